"""Byte-level BPE (RoBERTa's family) end to end on real text: exact rows, word starts of the pre-tokenizer's words,
RoBERTa's special tokens by role, literal special tokens kept as text, long texts in pieces, export."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest
import zstandard
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer
from pipeline.tokenize.encodings import ENCODE_PIECE_CHARS, text_pieces
from pipeline.verify import verify
from schemas.artifact import Artifact
from tests.conftest import WIKIPEDIA_SAMPLE, build, wikitext2

ROBERTA = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}


def _wikitext_texts(split: str = "valid") -> list[str]:
    opts = ReaderOptions(input_format="wikitext", wikitext_unk="<unk>")
    return [d.text for d in read_file(str(wikitext2(split)), opts) if isinstance(d, Document)]


@pytest.fixture(scope="module")
def roberta_json() -> str:
    return roberta_tokenizer()


def roberta_tokenizer() -> str:
    """A RoBERTa-style byte-level BPE trained here on WikiText-2 (specials in RoBERTa's order), as JSON."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    trainer = trainers.BpeTrainer(
        vocab_size=5000,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_wikitext_texts(), trainer)
    return tok.to_str()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """JSONL of real text: WikiText-2 valid's articles, 300 Wikipedia articles, a text writing special tokens,
    and one document of WikiText-2 test's articles joined, over the piece limit (1M characters)."""
    directory = tmp_path_factory.mktemp("bpe-corpus")
    texts = _wikitext_texts()
    if WIKIPEDIA_SAMPLE.exists():
        with open(WIKIPEDIA_SAMPLE, "rb") as f:
            reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
            texts += [json.loads(line)["text"] for line in itertools.islice(reader, 300)]
    texts.append("Literal <s> , </s> , <mask> , <pad> and [MASK] in text . " + texts[0][:2000])
    long_text = "\n".join(_wikitext_texts("test"))
    assert len(long_text) > ENCODE_PIECE_CHARS
    texts.append(long_text)
    path = directory / "corpus.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": f"d{i:04d}", "text": text}) + "\n")
    return path


def _by_doc(artifact: Path) -> dict[str, dict[str, list]]:
    out: dict[str, dict[str, list]] = {}
    for shard in sorted((artifact / "shards").glob("*.arrow")):
        for row in ipc.open_file(shard).read_all().to_pylist():
            doc = out.setdefault(row["doc_id"], {"input_ids": [], "word_start": [], "sentence_start": []})
            for column in doc:
                doc[column].extend(row[column])
    return out


def assert_rows_exact(corpus: Path, out: Path, manifest: dict, is_literal) -> tuple[Tokenizer, list[Document], list]:
    """The artifact ``out`` built from ``corpus`` verifies; every document's rows, concatenated, are the artifact
    tokenizer's ids of its text with the pre-tokenizer's word starts, and sentences start at word starts (over
    500,000 tokens and 10,000 sentences checked); a document ``is_literal`` says writes special tokens holds none of
    RoBERTa's special ids. Returns (tokenizer, documents, the literal documents' ids)."""
    report = verify(str(out))  # rows start at word starts; no <s> </s> <pad> <mask> id in any row
    assert report.ok, report.problems
    tok = Tokenizer.from_str(Artifact.open(str(out)).tokenizer_json())
    rows = _by_doc(out)
    docs = [d for d in read_file(str(corpus), ReaderOptions()) if isinstance(d, Document)]
    assert len(rows) == len(docs) == manifest["counts"]["documents_written"]
    special = {tok.token_to_id(t) for role, t in ROBERTA.items() if role != "unk"}
    checked = sentences = 0
    literal = []
    for doc in docs:
        got = rows[doc.doc_id]
        if is_literal(doc.text):
            assert not special & set(got["input_ids"])
            literal.append(got["input_ids"])
            continue
        encoding = tok.encode(doc.text, add_special_tokens=False)
        assert got["input_ids"] == encoding.ids, doc.doc_id
        w = encoding.word_ids
        assert got["word_start"] == [i == 0 or w[i] != w[i - 1] for i in range(len(w))], doc.doc_id
        assert all(got["word_start"][i] for i in np.flatnonzero(got["sentence_start"]).tolist())
        checked += len(encoding.ids)
        sentences += sum(got["sentence_start"])
    assert checked > 500_000 and sentences > 10_000
    return tok, docs, literal


