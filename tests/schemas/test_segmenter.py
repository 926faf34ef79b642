"""Greedy longest-match segmentation (schemas.segmenter): hand-computed examples, a brute-force reference,
and dictionaries written by the n-gram dictionary job (including one built on real WikiText-2)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pipeline import build_ngram_dictionary as job
from schemas import ngram_dictionary as ngram_format
from schemas.segmenter import Segmenter

SHARED = Path(__file__).resolve().parents[3] / "shared"
WIKITEXT2 = SHARED / "data" / "wikitext-2"
needs_wikitext2 = pytest.mark.skipif(
    not (WIKITEXT2 / "wiki.valid.tokens").exists(), reason="../shared/data/wikitext-2 is not available"
)


def words(text: str) -> list[str]:
    return text.split(" ")


# --------------------------------------------------------------------------------------------------
# Hand-computed examples


def test_greedy_from_the_head_takes_the_longest_entry():
    seg = Segmenter(["new york", "new york city", "york city hall", "city hall"])
    w = words("i love new york city hall")
    # At "new": "new york city" (3 words) beats "new york"; then "hall" is alone. Greedy, not optimal:
    # "new york" + "city hall" is never considered.
    assert seg.segment(w) == [(0, 1), (1, 2), (2, 5), (5, 6)]
    assert seg.ngram_spans(w) == [(2, 5)]


def test_unmatched_words_stay_single_and_segments_cover_every_word():
    seg = Segmenter(["of the", "united states"])
    w = words("the president of the united states of america")
    assert seg.segment(w) == [(0, 1), (1, 2), (2, 4), (4, 6), (6, 7), (7, 8)]
    assert seg.ngram_spans(w) == [(2, 4), (4, 6)]
    assert seg.segment(words("nothing here matches")) == [(0, 1), (1, 2), (2, 3)]
    assert seg.segment([]) == []
    assert seg.ngram_spans(["of"]) == []


def test_longer_entry_found_through_prefixes_that_are_not_entries():
    seg = Segmenter(["a b", "a b c d"])
    assert seg.segment(words("a b c d e")) == [(0, 4), (4, 5)]
    assert seg.segment(words("a b c e")) == [(0, 2), (2, 3), (3, 4)]  # "a b c" is a prefix, not an entry
    assert seg.segment(words("x a b c")) == [(0, 1), (1, 3), (3, 4)]
    only_long = Segmenter(["a b c d"])
    assert only_long.segment(words("a b c x")) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_entry_cut_by_the_end_of_the_sentence_does_not_match():
    seg = Segmenter(["a b c"])
    assert seg.segment(words("x a b")) == [(0, 1), (1, 2), (2, 3)]


def test_max_n_ignores_longer_entries():
    entries = ["a b", "a b c", "a b c d e"]
    assert Segmenter(entries).segment(words("a b c d e")) == [(0, 5)]
    capped = Segmenter(entries, max_n=3)
    assert capped.max_n == 3
    assert capped.segment(words("a b c d e")) == [(0, 3), (3, 4), (4, 5)]
    assert Segmenter(entries, max_n=1).segment(words("a b")) == [(0, 1), (1, 2)]


def test_entries_as_word_sequences_and_single_words_are_ignored():
    seg = Segmenter([("New", "York"), "York", ["a", "b", "c"]])
    assert len(seg) == 2
    assert ("New", "York") in seg and "a b c" in seg and "a b" not in seg and "York" not in seg
    assert seg.segment(["New", "York", "a", "b", "c"]) == [(0, 2), (2, 5)]


def test_lowercase_dictionary_lowercases_the_words_it_looks_up():
    seg = Segmenter(["new york"], lowercase=True)
    assert seg.segment(words("In New YORK")) == [(0, 1), (1, 3)]
    cased = Segmenter(["new york"])
    assert cased.segment(words("In New York")) == [(0, 1), (1, 2), (2, 3)]


def test_wikitext_markers_match_pre_tokenized_plain_text():
    # WikiText "1 @,@ 000" is "1,000" in plain text, which a BERT pre-tokenizer splits into "1 , 000".
    entries = ["1 @,@ 000", "2 @.@ 5 million", "well @-@ known"]
    seg = Segmenter(entries)
    assert seg.segment(words("about 1 , 000 people")) == [(0, 1), (1, 4), (4, 5)]
    assert seg.segment(words("2 . 5 million")) == [(0, 4)]
    assert seg.segment(words("a well - known man")) == [(0, 1), (1, 4), (4, 5)]
    assert seg.segment(words("about 1 @,@ 000 people")) == [(0, 1), (1, 4), (4, 5)]  # WikiText tokens too
    raw = Segmenter(entries, normalize_markers=False)
    assert raw.segment(words("1 , 000")) == [(0, 1), (1, 2), (2, 3)]
    assert raw.segment(words("1 @,@ 000")) == [(0, 3)]


def test_bad_entries_are_refused():
    for bad in ["a  b", " a b", "a\tb c", ("a", "")]:
        with pytest.raises(ValueError, match="bad n-gram"):
            Segmenter([bad])
    with pytest.raises(ValueError, match="max_n must be >= 1"):
        Segmenter(["a b"], max_n=0)


# --------------------------------------------------------------------------------------------------
# Against a brute-force reference


def reference_segment(entries: set[tuple[str, ...]], max_n: int, w: list[str]) -> list[tuple[int, int]]:
    spans, i = [], 0
    while i < len(w):
        for n in range(min(max_n, len(w) - i), 0, -1):
            if n == 1 or tuple(w[i : i + n]) in entries:
                spans.append((i, i + n))
                i += n
                break
    return spans


def test_equals_brute_force_reference_on_random_dictionaries():
    rng = random.Random(7)
    vocab = list("abcdef")
    checked = multi = 0
    for _ in range(200):
        entries = {tuple(rng.choices(vocab, k=rng.randint(2, 5))) for _ in range(rng.randint(1, 30))}
        seg = Segmenter(entries)
        max_n = max(map(len, entries))
        for _ in range(5):
            w = rng.choices(vocab, k=rng.randint(0, 25))
            spans = seg.segment(w)
            assert spans == reference_segment(entries, max_n, w)
            assert seg.ngram_spans(w) == [s for s in spans if s[1] - s[0] > 1]
            checked += 1
            multi += len(seg.ngram_spans(w))
    assert checked == 1000 and multi > 500


# --------------------------------------------------------------------------------------------------
# Dictionaries written by the job


@pytest.fixture(scope="module")
def lowercase_dictionary(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("segdict")
    corpus = root / "corpus.tokens"
    corpus.write_text(
        " = New York = \n"
        + " New York City is big . \n" * 3
        + " new york city hall , 1 @,@ 000 people \n" * 2
        + " the <unk> city hall \n",
        encoding="utf-8",
    )
    out = root / "dict"
    job.run(["--input", str(corpus), "--output", str(out), "--min-count", "2", "--lowercase"])
    return out


def test_from_dictionary_honours_lowercase_and_markers(lowercase_dictionary):
    seg = Segmenter.from_dictionary(str(lowercase_dictionary))
    assert seg.lowercase is True
    assert "new york city" in seg and "1 @,@ 000" in seg and "1 , 000" in seg
    w = words("In NEW York City hall ; 1 , 000 men")
    # "new york city hall" occurs twice, "new york city" 5 times: both are entries (min count 2), the longest
    # wins; "new york city hall ;" and "1 @,@ 000 men" are not entries ("... hall , " and "... 000 people" are).
    assert seg.segment(w) == [(0, 1), (1, 5), (5, 6), (6, 9), (9, 10)]
    assert seg.ngram_spans(w) == [(1, 5), (6, 9)]


def test_from_dictionary_min_count_filters_entries(lowercase_dictionary):
    seg = Segmenter.from_dictionary(str(lowercase_dictionary), min_count=4)  # "city hall": 3, "new york": 5
    assert "new york city" in seg and "city hall" not in seg
    assert seg.ngram_spans(words("new york city hall")) == [(0, 3)]


def test_from_dictionary_refuses_incomplete_or_unknown_dictionaries(lowercase_dictionary, tmp_path):
    with pytest.raises(ValueError, match="no manifest.json"):
        Segmenter.from_dictionary(str(tmp_path))
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / ngram_format.ARROW_FILE).write_bytes((lowercase_dictionary / ngram_format.ARROW_FILE).read_bytes())
    manifest = json.loads((lowercase_dictionary / ngram_format.MANIFEST_FILE).read_text())
    manifest["format_version"] = 99
    (copy / ngram_format.MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="format version 99"):
        Segmenter.from_dictionary(str(copy))


@needs_wikitext2
def test_segments_real_wikitext2_like_the_reference(tmp_path):
    valid = WIKITEXT2 / "wiki.valid.tokens"
    out = tmp_path / "dict"
    job.run(["--input", str(valid), "--output", str(out)])
    seg = Segmenter.from_dictionary(str(out), normalize_markers=False)
    entries = {
        tuple(line.split("\t")[0].split(" "))
        for line in (out / ngram_format.TSV_FILE).read_text(encoding="utf-8").splitlines()[1:]
    }
    assert len(entries) > 0 and len(seg) == len(entries)
    lines = [line.split() for line in (WIKITEXT2 / "wiki.test.tokens").read_text(encoding="utf-8").splitlines()]
    multi = 0
    for w in lines:
        spans = seg.segment(w)
        assert spans == reference_segment(entries, 5, w)
        multi += len(seg.ngram_spans(w))
    assert multi > 1000
