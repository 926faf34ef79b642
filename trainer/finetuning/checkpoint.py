"""Where fine-tuning starts: the encoder's weights and the tokenizer the artifact carried.

``--init`` accepts what ``trainer.pretrained`` reads (the loader pre-training's ``--init`` shares, with the one table of
Hugging Face names in ``trainer.hf_bert``):

- a pre-training run directory (``RUN_DIR``, holding ``checkpoints/latest``), its ``RUN_DIR/checkpoints``
  directory, or one checkpoint ``RUN_DIR/checkpoints/global_stepN``: the weights are consolidated by
  ``trainer.export.load_model`` (any ZeRO stage), the tokenizer is the checkpoint's ``tokenizer.json``
  (the artifact's, byte for byte), the model configuration its ``spanprep_trainer.json``;
- a Hugging Face BERT directory (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``), such as
  ``python -m trainer.export`` writes: the tokenizer is its ``tokenizer.json``, or, for a model without one, a
  WordPiece tokenizer from its ``vocab.txt`` (lower-casing as its ``tokenizer_config.json`` says).
"""

from __future__ import annotations

import os

from trainer.config import CHECKPOINT_TOKENIZER_FILE, ConfigError, ModelConfig
from trainer.export import ExportError, load_model
from trainer.model import SpanBert
from trainer.pretrained import Pretrained, PretrainedError, open_pretrained


class CheckpointError(ValueError):
    """``--init`` is not something fine-tuning can start from; the message says why."""


def load_pretrained(path: str) -> tuple[SpanBert, str, dict]:
    """(encoder in train mode, tokenizer JSON, description of the source)."""
    try:
        source = open_pretrained(path)
    except PretrainedError as e:
        raise CheckpointError(f"--init {e}") from None
    if source.checkpoint is not None:
        return _from_deepspeed(*source.checkpoint)
    return _from_hf(source)


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


def _from_hf(source: Pretrained) -> tuple[SpanBert, str, dict]:
    try:
        cfg = ModelConfig(**{**source.defaults, **source.fixed, "objective": "mlm"})
        state, _, _ = source.state(cfg)
    except (ConfigError, PretrainedError, ValueError) as e:
        raise CheckpointError(f"--init {e}") from None
    model = SpanBert(cfg)
    model.load_state_dict(state, strict=False)  # the encoder is complete (checked); a missing MLM head stays fresh
    info = {"kind": "huggingface", "path": source.path, "max_seq_len": source.fixed["max_position_embeddings"]}
    try:
        tokenizer_json = source.tokenizer.json()
    except PretrainedError as e:
        raise CheckpointError(f"--init {e}") from None
    return model.train(), tokenizer_json, info
