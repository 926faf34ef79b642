"""Duplicate documents (issue 35): the text rules, MinHash, the DropDuplicates composite, and the job with --dedup on
real Wikipedia pages with planted copies, checked against exact Jaccard computed by brute force."""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
import re
import typing
import unicodedata
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
import zstandard
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline import build_shards
from pipeline import verify as verify_mod
from pipeline.dedup import minhash, text, word_rules
from pipeline.dedup.unique_documents import DropDuplicates
from pipeline.elements import Document, Source
from tests.conftest import WIKIPEDIA_SAMPLE, build

WORDS = [f"w{i}" for i in range(100)]


def _create(items):
    return beam.Create(range(len(items))) | beam.Map(lambda i: items[i]).with_output_types(typing.Any)


def _doc(doc_id: str, words: list[str] | str, line: int = 1) -> Document:
    body = words if isinstance(words, str) else " ".join(words)
    return Document(doc_id, body, Source("corpus.jsonl", line, line * 1000))


def _inputs(p, docs: list[Document]) -> dict:
    """The three reads of the input DropDuplicates takes (the main pass, the pre-pass, near's confirmation pass)."""
    return {
        "documents": p | _create(docs),
        "prepass": p | "Again" >> _create(docs),
        "confirm": p | "Once more" >> _create(docs),
    }


def _check(docs: list[Document], mode: str, kept: list, removed: list) -> None:
    """Run DropDuplicates and assert the kept (doc_id, line)s and removed (doc_id, line, method, duplicate_of,
    similarity)s."""
    with TestPipeline(runner="FnApiRunner") as p:
        out = _inputs(p, docs) | DropDuplicates(mode)
        assert_that(out["documents"] | "Kept" >> beam.Map(lambda d: (d.doc_id, d.source.line)), equal_to(kept), "kept")
        assert_that(
            out["removed"]
            | "Removed"
            >> beam.Map(
                lambda r: (
                    r.doc_id,
                    r.source.line,
                    r.detail["method"],
                    r.detail["duplicate_of"]["doc_id"],
                    r.detail["similarity"],
                )
            ),
            equal_to(removed),
            "removed",
        )


# -- text rules and MinHash ---------------------------------------------------------------------


def test_words_fold_case_accents_and_punctuation():
    assert text.words("Café, 3.5! ÜBER-cool\tnaïve_x") == ["cafe", "3", "5", "uber", "cool", "naive", "x"]
    assert text.words("naïve_x", erase=False) == ["naive_x"]  # the rule before format 2.2: "_" was a letter
    assert text.words("«—»") == []


def test_marks_of_other_scripts_are_letters_of_their_words_not_accents():
    """Only Latin, Greek and Cyrillic letters lose their accents; an Indic vowel sign or a kana's voicing mark is part
    of its word (review of issue 35: both were dropped or split off, so different words, and documents, were one)."""
    assert text.words("दिल") != text.words("दाल") and len(text.words("हिंदी भाषा")) == 2
    assert text.words("がっこう") != text.words("かっこう")
    assert text.words("Tiếng Việt, хлеб Ёлка") == ["tieng", "viet", "хлеб", "елка"]
    docs = [_doc("a", "मुझे दिल पसंद है", 1), _doc("b", "मुझे दाल पसंद है", 2), _doc("c", "मुझे दिल पसंद है ।", 3)]
    _check(docs, "exact", [("a", 1), ("b", 2)], [("c", 3, "exact", "a", 1.0)])


