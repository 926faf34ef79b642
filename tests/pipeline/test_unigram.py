"""SentencePiece-style Unigram (Metaspace) end to end on real text: the family's tokenizers accepted or refused,
literal special tokens kept as text although the model holds them as pieces, exact rows with the pre-tokenizer's
word starts, long texts in pieces cut where the tokens stay the same, --tokenizer-from, export, span masking."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest
import zstandard
from tokenizers import Regex, SentencePieceUnigramTokenizer, Tokenizer, normalizers, pre_tokenizers

from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer
from pipeline.tokenize.encodings import ENCODE_PIECE_CHARS, Encoded, text_pieces
from pipeline.verify import verify
from schemas.tokenizers.families import UNIGRAM, TokenizerError, family
from tests.conftest import WIKIPEDIA_SAMPLE, build, wikitext2
from tests.pipeline.test_byte_level_bpe import (
    _by_doc,
    _wikitext_texts,
    assert_export_loads_in_autotokenizer,
    assert_rows_exact,
)
from tests.pipeline.test_tokenizer_rules import _tokenize

ROBERTA = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}
BERT = {"cls": "[CLS]", "pad": "[PAD]", "sep": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}
LITERAL = "Literal <s> , </s> , <mask> , <pad> , [MASK] , [CLS] , [SEP] , [PAD] and x<mask>y[MASK]z in text ."


def _train(names: dict[str, str], vocab_size: int = 3000, extra: tuple[str, ...] = ()) -> str:
    """What ``tokenizers``' SentencePieceUnigramTokenizer builds (Nmt, NFKC, spaces collapsed; Metaspace), trained
    here on WikiText-2 valid (and the texts ``extra``) with the special tokens of ``names`` (RoBERTa's order)."""
    sp = SentencePieceUnigramTokenizer()
    specials = [names[r] for r in ("cls", "pad", "sep", "unk", "mask")]
    texts = [*_wikitext_texts(), *extra]
    sp.train_from_iterator(
        texts, vocab_size=vocab_size, special_tokens=specials, unk_token=names["unk"], show_progress=False
    )
    return sp._tokenizer.to_str()


@pytest.fixture(scope="module")
def unigram_json() -> str:
    return _train(ROBERTA)


@pytest.fixture(scope="module")
def bert_named_json() -> str:
    return _train(BERT)


def _variant(config_json: str, normalizer, prepend_scheme: str = "always") -> Tokenizer:
    tok = Tokenizer.from_str(config_json)
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=prepend_scheme)
    return tok


def test_the_trainers_special_pieces_score_highest_and_the_text_tokenizer_never_picks_them(unigram_json):
    """The UnigramTrainer puts the special tokens into the model as pieces of score 0 (every other piece scores
    below): with the added tokens dropped, the user's model still picks <mask> inside text; the text tokenizer
    (load_for_text) keeps every other id of every other text."""
    vocab = json.loads(unigram_json)["model"]["vocab"]
    assert dict(vocab[:5]) == dict.fromkeys(ROBERTA.values(), 0.0)  # the trainer puts them first
    assert max(score for _, score in vocab[5:]) < 0.0
    user = Tokenizer.from_str(unigram_json)
    bare = json.loads(unigram_json)
    bare["added_tokens"] = [t for t in bare["added_tokens"] if t["content"] == "<unk>"]
    mask = user.token_to_id("<mask>")
    assert mask in Tokenizer.from_str(json.dumps(bare)).encode(LITERAL, add_special_tokens=False).ids  # the bug
    text_tok = tokenizer.make_spec(Tokenizer.from_str(unigram_json), "file").load_for_text()
    assert mask not in text_tok.encode(LITERAL, add_special_tokens=False).ids
    checked = 0
    for text in _wikitext_texts("test"):
        assert text_tok.encode(text, add_special_tokens=False).ids == user.encode(text, add_special_tokens=False).ids
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("names", [ROBERTA, BERT], ids=["roberta-names", "bert-names"])
def test_literal_special_tokens_stay_text_in_unigram_rows(names, unigram_json, bert_named_json):
    """Each literal special string, of either naming, in real text: the rows hold none of the special ids (unk aside,
    WikiText's <unk> is the unk role) and decode back to the literal text; the other documents' rows are the user's
    tokenizer's ids."""
    config = unigram_json if names is ROBERTA else bert_named_json
    spec = tokenizer.make_spec(Tokenizer.from_str(config), "file")
    assert spec.family == UNIGRAM and spec.special_tokens == names
    opts = ReaderOptions(input_format="wikitext", wikitext_unk=names["unk"])
    docs = [d for d in read_file(str(wikitext2("valid")), opts) if isinstance(d, Document)][:8]
    literal = [Document(f"lit{i}", f"{LITERAL} {d.text[:3000]}", d.source) for i, d in enumerate(docs)]
    out = _tokenize(spec, docs + literal, sentence_path=False)
    user = spec.load()
    special = {user.token_to_id(t) for role, t in names.items() if role != "unk"}
    assert len(special) == 4 and None not in special
    text_tok = spec.load_for_text()
    checked = 0
    for doc, got in zip(docs + literal, out):
        assert got.doc_id == doc.doc_id
        if doc.doc_id.startswith("lit"):
            assert not special & set(got.ids.tolist()), doc.doc_id
            assert text_tok.decode(got.ids.tolist()).startswith(LITERAL)
        else:
            assert got.ids.tolist() == user.encode(doc.text, add_special_tokens=False).ids
        checked += 1
    assert checked == 16


