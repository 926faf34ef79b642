"""The tokenizer side of issue 21 on real text: the job never writes rows its own verify rejects (words longer
than a row, special ids from literal text, tokenizers it cannot handle), and sentence starts stay exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

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
    out = tmp_path / "a"
    manifest = build(wikitext2("valid"), out, *WIKITEXT2_BUILD, "--max-seq-len", "8", "--pack", pack)
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


def _tokenize(spec: tokenizer.TokenizerSpec, docs: list[Document], sentence_path: bool) -> list:
    fn = _TokenizeFn(spec, "int32")
    fn.setup()
    if not sentence_path:
        fn._sentences = None  # the whole-document path: sentence starts placed through the offsets
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
