"""What every part of the report shares: its error, file names and limits, the display names and colours of
the candidate kinds, and how numbers and versions are worded."""

from __future__ import annotations

from schemas import format as fmt

README_FILE = "README.md"
INDEX_FILE = "index.html"
DEFAULT_MAX_ROWS = 200_000
DEFAULT_EXAMPLES = 4
DEFAULT_LICENSE = "unknown"
# Span lengths and spans per row are plotted up to these values; longer ones go into the last bar.
MAX_PLOTTED_SPAN_LEN = 12
SPANS_PER_ROW_BARS = 24  # at most this many bars per kind
TOP_LABELS = 15
TOP_NGRAMS = 25

KIND_NAMES = {"entities": "entities", "noun_phrases": "noun phrases", "ngrams": "n-grams"}
KIND_COLORS = {"entities": "#d97706", "noun_phrases": "#2563eb", "ngrams": "#059669"}
KIND_CSS = {"entities": "ent", "noun_phrases": "np", "ngrams": "ng"}


class ReportError(fmt.FormatError):
    """The report cannot be made (a FormatError, so callers that print those need no extra handler)."""


def versions(m: dict) -> list[tuple[str, str]]:
    """(software, version) from created_by: the package first, then the libraries."""
    cb = dict(m.get("created_by") or {})
    first = [(str(cb.pop("package", "spanprep")), str(cb.pop("version", "?")))]
    return first + [(k, str(v)) for k, v in sorted(cb.items()) if not isinstance(v, (dict, list))]


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"