def _normalizer_variants() -> dict[str, tuple]:
    collapse = normalizers.Replace(Regex(" {2,}"), " ")
    return {
        "sentencepiece": (normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC(), collapse]), "always"),
        "none-first": (None, "first"),
        "nfkc-never": (normalizers.NFKC(), "never"),
        "nfd-lower": (
            normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(), collapse]),
            "always",
        ),
        "collapse-first": (normalizers.Sequence([collapse, normalizers.Nmt(), normalizers.NFC()]), "first"),
    }


def _piece_texts() -> list[str]:
    # WikiText as published (" \n \n = Title = \n": runs of spaces and line feeds) and as the reader gives it
    texts = [wikitext2("valid").read_text(encoding="utf-8")[:200_000], "\n".join(_wikitext_texts("valid"))[:200_000]]
    if WIKIPEDIA_SAMPLE.exists():
        with open(WIKIPEDIA_SAMPLE, "rb") as f:
            reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
            texts += [json.loads(line)["text"] for line in itertools.islice(reader, 40)]
    return texts


def _allowed(text: str, i: int, added: tuple[str, ...]) -> bool:
    """The Unigram piece rule (schemas/tokenizers/families.py), written out: a space between printable non-space ASCII characters
    with no added token ending before it or starting after it."""
    return (
        text[i] == " "
        and 0 < i < len(text) - 1
        and "!" <= text[i - 1] <= "~"
        and "!" <= text[i + 1] <= "~"
        and not text.startswith(added, i + 1)
        and not text.endswith(added, 0, i)
    )


@pytest.mark.parametrize("variant", list(_normalizer_variants()))
def test_unigram_pieces_start_only_where_a_cut_keeps_the_tokens(variant, unigram_json):
    """The piece rule on real text, for each accepted normalizer and prepend scheme: at every sampled space the rule
    allows, the text on either side encoded alone gives the tokens and word starts of the whole (a window around the
    cut); the cuts it refuses (line feeds, spaces next to whitespace or non-ASCII) can change them; and
    text_pieces(metaspace=True) cuts only there, its pieces giving the whole text's tokens, offsets and words."""
    normalizer, scheme = _normalizer_variants()[variant]
    tok = _variant(unigram_json, normalizer, scheme)
    assert family(tok) == UNIGRAM
    added = tuple(t["content"] for t in json.loads(unigram_json)["added_tokens"])

    def encode(text: str) -> tuple[list[int], list[bool]]:
        enc = tok.encode(text, add_special_tokens=False)
        w = enc.word_ids
        return enc.ids, [i == 0 or w[i] != w[i - 1] for i in range(len(w))]

    texts = _piece_texts()
    allowed = refused_and_different = line_feeds_different = 0
    for text in texts:
        cuts = [i for i, c in enumerate(text) if c in " \n\t" and 0 < i]
        good = [i for i in cuts if _allowed(text, i, added)]
        bad = [i for i in cuts if not _allowed(text, i, added)]
        for cut in good[::11] + bad[::5]:
            a, b = max(0, cut - 150), min(len(text), cut + 150)
            window, k = text[a:b], cut - a
            whole = encode(window)
            (ids1, ws1), (ids2, ws2) = encode(window[:k]), encode(window[k:])
            joined = (ids1 + ids2, ws1 + ws2)  # a piece's first token starts a word
            if _allowed(text, cut, added):
                assert joined == whole, (cut, window[k - 20 : k + 20])
                allowed += 1
            else:
                refused_and_different += joined != whole
                line_feeds_different += joined != whole and text[cut] == "\n"
    assert allowed > 1000 and refused_and_different > 0, (allowed, refused_and_different)
    if variant == "nfkc-never" or variant == "none-first":  # a line feed is inside a word without Nmt
        assert line_feeds_different > 0
    text = texts[1]
    pieces = text_pieces(text, 20_000, added=added, metaspace=True)
    assert len(pieces) > 8 and all(_allowed(text, a, added) for a, _ in pieces[1:])
    assert all(b - a <= 20_000 for a, b in pieces)
    whole = Encoded.of(tok.encode(text, add_special_tokens=False))
    parts = Encoded.concatenate([Encoded.of(tok.encode(text[a:b], add_special_tokens=False), a) for a, b in pieces])
    assert len(whole.ids) > 40_000
    assert np.array_equal(whole.ids, parts.ids) and np.array_equal(whole.offsets, parts.offsets)
    assert np.array_equal(np.diff(whole.words) != 0, np.diff(parts.words) != 0)
    # the byte-level BPE rule (a line feed before a non-space) on the same text need not keep the tokens
    strict = text_pieces(text, 20_000, strict=True, added=added)
    bpe_rule = [i for a, b in strict for i in tok.encode(text[a:b], add_special_tokens=False).ids]
    if variant in ("nfkc-never", "none-first", "sentencepiece"):
        assert bpe_rule != whole.ids.tolist()


