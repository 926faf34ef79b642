"""Evaluation files as distributed, read into examples for the overlap check (``pipeline.contamination``).

- ``.json``: SQuAD v1.1 / v2.0 (and XQuAD, which has SQuAD v1.1's layout): one example per question, its texts the
  paragraph's context, the question and every answer text (v2.0's unanswerable questions have none);
- ``.tsv``: GLUE. With a header, the columns named ``sentence``, ``sentence1``, ``sentence2``, ``question``,
  ``question1``, ``question2``, ``premise``, ``hypothesis`` or ``text`` are texts and ``index``/``idx``/``id`` the
  example id (else its line number); without one, CoLA's four columns (source, label 0/1, original mark, sentence);
- ``.jsonl`` (``.jsonl.gz``, ``.jsonl.zst``): one JSON object per line with a string field ``text`` (``--text-field``)
  and an optional ``id``.

Every text is read as written, except for the Penn Treebank tokenisation some sets carry (SST-2): it is undone
before the text's words are taken (:func:`undo_ptb`), so that a sentence tokenized ``does n't`` has the words of the
``doesn't`` a corpus holds (docs/DEDUP.md, "Tokenized evaluation text").

A file that is none of these fails with one line naming the file and the position (:class:`EvalFileError`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import zlib
from dataclasses import dataclass
from typing import Any

import zstandard
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

TSV_TEXT_COLUMNS = ("sentence", "sentence1", "sentence2", "question", "question1", "question2", "premise",
                    "hypothesis", "text")  # fmt: skip
TSV_ID_COLUMNS = ("index", "idx", "id")


# Penn Treebank tokenisation that changes the words (pipeline.dedup.text: apostrophes, quotes and brackets only
# separate words, so ``john 's``, ````x''`` and ``( x )`` already have a corpus's words): ``n't`` split from its verb
# (``ca n't``, ``wo n't``), ``gonna``-like words split in two, and brackets written as tokens.
_PTB_NT = re.compile(r"(?<=\w) (?=n['\u2019]t\b)", re.IGNORECASE)
_PTB_SPLIT = re.compile(r"\b(?:gim me|lem me|gon na|wan na|got ta)\b", re.IGNORECASE)
_PTB_BRACKETS = re.compile(r"-([lr])([rsc])b-", re.IGNORECASE)
_BRACKETS = {"lr": "(", "rr": ")", "ls": "[", "rs": "]", "lc": "{", "rc": "}"}


def undo_ptb(body: str) -> str:
    """``body`` with Penn Treebank tokenisation undone where it changes the words: `` n't`` joined back onto the word
    before it (``ca n't`` -> ``can't``, ``wo n't`` -> ``won't``), ``gon na`` / ``wan na`` / ``got ta`` / ``gim me``
    / ``lem me`` joined, and ``-lrb-`` ``-rrb-`` ``-lsb-`` ``-rsb-`` ``-lcb-`` ``-rcb-`` (any case) the brackets they
    stand for. Natural text is left as it is: none of these occurs in it (a space before ``n't`` is a typo)."""
    if "-" in body:
        body = _PTB_BRACKETS.sub(lambda m: _BRACKETS[(m[1] + m[2]).lower()], body)
    if " " not in body:
        return body
    body = _PTB_NT.sub("", body)
    return _PTB_SPLIT.sub(lambda m: m[0].replace(" ", ""), body)


class EvalFileError(ValueError):
    """An evaluation file that cannot be read; the message is one line naming the file and position."""


@dataclass(frozen=True)
class Example:
    id: str
    texts: tuple[str, ...]  # each checked on its own: no n-gram spans two of them


def _read_bytes(path: str) -> bytes:
    if re.search("[\udc80-\udcff]", path):  # bytes not UTF-8, escaped (os.fsdecode): no record can name it
        raise EvalFileError(f"{path}: the file name is not UTF-8: rename the file")
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            return f.read()
    except Exception as e:  # Beam's filesystems raise BeamIOError, OSError, ...
        raise EvalFileError(f"{path}: cannot be read ({' '.join(str(e).split())[:200]})") from None


def _zstd_frames(raw: bytes) -> bytes:
    """Every frame of ``raw`` decompressed; EOFError when the last one is cut short (a stream reader returned what
    it had, so a truncated file read as fewer examples, or none)."""
    out, rest = [], raw
    while rest:
        frame = zstandard.ZstdDecompressor().decompressobj()
        out.append(frame.decompress(rest))
        if not frame.eof:
            raise EOFError(f"the zstd frame at byte {len(raw) - len(rest)} is truncated")
        rest = frame.unused_data
    return b"".join(out)


def _read(path: str, raw: bytes | None = None) -> str:
    if raw is None:
        raw = _read_bytes(path)
    try:
        if path.lower().endswith(".gz"):  # the kind is read from the lower-cased name too (read_eval_file)
            raw = gzip.decompress(raw)
        elif path.lower().endswith(".zst"):
            raw = _zstd_frames(raw)
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:  # zlib.error: damaged deflate data
        raise EvalFileError(f"{path}: cannot be decompressed ({' '.join(str(e).split())[:200]})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise EvalFileError(f"{path}: byte {e.start}: not UTF-8") from None


def _need(value: Any, kind: type | tuple[type, ...], path: str, where: str, what: str) -> Any:
    if not isinstance(value, kind):
        raise EvalFileError(f"{path}: {where}: {what}")
    return value


def read_squad(path: str, content: str) -> list[Example]:
    try:
        data = json.loads(content)
    except json.JSONDecodeError as e:
        raise EvalFileError(f"{path}: line {e.lineno} column {e.colno}: not JSON ({e.msg})") from None
    except RecursionError:
        raise EvalFileError(f"{path}: not a SQuAD file (JSON nested too deeply)") from None
    except ValueError as e:  # valid JSON Python will not read: a number of more than 4,300 digits
        raise EvalFileError(f"{path}: Python cannot read a value of this file: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise EvalFileError(f"{path}: not a SQuAD file (no top-level 'data' list)")
    examples = []
    for i, article in enumerate(data["data"]):
        paragraphs = _need(
            article.get("paragraphs") if isinstance(article, dict) else None,
            list,
            path,
            f"data[{i}]",
            "no 'paragraphs' list",
        )
        for j, paragraph in enumerate(paragraphs):
            where = f"data[{i}].paragraphs[{j}]"
            paragraph = _need(paragraph, dict, path, where, "not an object")
            context = _need(paragraph.get("context"), str, path, where, "no string 'context'")
            for k, qa in enumerate(_need(paragraph.get("qas"), list, path, where, "no 'qas' list")):
                at = f"{where}.qas[{k}]"
                qa = _need(qa, dict, path, at, "not an object")
                qid = _need(qa.get("id"), (str, int), path, at, "no 'id'")
                question = _need(qa.get("question"), str, path, at, "no string 'question'")
                answers = _need(qa.get("answers", []), list, path, at, "'answers' is not a list")
                texts = [context, question]
                for m, answer in enumerate(answers):
                    answer = _need(answer, dict, path, f"{at}.answers[{m}]", "not an object")
                    texts.append(_need(answer.get("text"), str, path, f"{at}.answers[{m}]", "no string 'text'"))
                examples.append(Example(str(qid), tuple(texts)))
    return examples


def read_tsv(path: str, content: str) -> list[Example]:
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise EvalFileError(f"{path}: empty")
    rows = [line.rstrip("\r").split("\t") for line in lines]
    header = [h.strip().lower() for h in rows[0]]
    text_columns = [c for c, name in enumerate(header) if name in TSV_TEXT_COLUMNS]
    if text_columns:
        id_column = next((c for c, name in enumerate(header) if name in TSV_ID_COLUMNS), None)
        first = 1
    elif len(rows[0]) == 4 and rows[0][1] in ("0", "1"):  # CoLA: source, label, original mark, sentence
        text_columns, id_column, first = [3], None, 0
    else:
        raise EvalFileError(
            f"{path}: line 1: no header naming a text column ({', '.join(TSV_TEXT_COLUMNS)}) and not CoLA's four "
            "columns (source, label, mark, sentence)"
        )
    need = max(text_columns) + 1
    examples = []
    for n, row in enumerate(rows[first:], first + 1):
        if len(row) < need:
            raise EvalFileError(f"{path}: line {n}: {len(row)} column(s), the text is in column {need}")
        example_id = row[id_column] if id_column is not None and id_column < len(row) else f"line {n}"
        examples.append(Example(example_id, tuple(row[c] for c in text_columns)))
    return examples


def read_jsonl(path: str, content: str, text_field: str = "text") -> list[Example]:
    examples = []
    for n, line in enumerate(content.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise EvalFileError(f"{path}: line {n}: not JSON") from None
        except ValueError as e:  # a number of more than 4,300 digits
            raise EvalFileError(f"{path}: line {n}: Python cannot read a value of this record: {e}") from None
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise EvalFileError(f"{path}: line {n}: no string field {text_field!r}")
        examples.append(Example(str(record.get("id", f"line {n}")), (record[text_field],)))
    return examples


def _identity(path: str) -> str:
    """What names one file however it is spelt: a local path resolved (links, ``.``, ``..``, relative), a URL as is
    with its ``.``/``//`` parts folded."""
    scheme, sep, rest = path.partition("://")
    if sep:
        return f"{scheme}://{os.path.normpath(rest)}"
    return os.path.realpath(path)


def given_twice(paths: list[str] | tuple[str, ...]) -> tuple[str, str] | None:
    """The first two of ``paths`` that name the same file (its examples would be counted twice, and every record
    would name it twice), or None."""
    seen: dict[str, str] = {}
    for path in paths:
        key = _identity(path)
        if key in seen:
            return seen[key], path
        seen[key] = path
    return None


def twice_message(option: str, first: str, second: str) -> str:
    if first == second:
        return f"{option} {first} is given more than once"
    return f"{option} {first} and {option} {second} are the same file"


def read_eval_file(path: str, text_field: str = "text", raw: bytes | None = None) -> list[Example]:
    """The examples of one evaluation file (of its bytes ``raw`` when given); :class:`EvalFileError` when it cannot
    be used. Their texts have Penn Treebank tokenisation undone (:func:`undo_ptb`), whatever the file."""
    name = path.lower()
    if name.endswith(".json"):
        examples = read_squad(path, _read(path, raw))
    elif name.endswith(".tsv"):
        examples = read_tsv(path, _read(path, raw))
    elif name.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")):
        examples = read_jsonl(path, _read(path, raw), text_field)
    else:
        raise EvalFileError(
            f"{path}: unknown kind of evaluation file (.json SQuAD/XQuAD, .tsv GLUE, or .jsonl with a {text_field!r} "
            "field)"
        )
    return [Example(ex.id, tuple(map(undo_ptb, ex.texts))) for ex in examples]


@dataclass(frozen=True)
class EvalFile:
    """An evaluation file as the launcher checked it: its path and the sha256 of its bytes. The job's workers read
    it again (so the job carries a path, not the file's n-grams, which Beam would compress into every step) and
    refuse it if its bytes are no longer those checked."""

    path: str
    sha256: str

    @classmethod
    def check(cls, path: str) -> EvalFile:
        """Read and parse ``path``; :class:`EvalFileError` when it cannot be used or has no example."""
        raw = _read_bytes(path)
        if not read_eval_file(path, raw=raw):
            raise EvalFileError(f"{path}: no examples")
        return cls(path, hashlib.sha256(raw).hexdigest())

    def examples(self) -> list[Example]:
        raw = _read_bytes(self.path)
        if hashlib.sha256(raw).hexdigest() != self.sha256:
            raise EvalFileError(f"{self.path}: changed since the job started (its sha256 is no longer {self.sha256})")
        return read_eval_file(self.path, raw=raw)
