"""Stream documents out of raw corpus files, turning every bad record into a dead letter.

Plain generators (Beam only for :func:`read_file`'s FileSystems): ``pipeline.read.documents.ReadDocuments`` runs
them inside a DoFn, and tests call them directly. Every function here reads a file as a stream of bounded chunks:
memory never depends on the size of the file, and a single enormous line costs one pass and at most
``max_record_bytes`` of memory.

Every record read becomes exactly one :class:`Document` or one :class:`DeadLetter`, so ``documents_read ==
documents + dead letters`` per file; :class:`InputSummary` closes each file with its byte count, sha256 and whether
it was truncated.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline import progress
from pipeline.elements import (
    CORRUPT_INPUT,
    DOCUMENT_TOO_LONG,
    EMPTY_TEXT,
    INVALID_UNICODE,
    INVALID_UTF8,
    LINE_TOO_LONG,
    MALFORMED_JSON,
    MISSING_TEXT,
    NON_STRING_TEXT,
    TOO_DEEP,
    TRUNCATED_INPUT,
    DeadLetter,
    Document,
    InputSummary,
    Record,
    Source,
    preview,
)
from pipeline.read import wikitext
from pipeline.read.clean import clean_text
from pipeline.read.record_checks import MAX_JSON_DEPTH, UTF8_BOM, parse_json_within_depth, skip_bom, unencodable_at
from pipeline.read.streams import (
    CorruptInputError,
    HashingReader,
    TruncatedInputError,
    check_members,
    compression_of,
    decompressed_chunks,
    iter_lines,
)

DEFAULT_MAX_RECORD_BYTES = 16 << 20
COLUMNAR_FORMATS = ("parquet", "hf_dataset")  # files of Arrow data, read by row group: pipeline.read.columnar
INPUT_FORMATS = ("wikitext", "jsonl", "text", *COLUMNAR_FORMATS)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReaderOptions:
    input_format: str = "jsonl"  # wikitext | jsonl | text | parquet | hf_dataset (columnar.py reads the last two)
    text_field: str = "text"
    id_field: str = "id"
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    wikitext_headings: str = "keep"  # keep | drop
    wikitext_unk: str | None = wikitext.UNK  # replacement for <unk>; None drops it
    wikitext_detokenize: str = "auto"  # auto (.tokens files only) | yes | no

    def __post_init__(self):
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(f"input_format must be one of {', '.join(INPUT_FORMATS)}, got {self.input_format!r}")
        if self.wikitext_headings not in ("keep", "drop"):
            raise ValueError(f"wikitext_headings must be keep or drop, got {self.wikitext_headings!r}")
        if self.wikitext_detokenize not in ("auto", "yes", "no"):
            raise ValueError(f"wikitext_detokenize must be auto, yes or no, got {self.wikitext_detokenize!r}")
        if self.max_record_bytes < 1:
            raise ValueError("max_record_bytes must be positive")


def _decode(line: bytes, src: Source) -> str | DeadLetter:
    """The line as text, or its dead letter when it is not valid UTF-8."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        return DeadLetter(
            INVALID_UTF8,
            f"invalid UTF-8 at byte {e.start} of the record: {e.reason}",
            src,
            f"{os.path.basename(src.path)}:{src.line}",
            preview(line),
        )


def finish_text(doc_id: str, text: str, src: Source, may_hold_surrogates: bool = True) -> Record:
    """The document, or its dead letter. Lone surrogates can only come from JSON ``\\uD800``-``\\uDFFF``
    escapes (strict UTF-8 decoding refuses them), so the scan for them runs only when the caller says
    the record may hold one."""
    bad = unencodable_at(text) if may_hold_surrogates else None
    if bad is not None:
        return DeadLetter(
            INVALID_UNICODE,
            f"text holds a lone surrogate (U+{ord(text[bad]):04X}) at character {bad}: not valid Unicode, no tokenizer can take it",
            src,
            doc_id,
            preview(text),
        )
    text, cleaned = clean_text(text)
    if not text.strip():
        return DeadLetter(
            EMPTY_TEXT,
            "text is empty or whitespace only" + (" after removing control characters" if cleaned else ""),
            src,
            doc_id,
            preview(text),
        )
    return Document(doc_id, text, src, cleaned)


