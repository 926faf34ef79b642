"""trainer/hf_bert.py: the one table of Hugging Face BERT names, read both ways, and the weight files it accepts
(BertModel's unprefixed names, old gamma/beta LayerNorms, sharded safetensors, an untied decoder refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer.config import ModelConfig
from trainer.hf_bert import HFCheckpointError, from_hf_state_dict, read_weights, to_hf_state_dict
from trainer.model import SpanBert
from trainer.pretrained import open_pretrained


def perturbed(cfg: ModelConfig) -> SpanBert:
    torch.manual_seed(0)
    model = SpanBert(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("nsp", [False, True])
def test_export_and_init_are_inverse_through_the_one_table(nsp):
    cfg = ModelConfig.preset("tiny", vocab_size=300, objective="mlm", nsp=nsp)
    state = perturbed(cfg).state_dict()
    hf = to_hf_state_dict(state, cfg)
    assert ("cls.seq_relationship.weight" in hf) == nsp and ("bert.pooler.dense.weight" in hf) == nsp
    back, unused = from_hf_state_dict(hf, cfg, "probe")
    assert unused == []
    assert set(back) == set(state) - {"mlm_head.decoder.weight"}  # the tied decoder is the word embedding
    for name, tensor in back.items():
        assert torch.equal(tensor, state[name]), name


def test_bert_model_names_and_old_layer_norm_names_are_read():
    cfg = ModelConfig.preset("tiny", vocab_size=300, objective="mlm")
    state = perturbed(cfg).state_dict()
    hf = to_hf_state_dict(state, cfg)
    old = {}
    for key, tensor in hf.items():  # BertModel (no "bert." prefix, no heads) as old files name LayerNorms
        if key.startswith("bert."):
            key = (
                key[len("bert.") :]
                .replace("LayerNorm.weight", "LayerNorm.gamma")
                .replace("LayerNorm.bias", "LayerNorm.beta")
            )
            old[key] = tensor
    old["embeddings.position_ids"] = torch.arange(cfg.max_position_embeddings)[None]
    back, unused = from_hf_state_dict(old, cfg, "probe")
    assert unused == [] and not any(k.startswith("mlm_head.") for k in back)
    assert "embeddings.LayerNorm.weight" in back and "layers.1.ln2.bias" in back  # read from gamma/beta
    for name, tensor in back.items():
        assert torch.equal(tensor, state[name]), name


def test_an_untied_decoder_and_a_partial_encoder_are_refused():
    cfg = ModelConfig.preset("tiny", vocab_size=300, objective="mlm")
    hf = to_hf_state_dict(perturbed(cfg).state_dict(), cfg)
    untied = {**hf, "cls.predictions.decoder.weight": torch.randn(300, cfg.hidden_size)}
    with pytest.raises(HFCheckpointError, match="probe: cls.predictions.decoder.weight is not the word embedding"):
        from_hf_state_dict(untied, cfg, "probe")
    partial = {k: v for k, v in hf.items() if "layer.1.output.dense" not in k}
    with pytest.raises(
        HFCheckpointError, match=r"probe: the weights lack bert.encoder.layer.1.output.dense.weight \(and 1 more\)"
    ):
        from_hf_state_dict(partial, cfg, "probe")


def test_sharded_safetensors_read_as_one(tmp_path: Path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(cfg)
    model.save_pretrained(str(tmp_path / "one"))
    model.save_pretrained(str(tmp_path / "sharded"), max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    assert len(json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())["weight_map"]) > 20
    one, sharded = read_weights(str(tmp_path / "one")), read_weights(str(tmp_path / "sharded"))
    assert sorted(one) == sorted(sharded)
    assert all(torch.equal(one[k], sharded[k]) for k in one)
    for name in ("one", "sharded"):
        (tmp_path / name / "tokenizer_config.json").write_text('{"do_lower_case": false}')
        (tmp_path / name / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(300)))
    a, b = open_pretrained(str(tmp_path / "one")), open_pretrained(str(tmp_path / "sharded"))
    ours = ModelConfig(**{**a.defaults, **a.fixed})
    sa, sb = a.state(ours)[0], b.state(ours)[0]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