@pytest.mark.slow
def test_byte_level_bpe_rows_are_exact_with_the_pre_tokenizers_word_starts(tmp_path, corpus, roberta_json):
    (tmp_path / "tokenizer.json").write_text(roberta_json, encoding="utf-8")
    out = tmp_path / "a"
    manifest = build(corpus, out, "--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "3")
    assert manifest["tokenizer"]["special_tokens"] == ROBERTA
    tok, docs, literal = assert_rows_exact(corpus, out, manifest, lambda text: "Literal <s>" in text)
    for ids in literal:  # the specials written in the text are text
        assert tok.decode(ids).startswith("Literal <s> , </s> , <mask> , <pad> and [MASK]")
    assert max(len(d.text) for d in docs) > ENCODE_PIECE_CHARS  # the long document went through pieces


def test_byte_level_bpe_pieces_start_only_where_a_cut_keeps_the_tokens(roberta_json):
    """The piece rule on real text: at a line feed followed by a non-space character (not an added token such as
    WikiText's <unk>, which the tokenizer splits off first), the text on either side
    encoded alone gives the tokens of the whole (checked on a window around each cut); the other cuts the
    WordPiece rule takes (a line feed before whitespace, a space) can change them, which is why BPE excludes them."""
    tok = Tokenizer.from_str(roberta_json)
    # WikiText as published (" \n \n = Title = \n": runs of spaces and line feeds) and as the reader gives it
    texts = [wikitext2("valid").read_text(encoding="utf-8")[:300_000], "\n".join(_wikitext_texts("valid"))[:300_000]]
    if WIKIPEDIA_SAMPLE.exists():
        with open(WIKIPEDIA_SAMPLE, "rb") as f:
            reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
            texts += [json.loads(line)["text"] for line in itertools.islice(reader, 50)]

    def encode(text: str) -> tuple[list[int], list[bool]]:
        enc = tok.encode(text, add_special_tokens=False)
        w = enc.word_ids
        return enc.ids, [i == 0 or w[i] != w[i - 1] for i in range(len(w))]

    added = tuple(t["content"] for t in json.loads(roberta_json)["added_tokens"])  # <unk>, <s>, ...
    allowed = refused_and_different = 0
    for text in texts:
        # where text_pieces(strict=True) may start a piece, and where the WordPiece rule also may
        strict = {
            i
            for i, c in enumerate(text)
            if c == "\n" and i + 1 < len(text) and not text[i + 1].isspace() and not text.startswith(added, i + 1)
        }
        loose = [i for i, c in enumerate(text) if c == "\n" and i not in strict]
        for cut in sorted(strict)[::3] + loose[::3]:
            if cut == 0:
                continue
            a, b = max(0, cut - 200), min(len(text), cut + 200)
            window, k = text[a:b], cut - a
            whole = encode(window)
            (ids1, ws1), (ids2, ws2) = encode(window[:k]), encode(window[k:])
            joined = (ids1 + ids2, ws1 + ws2)  # a piece's first token starts a word
            if cut in strict:
                assert joined == whole, (cut, window[k - 20 : k + 20])
                allowed += 1
            else:
                refused_and_different += joined != whole
    assert allowed > 1000 and refused_and_different > 0, (allowed, refused_and_different)
    # and text_pieces(strict=True) cuts exactly there: every piece but the first starts at such a line feed
    text = texts[1]  # as the reader gives it (the file as published has a space after every line feed)
    pieces = text_pieces(text, 20_000, strict=True, added=added)
    cuts = {i for i, c in enumerate(text) if c == "\n" and i + 1 < len(text) and not text[i + 1].isspace()} - {
        i for i in range(len(text)) if text.startswith(added, i + 1)
    }
    assert len(pieces) > 10 and all(a in cuts for a, _ in pieces[1:])
    assert [i for a, b in pieces for i in tok.encode(text[a:b], add_special_tokens=False).ids] == tok.encode(
        text, add_special_tokens=False
    ).ids


def assert_export_loads_in_autotokenizer(tokenizer_json: str, out: Path, roles: tuple[str, ...]) -> None:
    """``trainer.export``'s tokenizer files of ``tokenizer_json`` load in AutoTokenizer with ``roles`` (cls, sep,
    pad, mask, unk) and give the tokenizer's ids on 10 WikiText-2 articles."""
    transformers = pytest.importorskip("transformers")
    from pipeline.tokenize import tokenizer
    from trainer.export import write_tokenizer_files

    spec = tokenizer.make_spec(Tokenizer.from_str(tokenizer_json), "file")
    write_tokenizer_files(spec.json, spec.describe(), 512, str(out))
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    assert (auto.cls_token, auto.sep_token, auto.pad_token, auto.mask_token, auto.unk_token) == roles
    tok = spec.load()
    checked = 0
    for text in _wikitext_texts()[:10]:
        assert auto(text, add_special_tokens=False)["input_ids"] == tok.encode(text, add_special_tokens=False).ids
        checked += 1
    assert checked == 10


@pytest.mark.slow
def test_exported_byte_level_bpe_loads_in_autotokenizer_with_robertas_roles(tmp_path, roberta_json):
    assert_export_loads_in_autotokenizer(roberta_json, tmp_path, ("<s>", "</s>", "<pad>", "<mask>", "<unk>"))


@pytest.mark.slow
def test_span_masking_on_a_byte_level_bpe_artifact_masks_whole_words(tmp_path, roberta_json):
    """preview_masking --scheme span on a RoBERTa-style artifact: every masked run is whole words of the
    pre-tokenizer (word_start from its words, not from a ## convention), and [MASK] is RoBERTa's <mask>."""
    from trainer import preview_masking

    (tmp_path / "tokenizer.json").write_text(roberta_json, encoding="utf-8")
    out = tmp_path / "a"
    build(wikitext2("valid"), out, "--input-format", "wikitext", "--tokenizer", str(tmp_path / "tokenizer.json"))
    mask_id = Tokenizer.from_str(roberta_json).token_to_id("<mask>")
    preview = tmp_path / "masked.arrow"
    stats = preview_masking.run(["--data", str(out), "--scheme", "span", "--num", "64", "--out", str(preview)])
    assert stats
    table = ipc.open_file(preview).read_all().to_pydict()
    runs = masked = 0
    for labels, word_start, ids in zip(table["labels"], table["word_start"], table["masked_ids"]):
        target = np.array(labels) != -100
        ws = np.append(np.array(word_start, bool), True)
        edges = np.flatnonzero(np.diff(np.concatenate(([0], target.astype(np.int8), [0]))))
        for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
            assert ws[a] and ws[b], (a, b)  # a run of targets starts at a word start and ends before one
            runs += 1
        masked += int((np.array(ids) == mask_id).sum())
    assert runs > 100 and masked > 100


@pytest.mark.parametrize("family", ["byte_level_bpe", "wordpiece"])
def test_a_long_text_is_encoded_whole_when_an_added_token_holds_whitespace(family, roberta_json):
    """Every family cuts a long text at whitespace; an added token holding whitespace (``"\\n\\n"``, ``"of the"``) or
    stripping it is matched across the cut in the whole text only, so with one the text is encoded whole and its
    rows are the tokenizer's ids (pieces gave other ids for both); without one it is still cut."""
    from pipeline.tokenize.tokenized_documents import _TokenizeFn

    opts = ReaderOptions(input_format="wikitext", wikitext_unk="<unk>")
    docs = [d for d in read_file(str(wikitext2("test")), opts) if isinstance(d, Document)]
    long_doc = Document("long", "\n".join(d.text for d in docs), docs[0].source)
    assert len(long_doc.text) > ENCODE_PIECE_CHARS and "\n\n" in long_doc.text and " of the " in long_doc.text
    if family == "byte_level_bpe":
        user = Tokenizer.from_str(roberta_json)
    else:
        user = tokenizer.train(_wikitext_texts(), vocab_size=4000)
    limits = []
    for added in ([], ["\n\n", "of the"]):
        tok = Tokenizer.from_str(user.to_str())
        tok.add_tokens(added)
        spec = tokenizer.make_spec(tok, "file")
        assert spec.family == family
        fn = _TokenizeFn(spec, "int32")
        fn.setup()
        limits.append(fn._piece_limit)
        out = list(fn.process([long_doc]))
        [got] = out + [o.value for o in fn.finish_bundle()]
        fn.teardown()
        expected = spec.load().encode(long_doc.text, add_special_tokens=False).ids
        assert len(expected) > 300_000 and got.ids.tolist() == expected
    assert limits == [ENCODE_PIECE_CHARS, None]
