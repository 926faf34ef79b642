"""The cache of chunk encodings gives exactly the ids of encoding every sentence, whatever it holds."""

from __future__ import annotations

import itertools
import threading

import pytest

from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer
from pipeline.tokenize.chunk_cache import ChunkCache
from pipeline.tokenize.sentence_encoding import CUT_MARKER, SentenceEncoder
from pipeline.tokenize.sentences import sentence_spans
from tests.conftest import WIKIPEDIA_SAMPLE, wikitext2
from tests.pipeline.test_sentence_encoding import generated_texts


def _batches(encoder: SentenceEncoder, texts: list[str], size: int = 16) -> list[tuple[list[str], list]]:
    sent = [sentence_spans(t) for t in texts]
    keep = [i for i, t in enumerate(texts) if encoder.applies(t, sent[i])]
    return [
        ([texts[i] for i in keep[a : a + size]], [sent[i] for i in keep[a : a + size]])
        for a in range(0, len(keep), size)
    ]


def _cache(e: SentenceEncoder, **kw) -> ChunkCache:
    return ChunkCache(e._marked, CUT_MARKER, e._marker_id, e._continuation, **kw)


def _assert_equal(expected, got) -> int:
    assert len(expected) == len(got)
    for (ids, word_start, firsts), (ids2, word_start2, firsts2) in zip(expected, got):
        assert ids.tolist() == ids2.tolist()
        assert word_start.tolist() == word_start2.tolist()
        assert firsts.tolist() == firsts2.tolist()
    return sum(len(ids) for ids, _, _ in expected)


@pytest.fixture(scope="module")
def corpus():
    """Generated edge cases, WikiText-2 and (where present) Wikipedia articles; a tokenizer trained on them; and
    the encoder without a cache, whose per-sentence encodings the cache must reproduce."""
    texts = generated_texts(300, seed=21)
    texts += [
        d.text
        for d in read_file(str(wikitext2("valid")), ReaderOptions(input_format="wikitext"))
        if isinstance(d, Document)
    ]
    if WIKIPEDIA_SAMPLE.exists():
        wiki = (
            r.text
            for r in read_file(str(WIKIPEDIA_SAMPLE), ReaderOptions(input_format="jsonl"))
            if isinstance(r, Document)
        )
        texts += list(itertools.islice(wiki, 150))
    spec = tokenizer.make_spec(tokenizer.train(texts, vocab_size=3000), "trained")
    uncached = SentenceEncoder.for_tokenizer(spec.load_for_text(), cache_bytes=0)
    assert uncached.cache is None
    batches = _batches(uncached, texts)
    expected = [uncached.encode(t, s) for t, s in batches]
    return uncached, batches, expected


@pytest.mark.parametrize(
    "settings",
    [
        {},  # the default
        {"key_mask": 0xFF},  # 256 distinct keys: most lookups and most distinct misses of a batch collide
        {"max_bytes": 600_000},  # full again and again: emptied and refilled
        {"max_chunk_bytes": 5},  # chunks over 5 bytes are encoded every time
        {"max_bytes": 1},  # holds nothing
    ],
)
def test_the_cache_gives_the_ids_of_encoding_each_sentence(corpus, settings):
    encoder, batches, expected = corpus
    cache = _cache(encoder, **settings)
    tokens = 0
    for _ in range(2):  # a second pass answers from what the first left in the cache
        for (texts, sent), want in zip(batches, expected):
            tokens += _assert_equal(want, cache.encode(texts, sent))
            assert cache.nbytes <= settings.get("max_bytes", 64 << 20) or len(cache) == 0
    assert tokens > 100_000 and cache.hits + cache.misses > 0
    if settings.get("max_bytes") == 1:
        assert len(cache) == 0 and cache.hits == 0
    else:
        assert cache.hits > 0 and cache.misses > 0
    if not settings:
        assert cache.hits > 5 * cache.misses and cache.clears == 0 and cache.collisions == 0
    if "key_mask" in settings:
        assert cache.collisions > 1000 and len(cache) <= 256
    if settings.get("max_bytes") == 600_000:
        assert cache.clears >= 2
    if "max_chunk_bytes" in settings:
        assert cache.misses > 100_000


