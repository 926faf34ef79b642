"""A byte-level BPE artifact (RoBERTa's special tokens, by role) and a Unigram artifact (BERT's) train on 2 ranks,
export, and the export's tokenizer is the artifact's under ``transformers.AutoTokenizer``."""

from __future__ import annotations

import sys

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from tests.conftest import build, free_port, wikitext2
from tests.support.pretrain_runs import DEEPSPEED, PRETRAIN, ds_config, metric, run

pytestmark = pytest.mark.slow


def test_byte_level_bpe_artifact_trains_on_two_ranks_and_exports_for_autotokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    texts = [
        d.text
        for d in read_file(str(wikitext2("valid")), ReaderOptions(input_format="wikitext", wikitext_unk="<unk>"))
        if isinstance(d, Document)
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    artifact = tmp_path / "artifact"
    build(
        wikitext2("valid"),
        artifact,
        *("--input-format", "wikitext", "--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "16"),
    )  # 16: the old default; without it a small corpus is one shard, and pre-training holds out one for evaluation

    auto, exported = _train_on_two_ranks_and_export(tmp_path, artifact)
    assert (auto.cls_token, auto.sep_token, auto.pad_token, auto.mask_token, auto.unk_token) == (
        "<s>",
        "</s>",
        "<pad>",
        "<mask>",
        "<unk>",
    )
    sentence = "The European lobster is a species of clawed lobster from the eastern Atlantic Ocean."
    assert auto(sentence, add_special_tokens=False)["input_ids"] == tok.encode(sentence, add_special_tokens=False).ids
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(exported))
    assert model.config.vocab_size == tok.get_vocab_size()


def test_unigram_artifact_trains_on_two_ranks_and_exports_for_autotokenizer(tmp_path):
    """A SentencePiece-style Unigram (Metaspace, BERT's special names, which the trainer holds as score-0 pieces)
    trains on 2 ranks, exports, and AutoTokenizer loads the export with those roles and the artifact's ids."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import SentencePieceUnigramTokenizer

    texts = [
        d.text
        for d in read_file(str(wikitext2("valid")), ReaderOptions(input_format="wikitext", wikitext_unk="[UNK]"))
        if isinstance(d, Document)
    ]
    sp = SentencePieceUnigramTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    sp.train_from_iterator(texts, vocab_size=3000, special_tokens=specials, unk_token="[UNK]", show_progress=False)
    tok = sp._tokenizer
    tok.save(str(tmp_path / "tokenizer.json"))
    artifact = tmp_path / "artifact"
    manifest = build(
        wikitext2("valid"),
        artifact,
        *("--input-format", "wikitext", "--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "16"),
    )
    assert manifest["tokenizer"]["special_tokens"]["mask"] == "[MASK]"

    auto, exported = _train_on_two_ranks_and_export(tmp_path, artifact)
    assert (auto.cls_token, auto.sep_token, auto.pad_token, auto.mask_token, auto.unk_token) == (
        "[CLS]",
        "[SEP]",
        "[PAD]",
        "[MASK]",
        "[UNK]",
    )
    sentence = "The European lobster is a species of clawed lobster from the eastern Atlantic Ocean."
    ids = tok.encode(sentence, add_special_tokens=False).ids
    assert len(ids) > 10 and auto(sentence, add_special_tokens=False)["input_ids"] == ids
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(exported))
    assert model.config.vocab_size == tok.get_vocab_size()


def _train_on_two_ranks_and_export(tmp_path, artifact):
    """8 steps of a tiny model on 2 ranks (loss falls), then ``trainer.export``: (AutoTokenizer of it, its path)."""
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "run"
    launcher = [str(DEEPSPEED), "--num_gpus", "2", "--master_port", str(free_port()), str(PRETRAIN)]
    args = ["--deepspeed_config", str(ds_config(tmp_path, 2)), "--data", str(artifact), "--preset", "tiny"]
    args += ["--lr", "5e-3", "--warmup-steps", "2", "--max-steps", "8", "--log-every", "1", "--no-progress"]
    args += ["--num-workers", "1", "--seed", "7", "--output-dir", str(out), "--save-every", "8"]
    run([*launcher, *args])
    loss = metric(out, "train_loss")
    assert sorted(loss) == list(range(1, 9)) and loss[8] < loss[1]
    exported = tmp_path / "export"
    run([sys.executable, "-m", "trainer.export", str(out / "checkpoints"), "--out", str(exported)])
    return transformers.AutoTokenizer.from_pretrained(str(exported)), exported