def _jsonl_records(lines, name: str, path: str, opts: ReaderOptions, first_ordinal: int = 0) -> Iterator[Record]:
    for line_no, offset, line, length in lines:
        src = Source(path, line_no, offset)
        fallback_id = f"{name}:{line_no}"
        if line is None:
            yield DeadLetter(
                LINE_TOO_LONG,
                f"record of {length:,} bytes exceeds --max-record-bytes={opts.max_record_bytes:,}",
                src,
                fallback_id,
            )
            continue
        if not line.strip():
            continue  # blank lines are not records
        raw = _decode(line, src)
        if isinstance(raw, DeadLetter):
            yield raw
            continue
        try:
            too_deep, obj = parse_json_within_depth(line, raw)
        except json.JSONDecodeError as e:
            yield DeadLetter(MALFORMED_JSON, f"{e.msg} at column {e.colno}", src, fallback_id, preview(raw))
            continue
        except ValueError as e:  # valid JSON Python will not read: a number of more than 4,300 digits
            yield DeadLetter(
                MALFORMED_JSON, f"Python cannot read a value of this record: {e}", src, fallback_id, preview(raw)
            )
            continue
        if too_deep:
            yield DeadLetter(
                TOO_DEEP, f"JSON nests deeper than {MAX_JSON_DEPTH} levels", src, fallback_id, preview(raw)
            )
            continue
        if not isinstance(obj, dict):
            yield DeadLetter(
                MALFORMED_JSON, f"expected a JSON object, got {type(obj).__name__}", src, fallback_id, preview(raw)
            )
            continue
        value = obj.get(opts.id_field)
        doc_id = (
            str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) else fallback_id
        )
        if unencodable_at(doc_id) is not None:
            yield DeadLetter(
                INVALID_UNICODE,
                f"field {opts.id_field!r} holds a lone surrogate: not valid Unicode",
                src,
                fallback_id,
                preview(raw),
            )
            continue
        if opts.text_field not in obj:
            yield DeadLetter(
                MISSING_TEXT,
                f"no field {opts.text_field!r} (fields: {', '.join(sorted(obj)[:10])})",
                src,
                doc_id,
                preview(raw),
            )
            continue
        text = obj[opts.text_field]
        if not isinstance(text, str):
            yield DeadLetter(
                NON_STRING_TEXT,
                f"field {opts.text_field!r} is {type(text).__name__}, not a string",
                src,
                doc_id,
                preview(raw),
            )
            continue
        yield finish_text(doc_id, text, src, may_hold_surrogates=b"\\ud" in line or b"\\uD" in line)


BLANK, CONTENT, TITLE = 0, 1, 2  # kinds of line in a WikiText or text file


def decoded(line: bytes | None) -> str | None:
    """A line as text; None when it was too long (``iter_lines`` gave None) or is not UTF-8."""
    if line is None:
        return None
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return None


class DocumentStarts:
    """Which lines of a WikiText or text file start a document: the one rule the readers here and the
    byte-range planner (``pipeline.read.ranges``) share, so they cannot disagree.

    Feed every line's :func:`decoded` text to :meth:`step`, in order. ``open`` says whether a document is
    open before the first line (False at the start of a file). WikiText: a level-1 heading starts an
    article, and so does any other non-blank line while none is open (content before the first title;
    once open, an article stays open). Text: a non-blank line after a blank line (or at the start)
    starts a document, a blank line closes it. A line that is too long or not UTF-8 counts as non-blank.
    """

    def __init__(self, input_format: str, open: bool = False):
        self.wikitext = input_format == "wikitext"
        self.open = open

    def kind(self, text: str | None) -> int:
        if text is None:
            return CONTENT
        if not text.strip():
            return BLANK
        return TITLE if self.wikitext and wikitext.heading_level(text) == 1 else CONTENT

    def advance(self, kind: int) -> bool:
        """Whether a line of this :meth:`kind` starts a document; then moves past it."""
        starts = kind == TITLE or (kind == CONTENT and not self.open)
        self.open = kind != BLANK or (self.wikitext and self.open)
        return starts

    def step(self, text: str | None) -> bool:
        """Whether the line ``text`` starts a document; then moves past it."""
        return self.advance(self.kind(text))


