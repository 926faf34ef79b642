"""Our replacement for Punkt's multi-character punctuation scan gives exactly Punkt's own answer."""

from __future__ import annotations

import random

import punkt
import punkt.rules.boundaries as boundaries

from pipeline.tokenize import sentences
from tests.conftest import wikitext2

CRAFTED = [
    "", "-", "--", "---", "a--b", ".", "..", "...", ". .", ". . .", ". . . .", ".\t.\n.", "..--..", "a. .b", ". .. . .",
    "Wait . . . what?", "He paused... Then spoke.", "x -- y --- z", "1.. 2. . 3. . . 4", ". . ..", ".\u2028.\u2028.",
]

def test_the_replacement_is_installed():
    assert boundaries._multi_char_interior is sentences._multi_char_interior

def test_same_interior_as_punkt_on_crafted_and_random_text():
    lang = boundaries.DEFAULT_LANGUAGE_VARS
    rng = random.Random(0)
    texts = CRAFTED + ["".join(rng.choice(".- \tab\n") for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    nonempty = 0
    for text in texts:
        ours = sentences._multi_char_interior(text, lang)
        assert ours == sentences._punkt_multi_char_interior(text, lang), repr(text)
        nonempty += bool(ours)
    assert nonempty > 500

def test_same_sentences_as_punkt_on_real_text():
    text = wikitext2("valid").read_text(encoding="utf-8")[:300_000]
    ours = sentences.sentence_spans(text)
    boundaries._multi_char_interior = sentences._punkt_multi_char_interior
    try:
        theirs = sentences.sentence_spans(text)
    finally:
        boundaries._multi_char_interior = sentences._multi_char_interior
    assert len(ours) > 1000 and ours == theirs