def test_each_character_of_an_unspaced_script_is_a_word_with_its_marks():
    """Han and kana are written without spaces: a whole sentence was one word, so no 13-gram was ever shared and a
    5-word shingle spanned paragraphs (review D11). Each character is a word; a voicing mark stays with its kana."""
    sentence = "日本語の文章です"
    assert text.words(sentence) == [unicodedata.normalize("NFKD", c) for c in sentence] and len(sentence) == 8
    assert text.words("abc日本") == ["abc", "日", "本"]
    assert text.words("ＩＢＭの東京タワー、333メートル。") == [
        "ibm",
        "の",
        "東",
        "京",
        "タ",
        "ワ",
        "ー",
        "333",
        "メ",
        "ー",
        "ト",
        "ル",
    ]
    gakkou, kakkou = text.words("がっこう"), text.words("かっこう")
    assert len(gakkou) == len(kakkou) == 4 and gakkou[1:] == kakkou[1:]
    assert gakkou[0] == "\u304b\u3099" != kakkou[0] == "\u304b"  # NFKD: が is か + the voicing mark, one word
    assert text.words("ｶﾞｯｺｳ") == text.words("ガッコウ") == ["\u30ab\u3099", "ッ", "コ", "ウ"]  # halfwidth
    assert text.words("人々 〇 𠮷野家") == ["人", "々", "〇", "𠮷", "野", "家"]
    # Hangul is written with spaces between words; Thai has no spaces, but its letters are not words (a per-letter
    # rule would make 13 letters an n-gram): both keep their runs
    spaced = "한국어 문장입니다 ภาษาไทย"
    assert text.words(spaced) == unicodedata.normalize("NFKD", spaced).split() and len(spaced.split()) == 3


def test_shingles_of_a_short_text_are_one_shingle_and_jaccard_is_exact():
    assert len(text.shingle_set(["a", "b"], 5)) == 1 and len(text.shingle_set([], 5)) == 0
    a = text.shingle_set(WORDS, 5)
    edited = WORDS[:50] + ["x"] + WORDS[51:]  # one word: 5 of 96 shingles change
    assert len(a) == 96 and text.jaccard(a, text.shingle_set(edited, 5)) == pytest.approx(91 / 101)


def test_minhash_agreement_estimates_jaccard():
    a = np.unique(text.word_hashes([f"a{i}" for i in range(1000)]))
    b = np.unique(text.word_hashes([f"a{i}" for i in range(800)] + [f"b{i}" for i in range(200)]))
    s = text.jaccard(a, b)
    assert s == pytest.approx(800 / 1200)
    agree = float(np.mean(minhash.signature(a, 1024) == minhash.signature(b, 1024)))
    assert abs(agree - s) < 4 * math.sqrt(s * (1 - s) / 1024)


def test_minhash_signature_is_its_definition_across_chunks():
    """Value i is min over shingles h of ((a_i * h + b_i) mod 2**64) >> 32, computed here with Python integers, for a
    set longer than the chunk the products are made in."""
    hashes = np.random.default_rng(3).integers(0, 2**64, size=minhash._CHUNK + 5, dtype=np.uint64, endpoint=False)
    a, b = minhash._permutations(4)
    values = [int(h) for h in hashes]
    expected = [min(((int(ai) * h + int(bi)) % 2**64) >> 32 for h in values) for ai, bi in zip(a, b)]
    assert minhash.signature(hashes, 4).tolist() == expected
    assert minhash.signature(hashes[:3], 4).tolist() == [
        min(((int(ai) * h + int(bi)) % 2**64) >> 32 for h in values[:3]) for ai, bi in zip(a, b)
    ]


def test_near_params_are_checked_and_bands_follow_the_s_curve():
    with pytest.raises(ValueError, match="--dedup-threshold"):
        minhash.NearParams(threshold=1.5)
    params = minhash.NearParams()
    rng = np.random.default_rng(7)
    trials, shared = 300, 0
    for _ in range(trials):  # pairs of 80-hash sets sharing 60: Jaccard 60/100
        pool = rng.integers(0, 2**63, size=100, dtype=np.uint64)
        a, b = np.unique(pool[:80]), np.unique(pool[20:])
        assert text.jaccard(a, b) == 0.6
        keys_a = minhash.band_keys(minhash.signature(a, params.num_perm), params)
        keys_b = minhash.band_keys(minhash.signature(b, params.num_perm), params)
        shared += bool(set(keys_a) & set(keys_b))
    p = params.candidate_probability(0.6)  # 0.615 for 20 bands of 6
    assert abs(shared / trials - p) < 4 * math.sqrt(p * (1 - p) / trials)


