"""Stream documents out of raw corpus files, turning every bad record into a dead letter.

Pure Python, no Beam: ``pipeline.documents.ReadDocuments`` runs these generators inside a DoFn, and
tests call them directly. Every function here reads a file as a stream of bounded chunks: memory
never depends on the size of the file, and a single enormous line costs one pass and at most
``max_record_bytes`` of memory.

Every record read becomes exactly one :class:`Document` or one :class:`DeadLetter`, so
``documents_read == documents + dead letters`` per file; :class:`InputSummary` closes each file
with its byte count, sha256 and whether it was truncated.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator, Union

from pipeline import wikitext
from pipeline.record_checks import MAX_JSON_DEPTH, UTF8_BOM, encodable, json_depth_exceeds, skip_bom, unencodable_at

CHUNK_BYTES = 1 << 20
PREVIEW_CHARS = 1000
DEFAULT_MAX_RECORD_BYTES = 16 << 20

# Reasons a record is rejected (FORMAT.md lists them; the manifest counts them).
MALFORMED_JSON = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
MISSING_TEXT = "missing_text"
NON_STRING_TEXT = "non_string_text"
EMPTY_TEXT = "empty_text"
LINE_TOO_LONG = "line_too_long"
DOCUMENT_TOO_LONG = "document_too_long"
TRUNCATED_INPUT = "truncated_input"
CORRUPT_INPUT = "corrupt_input"
NO_TOKENS = "no_tokens"
INVALID_UNICODE = "invalid_unicode"
TOO_DEEP = "json_too_deep"
TOKENIZER_ERROR = "tokenizer_error"


# C0 and C1 control characters except tab and newline; carriage returns are normalised first.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Source:
    """Where a record starts: file, 1-based line, byte offset in the (decompressed) stream."""

    path: str
    line: int
    byte_offset: int

    def as_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "byte_offset": self.byte_offset}


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str
    source: Source
    cleaned: bool = False  # control characters were removed


@dataclass(frozen=True)
class DeadLetter:
    reason: str
    detail: str
    source: Source
    doc_id: str | None = None
    preview: str = ""

    def as_dict(self) -> dict:
        """JSON-ready and always encodable as UTF-8 (lone surrogates are written as ``\\udXXX``)."""
        return {
            "reason": self.reason,
            "detail": encodable(self.detail),
            "source": self.source.as_dict(),
            "doc_id": None if self.doc_id is None else encodable(self.doc_id),
            "preview": encodable(self.preview),
        }


@dataclass
class InputSummary:
    """Emitted once per input file after its last record."""

    path: str
    bytes: int = 0
    sha256: str = ""
    documents_read: int = 0
    truncated: bool = False
    byte_order_mark: bool = False  # a UTF-8 BOM started the (decompressed) file and was skipped

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "documents_read": self.documents_read,
            "truncated": self.truncated,
            "byte_order_mark": self.byte_order_mark,
        }


Record = Union[Document, DeadLetter]


class TruncatedInputError(Exception):
    """A compressed stream ended before its end-of-stream marker."""

    def __init__(self, compressed_bytes: int, decompressed_bytes: int, kind: str):
        self.compressed_bytes = compressed_bytes
        self.decompressed_bytes = decompressed_bytes
        super().__init__(
            f"{kind} stream is truncated: input ended after {compressed_bytes:,} compressed bytes "
            f"({decompressed_bytes:,} bytes decompressed) before the end-of-stream marker"
        )


class CorruptInputError(Exception):
    """A compressed stream could not be decoded at all."""


def clean_text(text: str) -> tuple[str, bool]:
    """Normalise line ends and remove control characters; return (text, whether anything was removed)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    cleaned = _CONTROL.sub("", text)
    return cleaned, len(cleaned) != len(text)


