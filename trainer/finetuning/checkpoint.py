"""Where fine-tuning starts: the encoder's weights and the tokenizer the artifact carried.

``--init`` accepts what ``trainer.pretrained`` reads (the loader pre-training's ``--init`` shares, with the one table of
Hugging Face names in ``trainer.hf_bert``):

- a pre-training run directory (``RUN_DIR``, holding ``checkpoints/latest``), its ``RUN_DIR/checkpoints``
  directory, or one checkpoint ``RUN_DIR/checkpoints/global_stepN``: the weights are consolidated by
  ``trainer.export.load_model`` (any ZeRO stage), the tokenizer is the checkpoint's ``tokenizer.json``
  (the artifact's, byte for byte), the model configuration its ``spanprep_trainer.json``;
- a Hugging Face BERT directory (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``), such as
  ``.venv/bin/python -m trainer.export`` writes: the tokenizer is its ``tokenizer.json``, or, for a model without one, a
  WordPiece tokenizer from its ``vocab.txt`` (lower-casing as its ``tokenizer_config.json`` says).

The special tokens are read by role (``CheckpointTokenizer.roles``): the checkpoint's artifact manifest names them,
or the directory's ``special_tokens_map.json`` / ``tokenizer_config.json``, or BERT's names for a ``vocab.txt``; a
role without a token is a one-line :class:`CheckpointError`.
"""

from __future__ import annotations

import os

from tokenizers import Tokenizer

from trainer.config import ConfigError, ModelConfig
from trainer.export import ExportError, load_model
from trainer.finetuning.encoding import ModelTokenizer
from trainer.model import SpanBert
from trainer.pretrained import Pretrained, PretrainedError, open_pretrained


class CheckpointError(ValueError):
    """``--init`` is not something fine-tuning can start from; the message says why."""


def load_pretrained(path: str) -> tuple[SpanBert, ModelTokenizer, dict]:
    """(encoder in train mode, its tokenizer with the special roles' ids, description of the source)."""
    try:
        source = open_pretrained(path)
        roles = source.tokenizer.roles()
        tokenizer = ModelTokenizer.of(Tokenizer.from_str(source.tokenizer.json()), roles)
    except (PretrainedError, ValueError) as e:
        raise CheckpointError(f"--init {e}") from None
    if source.checkpoint is not None:
        model, info = _from_deepspeed(*source.checkpoint)
    else:
        model, info = _from_hf(source, tokenizer)
    return model, tokenizer, {**info, "special_tokens": roles}


def _from_deepspeed(ckpt_dir: str, tag: str) -> tuple[SpanBert, dict]:
    try:
        model, meta = load_model(ckpt_dir, tag)
    except (ExportError, ConfigError) as e:
        raise CheckpointError(f"--init: {e}") from None
    info = {
        "kind": "deepspeed_checkpoint",
        "path": os.path.join(ckpt_dir, tag),
        "step": meta.get("step"),
        "artifact": meta.get("artifact"),
        "tokenizer_sha256": meta.get("tokenizer", {}).get("sha256"),
        "max_seq_len": meta.get("max_seq_len"),
    }
    return model.train(), info


def _from_hf(source: Pretrained, tokenizer: ModelTokenizer) -> tuple[SpanBert, dict]:
    # A config.json without pad_token_id: the tokenizer's pad role (the embedding's padding index), not 0.
    pad = {} if "pad_token_id" in source.defaults else {"pad_token_id": tokenizer.pad_id}
    try:
        cfg = ModelConfig(**{**source.defaults, **pad, **source.fixed, "objective": "mlm"})
        state, _, _ = source.state(cfg)
    except (ConfigError, PretrainedError, ValueError) as e:
        raise CheckpointError(f"--init {e}") from None
    model = SpanBert(cfg)
    model.load_state_dict(state, strict=False)  # the encoder is complete (checked); a missing MLM head stays fresh
    info = {"kind": "huggingface", "path": source.path, "max_seq_len": source.fixed["max_position_embeddings"]}
    return model.train(), info