def test_unigram_tokenizers_outside_the_proof_are_refused_in_one_line(unigram_json):
    """What the family does not cover is named in the refusal: Metaspace without split, with another replacement,
    inside a Sequence, a normalizer whose rule is not proved (Precompiled, Strip), byte fallback."""
    base = json.loads(unigram_json)
    cases = {
        "pre-tokenizer Metaspace without split": ("pre_tokenizer", {**base["pre_tokenizer"], "split": False}),
        "pre-tokenizer Metaspace with replacement '_'": (
            "pre_tokenizer",
            {**base["pre_tokenizer"], "replacement": "_"},
        ),
        "pre-tokenizer Sequence[WhitespaceSplit, Metaspace]": (
            "pre_tokenizer",
            {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, base["pre_tokenizer"]]},
        ),
        "(not proved: Strip)": ("normalizer", {"type": "Strip", "strip_left": True, "strip_right": True}),
        "(not proved: Precompiled)": ("normalizer", {"type": "Precompiled", "precompiled_charsmap": "AAAAAA=="}),
        "model Unigram with byte_fallback": ("model", {**base["model"], "byte_fallback": True}),
    }
    refused = 0
    for found, (key, value) in cases.items():
        tok = Tokenizer.from_str(json.dumps({**base, key: value}))
        with pytest.raises(TokenizerError) as e:
            tokenizer.make_spec(tok, "file")
        message = str(e.value)
        assert "\n" not in message and found in message and "or a Unigram without byte_fallback" in message, message
        refused += 1
    assert refused == 6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """JSONL of real text: WikiText-2 valid's articles, 300 Wikipedia articles, texts writing the special tokens,
    and one document of WikiText-2 test's articles joined, over the piece limit (1M characters)."""
    directory = tmp_path_factory.mktemp("unigram-corpus")
    texts = _wikitext_texts()
    if WIKIPEDIA_SAMPLE.exists():
        with open(WIKIPEDIA_SAMPLE, "rb") as f:
            reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
            texts += [json.loads(line)["text"] for line in itertools.islice(reader, 300)]
    texts.append(f"{LITERAL} {texts[0][:2000]}")
    long_text = "\n".join(_wikitext_texts("test"))
    assert len(long_text) > ENCODE_PIECE_CHARS
    texts.append(long_text)
    path = directory / "corpus.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"d{i:04d}", "text": text}) + "\n")
    return path


