"""What a document's text is once read: line ends normalised to ``\\n``, C0 and C1 control characters removed
(schemas/FORMAT.md). One rule for every reader (``pipeline.read.records``) and for whatever compares with the job's
texts (``benchmarks/bench_shards.py``'s baseline)."""

from __future__ import annotations

import re

# C0 and C1 control characters except tab and newline; carriage returns are normalised first.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def clean_text(text: str) -> tuple[str, bool]:
    """Normalise line ends and remove control characters; return (text, whether anything was removed)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    cleaned = _CONTROL.sub("", text)
    return cleaned, len(cleaned) != len(text)