_LONE_CR = (
    "%s: %d line(s) hold a lone CR (first: line %d), which is not a line end; if the file has CR-only line ends, "
    "its paragraphs read as one document: convert them to LF"
)


class _DocBuilder:
    """Accumulates the lines of one multi-line document (WikiText, plain text) with a byte bound.

    Documents are numbered in file order (``<file name>:<ordinal>``, after ``first_ordinal`` earlier
    ones); a line that is too long or not UTF-8 rejects the whole document it belongs to, with the
    line named in the reason.
    """

    def __init__(self, limit: int, name: str, joiner: str, first_ordinal: int = 0):
        self.limit = limit
        self.name = name
        self.joiner = joiner
        self.ordinal = first_ordinal
        self.lone_crs = 0  # lines holding a CR that is not part of a CRLF, and the first of them
        self.first_lone_cr = 0
        self.reset(None)

    def reset(self, src: Source | None):
        self.src = src
        self.parts: list[str] = []
        self.size = 0
        self.problem: tuple[str, str] | None = None

    def start(self, src: Source):
        self.ordinal += 1
        self.reset(src)

    def add(self, text: str, nbytes: int):
        self.size += nbytes
        if self.problem:
            return
        if self.size > self.limit:
            self.problem = (DOCUMENT_TOO_LONG, f"document exceeds --max-record-bytes={self.limit:,}")
            self.parts = []
            return
        self.parts.append(text)

    def next_line(
        self, src: Source, line: bytes | None, length: int, starts: DocumentStarts
    ) -> tuple[list[Record], str | None]:
        """Move to the next line: the document it closes (if it starts one) and its text, or None when
        the line rejects its document (too long, or not UTF-8)."""
        text = decoded(line)
        if text is not None and "\r" in text:
            self.lone_crs += 1
            self.first_lone_cr = self.first_lone_cr or src.line
        closed: list[Record] = []
        if starts.step(text):
            closed = self.emit()
            self.start(src)
        if text is None:
            if line is None:
                self.fail(
                    LINE_TOO_LONG, f"line {src.line} of {length:,} bytes exceeds --max-record-bytes={self.limit:,}"
                )
            else:
                bad = _decode(line, src)
                self.fail(INVALID_UTF8, f"line {src.line}: {bad.detail if isinstance(bad, DeadLetter) else bad}")
        return closed, text

    def warn_lone_crs(self, path: str) -> None:
        """Say once per file that lines hold a lone CR (not a line end: CR-only line ends read as one document)."""
        if self.lone_crs:
            log.warning(_LONE_CR, path, self.lone_crs, self.first_lone_cr)

    def fail(self, reason: str, detail: str):
        if not self.problem:
            self.problem = (reason, detail)
            self.parts = []

    def emit(self) -> list[Record]:
        """The document being built, if any (a dead letter if it was rejected)."""
        if self.src is None:
            return []
        doc_id = f"{self.name}:{self.ordinal}"
        if self.problem:
            return [DeadLetter(self.problem[0], self.problem[1], self.src, doc_id, "")]
        return [finish_text(doc_id, self.joiner.join(self.parts), self.src, may_hold_surrogates=False)]


def _wikitext_records(lines, name: str, path: str, opts: ReaderOptions, first_ordinal: int = 0) -> Iterator[Record]:
    detok = opts.wikitext_detokenize == "yes" or (opts.wikitext_detokenize == "auto" and ".tokens" in name)
    unk = opts.wikitext_unk

    def convert(s: str) -> str:
        if detok:
            return wikitext.detokenize(s, unk)
        s = s.strip()
        if unk is None:
            return " ".join(s.replace(wikitext.UNK, " ").split())
        return s.replace(wikitext.UNK, unk) if unk != wikitext.UNK else s

    doc = _DocBuilder(opts.max_record_bytes, name, "\n\n", first_ordinal)
    starts = DocumentStarts("wikitext")
    for line_no, offset, line, length in lines:
        src = Source(path, line_no, offset)
        closed, text = doc.next_line(src, line, length, starts)
        yield from closed
        if text is None or wikitext.is_blank(text):
            continue
        level = wikitext.heading_level(text)
        if level:
            if opts.wikitext_headings == "keep":
                doc.add(convert(wikitext.heading_text(text)), len(line))
            continue
        converted = convert(text)
        if converted:
            doc.add(converted, len(line))
    yield from doc.emit()
    doc.warn_lone_crs(path)


