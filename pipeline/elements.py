"""The elements that flow between the stages of ``build_shards``; every stage imports them from here.

read/ -> :class:`Document` (with its :class:`Source`), :class:`DeadLetter` (one per rejected record, with a
reason below) and one :class:`InputSummary` per file; candidates/ -> :class:`AnnotatedDocument` (a document
with :class:`CharSpans`); tokenize/ -> :class:`TokenizedDocument`; write/ packs those into :class:`Row` s.
Plain dataclasses, no Beam; this module imports nothing from ``pipeline``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
WORD_TOO_LONG = "word_too_long"

# Reasons a valid document is removed (``removed/<reason>.jsonl``; counted apart from dead letters).
DUPLICATE = "duplicate"
CONTAMINATED = "contaminated"

PREVIEW_CHARS = 1000  # a dead letter shows at most this much of its record


def encodable(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot encode) written as ``\\udXXX`` escapes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def preview(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text[: PREVIEW_CHARS * 4].decode("utf-8", errors="replace")
    return encodable(text[:PREVIEW_CHARS])


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


Record = Document | DeadLetter


@dataclass(frozen=True)
class RemovedDocument:
    """A valid document the job leaves out: a copy of ``detail["duplicate_of"]`` or overlapping evaluation data."""

    reason: str  # DUPLICATE or CONTAMINATED
    doc_id: str
    source: Source
    detail: dict  # JSON-ready: what it matched (FORMAT.md, "removed/<reason>.jsonl")
    preview: str = ""

    def as_dict(self) -> dict:
        return {
            "reason": self.reason,
            "doc_id": encodable(self.doc_id),
            "source": self.source.as_dict(),
            **self.detail,
            "preview": encodable(self.preview),
        }


@dataclass(frozen=True)
class CharSpans:
    """Candidate spans of one kind on a document's characters: [start, end) pairs and labels."""

    kind: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    labels: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AnnotatedDocument:
    """A document with candidate spans found on its text (output of FindMaskCandidates)."""

    document: Document
    spans: tuple[CharSpans, ...]


@dataclass
class TokenizedDocument:
    doc_id: str
    source_path: str
    source_line: int
    source_offset: int
    ids: np.ndarray  # uint16 or int32, the whole document
    word_start: np.ndarray  # bool, same length
    sentence_start: np.ndarray  # bool, same length
    cleaned: bool = False
    # kind -> int32 array (k, 2) of [start, end) token ranges in document coordinates, sorted.
    spans: dict[str, np.ndarray] = field(default_factory=dict)
    # kind -> labels aligned with spans[kind] (entities only).
    span_labels: dict[str, list[str]] = field(default_factory=dict)

    @property
    def sort_key(self) -> tuple:
        return (self.doc_id, self.source_path, self.source_offset)

    @property
    def num_sentences(self) -> int:
        return int(self.sentence_start.sum())


@dataclass
class Row:
    doc_id: str
    seq_index: int
    ids: np.ndarray
    word_start: np.ndarray
    sentence_start: np.ndarray
    spans: dict[str, np.ndarray]
    span_labels: dict[str, list[str]]