def test_fast_analysis_gives_the_words_of_the_reference_rule_on_real_text():
    """``analyse`` (code points, a word table, hashes of runs; normalising only the non-ASCII runs) against the rule as
    written (NFKD of the whole text, the accent regex, casefold, the word regex, a hash per word string)."""
    tricky = [
        "\u0301abc Caf\u00e9",
        " \u0301x",
        "x\u0301\u0323y \u00ef",
        "\ufb01ne \u00bd \u216b \u00b2",
        "\u0130stanbul STRASSE Stra\u00dfe",
        "\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u0401\u043b\u043a\u0430",
        "\u0926\u093f\u0932 \u304c\u3063\u3053\u3046",
        "lone \ud800 surrogate",
        "a\u00a0b\u2014c_d",
        "",
        "\u00ab\u2014\u00bb",
        "x\u0308",
        "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002abc\u65e5\u672c def",
        "\u304c\u3063\u3053\u3046 \u304b\u3063\u3053\u3046 \uff76\uff9e\uff6f\uff7a\uff73 \u309b\u309c",
        "\u65e5\u0301x \u3099\u65e5a a\u3099\u65e5\u3099\u3099b \u304b\u3099\u3099\u3099",
        "\u4eba\u3005\u3007 \U00020bb7\u91ce\u5bb6 \uf900\u2f00 \u3231 \u3300 \u30fc\u30fb\u30a2",
        "Caf\u00e9\u6771\u4eac\uff21\uff11\u3001\ud55c\uad6d\uc5b4 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u6f22",
        "\u3042",
        # marks no letter owns (removed) next to marks that are letters (kept): a stroked symbol, a mark first, after
        # CJK punctuation, a Han ideograph, a kana (its voicing kept), a Devanagari letter, an ASCII letter
        "\u0301x \u2209 y\u3001\u0300z \u65e5\u0300\u304b\u3099\u0301 \u0915\u093f\u0301 a\u0338\u0941 \u2192\u20d7",
        "\u4e2d\u56fd\u4eba\u6c11\u89e3\u653e\u519b\uff0c\u957f\u6c5f\u662f\u4e9a\u6d32\u7b2c\u4e00\u957f\u6cb3",
        # U+FFFF joins the non-ASCII runs in normalise: a text holding it is normalised run by run
        "Caf\u00e9\uffff\u0301x \u00c9t\u00e9\uffff",
        "\u00e9",
        "\u00e9A\u0301\u00c0B",
    ]
    pages = [p["text"] for p in wikipedia_pages(300)]
    assert sum(not t.isascii() for t in pages) > 100
    unspaced = re.compile("[" + word_rules._ranges(text._UNSPACED) + "]")
    assert sum(bool(unspaced.search(t)) for t in pages) >= 5  # pages citing Chinese titles
    for body in tricky + pages:
        reference = text._WORD.findall(text.normalise_reference(body))
        assert text.normalise(body) == text.normalise_reference(body)
        assert text.normalise(body, erase=False) == text.normalise_reference(body, erase=False)
        assert text.words(body) == reference
        hashes, digest = text.analyse(body)
        assert np.array_equal(hashes, text.word_hashes(reference)), body[:80]
        joined = " ".join(reference)
        if joined.isascii():  # the words decide, not the text around them (an em dash between ASCII words)
            named = hashlib.blake2b(joined.encode("ascii"), digest_size=16, person=b"ascii").digest()
        else:
            named = hashlib.blake2b(joined.encode("utf-32-le", "surrogatepass"), digest_size=16).digest()
        assert digest == (named if reference else None)


def test_the_digest_names_the_words_whatever_the_characters_between_them():
    """An ASCII text and one with the same words between non-ASCII punctuation are exact copies (the digest of ASCII
    words is taken on bytes, the others' on code points: the words decide which)."""
    same = [
        "words, between commas - here",
        "words\u2014between\u00a0commas \u00ab here \u00bb",
        "Words; BETWEEN commas: here",
    ]
    assert len({text.text_digest(t) for t in same}) == 1
    assert text.text_digest("\u0434\u043e\u043c au lait") == text.text_digest("\u0414\u043e\u043c \u2014 au lait")
    assert text.text_digest("\u0434\u043e\u043c au lait") != text.text_digest("\u0434\u044b\u043c au lait")


