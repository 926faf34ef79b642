"""Hugging Face BERT checkpoints for the continued pre-training tests, made here (no network): a cased and an uncased
WordPiece vocabulary trained on WikiText-2 by the pipeline's tokenizer trainer, a tiny ``BertForPreTraining`` with
random weights saved by ``save_pretrained`` (model.safetensors, tokenizer.json and tokenizer_config.json from
transformers' ``BertTokenizer``) and again as ``pytorch_model.bin`` with only ``vocab.txt`` + ``tokenizer_config.json``
(the older layout of SpanBERT's and BERT's own downloads), and an artifact built for each vocabulary with
``build_shards --vocab vocab.txt [--lowercase]``. Built once per test session (``hf_case``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import build, wikitext2_articles

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
MAX_SEQ_LEN = 128
VOCAB_SIZE = 3000
ARTICLES = 8
_CACHE: dict[str, dict[str, Path]] = {}


def save_bert(directory: Path, vocab_size: int, seed: int = 0, **config) -> Path:
    """A ``BertForPreTraining`` with random weights (LayerNorms and biases too, so a swapped name shows) saved by
    ``save_pretrained``; no dropout, so its logits are a function of the weights."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    cfg = dict(
        SIZES,
        vocab_size=vocab_size,
        max_position_embeddings=MAX_SEQ_LEN,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertForPreTraining(transformers.BertConfig(**{**cfg, **config}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(str(directory))
    return directory


def hf_case(tmp_path_factory, case: str) -> dict[str, Path]:
    """``case`` cased or uncased: {"vocab", "safetensors", "bin", "artifact", "text"}."""
    if case in _CACHE:
        return _CACHE[case]
    transformers = pytest.importorskip("transformers")
    from pipeline.tokenize.tokenizer import train

    lowercase = case == "uncased"
    root = tmp_path_factory.mktemp(f"hf_{case}")
    text = wikitext2_articles(ARTICLES, root)
    tok = train(text.read_text(encoding="utf-8").splitlines(), vocab_size=VOCAB_SIZE, lowercase=lowercase)
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    vocab_txt = root / "vocab.txt"
    vocab_txt.write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")

    st = save_bert(root / "bert_safetensors", len(vocab))
    transformers.BertTokenizer(vocab=str(vocab_txt), do_lower_case=lowercase).save_pretrained(str(st))
    assert (st / "model.safetensors").exists() and (st / "tokenizer.json").exists()

    # The same weights as a pickle (what save_pretrained wrote before safetensors), with vocab.txt only.
    pt = root / "bert_bin"
    pt.mkdir()
    shutil.copy(st / "config.json", pt / "config.json")
    model = transformers.BertForPreTraining.from_pretrained(str(st))
    torch.save(model.state_dict(), pt / "pytorch_model.bin")  # holds the tied decoder weight too, as old files do
    shutil.copy(vocab_txt, pt / "vocab.txt")
    (pt / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}))

    artifact = root / "artifact"
    extra = ["--lowercase"] if lowercase else []
    build(text, artifact, "--input-format", "wikitext", "--vocab", str(vocab_txt), *extra,
          "--max-seq-len", str(MAX_SEQ_LEN), "--num-shards", "2")  # fmt: skip
    _CACHE[case] = {"vocab": vocab_txt, "safetensors": st, "bin": pt, "artifact": artifact, "text": text}
    return _CACHE[case]