def _text_records(lines, name: str, path: str, opts: ReaderOptions, first_ordinal: int = 0) -> Iterator[Record]:
    doc = _DocBuilder(opts.max_record_bytes, name, "\n", first_ordinal)
    starts = DocumentStarts("text")
    for line_no, offset, line, length in lines:
        src = Source(path, line_no, offset)
        closed, text = doc.next_line(src, line, length, starts)
        yield from closed
        if text is None:
            continue
        if not text.strip():
            yield from doc.emit()
            doc.reset(None)
            continue
        doc.add(text.rstrip("\r"), len(line))
    yield from doc.emit()
    doc.warn_lone_crs(path)


_FORMATS: dict[str, Callable] = {"jsonl": _jsonl_records, "wikitext": _wikitext_records, "text": _text_records}


def parse_lines(lines, path: str, opts: ReaderOptions, first_ordinal: int = 0) -> Iterator[Record]:
    """The records of ``lines`` (``iter_lines`` items) of the file ``path`` in ``opts.input_format``;
    WikiText and text documents are numbered from ``first_ordinal + 1``."""
    return _FORMATS[opts.input_format](lines, os.path.basename(path.rstrip("/")), path, opts, first_ordinal)


def read_stream(f: BinaryIO, path: str, opts: ReaderOptions) -> Iterator[Record | InputSummary]:
    """Yield every record of one raw (possibly compressed) file, then its :class:`InputSummary`.

    A compressed file is read twice (``f`` must be seekable): the first pass hashes it and checks every
    gzip member / zstd frame (:func:`~pipeline.read.streams.check_members`), the second reads the records of
    the members that checked out, up to the first damaged one. A truncated or corrupt compressed stream does
    not raise: those records are yielded, then one ``truncated_input`` or ``corrupt_input`` dead letter
    stands for the rest of the file and says how far reading got, and the summary has ``truncated=True``.
    """
    raw = HashingReader(f)
    summary = InputSummary(path)
    lines_seen = [0, 0]  # last line number, byte offset after it
    bom = [False]
    compression = compression_of(path)
    read: Callable[[int], bytes] = raw.read
    damage: CorruptInputError | None = None
    if compression != "none":
        damage = check_members(raw.read, compression)
        raw.drain()
        f.seek(0)
        read = f.read

    def tracked_lines():
        chunks = skip_bom(iter(decompressed_chunks(read, compression, damage)), bom)
        first = next(chunks, b"")  # skip_bom has decided by the time it yields its first chunk
        for item in iter_lines(itertools.chain([first], chunks), opts.max_record_bytes, len(UTF8_BOM) if bom[0] else 0):
            lines_seen[0] = item[0]
            lines_seen[1] = item[1] + item[3] + 1
            yield item

    records = parse_lines(tracked_lines(), path, opts)
    try:
        for rec in records:
            summary.documents_read += 1
            yield rec
    except (TruncatedInputError, CorruptInputError) as e:
        kept = summary.documents_read
        summary.documents_read += 1
        summary.truncated = True
        trust = "" if isinstance(e, TruncatedInputError) else "; nothing of it or after it is used"
        yield DeadLetter(
            TRUNCATED_INPUT if isinstance(e, TruncatedInputError) else CORRUPT_INPUT,
            f"{e}{trust}; {kept:,} records before line {lines_seen[0] + 1} (decompressed byte {lines_seen[1]:,}) "
            "were read, the rest of the file is lost",
            Source(path, lines_seen[0] + 1, lines_seen[1]),
            None,
            "",
        )
    summary.byte_order_mark = bom[0]  # (a plain file was read to its end; a compressed one by check_members)
    summary.bytes = raw.bytes
    summary.sha256 = raw.sha256.hexdigest()
    yield summary


def read_file(path: str, opts: ReaderOptions) -> Iterator[Record | InputSummary]:
    """Open ``path`` with Beam's FileSystems (local, gs://, s3://, ...) and :func:`read_stream` it."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        yield from read_stream(progress.counted_file(f), path, opts)
