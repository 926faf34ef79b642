"""An exported tokenizer adds the special tokens as the trainer's inputs had them (``cls row sep``; pairs ``cls A sep
B sep`` with type ids 0/1), also when the artifact's tokenizer has no post-processor: a SentencePiece-style Unigram
(``SentencePieceUnigramTokenizer`` sets none) exported before with none, so its encodings lacked ``<s>``/``</s>``."""

from __future__ import annotations

import json

import pytest
from tokenizers import SentencePieceUnigramTokenizer, Tokenizer

from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from tests.conftest import wikitext2
from trainer.export import write_tokenizer_files

ROLES = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}
SENTENCE = "The European lobster is a species of clawed lobster from the eastern Atlantic Ocean."


@pytest.fixture(scope="module")
def unigram() -> Tokenizer:
    texts = [
        d.text
        for d in read_file(str(wikitext2("valid")), ReaderOptions(input_format="wikitext", wikitext_unk="<unk>"))
        if isinstance(d, Document)
    ]
    sp = SentencePieceUnigramTokenizer()
    sp.train_from_iterator(texts, vocab_size=3000, special_tokens=list(ROLES.values()), unk_token="<unk>")
    assert sp._tokenizer.post_processor is None
    return sp._tokenizer


def test_a_unigram_without_post_processor_exports_with_the_trainers_wrapping(unigram, tmp_path):
    ids = {role: unigram.token_to_id(token) for role, token in ROLES.items()}
    meta = {"special_tokens": ROLES, "special_token_ids": ids, "lowercase": False}
    write_tokenizer_files(unigram.to_str(), meta, 128, str(tmp_path))
    exported = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    plain = unigram.encode(SENTENCE, add_special_tokens=False).ids
    assert len(plain) > 10
    assert exported.encode(SENTENCE).ids == [ids["cls"], *plain, ids["sep"]]
    pair = exported.encode(SENTENCE, "A second one.")
    b = unigram.encode("A second one.", add_special_tokens=False).ids
    assert pair.ids == [ids["cls"], *plain, ids["sep"], *b, ids["sep"]]
    assert pair.type_ids == [0] * (len(plain) + 2) + [1] * (len(b) + 1)
    # the rest of the tokenizer is the artifact's
    written = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert {k: v for k, v in written.items() if k != "post_processor"} == {
        k: v for k, v in json.loads(unigram.to_str()).items() if k != "post_processor"
    }
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert auto(SENTENCE)["input_ids"] == [ids["cls"], *plain, ids["sep"]]


def test_a_tokenizer_with_its_own_post_processor_is_kept_byte_for_byte(unigram, tmp_path):
    from tokenizers import processors

    ids = {role: unigram.token_to_id(token) for role, token in ROLES.items()}
    with_own = Tokenizer.from_str(unigram.to_str())
    with_own.post_processor = processors.RobertaProcessing(("</s>", ids["sep"]), ("<s>", ids["cls"]))
    write_tokenizer_files(with_own.to_str(), {"special_tokens": ROLES, "special_token_ids": ids}, 128, str(tmp_path))
    assert (tmp_path / "tokenizer.json").read_text(encoding="utf-8") == with_own.to_str()
