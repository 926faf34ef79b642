"""N-gram counts over WikiText files: the counting stages of ``pipeline.build_ngram_dictionary``.

The rules (also stated in ``dictionaries/README.md``):

- A WikiText line is a heading (``heading_level(line) > 0``: ``" = Title = "``, ``" = = Section = = "``, ...),
  blank, or a paragraph. Heading lines and blank lines never count: neither their words nor the ``=`` markup.
  (A ``=`` inside a paragraph line, e.g. ``" C = O "`` or the table leftover ``" = National record "``, is an
  ordinary symbol token.)
- A paragraph's tokens are ``line.split()`` (WikiText separates tokens with single spaces). ``<unk>`` is a
  barrier: n-grams never contain it and never span it. With ``drop_punctuation``, punctuation tokens are
  barriers too, which is exactly "drop every n-gram that contains a punctuation token".
- ``lowercase`` lowercases the tokens before counting (``<unk>`` is recognised before lowercasing).
- Punctuation token (:func:`is_punctuation`): WikiText's ``@-@``, ``@,@``, ``@.@`` markers, or a token all of
  whose characters are in a Unicode punctuation (P*) or symbol (S*) category: ``, . " ( ) ; : ' – — / % $ =
  ... ° £ +`` are punctuation; ``1.5``, ``U.S.``, ``½`` (a number, No) and ``'s`` are not.
- N-grams are the token sequences of length ``min_n..max_n`` inside one barrier-free run of one line, written
  as their tokens joined by a single space. Their count is the number of positions they occur at.

How counting scales (the stages below):

1. Every counting pass pre-aggregates in its worker: :class:`_CountPerBundle` keeps a dict of partial counts
   per bundle and flushes it whenever it holds ``max_keys_per_bundle`` keys, so a worker's memory is bounded
   whatever the input size; ``CombinePerKey(sum)`` then adds the partial counts (and is lifted by the runner,
   a second per-bundle pre-aggregation), and :class:`KeepFrequent` applies the threshold.
2. Apriori pruning (``pruning="apriori"``, the default): an n-gram occurring ``c`` times contains each of its
   two (n-1)-grams at those ``c`` positions, so it can reach ``min_count`` only if both (n-1)-grams did. Length
   n is therefore counted in its own pass over the input, only at positions whose two (n-1)-grams are frequent
   (found from the frequent unigrams up, with the frequent shorter n-grams as a side input). The counts of the
   n-grams that survive are exact; only hopeless n-grams are never counted. This shrinks what is shuffled from
   every distinct n-gram of the corpus (hundreds of millions on WikiText-103, mostly seen once) to the
   candidates (WikiText-2: 1.09 M distinct 2..5-grams against 0.12 M candidates). It costs one read of the
   input per length (1..max_n), and the side input holds the frequent n-grams shorter than max_n (about the
   dictionary's size). ``pruning="none"`` counts every n-gram in one pass; use it for ``min_count`` 1 or 2,
   where nearly everything is frequent and pruning cannot help.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from pipeline.wikitext import UNK, heading_level

_LOG = logging.getLogger("spanprep.ngram_counts")

AT_MARKERS = ("@-@", "@,@", "@.@")
PRUNING_MODES = ("apriori", "none")
PROGRESS_EVERY_SECONDS = 30.0

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
    if not tokens or heading_level(line):
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


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------------------------------
# Reading


class ReadLines(beam.PTransform):
    """file paths -> raw lines (bytes, newline stripped), split into byte ranges so workers share big files.

    Lines are read as bytes and decoded by the consumers, so that a line that is not UTF-8 becomes a
    dead-letter record (see :class:`CorpusSummary`) rather than a crash.
    """

    def __init__(self, *, split_bytes: int, with_filename: bool = False):
        super().__init__()
        self._split_bytes = split_bytes
        self._with_filename = with_filename

    def expand(self, paths):
        return paths | "ReadAllFromText" >> beam.io.ReadAllFromText(
            desired_bundle_size=self._split_bytes,
            coder=beam.coders.BytesCoder(),
            with_filename=self._with_filename,
        )


# --------------------------------------------------------------------------------------------------
# Counting


class _CountPerBundle(beam.DoFn):
    """Raw lines -> (ngram, partial count), pre-aggregated in a dict of at most ``max_keys`` keys per bundle.

    ``lengths``: the n-gram lengths counted in this pass. With ``frequent_shorter`` (the apriori pass for
    one length n), only positions whose two (n-1)-grams are frequent are counted.
    """

    def __init__(self, *, rules: NgramRules, lengths: Sequence[int], pruned: bool, max_keys: int):
        self._rules = rules
        self._lengths = tuple(lengths)
        self._pruned = pruned
        self._max_keys = max_keys
        self._label = f"n={self._lengths[0]}" if len(self._lengths) == 1 else f"n={min(lengths)}..{max(lengths)}"

    def setup(self) -> None:
        self._frequent: frozenset[str] | None = None

    def start_bundle(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()
        self._lines = 0
        self._tokens = 0
        self._bytes = 0
        self._started = self._last_log = time.monotonic()

    def process(self, raw: bytes, frequent_shorter: Iterable[str] = ()) -> Iterator[tuple[str, int]]:
        self._lines += 1
        self._bytes += len(raw) + 1
        line = _decode(raw)
        if line is None:  # accounted for by CorpusSummary
            return
        rules = self._rules
        runs = line_runs(line, lowercase=rules.lowercase, drop_punctuation=rules.drop_punctuation)
        if not runs:
            return
        counts = self._counts
        if self._pruned:
            if self._frequent is None:
                # Batch, global window: the side input is the same for every element; build its set once.
                self._frequent = frozenset(frequent_shorter)
            (n,) = self._lengths
            self._count_pruned(runs, n, self._frequent, counts)
        else:
            for run in runs:
                self._tokens += len(run)
                for n in self._lengths:
                    if len(run) >= n:
                        counts.update([" ".join(run[i : i + n]) for i in range(len(run) - n + 1)])
        if len(counts) >= self._max_keys:
            yield from counts.items()
            counts.clear()
        now = time.monotonic()
        if now - self._last_log >= PROGRESS_EVERY_SECONDS:
            self._last_log = now
            _LOG.info(
                "counting %s: %d lines, %.1f MB read by this worker in %.0f s",
                self._label, self._lines, self._bytes / 1e6, now - self._started,
            )

    def _count_pruned(self, runs, n, frequent, counts) -> None:
        for run in runs:
            self._tokens += len(run)
            if len(run) < n:
                continue
            if n == 1:
                counts.update(run)
                continue
            # positions whose k-gram is frequent, for k = 1, 2, ..., n-1
            starts = [i for i, w in enumerate(run) if w in frequent]
            for k in range(2, n + 1):
                if len(starts) < 2:
                    break
                has = set(starts)
                candidates = [i for i in starts if i + 1 in has]  # both (k-1)-grams of the k-gram frequent
                if k == n:
                    counts.update([" ".join(run[i : i + n]) for i in candidates])
                else:
                    starts = [i for i in candidates if " ".join(run[i : i + k]) in frequent]

    def finish_bundle(self):
        for key_value in self._counts.items():
            yield GlobalWindows.windowed_value(key_value)
        if self._lines:
            _LOG.info(
                "counting %s: bundle done: %d lines, %d tokens, %.1f MB in %.1f s",
                self._label, self._lines, self._tokens, self._bytes / 1e6, time.monotonic() - self._started,
            )
        self._counts = collections.Counter()


class CountNgrams(beam.PTransform):
    """file paths -> ngram_to_count: exact counts of n-grams of the given lengths, in one pass over the input.

    With ``frequent_shorter`` (a PCollection of the n-grams of length < n that reached ``min_count``) and a
    single length n, only apriori candidates are counted (see the module docstring); without it, every n-gram.
    """

    def __init__(
        self,
        *,
        rules: NgramRules,
        lengths: Sequence[int],
        frequent_shorter=None,
        split_bytes: int,
        max_keys_per_bundle: int,
    ):
        super().__init__()
        if frequent_shorter is not None and len(lengths) != 1:
            raise ValueError("apriori counting (frequent_shorter) counts one length per pass")
        self._rules = rules
        self._lengths = tuple(lengths)
        self._frequent_shorter = frequent_shorter
        self._split_bytes = split_bytes
        self._max_keys = max_keys_per_bundle

    def expand(self, paths):
        pruned = self._frequent_shorter is not None or self._lengths == (1,)
        count_per_bundle = _CountPerBundle(
            rules=self._rules, lengths=self._lengths, pruned=pruned, max_keys=self._max_keys
        )
        side_inputs = {}
        if self._frequent_shorter is not None:
            side_inputs["frequent_shorter"] = beam.pvalue.AsList(self._frequent_shorter)
        lines = paths | "ReadLines" >> ReadLines(split_bytes=self._split_bytes)
        ngram_to_partial_count = lines | "CountPerBundle" >> beam.ParDo(count_per_bundle, **side_inputs)
        return ngram_to_partial_count | "SumCounts" >> beam.CombinePerKey(sum)


class KeepFrequent(beam.PTransform):
    """ngram_to_count -> ngram_to_count with count >= min_count (inclusive threshold)."""

    def __init__(self, min_count: int):
        super().__init__()
        self._min_count = min_count

    def expand(self, ngram_to_count):
        min_count = self._min_count
        return ngram_to_count | "CountAtLeastMin" >> beam.Filter(lambda kv: kv[1] >= min_count)


class FrequentNgrams(beam.PTransform):
    """file paths -> ngram_to_count: every n-gram of length min_n..max_n with count >= min_count.

    ``pruning="apriori"``: one counting pass per length 1..max_n, each restricted to candidates whose shorter
    n-grams are frequent; ``"none"``: one pass that counts every n-gram of length min_n..max_n.
    """

    def __init__(
        self,
        rules: NgramRules,
        *,
        pruning: str = "apriori",
        split_bytes: int = 8 << 20,
        max_keys_per_bundle: int = 200_000,
    ):
        super().__init__()
        if pruning not in PRUNING_MODES:
            raise ValueError(f"pruning must be one of {PRUNING_MODES}, got {pruning!r}")
        self._rules = rules
        self._pruning = pruning
        self._io = dict(split_bytes=split_bytes, max_keys_per_bundle=max_keys_per_bundle)

    def expand(self, paths):
        rules = self._rules
        if self._pruning == "none":
            lengths = range(rules.min_n, rules.max_n + 1)
            ngram_to_count = paths | "CountAllLengths" >> CountNgrams(rules=rules, lengths=lengths, **self._io)
            return ngram_to_count | "KeepFrequent" >> KeepFrequent(rules.min_count)

        frequent_by_length = []
        for n in range(1, rules.max_n + 1):
            frequent_shorter = None
            if n > 1:
                frequent_shorter = frequent_by_length | f"FrequentShorterThan{n}" >> beam.Flatten() | (
                    f"NgramsShorterThan{n}" >> beam.Keys()
                )
            ngram_to_count = paths | f"CountLength{n}" >> CountNgrams(
                rules=rules, lengths=[n], frequent_shorter=frequent_shorter, **self._io
            )
            frequent_by_length.append(ngram_to_count | f"KeepFrequentLength{n}" >> KeepFrequent(rules.min_count))
        kept = frequent_by_length[rules.min_n - 1 :]
        return kept | "DictionaryLengths" >> beam.Flatten()


# --------------------------------------------------------------------------------------------------
# Accounting: what the input was made of, and where it came from


CORPUS_FIELDS = (
    "lines",
    "blank_lines",
    "heading_lines",
    "paragraph_lines",
    "undecodable_lines",
    "paragraph_tokens",
    "unk_tokens",
)


class _SummarizeLines(beam.DoFn):
    """(path, raw line) -> one per-bundle dict of line/token counts; undecodable lines to ``dead_letter``."""

    DEAD_LETTER = "dead_letter"

    def start_bundle(self) -> None:
        self._summary = dict.fromkeys(CORPUS_FIELDS, 0)

    def process(self, path_and_line: tuple[str, bytes]):
        path, raw = path_and_line
        summary = self._summary
        summary["lines"] += 1
        line = _decode(raw)
        if line is None:
            summary["undecodable_lines"] += 1
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                reason = f"not UTF-8: {e.reason} at byte {e.start}"
            yield beam.pvalue.TaggedOutput(
                self.DEAD_LETTER,
                {"source": path, "reason": reason, "line": raw.decode("utf-8", "backslashreplace")},
            )
            return
        tokens = line.split()
        if not tokens:
            summary["blank_lines"] += 1
        elif heading_level(line):
            summary["heading_lines"] += 1
        else:
            summary["paragraph_lines"] += 1
            summary["paragraph_tokens"] += len(tokens)
            summary["unk_tokens"] += tokens.count(UNK)

    def finish_bundle(self):
        if self._summary["lines"]:
            yield GlobalWindows.windowed_value(self._summary)


class _SumDicts(beam.CombineFn):
    def create_accumulator(self) -> dict[str, int]:
        return dict.fromkeys(CORPUS_FIELDS, 0)

    def add_input(self, acc: dict[str, int], summary: dict[str, int]) -> dict[str, int]:
        for key in CORPUS_FIELDS:
            acc[key] += summary[key]
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, int]]) -> dict[str, int]:
        total = self.create_accumulator()
        for acc in accs:
            self.add_input(total, acc)
        return total

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return acc


class CorpusSummary(beam.PTransform):
    """file paths -> (corpus_summary, dead_letters): line kinds and token counts of the whole input, and one
    dead-letter record (source, reason, line) per line that is not UTF-8 (skipped by the counting passes)."""

    def __init__(self, *, split_bytes: int):
        super().__init__()
        self._split_bytes = split_bytes

    def expand(self, paths):
        path_to_line = paths | "ReadLines" >> ReadLines(split_bytes=self._split_bytes, with_filename=True)
        summaries = path_to_line | "SummarizeLines" >> beam.ParDo(_SummarizeLines()).with_outputs(
            _SummarizeLines.DEAD_LETTER, main="summaries"
        )
        corpus_summary = summaries.summaries | "SumSummaries" >> beam.CombineGlobally(_SumDicts())
        return corpus_summary, summaries[_SummarizeLines.DEAD_LETTER]


class _HashFile(beam.DoFn):
    CHUNK = 8 << 20

    def process(self, path: str) -> Iterator[dict[str, Any]]:
        import hashlib

        digest = hashlib.sha256()
        size = 0
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            while chunk := f.read(self.CHUNK):
                digest.update(chunk)
                size += len(chunk)
        yield {"path": path, "bytes": size, "sha256": digest.hexdigest()}


class SourceFiles(beam.PTransform):
    """file paths -> source records ``{"path", "bytes", "sha256"}`` of the raw (still compressed) files."""

    def expand(self, paths):
        return paths | "HashFiles" >> beam.ParDo(_HashFile())
