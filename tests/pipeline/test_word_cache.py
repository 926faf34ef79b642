"""Byte-level BPE and Unigram through the chunk cache (word_cache) give exactly the whole-document path's documents,
and every family starts the same Punkt sentences (word_heads)."""

from __future__ import annotations

import bisect
import io
import itertools
import json

import numpy as np
import pytest
import zstandard
from tokenizers import Tokenizer

from pipeline.elements import Document, Source, TokenizedDocument
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer
from pipeline.tokenize.sentences import sentence_spans
from pipeline.tokenize.tokenized_documents import _TokenizeFn
from pipeline.tokenize.word_cache import WordCache, WordEncoder, word_cache_for
from tests.conftest import WIKIPEDIA_SAMPLE, build, wikitext2
from tests.pipeline.test_byte_level_bpe import _by_doc, _wikitext_texts, roberta_tokenizer
from tests.pipeline.test_sentence_encoding import generated_texts
from tests.pipeline.test_tokenizer_rules import _tokenize
from tests.pipeline.test_unigram import ROBERTA, _normalizer_variants, _train, _variant

EDGES = [
    "",
    " ",
    "\n",
    "  leading spaces. Then text.",
    "\nStarts with a line feed. Ends with one.\n",
    "trailing space ",
    "a <unk> b <unk>c <unk>. <unk>",
    "Literal <s> , </s> , <mask> and <pad> in text.",
    "x" * 300 + " " + "y" * 70 + " z",
    "Mixed 東京 タワー and emoji \U0001f600 here. Ångström e\u0301t\u00e9 naïve.",
    "Tabs\tand\r\nwindows line ends. Non\u00a0breaking. Ideographic\u3000space.",
    'text.[1] Next sentence starts mid-word for Metaspace. "Quoted." Then (parens.) More.',
    "Control \x01 chars\x7f and\x0b\x0cfeeds.",
]


def _docs(texts: list[str]) -> list[Document]:
    return [Document(f"d{i:04d}", t, Source("mem", i + 1, 0)) for i, t in enumerate(texts)]


def _run(spec, docs: list[Document], encoder) -> list:
    """The tokenize stage's documents, with ``encoder`` as its fast path ("default": what it picks itself; None: the
    whole-document path)."""
    if encoder == "default":
        fn = _TokenizeFn(spec, "int32")
        fn.setup()
        picked = fn._sentences is not None
        fn.teardown()
        return _tokenize(spec, docs, picked)
    return _tokenize(spec, docs, encoder is not None, encoder)


def _assert_exact(spec, docs: list[Document], encoder) -> int:
    """The fast path's documents equal the whole-document path's (ids, word starts, sentence starts) and the ids are
    ``Tokenizer.encode``'s; returns the number of documents compared."""
    fast, whole = _run(spec, docs, encoder), _run(spec, docs, None)
    assert len(fast) == len(whole) == len(docs)
    tok = spec.load_for_text()
    compared = 0
    for doc, a, b in zip(docs, fast, whole):
        assert type(a) is type(b), doc.doc_id
        if isinstance(a, TokenizedDocument):
            assert a.ids.tolist() == b.ids.tolist() == tok.encode(doc.text, add_special_tokens=False).ids, doc.doc_id
            assert a.word_start.tolist() == b.word_start.tolist(), doc.doc_id
            assert a.sentence_start.tolist() == b.sentence_start.tolist(), doc.doc_id
            compared += 1
    return compared


@pytest.fixture(scope="module")
def bpe_json() -> str:
    return roberta_tokenizer()


@pytest.fixture(scope="module")
def unigram_json() -> str:
    return _train(ROBERTA)


def _spec(config: str | Tokenizer):
    tok = config if isinstance(config, Tokenizer) else Tokenizer.from_str(config)
    return tokenizer.make_spec(tok, "file")


def _forced(spec, max_bytes: int = 1 << 16) -> WordEncoder:
    """The fast path with keys narrowed to 10 bits (many look-ups hit another chunk's key: the bytes must decide) and
    a cache small enough to be emptied many times."""
    tok = spec.load_for_text()
    shared = word_cache_for(tok, 64 << 20)
    assert isinstance(shared, WordCache)
    cache = WordCache(tok, shared._glued_tokens, shared._token_bytes, max_bytes=max_bytes, key_mask=0x3FF)
    return WordEncoder(cache)


