"""``pretrain.py --init PATH``: continued pre-training from a Hugging Face BERT or a spanprep checkpoint.

In ``setup.prepare``, before any process group exists: :func:`open_init` reads the checkpoint's configuration (its
sizes replace ``--preset``; a size option that disagrees is an error) and tokenizer; :func:`check_init_fits_artifact`
refuses an artifact whose tokenizer is not the checkpoint's (token for token, and lower-casing, accent stripping and
CJK splitting), whose vocabulary is not the embedding matrix's size, or whose rows are longer than the position
embeddings; :func:`load_init` reads the weights (skipped when ``--resume`` finds a checkpoint of the run itself).
In ``loop.Trainer.build``: :meth:`InitWeights.apply` loads them into the freshly initialised model, so what the
checkpoint lacks (the SBO head; the NSP classifier of a model that never had one) keeps its fresh initialisation.
The optimizer and the schedule always start fresh.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.config import PRESETS, ConfigError, ModelConfig
from trainer.pretrained import (
    Pretrained,
    PretrainedError,
    open_pretrained,
    tokenizer_from_json,
    vocabulary_difference,
)


@dataclass
class InitWeights:
    """The weights ``--init`` gives the model, in our names, and what the model has beyond them."""

    path: str
    kind: str
    state: dict[str, torch.Tensor]
    new: list[str]  # the model's parameters the checkpoint lacks: initialised fresh
    unused: list[str]  # the checkpoint's tensors this model has no place for
    loaded: int = 0  # tensors the checkpoint gives (len(state) before apply releases it)

    def __post_init__(self) -> None:
        self.loaded = self.loaded or len(self.state)

    def apply(self, model: torch.nn.Module) -> None:
        """Copy the weights into ``model`` (built with the run's seed; the decoder stays tied to the embeddings), then
        release them: the model holds the only copy from here on."""
        result = model.load_state_dict(self.state, strict=False)
        self.state = {}
        left = sorted(set(result.missing_keys) - set(self.new) - {"mlm_head.decoder.weight"})
        if left or result.unexpected_keys:  # load_init checked the names against this configuration
            raise RuntimeError(
                f"--init {self.path}: the weights do not fit the model ({left[:3]}, {result.unexpected_keys[:3]})"
            )

    def describe(self) -> str:
        loaded = f"--init: loaded {self.loaded} tensors from {self.path} ({self.kind})"
        new = f"new (initialised fresh): {', '.join(self.new) if self.new else 'none'}"
        unused = f"not used: {', '.join(self.unused)}" if self.unused else ""
        return "; ".join(p for p in (loaded, new, unused) if p)

    def summary(self) -> dict:
        return {"path": self.path, "kind": self.kind, "loaded": self.loaded, "new": self.new, "unused": self.unused}


def open_init(path: str, model_given: dict, preset: str | None) -> Pretrained:
    """The checkpoint's small files; a ``--preset`` or size option that disagrees with it is a :class:`ConfigError`."""
    try:
        init = open_pretrained(path)
    except PretrainedError as e:
        raise ConfigError(f"--init {e}") from None
    source = "config.json" if init.kind == "huggingface" else "spanprep_trainer.json"
    for key, value in model_given.items():
        if key in init.fixed and init.fixed[key] != value:
            raise ConfigError(
                f"--{key.replace('_', '-')} {value} conflicts with --init {path}: its {source} has {key} {init.fixed[key]}"
            )
    if preset is not None:
        differ = [f"{k} {v} vs {init.fixed[k]}" for k, v in PRESETS[preset].items() if init.fixed.get(k) != v]
        if differ:
            raise ConfigError(
                f"--preset {preset} conflicts with --init {path} ({', '.join(differ)} in its {source}); "
                f"drop --preset: the sizes come from the checkpoint"
            )
    return init


def init_model_config(init: Pretrained, model_given: dict, fixed_by_artifact: dict) -> ModelConfig:
    """The run's model: the checkpoint's sizes, its other settings unless an option changes them, the artifact's ids."""
    values = {**init.defaults, **model_given, **init.fixed}
    values["pad_token_id"] = fixed_by_artifact["pad_token_id"]
    try:
        return ModelConfig(**values)
    except ConfigError as e:
        raise ConfigError(f"--init {init.path}: {e}") from None


def check_init_fits_artifact(init: Pretrained, artifact, max_seq_len: int) -> None:
    """The artifact's tokenizer must be the checkpoint's (the same tokens, and the same token in each special role the
    checkpoint names), its vocabulary the embedding matrix's rows, and its rows no longer than the position
    embeddings; otherwise a :class:`ConfigError` naming the first difference."""
    ours = tokenizer_from_json(artifact.tokenizer_json(), artifact.display(artifact.manifest["tokenizer"]["file"]))
    diff = vocabulary_difference(ours, init.tokenizer)
    if diff is not None:
        raise ConfigError(
            f"--init {init.path}: the artifact's tokenizer is not the checkpoint's: {diff}; build the artifact with "
            f"the checkpoint's tokenizer (build_shards --tokenizer-from HF_DIR, or --tokenizer with its tokenizer.json)"
        )
    roles = artifact.manifest["tokenizer"].get("special_tokens") or {}
    differ = [
        f"{r} {t!r} (the artifact's: {roles[r]!r})"
        for r, t in init.tokenizer.named_roles.items()
        if roles.get(r, t) != t
    ]
    if differ:
        raise ConfigError(
            f"--init {init.path}: the checkpoint names other special tokens than the artifact: {', '.join(differ)}; "
            f"build the artifact with build_shards --tokenizer-from HF_DIR (it reads the roles the directory names)"
        )
    rows = init.fixed["vocab_size"]
    if rows != artifact.vocab_size:
        raise ConfigError(
            f"--init {init.path}: its embedding matrix has {rows} rows (vocab_size) but the artifact's tokenizer "
            f"{artifact.vocab_size} tokens; the vocabulary size must be the embedding matrix's"
        )
    positions = init.fixed["max_position_embeddings"]
    if positions < max_seq_len:
        raise ConfigError(
            f"--init {init.path}: {positions} position embeddings (max_position_embeddings) are fewer than the "
            f"sequence length {max_seq_len} (--max-seq-len, default: the max_seq_len of {artifact.uri})"
        )


def load_init(init: Pretrained, model: ModelConfig) -> InitWeights:
    """Read the checkpoint's weights for ``model`` (shapes checked); a :class:`ConfigError` when they do not fit."""
    try:
        state, new, unused = init.state(model)
    except (PretrainedError, ValueError) as e:
        message = str(e)
        raise ConfigError(message if message.startswith("--init") else f"--init {message}") from None
    return InitWeights(init.path, init.kind, state, new, unused)