@pytest.mark.slow
def test_unigram_rows_are_exact_with_the_pre_tokenizers_word_starts(tmp_path, corpus, unigram_json):
    """Rows, concatenated per document, are the user's tokenizer's ids of the text with its Metaspace word starts
    (the long document too, encoded in pieces); verify passes; the artifact without the chunk cache is
    byte-identical."""
    (tmp_path / "tokenizer.json").write_text(unigram_json, encoding="utf-8")
    out = tmp_path / "a"
    manifest = build(corpus, out, "--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "3")
    assert manifest["tokenizer"]["special_tokens"] == ROBERTA
    _, docs, _ = assert_rows_exact(corpus, out, manifest, lambda text: text.startswith(LITERAL))
    long_text = max((d.text for d in docs), key=len)  # went through pieces, cut by the Unigram rule
    added = tuple(t["content"] for t in json.loads(unigram_json)["added_tokens"])
    assert len(text_pieces(long_text, ENCODE_PIECE_CHARS, added=added, metaspace=True)) == 2
    off = tmp_path / "b"
    build(corpus, off, "--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "3", "--encode-cache-mb", "0")
    shards = sorted(p.name for p in (out / "shards").glob("*.arrow"))
    assert len(shards) == 3
    for name in shards:
        assert (out / "shards" / name).read_bytes() == (off / "shards" / name).read_bytes(), name


@pytest.mark.slow
def test_tokenizer_from_a_directory_with_a_unigram_tokenizer_json(tmp_path, bert_named_json):
    """build_shards --tokenizer-from DIR with a Unigram tokenizer.json (BERT's special names): the roles are
    recorded, verify passes, and the rows are the tokenizer's ids."""
    directory = tmp_path / "dir"
    directory.mkdir()
    (directory / "tokenizer.json").write_text(bert_named_json, encoding="utf-8")
    out = tmp_path / "a"
    opts = ["--input-format", "wikitext", "--tokenizer-from", str(directory)]
    manifest = build(wikitext2("valid"), out, *opts, "--num-shards", "2")
    assert manifest["tokenizer"]["special_tokens"] == BERT
    ids = manifest["tokenizer"]["special_token_ids"]
    assert sorted(ids.values()) == [0, 1, 2, 3, 4]
    assert verify(str(out)).ok
    tok = Tokenizer.from_str(bert_named_json)
    rows = _by_doc(out)
    docs = read_file(str(wikitext2("valid")), ReaderOptions(input_format="wikitext", wikitext_unk="[UNK]"))
    checked = 0
    for doc in docs:
        if isinstance(doc, Document):
            assert rows[doc.doc_id]["input_ids"] == tok.encode(doc.text, add_special_tokens=False).ids
            checked += 1
    assert checked == 60


@pytest.mark.slow
def test_exported_unigram_loads_in_autotokenizer_with_its_roles(tmp_path, unigram_json):
    assert_export_loads_in_autotokenizer(unigram_json, tmp_path, ("<s>", "</s>", "<pad>", "<mask>", "<unk>"))


@pytest.mark.slow
def test_span_masking_on_a_unigram_artifact_masks_whole_words(tmp_path, unigram_json):
    """preview_masking --scheme span on a Unigram artifact: every masked run is whole words of Metaspace (the ▁ of
    a word inside its first piece), and [MASK] is the artifact's <mask>."""
    from trainer import preview_masking

    (tmp_path / "tokenizer.json").write_text(unigram_json, encoding="utf-8")
    out = tmp_path / "a"
    build(wikitext2("valid"), out, "--input-format", "wikitext", "--tokenizer", str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.from_str(unigram_json)
    mask_id = tok.token_to_id("<mask>")
    preview = tmp_path / "masked.arrow"
    stats = preview_masking.run(["--data", str(out), "--scheme", "span", "--num", "64", "--out", str(preview)])
    assert stats
    table = ipc.open_file(preview).read_all().to_pydict()
    runs = masked = 0
    for labels, word_start, ids, original in zip(
        table["labels"], table["word_start"], table["masked_ids"], table["original_ids"]
    ):
        target = np.array(labels) != -100
        ws = np.append(np.array(word_start, bool), True)
        edges = np.flatnonzero(np.diff(np.concatenate(([0], target.astype(np.int8), [0]))))
        for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
            assert ws[a] and ws[b], (a, b)  # a run of targets starts at a word start and ends before one
            assert tok.id_to_token(original[a]).startswith("▁") or tok.id_to_token(original[a]) == "<unk>"
            runs += 1
        masked += int((np.array(ids) == mask_id).sum())
    assert runs > 100 and masked > 100


def test_a_unigram_whose_added_tokens_strip_whitespace_encodes_long_texts_whole(unigram_json):
    """The piece rule's proof needs the added tokens matched in text to hold no whitespace and strip none: with an
    unk token that strips the space after it, a text over the piece limit is encoded whole, and its rows are still
    the tokenizer's ids; with the trainer's own unk token it is cut in two pieces."""
    from pipeline.tokenize.tokenized_documents import _TokenizeFn

    config = json.loads(unigram_json)
    for added in config["added_tokens"]:
        if added["content"] == "<unk>":
            added["rstrip"] = True
    opts = ReaderOptions(input_format="wikitext", wikitext_unk="<unk>")
    docs = [d for d in read_file(str(wikitext2("test")), opts) if isinstance(d, Document)]
    long_doc = Document("long", "\n".join(d.text for d in docs), docs[0].source)
    assert len(long_doc.text) > ENCODE_PIECE_CHARS
    limits = []
    for tokenizer_json in (json.dumps(config), unigram_json):
        spec = tokenizer.make_spec(Tokenizer.from_str(tokenizer_json), "file")
        fn = _TokenizeFn(spec, "int32")
        fn.setup()
        limits.append(fn._piece_limit)
        out = list(fn.process([long_doc]))
        [got] = out + [o.value for o in fn.finish_bundle()]
        fn.teardown()
        expected = spec.load().encode(long_doc.text, add_special_tokens=False).ids
        assert len(expected) > 300_000 and got.ids.tolist() == expected
    assert limits == [None, ENCODE_PIECE_CHARS]


def test_verify_finds_an_unmarked_unigram_row_starting_inside_a_word(tmp_path, unigram_json):
    """Behind Metaspace (split, prepend always) every word starts with its ``▁`` and no later piece of a word holds
    one, so verify knows a row starting with another piece (not the unk piece, not an added token) starts inside a
    word, as it knows WordPiece's ``##``: an artifact the job built verifies, and one whose continuation row lost its
    mark (the manifest's count made to match, as a job that forgot the mark would write it) is rejected."""
    from schemas.tokenizers.families import word_continuing_ids
    from tests.conftest import wikitext2_articles
    from tests.pipeline.test_verify_continuations import manifest, rewrite_rows, run_verify, write_manifest

    (tmp_path / "tokenizer.json").write_text(unigram_json, encoding="utf-8")
    out = tmp_path / "artifact"
    m = build(
        wikitext2_articles(4, tmp_path),
        out,
        *("--input-format", "wikitext", "--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "1"),
        *("--max-seq-len", "8"),
    )
    assert m["counts"]["continuation_rows"] > 0
    code, output = run_verify(out)
    assert code == 0, output
    continuing = word_continuing_ids(Tokenizer.from_str(unigram_json))
    assert continuing is not None and 0 < continuing.sum() < len(continuing)
    relative = manifest(out)["shards"][0]["path"]
    rows = ipc.open_file(str(out / relative)).read_all().to_pylist()
    marked = [i for i, r in enumerate(rows) if not r["word_start"][0]]
    assert marked and all(continuing[rows[i]["input_ids"][0]] for i in marked)  # each starts with a non-▁ piece

    def unmark(rows: list[dict]) -> None:
        rows[marked[0]]["word_start"][0] = True

    rewrite_rows(out, relative, unmark)
    m = manifest(out)
    m["counts"]["continuation_rows"] -= 1
    write_manifest(out, m)
    code, output = run_verify(out)
    assert code == 1 and "are not marked as continuation rows" in output, output


def test_an_added_token_the_normalizer_makes_hold_a_space_keeps_long_texts_whole(unigram_json, monkeypatch):
    """Issue 32 item 5: an added ``"of\\u200bthe"`` is ``"of the"`` after Nmt and matches across the spaces that the
    piece rule cuts at; such a tokenizer encodes long texts whole, and the rows are Tokenizer.encode's ids (with the
    piece limit lowered to 2,000 characters the cuts fell inside its matches)."""
    from pipeline.tokenize import tokenized_documents

    monkeypatch.setattr(tokenized_documents, "ENCODE_PIECE_CHARS", 2000)
    config = json.loads(unigram_json)
    assert config["normalizer"]["normalizers"][0]["type"] == "Nmt"
    tok = Tokenizer.from_str(json.dumps(config))
    tok.add_tokens(["of\u200bthe"])
    spec = tokenizer.make_spec(tok, "file")
    opts = ReaderOptions(input_format="wikitext", wikitext_unk="<unk>")
    docs = [d for d in read_file(str(wikitext2("test")), opts) if isinstance(d, Document)][:40]
    text = "\n".join(d.text for d in docs)
    assert len(text) > 100_000
    fn = tokenized_documents._TokenizeFn(spec, "int32")
    fn.setup()
    out = list(fn.process([Document("long", text, docs[0].source)]))
    [got] = out + [o.value for o in fn.finish_bundle()]
    fn.teardown()
    expected = spec.load_for_text().encode(text, add_special_tokens=False).ids
    added = spec.load().token_to_id("of\u200bthe")
    assert expected.count(added) > 50 and got.ids.tolist() == expected
    assert fn._piece_limit is None
