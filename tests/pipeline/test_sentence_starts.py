"""Sentence starts without reading the offsets back: equal to the offsets' answer, position by position."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.tokenize import tokenizer
from pipeline.tokenize.encodings import Encoded
from pipeline.tokenize.sentences import sentence_spans
from tests.conftest import wikitext2

TEXTS = [
    "Hello world. This is  it.\n\n\nHeading\n\nA new paragraph starts here! And \u00e9t\u00e9 ends? Yes.",
    "  Leading spaces. Then [UNK] and <unk> tokens.\tTabs too.   ",
    "Numbers 3.14 and e.g. abbreviations, Dr. Smith went home. Unbreakablewordwithoutanyspace.",
]


@pytest.fixture(scope="module")
def tok():
    return tokenizer.make_spec(tokenizer.train(TEXTS * 20, vocab_size=200), "trained").load_for_text()


def _both(tok, text: str, chars: list[int]):
    chars = np.array(chars, dtype=np.int64)
    fast = Encoded.of(tok.encode(text, add_special_tokens=False))
    exact = np.searchsorted(Encoded.of(tok.encode(text, add_special_tokens=False)).offsets[:, 0], chars, side="left")
    return fast.first_tokens_at(text, chars), exact, fast


def test_punkt_starts_match_offsets_without_reading_them(tok):
    checked = 0
    for text in TEXTS:
        starts = [s for s, _ in sentence_spans(text, "english")]
        got, exact, enc = _both(tok, text, starts)
        assert got.tolist() == exact.tolist()
        assert enc._offsets is None  # answered by the tokenizer, offsets never read back
        checked += len(starts)
    assert checked > 5


def test_positions_inside_a_token_or_past_the_end_fall_back_to_the_offsets(tok):
    text = TEXTS[2]
    inside = text.index("Unbreakable") + 3  # inside a word: the first token starting after it, not the one holding it
    for chars in ([0, inside], [0, len(text)], [0, len(text) + 5], [text.index("abbreviations") + 2]):
        got, exact, enc = _both(tok, text, chars)
        assert got.tolist() == exact.tolist(), chars
        assert enc._offsets is not None, chars  # the exact fallback ran
    got, exact, enc = _both(tok, text, [text.index("3.14") + 1])  # "." is a token of its own: no fallback needed
    assert got.tolist() == exact.tolist() and enc._offsets is None


def test_wikitext_sentence_starts_match(tok):
    path = wikitext2()  # skips without ../shared
    text = path.read_text(encoding="utf-8")[:200_000]
    starts = [s for s, _ in sentence_spans(text, "english")]
    got, exact, enc = _both(tok, text, starts)
    assert len(starts) > 100 and got.tolist() == exact.tolist()