def test_the_word_tables_are_filled_for_the_planes_a_text_uses_and_say_what_the_rule_says(monkeypatch):
    """The tables are filled a plane at a time, when a text has a code point there (an English corpus never pays
    for scanning the other 16 planes); what is filled says, character by character, what ``_WORD`` says."""
    monkeypatch.setattr(text, "_TABLES", [])
    monkeypatch.setattr(text, "_PLANES", set())
    assert text.analyse("Plain English, and a café.")[1] is not None
    assert text._PLANES == {0}
    hashes, _ = text.analyse("Linear B \U00010000\U00010001 and Han \U00020000\U0002a6d6 ideographs")
    assert len(hashes) == 8 and text._PLANES == {0, 1, 2}
    kinds, words = text._TABLES
    marks, unspaced = set(text._MARKS), set(text._UNSPACED)
    checked = 0
    for cp in range(0, 3 << 16):
        is_word = text._WORD.fullmatch(chr(cp)) is not None
        expected = 0 if not is_word else 3 if cp in unspaced else 2 if cp in marks else 1
        assert (kinds[cp], words[cp]) == (expected, is_word), hex(cp)
        checked += is_word
    assert checked > 100_000 and not kinds[3 << 16 :].any()  # plane 3 holds Han too, but no text asked for it


def test_word_hashes_of_long_texts_and_of_texts_in_one_batch_equal_each_text_alone():
    """analyse hashes words from prefix sums, in blocks past text._PREFIX_LIMIT code points (a word longer than a
    block by the run rule); analyse_texts joins texts by U+FFFF. Both must give what the word strings give."""
    pages = [p["text"] for p in wikipedia_pages(400)]
    long_text = " ".join(pages)
    assert len(long_text) > text._PREFIX_LIMIT  # three blocks of words
    for body in (long_text, "x" * (text._PREFIX_LIMIT + 5) + " tail " + pages[0], pages[1] + " " + "y" * 600_000):
        assert np.array_equal(text.analyse(body)[0], text.word_hashes(text.words(body)))
    batch = [*pages[:50], "", "\u0301lead mark", "Caf\u00e9\u0301 x", "\u00ab\u2014\u00bb", "end\u0308"]
    for texts in (batch, [*batch, "a\uffffb"]):  # a text holding the separator: analysed alone
        hashes, owner = text.analyse_texts(texts)
        alone = [text.word_hashes(text.words(t)) for t in texts]
        assert np.array_equal(hashes, np.concatenate(alone))
        assert np.array_equal(owner, np.repeat(np.arange(len(texts)), [len(a) for a in alone]))
    for page in pages[:40]:  # the job signs the shingle windows, repeats and all: the set's signature
        windows = text.shingle_windows(text.analyse(page)[0], 5)
        assert np.array_equal(minhash.signature(windows, 120), minhash.signature(np.unique(windows), 120))
    grams, owners = text.ngrams_within(*text.analyse_texts(pages[:20]), 5)
    assert np.array_equal(grams, np.concatenate([text.ngram_hashes(text.analyse(p)[0], 5) for p in pages[:20]]))
    assert len(owners) == len(grams)


