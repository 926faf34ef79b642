"""The tokenizer side of issue 21 on real text: the job never writes rows its own verify rejects (words longer
than a row, special ids from literal text, tokenizers it cannot handle), and sentence starts stay exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from pipeline import verify
from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer
from pipeline.tokenize.tokenized_documents import _TokenizeFn
from schemas.artifact import Artifact
from schemas.format import SPECIAL_TOKENS
from tests.conftest import WIKITEXT2_BUILD, build, wikitext2


@pytest.mark.parametrize("pack", ["doc-sentences", "full-sentences"])
def test_a_word_longer_than_a_row_dead_letters_its_document_and_the_artifact_verifies(tmp_path, pack):
    """The rule of format 1.x, kept behind --long-words dead-letter (the default splits such a word into
    continuation rows: tests/pipeline/test_long_words.py)."""
    out = tmp_path / "a"
    manifest = build(
        wikitext2("valid"), out, *WIKITEXT2_BUILD, "--max-seq-len", "8", "--pack", pack, "--long-words", "dead-letter"
    )
    c = manifest["counts"]
    # WikiText-2's 'cephalothorax' alone is 7 WordPieces of this vocabulary: more than the 6 a row holds
    assert c["dead_lettered_by_reason"].get("word_too_long", 0) > 0
    assert c["documents_read"] == c["documents_written"] + c["documents_dead_lettered"]
    report = verify.verify(str(out))
    assert report.ok, report.problems
    assert report.checked["rows checked"] > 0
    letters = [json.loads(line) for line in (out / "dead_letter" / "word_too_long.jsonl").read_text().splitlines()]
    assert len(letters) == c["dead_lettered_by_reason"]["word_too_long"]
    assert all("tokens, more than a row holds (6" in d["detail"] for d in letters)
    # every written row starts at a word start, and no written word is longer than a row
    art = Artifact.open(str(out))
    words = 0
    for entry in art.manifest["shards"]:
        table = art.open_shard(entry["path"]).read_all()
        for ws in table.column("word_start").to_pylist():
            assert ws[0]
            starts = np.flatnonzero(np.append(ws, True))
            assert np.diff(starts).max() <= 6
            words += len(starts) - 1
    assert words > 10_000


def _wikitext_documents() -> list[Document]:
    opts = ReaderOptions(input_format="wikitext", wikitext_unk=SPECIAL_TOKENS["unk"])
    return [r for r in read_file(str(wikitext2("valid")), opts) if isinstance(r, Document)]


def _tokenize(spec: tokenizer.TokenizerSpec, docs: list[Document], sentence_path: bool, encoder=None) -> list:
    """The tokenize stage's documents: on its fast path (``encoder``, else the one it picks) or the whole-document
    path."""
    fn = _TokenizeFn(spec, "int32")
    fn.setup()
    if not sentence_path:
        fn._sentences = None  # the whole-document path: sentence starts placed through the offsets
    elif encoder is not None:
        fn._sentences = encoder
    assert sentence_path == (fn._sentences is not None)
    out = []
    for i in range(0, len(docs), 32):
        out.extend(fn.process(docs[i : i + 32]))
    out.extend(o.value for o in fn.finish_bundle())
    fn.teardown()
    return out


def test_an_lstrip_added_token_starts_its_sentence_on_the_whole_document_path():
    """Issue 21 item 10: [UNK] with lstrip (WikiText's <unk> at a sentence start) takes the space before it into
    its span; the whole-document path placed the sentence start one token late."""
    docs = _wikitext_documents()
    config = json.loads(tokenizer.train([d.text for d in docs], vocab_size=4000).to_str())
    for added in config["added_tokens"]:
        if added["content"] == SPECIAL_TOKENS["unk"]:
            added["lstrip"] = True
    spec = tokenizer.make_spec(Tokenizer.from_str(json.dumps(config)), "file")
    by_sentences, whole = _tokenize(spec, docs, True), _tokenize(spec, docs, False)
    unk = spec.load().token_to_id(SPECIAL_TOKENS["unk"])
    assert len(by_sentences) == len(whole) == len(docs) == 60
    unk_starts = 0
    for a, b in zip(by_sentences, whole):
        assert a.ids.tobytes() == b.ids.tobytes()
        assert a.word_start.tolist() == b.word_start.tolist()
        assert a.sentence_start.tolist() == b.sentence_start.tolist(), a.doc_id
        unk_starts += int((a.sentence_start[1:] & (a.ids[1:] == unk)).sum())
    assert unk_starts > 10  # sentences that start with the lstrip token were compared


def _other_families(docs: list[Document]) -> dict[str, Tokenizer]:
    """Tokenizers of families the job cannot handle yet, trained here on real text with BERT's special tokens."""
    texts = [d.text for d in docs]
    specials = list(SPECIAL_TOKENS.values())
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)  # a prefix space on every piece: refused
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=2000,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    unigram = Tokenizer(models.Unigram())
    unigram.normalizer = normalizers.NFKC()
    unigram.pre_tokenizer = pre_tokenizers.Metaspace(split=False)  # one word per text: refused
    unigram.train_from_iterator(
        texts,
        trainers.UnigramTrainer(vocab_size=2000, special_tokens=specials, unk_token="[UNK]", show_progress=False),
    )
    whitespace = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    whitespace.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    whitespace.train_from_iterator(
        texts, trainers.WordPieceTrainer(vocab_size=2000, special_tokens=specials, show_progress=False)
    )
    return {
        "BPE, pre-tokenizer ByteLevel with add_prefix_space": bpe,
        "Unigram, pre-tokenizer Metaspace without split": unigram,
        "WordPiece, pre-tokenizer WhitespaceSplit": whitespace,
    }


def test_tokenizers_the_job_cannot_handle_are_refused_in_one_line(tmp_path, capsys):
    """Issue 21 items 6b and 6c: a WordPiece tokenizer.json behind WhitespaceSplit read literal [MASK] in the text
    as the mask id, Unigram did the same, and verify rejected the artifacts; each is refused before any work."""
    from pipeline import build_shards

    docs = _wikitext_documents()[:3]
    corpus = tmp_path / "wiki.tokens"
    # real WikiText articles, one paragraph of which writes the special tokens literally
    text = wikitext2("valid").read_text(encoding="utf-8")
    corpus.write_text(text[: text.index(" = ", 200_000)] + " Literal [MASK] , [SEP] , [CLS] and [PAD] in text . \n")
    for found, tok in _other_families(docs).items():
        path = tmp_path / "tokenizer.json"
        tok.save(str(path))
        out = tmp_path / "out"
        argv = ["--input", str(corpus), "--input-format", "wikitext", "--tokenizer", str(path), "--output", str(out)]
        argv += ["--runner", "FnApiRunner", "--num-shards", "2"]
        assert build_shards.main(argv) == 2, found
        captured = capsys.readouterr().err
        err = [line for line in captured.splitlines() if " INFO " not in line]  # the log's progress lines aside
        assert "Traceback" not in captured and len(err) == 1, captured
        assert err[0].startswith("build_shards: error: --tokenizer " + str(path)), err
        assert f"model {found}, normalizer" in err[0] and "not supported (supported: a WordPiece model" in err[0], err
        assert not (out / "manifest.json").exists()