def test_byte_level_bpe_generated_edge_cases_equal_the_whole_document_path(bpe_json):
    spec = _spec(bpe_json)
    docs = _docs(generated_texts(300, seed=5) + EDGES)
    fn = _TokenizeFn(spec, "int32")
    fn.setup()
    assert isinstance(fn._sentences, WordEncoder)  # the stage picks the word cache for this family by itself
    assert _assert_exact(spec, docs, "default") >= len(docs) - 3  # the empty and blank ones are dead letters
    forced = _forced(spec)
    assert _assert_exact(spec, docs, forced) >= len(docs) - 3
    assert forced.cache.collisions > 0 and forced.cache.clears > 0 and forced.cache.hits > 0
    assert forced.cache.refused == 0  # every batch took the fast path


@pytest.mark.parametrize("variant", sorted(_normalizer_variants()))
def test_unigram_variants_equal_the_whole_document_path(variant, unigram_json):
    normalizer, scheme = _normalizer_variants()[variant]
    spec = _spec(_variant(unigram_json, normalizer, scheme))
    assert WordEncoder.for_tokenizer(spec.load_for_text(), 1 << 20) is not None
    docs = _docs(generated_texts(150, seed=13) + EDGES)
    assert _assert_exact(spec, docs, "default") >= len(docs) - 3
    forced = _forced(spec)
    assert _assert_exact(spec, docs, forced) >= len(docs) - 3
    assert forced.cache.collisions > 0 and forced.cache.hits > 0
    assert forced.cache.refused == 0  # every batch took the fast path


def _real_docs() -> list[Document]:
    docs = [
        r for r in read_file(str(wikitext2("valid")), ReaderOptions(input_format="wikitext")) if isinstance(r, Document)
    ]
    if WIKIPEDIA_SAMPLE.exists():
        wiki = ReaderOptions(input_format="jsonl")
        docs += list(
            itertools.islice((r for r in read_file(str(WIKIPEDIA_SAMPLE), wiki) if isinstance(r, Document)), 200)
        )
    return docs


@pytest.mark.parametrize("family", ["byte_level_bpe", "unigram"])
def test_real_text_equals_the_whole_document_path(family, bpe_json, unigram_json):
    spec = _spec(bpe_json if family == "byte_level_bpe" else unigram_json)
    docs = _real_docs()
    encoder = WordEncoder.for_tokenizer(spec.load_for_text(), 64 << 20)
    assert encoder is not None
    assert _assert_exact(spec, docs, encoder) == len(docs) > 50
    assert encoder.cache.hits > 0.3 * (encoder.cache.hits + encoder.cache.misses)  # repeats came from the cache
    assert encoder.cache.refused == 0


def test_tokenizers_the_word_cache_does_not_cover_keep_the_whole_document_path(bpe_json, unigram_json):
    spaced = Tokenizer.from_str(bpe_json)
    spaced.add_tokens(["New York"])  # an added token holding a space would match across a cut
    assert WordEncoder.for_tokenizer(spaced, 1 << 20) is None
    assert WordEncoder.for_tokenizer(Tokenizer.from_str(bpe_json), 0) is None  # --encode-cache-mb 0
    normalized = Tokenizer.from_str(unigram_json)
    normalized.add_tokens(["Ωmega"])  # matched on normalized text: str.find cannot see where
    assert WordEncoder.for_tokenizer(normalized, 1 << 20) is None
    assert WordEncoder.for_tokenizer(tokenizer.train(["Some text."] * 5, vocab_size=60), 1 << 20) is None
    suffixed = json.loads(bpe_json)
    suffixed["model"]["end_of_word_suffix"] = "</w>"  # token strings longer than their bytes
    assert WordEncoder.for_tokenizer(Tokenizer.from_str(bpe_json), 1 << 20) is not None
    assert WordEncoder.for_tokenizer(Tokenizer.from_str(json.dumps(suffixed)), 1 << 20) is None


def _heads(text: str, tok) -> list[int]:
    """Where each of the tokenizer's words begins: its first token's offset, past any whitespace (Python's)."""
    enc = tok.encode(text, add_special_tokens=False)
    out, previous = [], object()
    for word, (a, _) in zip(enc.word_ids, enc.offsets):
        if word is None or word != previous:
            while a < len(text) and text[a].isspace():
                a += 1
            out.append(a)
        previous = word if word is not None else object()
    return out


def _sentence_chars(text: str, doc: TokenizedDocument, tok) -> list[int]:
    """The character where each sentence start of ``doc`` begins: its word's first non-space character."""
    enc = tok.encode(text, add_special_tokens=False)
    out = []
    for k in np.flatnonzero(doc.sentence_start).tolist():
        a = enc.offsets[k][0]
        while a < len(text) and text[a].isspace():
            a += 1
        out.append(a)
    return out