def preview(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text[: PREVIEW_CHARS * 4].decode("utf-8", errors="replace")
    return encodable(text[:PREVIEW_CHARS])


# -- byte streams ----------------------------------------------------------------------------


class _HashingReader:
    """Counts and hashes every raw byte read from ``f``."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        if data:
            self.sha256.update(data)
            self.bytes += len(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK_BYTES):
            pass


def compression_of(path: str) -> str:
    name = path.lower()
    if name.endswith(".gz") or name.endswith(".gzip"):
        return "gzip"
    if name.endswith(".zst") or name.endswith(".zstd"):
        return "zstd"
    return "none"


def _decompressed_chunks(raw: _HashingReader, compression: str) -> Iterator[bytes]:
    """Yield decompressed chunks; multi-member gzip and multi-frame zstd are supported.

    Raises :class:`TruncatedInputError` when the input ends inside a member/frame: zstandard's
    stream reader returns a silent partial result in that case, so frames are tracked here.
    """
    if compression == "none":
        while chunk := raw.read(CHUNK_BYTES):
            yield chunk
        return
    if compression == "gzip":
        new = lambda: zlib.decompressobj(wbits=31)  # noqa: E731
        errors: tuple[type[Exception], ...] = (zlib.error,)
    else:
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        new = dctx.decompressobj
        errors = (zstandard.ZstdError,)
    out_bytes = 0
    obj = new()
    in_member = False  # bytes of the current member/frame have been fed
    while True:
        chunk = raw.read(CHUNK_BYTES)
        if not chunk:
            break
        while chunk:
            try:
                data = obj.decompress(chunk)
            except errors as e:
                raise CorruptInputError(
                    f"{compression} data is corrupt after {raw.bytes:,} compressed bytes: {e}"
                ) from None
            in_member = True
            if data:
                out_bytes += len(data)
                yield data
            if obj.eof:
                chunk = obj.unused_data
                obj = new()
                in_member = False
            else:
                chunk = b""
    if in_member:
        raise TruncatedInputError(raw.bytes, out_bytes, compression)


def iter_lines(chunks: Iterator[bytes], max_line_bytes: int, first_offset: int = 0) -> Iterator[tuple[int, int, bytes | None, int]]:
    """Split a chunk stream into lines without holding more than ``max_line_bytes`` of one line.

    Yields ``(line_number, byte_offset, line_or_None, line_length)`` with the newline stripped;
    ``line`` is ``None`` when the line is longer than ``max_line_bytes`` (it is skipped, not stored).
    A final line without a newline is yielded too.
    """
    line_no = 0
    offset = first_offset  # byte offset where the pending line starts
    pending: list[bytes] = []
    pending_len = 0
    overflow = False
    for chunk in chunks:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                piece = chunk[start:]
                if piece:
                    pending_len += len(piece)
                    if not overflow:
                        if pending_len > max_line_bytes:
                            overflow = True
                            pending = []
                        else:
                            pending.append(piece)
                break
            piece = chunk[start:nl]
            length = pending_len + len(piece)
            line_no += 1
            if overflow or length > max_line_bytes:
                yield line_no, offset, None, length
            else:
                line = b"".join(pending) + piece if pending else piece
                yield line_no, offset, line, length
            offset += length + 1
            pending, pending_len, overflow = [], 0, False
            start = nl + 1
    if pending_len:
        line_no += 1
        if overflow:
            yield line_no, offset, None, pending_len
        else:
            yield line_no, offset, b"".join(pending), pending_len


# -- formats ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReaderOptions:
    input_format: str = "jsonl"  # wikitext | jsonl | text
    text_field: str = "text"
    id_field: str = "id"
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    wikitext_headings: str = "keep"  # keep | drop
    wikitext_unk: str | None = wikitext.UNK  # replacement for <unk>; None drops it
    wikitext_detokenize: str = "auto"  # auto (.tokens files only) | yes | no

    def __post_init__(self):
        if self.input_format not in ("wikitext", "jsonl", "text"):
            raise ValueError(f"input_format must be wikitext, jsonl or text, got {self.input_format!r}")
        if self.wikitext_headings not in ("keep", "drop"):
            raise ValueError(f"wikitext_headings must be keep or drop, got {self.wikitext_headings!r}")
        if self.wikitext_detokenize not in ("auto", "yes", "no"):
            raise ValueError(f"wikitext_detokenize must be auto, yes or no, got {self.wikitext_detokenize!r}")
        if self.max_record_bytes < 1:
            raise ValueError("max_record_bytes must be positive")


def _decode(line: bytes, src: Source) -> tuple[str | None, DeadLetter | None]:
    try:
        return line.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, DeadLetter(INVALID_UTF8, f"invalid UTF-8 at byte {e.start} of the record: {e.reason}", src, f"{os.path.basename(src.path)}:{src.line}", preview(line))


def _finish_text(doc_id: str, text: str, src: Source) -> Record:
    bad = unencodable_at(text)
    if bad is not None:
        return DeadLetter(INVALID_UNICODE, f"text holds a lone surrogate (U+{ord(text[bad]):04X}) at character {bad}: not valid Unicode, no tokenizer can take it", src, doc_id, preview(text))
    text, cleaned = clean_text(text)
    if not text.strip():
        return DeadLetter(EMPTY_TEXT, "text is empty or whitespace only" + (" after removing control characters" if cleaned else ""), src, doc_id, preview(text))
    return Document(doc_id, text, src, cleaned)


def _jsonl_records(lines, name: str, path: str, opts: ReaderOptions) -> Iterator[Record]:
    for line_no, offset, line, length in lines:
        src = Source(path, line_no, offset)
        fallback_id = f"{name}:{line_no}"
        if line is None:
            yield DeadLetter(LINE_TOO_LONG, f"record of {length:,} bytes exceeds --max-record-bytes={opts.max_record_bytes:,}", src, fallback_id)
            continue
        if not line.strip():
            continue  # blank lines are not records
        raw, bad = _decode(line, src)
        if bad:
            yield bad
            continue
        if json_depth_exceeds(line):
            yield DeadLetter(TOO_DEEP, f"JSON nests deeper than {MAX_JSON_DEPTH} levels", src, fallback_id, preview(raw))
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            yield DeadLetter(MALFORMED_JSON, f"{e.msg} at column {e.colno}", src, fallback_id, preview(raw))
            continue
        if not isinstance(obj, dict):
            yield DeadLetter(MALFORMED_JSON, f"expected a JSON object, got {type(obj).__name__}", src, fallback_id, preview(raw))
            continue
        value = obj.get(opts.id_field)
        doc_id = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) else fallback_id
        if unencodable_at(doc_id) is not None:
            yield DeadLetter(INVALID_UNICODE, f"field {opts.id_field!r} holds a lone surrogate: not valid Unicode", src, fallback_id, preview(raw))
            continue
        if opts.text_field not in obj:
            yield DeadLetter(MISSING_TEXT, f"no field {opts.text_field!r} (fields: {', '.join(sorted(obj)[:10])})", src, doc_id, preview(raw))
            continue
        text = obj[opts.text_field]
        if not isinstance(text, str):
            yield DeadLetter(NON_STRING_TEXT, f"field {opts.text_field!r} is {type(text).__name__}, not a string", src, doc_id, preview(raw))
            continue
        yield _finish_text(doc_id, text, src)


class _DocBuilder:
    """Accumulates the lines of one multi-line document (WikiText, plain text) with a byte bound.

    Documents are numbered in file order (``<file name>:<ordinal>``); a line that is too long or not
    UTF-8 rejects the whole document it belongs to, with the line named in the reason.
    """

    def __init__(self, limit: int, name: str, joiner: str):
        self.limit = limit
        self.name = name
        self.joiner = joiner
        self.ordinal = 0
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

    def fail(self, src: Source, reason: str, detail: str):
        if self.src is None:
            self.start(src)
        if not self.problem:
            self.problem = (reason, detail)
            self.parts = []

    def decode(self, src: Source, line: bytes | None, length: int) -> str | None:
        """The line as text, or None when it rejects the document (too long, or not UTF-8)."""
        if line is None:
            self.fail(src, LINE_TOO_LONG, f"line {src.line} of {length:,} bytes exceeds --max-record-bytes={self.limit:,}")
            return None
        text, bad = _decode(line, src)
        if bad:
            self.fail(src, INVALID_UTF8, f"line {src.line}: {bad.detail}")
            return None
        return text

    def emit(self) -> Iterator[Record]:
        if self.src is None:
            return
        doc_id = f"{self.name}:{self.ordinal}"
        if self.problem:
            yield DeadLetter(self.problem[0], self.problem[1], self.src, doc_id, "")
        else:
            yield _finish_text(doc_id, self.joiner.join(self.parts), self.src)


def _wikitext_records(lines, name: str, path: str, opts: ReaderOptions) -> Iterator[Record]:
    detok = opts.wikitext_detokenize == "yes" or (opts.wikitext_detokenize == "auto" and ".tokens" in name)
    unk = opts.wikitext_unk

    def convert(s: str) -> str:
        if detok:
            return wikitext.detokenize(s, unk)
        s = s.strip()
        if unk is None:
            return " ".join(s.replace(wikitext.UNK, " ").split())
        return s.replace(wikitext.UNK, unk) if unk != wikitext.UNK else s

    doc = _DocBuilder(opts.max_record_bytes, name, "\n\n")
    for line_no, offset, line, length in lines:
        src = Source(path, line_no, offset)
        text = doc.decode(src, line, length)
        if text is None or wikitext.is_blank(text):
            continue
        level = wikitext.heading_level(text)
        if level == 1:
            yield from doc.emit()
            doc.start(src)
        elif doc.src is None:  # content before the first title still forms a document
            doc.start(src)
        if level:
            if opts.wikitext_headings == "keep":
                doc.add(convert(wikitext.heading_text(text)), length)
            continue
        converted = convert(text)
        if converted:
            doc.add(converted, length)
    yield from doc.emit()


def _text_records(lines, name: str, path: str, opts: ReaderOptions) -> Iterator[Record]:
    doc = _DocBuilder(opts.max_record_bytes, name, "\n")
    for line_no, offset, line, length in lines:
        src = Source(path, line_no, offset)
        text = doc.decode(src, line, length)
        if text is None:
            continue
        if not text.strip():
            yield from doc.emit()
            doc.reset(None)
            continue
        if doc.src is None:
            doc.start(src)
        doc.add(text.rstrip("\r"), length)
    yield from doc.emit()


_FORMATS: dict[str, Callable] = {"jsonl": _jsonl_records, "wikitext": _wikitext_records, "text": _text_records}


def read_stream(f: BinaryIO, path: str, opts: ReaderOptions) -> Iterator[Record | InputSummary]:
    """Yield every record of one raw (possibly compressed) file, then its :class:`InputSummary`.

    A truncated or corrupt compressed stream does not raise: the records decoded so far are
    yielded, then a ``truncated_input`` dead letter describes how far reading got, and the
    summary has ``truncated=True``.
    """
    raw = _HashingReader(f)
    name = os.path.basename(path.rstrip("/"))
    summary = InputSummary(path)
    lines_seen = [0, 0]  # last line number, byte offset after it
    bom = [False]

    def tracked_lines():
        chunks = skip_bom(iter(_decompressed_chunks(raw, compression_of(path))), bom)
        first = next(chunks, b"")  # skip_bom has decided by the time it yields its first chunk
        for item in iter_lines(itertools.chain([first], chunks), opts.max_record_bytes, len(UTF8_BOM) if bom[0] else 0):
            lines_seen[0] = item[0]
            lines_seen[1] = item[1] + item[3] + 1
            yield item

    records = _FORMATS[opts.input_format](tracked_lines(), name, path, opts)
    try:
        for rec in records:
            summary.documents_read += 1
            yield rec
    except (TruncatedInputError, CorruptInputError) as e:
        summary.documents_read += 1
        summary.truncated = True
        src = Source(path, lines_seen[0] + 1, lines_seen[1])
        yield DeadLetter(
            TRUNCATED_INPUT if isinstance(e, TruncatedInputError) else CORRUPT_INPUT,
            f"{e}; the records before line {lines_seen[0] + 1} were read, the rest of the file is lost",
            src,
            None,
            "",
        )
    raw.drain()
    summary.byte_order_mark = bom[0]
    summary.bytes = raw.bytes
    summary.sha256 = raw.sha256.hexdigest()
    yield summary


def read_file(path: str, opts: ReaderOptions) -> Iterator[Record | InputSummary]:
    """Open ``path`` with Beam's FileSystems (local, gs://, s3://, ...) and :func:`read_stream` it."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        yield from read_stream(f, path, opts)