def test_a_template_bucket_gives_one_pair_per_member_and_one_cluster():
    """300 template stubs made a bucket of 272 and 44,850 pairs (D2): now each member is compared with the bucket's
    smallest (at most bands x (m - 1) pairs), and the whole template is one cluster whose records all name the one page kept."""
    stub = "is a commune in the Aisne department in Hauts-de-France in northern France. " * 4
    docs = [_doc(f"t{i:02d}", f"Town{i} {stub}", i + 1) for i in range(80)]
    with TestPipeline(runner="FnApiRunner") as p:
        out = _inputs(p, docs) | DropDuplicates("near")
        stats = out["stats"] | beam.combiners.ToDict()
        assert_that(
            stats | beam.Map(lambda d: d["candidate_pairs"] <= 20 * 79 < 80 * 79 // 2 and d["buckets_capped"] == 0),
            equal_to([True]),
            "pairs",
        )
        assert_that(out["documents"] | beam.Map(lambda d: d.doc_id), equal_to(["t00"]), "kept")
        named = out["removed"] | beam.Map(lambda r: r.detail["duplicate_of"]["doc_id"]) | beam.Distinct()
        assert_that(named, equal_to(["t00"]), "named")


def test_a_bucket_larger_than_the_cap_gives_pairs_among_its_smallest_members_and_is_counted():
    """--dedup-max-bucket: the 80 template stubs above with a cap of 10: each bucket's 10 smallest documents are
    candidates (at most bands x 9 pairs), the capped buckets are counted, and the stubs a capped bucket left out stay
    unless another band made them candidates (with the default cap nothing is capped and one stays: the test above)."""
    stub = "is a commune in the Aisne department in Hauts-de-France in northern France. " * 4
    docs = [_doc(f"t{i:02d}", f"Town{i} {stub}", i + 1) for i in range(80)]
    with TestPipeline(runner="FnApiRunner") as p:
        out = _inputs(p, docs) | DropDuplicates("near", minhash.NearParams(max_bucket=10))
        stats = out["stats"] | "Stats" >> beam.combiners.ToDict()
        kept = out["documents"] | beam.combiners.Count.Globally()
        result = stats | beam.Map(
            lambda d, n: d["buckets_capped"] > 0 and d["candidate_pairs"] <= 20 * 9 and n > 1,
            beam.pvalue.AsSingleton(kept),
        )
        assert_that(result, equal_to([True]))


# -- the composite ------------------------------------------------------------------------------


def test_exact_copies_differ_only_in_case_punctuation_and_spacing_and_the_smallest_key_stays():
    docs = [
        _doc("b", "The cat sat on the mat.", 1),
        _doc("a", "the CAT  sat, on the mat", 2),
        _doc("c", "The cat sat on a mat.", 3),
        _doc("d", "-- !! --", 4),
        _doc("e", "-- ?? --", 5),  # no words: never a copy
        _doc("a", "THE CAT SAT ON THE MAT", 6),  # same id, later position: a larger key
    ]
    kept = [("b", 1), ("c", 3), ("d", 4), ("e", 5)]  # the smallest position stays, whatever the ids (D12)
    _check(docs, "exact", kept, [("a", 2, "exact", "b", 1.0), ("a", 6, "exact", "b", 1.0)])


def test_near_copies_are_confirmed_by_exact_jaccard_and_do_not_depend_on_input_order():
    one_edit = WORDS[:50] + ["x"] + WORDS[51:]  # J = 91/101 = 0.90
    ten_edits = [w if i % 10 else "y" for i, w in enumerate(WORDS)]  # J well below 0.8
    docs = [_doc("a", WORDS, 1), _doc("b", one_edit, 2), _doc("c", ten_edits, 3), _doc("d", WORDS[::-1], 4)]
    expected = round(text.jaccard(text.shingle_set(WORDS, 5), text.shingle_set(one_edit, 5)), 6)
    for order in (docs, docs[::-1]):
        _check(order, "near", [("a", 1), ("c", 3), ("d", 4)], [("b", 2, "near", "a", expected)])


def test_a_chain_is_one_cluster_and_every_record_names_the_document_kept():
    """A ~ B ~ C with A and C below the threshold: one cluster, A stays, and C's record names A (it named B, which is
    itself removed: D4), with their own similarity."""
    a = WORDS
    b = ["p"] * 10 + WORDS[10:]  # J(a, b) = 86/106 = 0.81
    c = b[:90] + ["q"] * 10  # J(b, c) = 0.81, J(a, c) = 76/116 = 0.66
    ab = round(text.jaccard(text.shingle_set(a, 5), text.shingle_set(b, 5)), 6)
    ac = round(text.jaccard(text.shingle_set(a, 5), text.shingle_set(c, 5)), 6)
    assert ac < 0.8
    docs = [_doc("a", a, 1), _doc("b", b, 2), _doc("c", c, 3), _doc("c2", " ".join(c).upper(), 4)]
    removed = [("b", 2, "near", "a", ab), ("c", 3, "near", "a", ac), ("c2", 4, "near", "a", ac)]
    for order in (docs, docs[::-1]):
        _check(order, "near", [("a", 1)], removed)


# -- the job on real text -----------------------------------------------------------------------


def wikipedia_pages(n: int) -> list[dict]:
    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE}")
    with WIKIPEDIA_SAMPLE.open("rb") as f:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        return [json.loads(next(lines)) for _ in range(n)]


