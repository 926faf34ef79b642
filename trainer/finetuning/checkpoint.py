"""Where fine-tuning starts: the encoder's weights and the tokenizer the artifact carried.

``--init`` accepts

- a pre-training run directory (``RUN_DIR``, holding ``checkpoints/latest``), its ``RUN_DIR/checkpoints``
  directory, or one checkpoint ``RUN_DIR/checkpoints/global_stepN``: the weights are consolidated by
  ``trainer.export.load_model`` (any ZeRO stage), the tokenizer is the checkpoint's ``tokenizer.json``
  (the artifact's, byte for byte), the model configuration its ``spanprep_trainer.json``;
- a Hugging Face BERT directory (``config.json`` + ``model.safetensors``), such as ``python -m trainer.export``
  writes: Hugging Face names are mapped back to ours (the inverse of ``trainer.export.to_hf_state_dict``), the
  tokenizer is its ``tokenizer.json``, or, for a model without one, a WordPiece tokenizer from its
  ``vocab.txt`` (``pipeline.tokenize.tokenizer.from_vocab``, lower-casing as its ``tokenizer_config.json`` says).
"""

from __future__ import annotations

import json
import os

import torch

from pipeline.tokenize.tokenizer import from_vocab
from trainer.config import CHECKPOINT_META_FILE, CHECKPOINT_TOKENIZER_FILE, ConfigError, ModelConfig
from trainer.export import ExportError, load_model
from trainer.model import SpanBert


class CheckpointError(ValueError):
    """``--init`` is not something fine-tuning can start from; the message says why."""


def load_pretrained(path: str) -> tuple[SpanBert, str, dict]:
    """(encoder in train mode, tokenizer JSON, description of the source)."""
    if not os.path.isdir(path):
        raise CheckpointError(f"--init {path}: no such directory")
    if os.path.isfile(os.path.join(path, "config.json")) and os.path.isfile(os.path.join(path, "model.safetensors")):
        return _from_hf(path)
    for ckpt_dir, tag in (
        (os.path.join(path, "checkpoints"), None),
        (path, None),
        (os.path.dirname(os.path.abspath(path)), os.path.basename(os.path.abspath(path))),
    ):
        marker = os.path.join(ckpt_dir, "latest") if tag is None else os.path.join(ckpt_dir, tag, CHECKPOINT_META_FILE)
        if os.path.isfile(marker):
            return _from_deepspeed(ckpt_dir, tag)
    raise CheckpointError(
        f"--init {path}: neither a pre-training run (RUN_DIR with checkpoints/latest, or a "
        f"checkpoint directory) nor a Hugging Face export (config.json + model.safetensors)"
    )


def _from_deepspeed(ckpt_dir: str, tag: str | None) -> tuple[SpanBert, str, dict]:
    try:
        model, meta = load_model(ckpt_dir, tag)
    except (ExportError, ConfigError) as e:
        raise CheckpointError(f"--init: {e}") from None
    tag = tag or open(os.path.join(ckpt_dir, "latest")).read().strip()
    tok_path = os.path.join(ckpt_dir, tag, CHECKPOINT_TOKENIZER_FILE)
    if not os.path.isfile(tok_path):
        raise CheckpointError(f"--init: {tok_path} is missing; the checkpoint does not carry its tokenizer")
    with open(tok_path, encoding="utf-8") as f:
        tokenizer_json = f.read()
    info = {
        "kind": "deepspeed_checkpoint",
        "path": os.path.join(ckpt_dir, tag),
        "step": meta.get("step"),
        "artifact": meta.get("artifact"),
        "tokenizer_sha256": meta.get("tokenizer", {}).get("sha256"),
        "max_seq_len": meta.get("max_seq_len"),
    }
    return model.train(), tokenizer_json, info