def test_threads_sharing_one_cache_give_the_same_ids(corpus):
    encoder, batches, expected = corpus
    cache = _cache(encoder, max_bytes=2_000_000)
    got: dict[int, list] = {}
    errors = []

    def work(k: int):
        try:
            for i in range(k, len(batches), 3):
                got[i] = cache.encode(*batches[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(got) == len(batches) > 3
    assert sum(_assert_equal(expected[i], got[i]) for i in range(len(batches))) > 100_000
    assert cache.hits > 0


def test_documents_without_chunks_and_non_ascii_positions():
    e = _uncached_small()
    cache = ChunkCache(e._marked, CUT_MARKER, e._marker_id, e._continuation)
    texts = ["Ünïcödé wörds. Then ASCII.", "\u00a0\u3000", "東京タワー。 Next one.", "a"]
    sent = [sentence_spans(t) for t in texts]
    sent[1] = [(0, 2)]  # only spaces that are not chunk separators: one chunk, no tokens
    got = cache.encode(texts, sent)
    want = e.encode(texts, sent)
    assert _assert_equal(want, got) > 5
    assert len(got[1][0]) == 0
    assert cache.encode([], []) == []


def _uncached_small() -> SentenceEncoder:
    tok = tokenizer.train(["Ünïcödé wörds. Then ASCII. 東京タワー。 Next one. a"] * 5, vocab_size=120)
    return SentenceEncoder.for_tokenizer(tokenizer.make_spec(tok, "trained").load_for_text(), cache_bytes=0)


def test_encoders_of_one_tokenizer_share_one_cache_while_alive():
    tok = tokenizer.make_spec(
        tokenizer.train(["Shared cache text. Another sentence."] * 5, vocab_size=100), "trained"
    ).load_for_text()
    a, b = SentenceEncoder.for_tokenizer(tok), SentenceEncoder.for_tokenizer(tok)
    assert a.cache is b.cache is not None
    small = SentenceEncoder.for_tokenizer(tok, cache_bytes=1 << 20)
    assert small.cache is not a.cache
    with pytest.raises(ValueError):
        ChunkCache(a._marked, CUT_MARKER, a._marker_id, a._continuation, max_bytes=0)


PUNCTUATED = [
    "a[UNK]b went ([UNK]) and [[UNK]] or [UNK][UNK] then [UN[UNK]K] ok.",
    "Use c++ or xc++y, (c++) and c++. Done!",
    "C++ and c+++ and +c++ here. Next c++c++ one.",
    "Mixed «quotes» — dashes – and 'apostrophes' don't split... really?!",
    "Numbers 1,000.5 and 3.14/2 or 2-3-4; e-mail: a.b@c.d (see http://x.y/z?q=1&r=2#f).",
]


@pytest.mark.parametrize("normalized", [False, True])
def test_cuts_at_punctuation_keep_added_tokens_whole(normalized):
    """Chunks also end at ASCII punctuation, except around added tokens that hold some ([UNK], here c++ too,
    matched only as a single word); with a normalized such token no chunk ends at punctuation at all."""
    from tokenizers import AddedToken

    from tests.pipeline.test_sentence_encoding import _assert_same, _docs

    tok = tokenizer.train(PUNCTUATED * 5 + generated_texts(50, seed=2), vocab_size=300)
    tok.add_tokens([AddedToken("c++", single_word=True, normalized=normalized)])
    spec = tokenizer.make_spec(tok, "trained")
    encoder = SentenceEncoder.for_tokenizer(spec.load_for_text())  # the cache the job's encoder shares
    assert encoder.cache._glued_tokens == (() if normalized else ("[UNK]", "c++"))
    assert (encoder.cache._classes == 1).any() != normalized
    assert _assert_same(spec, _docs(PUNCTUATED * 3)) == 15  # the whole-document path agrees on every one
    assert encoder.cache.misses > 0  # the job's encoder went through this (shared) cache
    with_c = tok.encode("xc++y (c++) c++.", add_special_tokens=False).tokens
    assert with_c.count("c++") == 2  # single_word: not inside xc++y, so gluing its neighbours mattered


def test_runs_of_punctuation_take_the_tokenizers_ids_character_by_character():
    """A run of ASCII punctuation is one token per character, from a table the tokenizer filled; an added token
    made of punctuation alone (matched across such a run) turns the table off."""
    from tokenizers import AddedToken

    from tests.pipeline.test_sentence_encoding import _assert_same, _docs

    texts = [
        "Tables +----+---+ and ... or .... and ..... and (?!) here.",
        "Odd :: and ;; and ~~~ once. [UNK]!! [[UNK]]...",
    ]
    tok = tokenizer.train(texts * 5, vocab_size=200)
    spec = tokenizer.make_spec(tok, "trained")
    encoder = SentenceEncoder.for_tokenizer(spec.load_for_text())
    table = encoder.cache._punctuation_ids
    assert table is not None and table[ord("+")] == tok.token_to_id("+")
    assert table[ord("^")] == tok.token_to_id("[UNK]") != tok.token_to_id("+")  # "^" never seen in training
    texts.append("Unseen ^^ and `^` here.")
    assert _assert_same(spec, _docs(texts * 3)) == 9
    tok.add_tokens([AddedToken("...", normalized=False)])
    dots = tokenizer.make_spec(tok, "trained")
    encoder = SentenceEncoder.for_tokenizer(dots.load_for_text())
    assert encoder.cache._punctuation_ids is None and encoder.cache._glued_tokens == ("[UNK]", "...")
    assert _assert_same(dots, _docs(texts * 3)) == 9
    assert "..." in dots.load_for_text().encode(texts[0], add_special_tokens=False).tokens


@pytest.mark.parametrize(
    "token,lowercase,texts",
    [
        # "_" is punctuation to the pre-tokenizer but a word character to single_word matching
        (
            {"content": "zzq", "single_word": True, "normalized": False},
            False,
            ["zzq_ here.", "x _zzq here.", "Say zzq_ now. And zzq."],
        ),
        (
            {"content": "zzq", "single_word": True, "normalized": True},
            False,
            ["zzq_ here.", "x _zzq here.", "Say zzq_ now. And zzq."],
        ),
        # matched on normalized text, where NFD (lowercase strips accents) turns U+037E into ";"
        ({"content": "\u037e", "single_word": True, "normalized": True}, True, ["Say a; now.", "Then b;c and ; here."]),
        ({"content": "q\u037e", "normalized": True}, True, ["q; here.", "Q; and q\u037e there."]),
    ],
)
def test_added_tokens_whose_match_a_cut_at_punctuation_could_change(token, lowercase, texts):
    """Found by a differential fuzz of the cache against the uncached path: such tokens are glued, or turn the
    cuts at punctuation off; either way the three paths agree."""
    from tokenizers import AddedToken

    from tests.pipeline.test_sentence_encoding import _assert_same, _docs

    tok = tokenizer.train(PUNCTUATED * 5 + texts * 5, vocab_size=300, lowercase=lowercase)
    tok.add_tokens([AddedToken(**token)])
    spec = tokenizer.make_spec(tok, "trained")
    uncached = SentenceEncoder.for_tokenizer(spec.load_for_text(), cache_bytes=0)
    cache = _cache(uncached)
    assert cache._glued_tokens == (() if token["normalized"] else ("[UNK]", token["content"]))
    sent = [sentence_spans(t) for t in texts]
    assert all(uncached.applies(t, s) for t, s in zip(texts, sent))
    assert _assert_equal(uncached.encode(texts, sent), cache.encode(texts, sent)) > 5
    assert _assert_same(spec, _docs(texts)) == len(texts)  # and the whole-document path agrees