def planted_corpus(path: Path, n: int = 40, copies: int = 20, seed: int = 0) -> list[dict]:
    """``n`` real pages, ``copies`` of them copied with 1-10% of their words replaced, 3 copied in upper case, and
    the copies numbered ...0 and ...1 (4 edited at 1 or 2%, 2 upper case) copied again with 2% more replaced:
    chains A ~ B ~ C whose A and C may be below the threshold."""
    rng = random.Random(seed)
    pages = [{"id": p["id"], "text": p["text"]} for p in wikipedia_pages(n)]
    out = list(pages)

    def edited(body: str, percent: int) -> str:
        words = body.split(" ")
        for j in rng.sample(range(len(words)), max(1, round(len(words) * percent / 100))):
            words[j] = f"edit{rng.randrange(10**6)}"
        return " ".join(words)

    for i, page in enumerate(rng.sample(pages, copies)):
        out.append({"id": f"copy-{i:02d}", "text": edited(page["text"], 1 + i % 10)})
    out += [{"id": f"upper-{i}", "text": p["text"].upper()} for i, p in enumerate(pages[:3])]
    out += [{"id": f"again-{r['id']}", "text": edited(r["text"], 2)} for r in out[n:] if int(r["id"][-1]) in (0, 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in out), encoding="utf-8")
    return out


Key = tuple[str, int, int, str]  # source path, byte offset, line, doc_id: the job's order of "smallest"


def keyed_documents(path: Path) -> list[tuple[Key, list[str]]]:
    """Each record of a JSONL file with its key, computed from the file's bytes (lines from 1, offsets from 0), and
    its normalised words."""
    out, offset = [], 0
    for line, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1):
        r = json.loads(raw)
        out.append(((str(path), offset, line, r["id"]), text.words(r["text"])))
        offset += len(raw)
    return out


def exact_jaccard_clusters(docs: list[tuple[Key, list[str]]], params: minhash.NearParams) -> tuple[dict, int]:
    """What the job promises, by comparing every pair: clusters are the connected components (union-find) of exact
    copies and of pairs with exact Jaccard >= the threshold; the smallest key of a cluster is kept; every other member
    -> (the kept key, round(Jaccard(member, kept), 6), "exact" when its words are the kept one's else "near").
    Also the number of near links a spanning forest of the clusters needs once exact copies are joined (each is a pair
    LSH may miss; a missed one splits a cluster at most in two)."""
    docs = [(k, w) for k, w in docs if w]  # a document without words is never a copy
    words = dict(docs)
    shingles = {k: text.shingle_set(w, params.shingle) for k, w in docs}
    parent = {k: k for k in words}

    def root(k: Key) -> Key:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def join(a: Key, b: Key) -> bool:
        ra, rb = root(a), root(b)
        parent[max(ra, rb)] = min(ra, rb)
        return ra != rb

    keys = sorted(words)
    pairs = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1 :]]
    for a, b in pairs:
        if words[a] == words[b]:
            join(a, b)
    near_links = sum(join(a, b) for a, b in pairs if text.jaccard(shingles[a], shingles[b]) >= params.threshold)
    records = {}
    for k in keys:
        kept = root(k)  # the smallest key of its cluster: join always makes the smaller root the parent
        if kept != k:
            method = "exact" if words[k] == words[kept] else "near"
            records[k] = (kept, round(text.jaccard(shingles[kept], shingles[k]), 6), method)
    return records, near_links