def from_hf_state_dict(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Hugging Face BERT names (with or without the ``bert.`` prefix) -> our encoder's names."""
    prefix = "bert." if any(k.startswith("bert.") for k in hf) else ""

    def get(name: str) -> torch.Tensor:
        key = prefix + name
        if key not in hf:
            raise CheckpointError(f"the Hugging Face weights lack {key}")
        return hf[key].float()

    out = {
        "embeddings.word_embeddings.weight": get("embeddings.word_embeddings.weight"),
        "embeddings.position_embeddings.weight": get("embeddings.position_embeddings.weight"),
    }
    if cfg.type_vocab_size:
        out["embeddings.token_type_embeddings.weight"] = get("embeddings.token_type_embeddings.weight")
    for p in ("weight", "bias"):
        out[f"embeddings.LayerNorm.{p}"] = get(f"embeddings.LayerNorm.{p}")
        for i in range(cfg.num_layers):
            src, dst = f"encoder.layer.{i}.", f"layers.{i}."
            out[dst + f"attn.qkv.{p}"] = torch.cat(
                [get(src + f"attention.self.{m}.{p}") for m in ("query", "key", "value")]
            )
            out[dst + f"attn.proj.{p}"] = get(src + f"attention.output.dense.{p}")
            out[dst + f"ln1.{p}"] = get(src + f"attention.output.LayerNorm.{p}")
            out[dst + f"fc1.{p}"] = get(src + f"intermediate.dense.{p}")
            out[dst + f"fc2.{p}"] = get(src + f"output.dense.{p}")
            out[dst + f"ln2.{p}"] = get(src + f"output.LayerNorm.{p}")
    return out


def _from_hf(path: str) -> tuple[SpanBert, str, dict]:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise CheckpointError("reading a Hugging Face model needs safetensors: pip install 'spanprep[hf]'") from None
    with open(os.path.join(path, "config.json")) as f:
        hf_cfg = json.load(f)
    if hf_cfg.get("model_type") != "bert" or hf_cfg.get("hidden_act", "gelu") != "gelu":
        raise CheckpointError(
            f"--init {path}: a {hf_cfg.get('model_type')!r} model with activation "
            f"{hf_cfg.get('hidden_act')!r}; fine-tuning reads BERT models with GeLU"
        )
    try:
        cfg = ModelConfig(
            vocab_size=hf_cfg["vocab_size"],
            hidden_size=hf_cfg["hidden_size"],
            num_layers=hf_cfg["num_hidden_layers"],
            num_heads=hf_cfg["num_attention_heads"],
            intermediate_size=hf_cfg["intermediate_size"],
            max_position_embeddings=hf_cfg["max_position_embeddings"],
            type_vocab_size=hf_cfg.get("type_vocab_size", 2),
            hidden_dropout=hf_cfg.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf_cfg.get("attention_probs_dropout_prob", 0.1),
            layer_norm_eps=hf_cfg.get("layer_norm_eps", 1e-12),
            initializer_range=hf_cfg.get("initializer_range", 0.02),
            pad_token_id=hf_cfg.get("pad_token_id") or 0,
            objective="mlm",
        )
    except (KeyError, ConfigError) as e:
        raise CheckpointError(f"--init {path}/config.json: {e}") from None
    model = SpanBert(cfg)
    state = from_hf_state_dict(load_file(os.path.join(path, "model.safetensors")), cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith(("mlm_head.", "sbo_head."))]
    if missing or unexpected:
        raise CheckpointError(
            f"--init {path}: weights do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    tokenizer_json = _hf_tokenizer(path)
    info = {"kind": "huggingface", "path": path, "max_seq_len": hf_cfg["max_position_embeddings"]}
    return model.train(), tokenizer_json, info


def _hf_tokenizer(path: str) -> str:
    tok_path = os.path.join(path, "tokenizer.json")
    if os.path.isfile(tok_path):
        with open(tok_path, encoding="utf-8") as f:
            return f.read()
    vocab = os.path.join(path, "vocab.txt")
    if not os.path.isfile(vocab):
        raise CheckpointError(f"--init {path}: neither tokenizer.json nor vocab.txt; cannot tokenize like the model")
    lowercase = False
    tc = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(tc):
        with open(tc) as f:
            lowercase = bool(json.load(f).get("do_lower_case", False))
    return from_vocab(vocab, lowercase=lowercase).to_str()