def test_every_family_starts_the_same_punkt_sentences(bpe_json, unigram_json):
    """Punkt's sentences are the family's sentences where the tokenizer's words allow it: a Punkt start (its first
    non-space character) where one of the tokenizer's words begins is a sentence start, and every other sentence
    start is the first word after a Punkt start that falls inside a word (``...code.[1]``: BPE's ``.[``, Metaspace's
    ``▁code.[1]``). Before, BPE's and a Unigram's sentence starts were lost wherever the word began with ``Ġ`` or a
    lone ``▁`` piece: 9,647 Unigram sentence starts against WordPiece's 12,374 on the same documents."""
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        texts = [json.loads(line)["text"] for line in itertools.islice(reader, 60)]
    docs = _docs(texts)
    specs = {
        "wordpiece": tokenizer.make_spec(tokenizer.train(_wikitext_texts(), vocab_size=4000), "trained"),
        "byte_level_bpe": _spec(bpe_json),
        "unigram": _spec(unigram_json),
    }
    punkt = [sorted({len(d.text[s:]) - len(d.text[s:].lstrip()) + s for s, _ in sentence_spans(d.text)}) for d in docs]
    total = sum(map(len, punkt))
    assert total > 2000
    for name, spec in specs.items():
        tok = spec.load_for_text()
        at_words = found_total = 0
        for d, t, p in zip(docs, _run(spec, docs, "default"), punkt):
            found, heads = _sentence_chars(d.text, t, tok), _heads(d.text, tok)
            expected = {heads[min(bisect.bisect_left(heads, c), len(heads) - 1)] for c in p}
            assert set(found) == expected, (name, d.doc_id, sorted(set(found) ^ expected)[:5])
            at_words += len(set(p) & set(heads))
            found_total += len(found)
        assert at_words == total if name == "wordpiece" else at_words >= 0.9 * total, (name, at_words, total)
        assert found_total >= 0.9 * total, (name, found_total, total)


def test_artifacts_of_every_family_count_punkts_sentences_and_the_cache_changes_no_byte(
    tmp_path, bpe_json, unigram_json
):
    corpus = tmp_path / "corpus.jsonl"
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        corpus.write_text("".join(itertools.islice(reader, 40)), encoding="utf-8")
    counts = {}
    for name, config in (("bpe", bpe_json), ("unigram", unigram_json)):
        (tmp_path / f"{name}.json").write_text(config)
        for mb in ("64", "0"):
            out = tmp_path / f"{name}-{mb}"
            manifest = build(corpus, out, "--tokenizer", str(tmp_path / f"{name}.json"), "--encode-cache-mb", mb)
            counts[name, mb] = manifest["counts"]["sentences"]
        assert _by_doc(tmp_path / f"{name}-64") == _by_doc(tmp_path / f"{name}-0")
        for shard in sorted((tmp_path / f"{name}-64" / "shards").glob("*.arrow")):
            assert shard.read_bytes() == (tmp_path / f"{name}-0" / "shards" / shard.name).read_bytes()
    wordpiece = build(corpus, tmp_path / "wp", "--vocab-size", "4000")["counts"]["sentences"]
    assert counts["bpe", "64"] == counts["bpe", "0"] and counts["unigram", "64"] == counts["unigram", "0"]
    # the sentences Punkt finds, less those that begin inside one of the family's words (module docstring)
    assert wordpiece >= counts["bpe", "64"] >= 0.9 * wordpiece, (counts, wordpiece)
    assert wordpiece >= counts["unigram", "64"] >= 0.9 * wordpiece, (counts, wordpiece)


def test_byte_level_bpe_lacking_a_byte_character_keeps_the_whole_document_path(bpe_json):
    """A byte-level BPE without the byte ``z`` in its vocabulary (unk, fused): an unk covers any number of bytes, so
    the tokens' lengths in bytes are not known. Before, a 9-byte unk in one document and a 1-byte unk in the next
    cancelled in the lengths' sum and the second document's id came out as -1."""
    config = json.loads(bpe_json)
    model = config["model"]
    model["unk_token"], model["fuse_unk"] = "<unk>", True
    model["vocab"] = {k: v for k, v in model["vocab"].items() if "z" not in k}
    model["merges"] = [m for m in model["merges"] if "z" not in (m if isinstance(m, str) else " ".join(m))]
    spec = _spec(json.dumps(config))
    docs = _docs(["zzzzzzzzz", "z"])  # one batch
    assert _assert_exact(spec, docs, "default") == len(docs)
    assert WordEncoder.for_tokenizer(spec.load_for_text(), 1 << 20) is None