def _key(d: dict) -> Key:
    return (d["source"]["path"], d["source"]["byte_offset"], d["source"]["line"], d["doc_id"])


def _removed_records(artifact: Path) -> dict[Key, tuple[Key, float, str]]:
    path = artifact / "removed" / "duplicate.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {_key(r): (_key(r["duplicate_of"]), r["similarity"], r["method"]) for r in rows}


def test_near_dedup_on_wikipedia_matches_exact_jaccard_and_verifies(tmp_path, capsys):
    """The job against brute-force exact Jaccard (``exact_jaccard_clusters``) on 63 real pages in shuffled order, so
    that the smallest position of a cluster is often not its smallest doc_id: every removal is the oracle's
    (precision 1), every record of a cluster the job found whole is the oracle's (kept key, similarity, method),
    and the documents missed are within what the manifest's false-negative rate allows."""
    records = planted_corpus(tmp_path / "corpus.jsonl")
    random.Random(1).shuffle(records)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    params = minhash.NearParams()
    docs = keyed_documents(corpus)
    words = dict(docs)
    oracle, near_links = exact_jaccard_clusters(docs, params)
    out = tmp_path / "artifact"
    m = build(corpus, out, "--train-tokenizer", "--vocab-size", "2000", "--num-shards", "2", "--dedup", "near")
    found = _removed_records(out)
    assert set(found) <= set(oracle), "a removed document the oracle keeps"  # LSH can only miss; confirmed pairs
    # A miss is a document the oracle removes and the job keeps: only where a near link of the oracle's spanning
    # forest was never a candidate pair (exact copies are always found), each at most one more document kept.
    # Every link is at or above the threshold, so LSH misses it with probability <= the rate at the threshold.
    rate = m["dedup"]["near"]["false_negative_rate_at_threshold"]
    assert rate == round(1 - params.candidate_probability(params.threshold), 6)
    missed = set(oracle) - set(found)
    assert len(missed) <= max(1, 3 * rate * near_links), (missed, rate, near_links)
    members: dict[Key, list[Key]] = {}
    for k, (kept, _, _) in oracle.items():
        members.setdefault(kept, []).append(k)
    checked = partial = position_not_id = 0
    for kept, removed in members.items():
        if not missed & set(removed):  # found whole: the job's cluster is the oracle's, so is every record
            position_not_id += kept[3] != min([kept[3]] + [k[3] for k in removed])
            for k in removed:
                assert found[k] == oracle[k], (k, found[k], oracle[k])
                checked += 1
        else:  # split by a missed link: each part keeps its own smallest; a record still names a kept member
            partial += 1  # of the same oracle cluster, smaller than itself, with their exact similarity
            for k in set(removed) - missed:
                named, similarity, method = found[k]
                assert named in missed | {kept} and named < k, (k, found[k])
                shingles = [text.shingle_set(words[x], params.shingle) for x in (named, k)]
                assert similarity == round(text.jaccard(*shingles), 6)
                assert method == ("exact" if words[k] == words[named] else "near")
    # what makes the rules visible: checked clusters whose smallest position is not their smallest doc_id, exact and
    # near records, and chains (a record below the threshold names a kept document it is not itself paired with)
    assert partial <= len(missed) and checked >= 8 and near_links >= 4 and position_not_id >= 2
    assert {method for _, _, method in found.values()} == {"exact", "near"}
    assert any(similarity < params.threshold for _, similarity, _ in found.values())
    c = m["counts"]
    assert c["documents_read"] == len(records) and c["documents_duplicate"] == len(found)
    assert c["documents_contaminated"] == 0
    assert c["documents_read"] == c["documents_written"] + c["documents_dead_lettered"] + c["documents_duplicate"]
    assert m["dedup"]["mode"] == "near" and m["dedup"]["candidate_pairs"] >= m["dedup"]["confirmed_pairs"] > 0
    assert verify_mod.main([str(out)]) == 0, capsys.readouterr().err


