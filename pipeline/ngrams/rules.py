"""What counts as an n-gram: the WikiText line rules, punctuation, and the options that select n-grams.

Pure Python (no Beam): every counting stage applies these rules the same way. The rules in prose are in the
package docstring and ``dictionaries/README.md``.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Iterator

from pipeline.read.wikitext import UNK, heading_level

AT_MARKERS = ("@-@", "@,@", "@.@")
PRUNING_MODES = ("apriori", "none")

_ASCII_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def is_punctuation(token: str) -> bool:
    """True for WikiText's ``@-@ @,@ @.@`` and for tokens made only of Unicode punctuation/symbol characters."""
    if token in AT_MARKERS:
        return True
    if not token:
        return False
    for ch in token:
        if ch in _ASCII_WORD_CHARS or unicodedata.category(ch)[0] not in "PS":
            return False
    return True


@dataclasses.dataclass(frozen=True, kw_only=True)
class NgramRules:
    """What counts as an n-gram and which ones the dictionary keeps."""

    min_n: int = 2  # shortest n-gram kept in the dictionary
    max_n: int = 5  # longest n-gram counted (Span Fine-tuning: n <= 5)
    min_count: int = 11  # inclusive: keep count >= min_count; 11 = the paper's "more than ten times"
    lowercase: bool = False  # lowercase tokens before counting
    drop_punctuation: bool = False  # drop n-grams that contain a punctuation token

    def __post_init__(self) -> None:
        for name in ("min_n", "max_n", "min_count"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if self.min_n < 1:
            raise ValueError(f"min_n must be >= 1, got {self.min_n}")
        if self.max_n < self.min_n:
            raise ValueError(f"max_n ({self.max_n}) must be >= min_n ({self.min_n})")
        if self.max_n > 100:
            raise ValueError(f"max_n must be <= 100, got {self.max_n}")
        if self.min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {self.min_count}")


def line_runs(line: str, *, lowercase: bool = False, drop_punctuation: bool = False) -> list[list[str]]:
    """The barrier-free token runs of one WikiText line; ``[]`` for headings and blank lines.

    >>> line_runs(" a b <unk> c , d ", drop_punctuation=True)
    [['a', 'b'], ['c'], ['d']]
    """
    tokens = line.split()
    if not tokens or (tokens[0] == "=" and tokens[-1] == "=" and heading_level(line)):
        return []
    if lowercase:
        lowered = line.lower().split()  # case mappings never create or remove whitespace: same positions
    else:
        lowered = tokens
    if not drop_punctuation and UNK not in tokens:
        return [lowered]
    runs = []
    start = 0
    for i, token in enumerate(tokens):
        if token == UNK or (drop_punctuation and is_punctuation(token)):
            if i > start:
                runs.append(lowered[start:i])
            start = i + 1
    if start < len(tokens):
        runs.append(lowered[start:])
    return runs


def decode_line(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def raw_line_runs(raw: bytes, rules: NgramRules, progress) -> Iterator[list[str]]:
    """The runs of one raw corpus line under ``rules``, counted in ``progress`` (a ``codes.Progress``: lines, bytes,
    tokens); none for a line that is not UTF-8 (``CorpusSummary`` accounts for it)."""
    progress.line(raw)
    line = decode_line(raw)
    if line is None:
        return
    for run in line_runs(line, lowercase=rules.lowercase, drop_punctuation=rules.drop_punctuation):
        progress.tokens += len(run)
        yield run