def test_dedup_counts_are_verified(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text(
        "".join(
            json.dumps({"id": str(i), "text": "Same words here." if i < 3 else f"Other {i}."}) + "\n" for i in range(5)
        )
    )
    out = tmp_path / "artifact"
    m = build(
        tmp_path / "c.jsonl", out, "--train-tokenizer", "--vocab-size", "200", "--num-shards", "1", "--dedup", "exact"
    )
    assert (m["counts"]["documents_written"], m["counts"]["documents_duplicate"]) == (3, 2)
    assert verify_mod.main([str(out)]) == 0
    m["counts"]["documents_duplicate"] = 1
    (out / "manifest.json").write_text(json.dumps(m))
    assert verify_mod.main([str(out)]) == 1
    err = capsys.readouterr().err
    assert "documents_duplicate 1" in err and "removed/duplicate.jsonl holds 2 records, documents_duplicate is 1" in err


def test_a_chain_built_into_an_artifact_verifies(tmp_path, capsys):
    """A ~ B ~ C as a build writes it: C's record names A, kept at the smallest position although its doc_id sorts
    last, with J(A, C) below the threshold; verify accepts what the build wrote (it refused both: it wanted
    doc_id-first keys and every near similarity at the threshold)."""
    a = WORDS
    b = ["p"] * 10 + WORDS[10:]
    c = b[:90] + ["q"] * 10
    rows = [("z-a", a), ("y-b", b), ("x-c", c)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"id": i, "text": " ".join(w)}) + "\n" for i, w in rows))
    out = tmp_path / "artifact"
    m = build(
        tmp_path / "c.jsonl", out, "--train-tokenizer", "--vocab-size", "200", "--num-shards", "1", "--dedup", "near"
    )
    assert m["counts"]["documents_duplicate"] == 2
    records = [json.loads(line) for line in (out / "removed" / "duplicate.jsonl").read_text().splitlines()]
    assert [(r["doc_id"], r["duplicate_of"]["doc_id"]) for r in records] == [("y-b", "z-a"), ("x-c", "z-a")]
    assert records[1]["similarity"] < 0.8
    assert verify_mod.main([str(out)]) == 0, capsys.readouterr().err


def test_bad_dedup_option_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text('{"id": "1", "text": "x"}\n')
    code = build_shards.main(
        [
            "--input",
            str(tmp_path / "c.jsonl"),
            "--output",
            str(tmp_path / "o"),
            "--dedup",
            "near",
            "--dedup-threshold",
            "0",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--dedup-threshold must be in (0, 1], got 0.0" in err and "Traceback" not in err


@pytest.mark.slow
def test_near_dedup_output_is_the_same_with_two_workers_and_the_files_in_either_order(tmp_path):
    """Byte-identical artifacts (D12): 1 worker, 2 worker processes, and the two input files given the other way
    round; the copy kept is the smallest (file, position) of its cluster."""
    records = planted_corpus(tmp_path / "corpus.jsonl")
    random.Random(1).shuffle(records)
    half = len(records) // 2
    for name, part in (("a.jsonl", records[:half]), ("b.jsonl", records[half:])):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    common = ["--train-tokenizer", "--vocab-size", "2000", "--num-shards", "2", "--dedup", "near"]
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    build_shards.main(["--input", a, "--input", b, "--output", str(tmp_path / "one"), *common])
    build_shards.main(
        ["--input", b, "--input", a, "--output", str(tmp_path / "two"), *common]
        + ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    )

    def files(root: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json"
        }

    one, two = files(tmp_path / "one"), files(tmp_path / "two")
    assert one == two and "removed/duplicate.jsonl" in one
    rows = [json.loads(line) for line in one["removed/duplicate.jsonl"].decode().splitlines()]
    position = lambda s: (s["path"], s["byte_offset"])  # noqa: E731
    assert all(position(r["duplicate_of"]["source"]) < position(r["source"]) for r in rows)
    removed = {(r["source"]["path"], r["source"]["byte_offset"]) for r in rows}
    assert not any(position(r["duplicate_of"]["source"]) in removed for r in rows)  # every one named is kept (D4)
