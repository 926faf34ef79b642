"""Hugging Face BERT checkpoints <-> our :class:`trainer.model.SpanBert`: the one table of parameter names.

:func:`name_table` is the only place that knows which Hugging Face tensor is which of ours; the exporter
(:func:`to_hf_state_dict`, ``.venv/bin/python -m trainer.export``) and both ``--init`` options (pre-training and fine-tuning,
through ``trainer.pretrained``) read it, one way or the other. A Hugging Face checkpoint is read from a directory
with ``config.json`` and ``model.safetensors`` or ``pytorch_model.bin`` (also sharded, with the ``*.index.json``);
``pytorch_model.bin`` only with ``torch.load(weights_only=True)``, so a pickle that wants to run code is refused.

Accepted weights: ``BertForPreTraining``, ``BertForMaskedLM`` (names prefixed ``bert.``) and ``BertModel`` (no prefix),
and older files whose LayerNorms are named ``gamma``/``beta``. The MLM decoder is tied to the word embeddings as in
BERT: a checkpoint whose ``cls.predictions.decoder.weight`` is another matrix is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import torch

from trainer.config import ConfigError, ModelConfig

# The parts of our model a checkpoint may or may not have; ``encoder`` is required.
PARTS = ("encoder", "mlm_head", "pooler", "nsp_head")
# config.json keys that fix the shapes and the function of the encoder -> our ModelConfig fields.
HF_SIZE_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
}
# config.json keys that are training settings: the checkpoint's value is the default, an option may change it.
HF_DEFAULT_FIELDS = {
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "initializer_range": "initializer_range",
}
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


class HFCheckpointError(ValueError):
    """A Hugging Face directory that is not a BERT checkpoint we can read; the message says what differs."""


def name_table(cfg: ModelConfig) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(part, our name, Hugging Face names) for every tensor of ``cfg``'s model that has a Hugging Face place.

    Hugging Face names are those of ``BertForPreTraining`` / ``BertForMaskedLM``; several names mean the tensors are
    concatenated along dim 0 in that order (our fused ``attn.qkv`` = query, key, value). Our tied
    ``mlm_head.decoder.weight`` is the word embedding and has no entry; the SBO head has no Hugging Face place.
    The pooler is ours only inside the NSP head (``nsp_head.pooler``).
    """
    for name in ("word_embeddings", "position_embeddings") + (
        ("token_type_embeddings",) if cfg.type_vocab_size else ()
    ):
        yield "encoder", f"embeddings.{name}.weight", (f"bert.embeddings.{name}.weight",)
    for p in ("weight", "bias"):
        yield "encoder", f"embeddings.LayerNorm.{p}", (f"bert.embeddings.LayerNorm.{p}",)
    for i in range(cfg.num_layers):
        src, hf = f"layers.{i}.", f"bert.encoder.layer.{i}."
        for p in ("weight", "bias"):
            yield (
                "encoder",
                src + f"attn.qkv.{p}",
                tuple(hf + f"attention.self.{m}.{p}" for m in ("query", "key", "value")),
            )
            yield "encoder", src + f"attn.proj.{p}", (hf + f"attention.output.dense.{p}",)
            yield "encoder", src + f"ln1.{p}", (hf + f"attention.output.LayerNorm.{p}",)
            yield "encoder", src + f"fc1.{p}", (hf + f"intermediate.dense.{p}",)
            yield "encoder", src + f"fc2.{p}", (hf + f"output.dense.{p}",)
            yield "encoder", src + f"ln2.{p}", (hf + f"output.LayerNorm.{p}",)
    for p in ("weight", "bias"):
        yield "mlm_head", f"mlm_head.transform.dense.{p}", (f"cls.predictions.transform.dense.{p}",)
        yield "mlm_head", f"mlm_head.transform.LayerNorm.{p}", (f"cls.predictions.transform.LayerNorm.{p}",)
    yield "mlm_head", "mlm_head.decoder.bias", ("cls.predictions.bias",)
    if cfg.nsp:
        for p in ("weight", "bias"):
            yield "pooler", f"nsp_head.pooler.{p}", (f"bert.pooler.dense.{p}",)
            yield "nsp_head", f"nsp_head.seq_relationship.{p}", (f"cls.seq_relationship.{p}",)


def to_hf_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our parameter names -> Hugging Face ``BertForMaskedLM``'s (``BertForPreTraining``'s with NSP), fp32.

    Without token types (``type_vocab_size`` 0) the export gets all-zero token type embeddings: they add nothing,
    and pairs can still be fine-tuned. The decoder weight is tied to the word embeddings, as Hugging Face saves it.
    """
    out: dict[str, torch.Tensor] = {}
    for _, ours, names in name_table(cfg):
        tensor = state[ours].detach().to(torch.float32)
        for name, piece in zip(names, tensor.split(tensor.size(0) // len(names), dim=0)):
            out[name] = piece.contiguous().clone()
    if not cfg.type_vocab_size:
        out["bert.embeddings.token_type_embeddings.weight"] = torch.zeros(2, cfg.hidden_size)
    return out


def normalize_hf_names(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``BertModel``'s unprefixed names get ``bert.``; old ``LayerNorm.gamma``/``beta`` become ``weight``/``bias``."""
    bare = not any(k.startswith("bert.") for k in hf)
    out = {}
    for key, tensor in hf.items():
        if key.endswith(".gamma"):
            key = key[: -len("gamma")] + "weight"
        elif key.endswith(".beta"):
            key = key[: -len("beta")] + "bias"
        if bare and key.startswith(("embeddings.", "encoder.", "pooler.")):
            key = "bert." + key
        out[key] = tensor
    return out


def from_hf_state_dict(
    hf: dict[str, torch.Tensor], cfg: ModelConfig, source: str
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Hugging Face tensors (any accepted naming) -> (our state dict of what the checkpoint has, its unused names).

    The encoder must be complete; the MLM head, the pooler and the NSP classifier are taken when ``cfg``'s model has
    them and the checkpoint too (a part is taken whole or not at all). Missing encoder tensors, a head present only in
    part and an untied decoder are :class:`HFCheckpointError`s naming ``source``.
    """
    hf = normalize_hf_names(hf)
    by_part: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for part, ours, names in name_table(cfg):
        by_part.setdefault(part, []).append((ours, names))
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for part, entries in by_part.items():
        wanted = [n for _, names in entries for n in names]
        have = [n for n in wanted if n in hf]
        if part == "mlm_head" and "cls.predictions.bias" not in hf and "cls.predictions.decoder.bias" in hf:
            hf["cls.predictions.bias"] = hf["cls.predictions.decoder.bias"]  # older files name the bias there
            have = [n for n in wanted if n in hf]
        if not have and part != "encoder":
            continue
        if len(have) != len(wanted):
            missing = [n for n in wanted if n not in hf]
            raise HFCheckpointError(
                f"{source}: the weights lack {missing[0]}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                + f"; a BERT checkpoint with {cfg.num_layers} layers has it"
            )
        for ours, names in entries:
            shapes = [list(hf[n].shape) for n in names]
            if len(names) > 1 and any(shape != shapes[0] for shape in shapes):  # query, key, value: one shape
                odd = next(i for i, shape in enumerate(shapes) if shape != shapes[0])
                raise HFCheckpointError(
                    f"{source}: {names[odd]} has shape {shapes[odd]} but {names[0]} {shapes[0]}; "
                    f"{', '.join(n.rsplit('.', 2)[-2] for n in names)} must have one shape"
                )
            out[ours] = torch.cat([hf[n].float() for n in names]) if len(names) > 1 else hf[names[0]].float()
        used.update(wanted)
    decoder = hf.get("cls.predictions.decoder.weight")
    if decoder is not None and "mlm_head.decoder.bias" in out:
        if not torch.equal(decoder.float(), out["embeddings.word_embeddings.weight"]):
            raise HFCheckpointError(
                f"{source}: cls.predictions.decoder.weight is not the word embedding matrix (an untied MLM decoder); "
                f"spanprep ties them as BERT does"
            )
    if "mlm_head.decoder.bias" in out:  # the tied decoder's copies in files that keep them
        used.update({"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"})
    unused = sorted(k for k in hf if k not in used and not k.endswith("position_ids"))
    return out, unused


def hf_config(cfg: ModelConfig) -> dict:
    """The ``config.json`` of our model as a Hugging Face ``BertConfig`` (the inverse of :func:`model_fields`)."""
    out: dict = {"architectures": ["BertForPreTraining" if cfg.nsp else "BertForMaskedLM"], "model_type": "bert"}
    for hf, ours in {**HF_SIZE_FIELDS, **HF_DEFAULT_FIELDS}.items():
        out[hf] = getattr(cfg, ours)
    out.update(
        type_vocab_size=cfg.type_vocab_size or 2,
        hidden_act="gelu",
        pad_token_id=cfg.pad_token_id,
        tie_word_embeddings=True,
        is_decoder=False,
        dtype="float32",
    )
    return out


def read_json_object(path: str) -> dict:
    """A Hugging Face directory's JSON file that must hold an object; :class:`HFCheckpointError` in one line naming
    the file when it cannot be read or holds something else."""
    try:
        with open(path, encoding="utf-8") as f:
            loaded = json.load(f)
    except (OSError, ValueError) as e:
        raise HFCheckpointError(f"{path}: cannot read it ({str(e).splitlines()[0]})") from None
    if not isinstance(loaded, dict):
        raise HFCheckpointError(f"{path}: not a JSON object")
    return loaded


def read_config(path: str) -> dict:
    """``path/config.json`` of a BERT checkpoint; another architecture is refused naming what it is."""
    cfg_path = os.path.join(path, "config.json")
    hf = read_json_object(cfg_path)
    model_type, archs = hf.get("model_type"), hf.get("architectures") or []
    # Old BERT exports (SpanBERT's among them) have no model_type; their architectures, if any, say Bert.
    if model_type not in (None, "bert") or not all(str(a).startswith("Bert") for a in archs):
        raise HFCheckpointError(
            f"{cfg_path}: model_type {model_type!r} (architectures {', '.join(map(str, archs)) or 'not given'}) is "
            f"not BERT; spanprep reads BERT checkpoints (model_type 'bert': BertForPreTraining, BertForMaskedLM, BertModel)"
        )
    for key, want in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):
        if hf.get(key, want) != want:
            raise HFCheckpointError(f"{cfg_path}: {key} is {hf[key]!r}; spanprep's BERT has {want!r}")
    missing = [k for k in HF_SIZE_FIELDS if k not in hf and k not in ("type_vocab_size", "layer_norm_eps")]
    if missing:
        raise HFCheckpointError(f"{cfg_path}: lacks {', '.join(missing)}")
    for key in (*HF_SIZE_FIELDS, *HF_DEFAULT_FIELDS):
        value = hf.get(key)
        whole = key in HF_SIZE_FIELDS and key != "layer_norm_eps"
        if value is None or (isinstance(value, int if whole else (int, float)) and not isinstance(value, bool)):
            continue
        raise HFCheckpointError(
            f"{cfg_path}: {key} is {json.dumps(value)}, not {'a whole number' if whole else 'a number'}"
        )
    return hf


def model_fields(hf: dict) -> tuple[dict, dict]:
    """(the ModelConfig fields config.json fixes, the ones it only defaults) from a :func:`read_config` dict."""
    fixed = {ours: hf[key] for key, ours in HF_SIZE_FIELDS.items() if key in hf}
    fixed.setdefault("type_vocab_size", 2)
    fixed.setdefault("layer_norm_eps", 1e-12)
    defaults = {ours: hf[key] for key, ours in HF_DEFAULT_FIELDS.items() if hf.get(key) is not None}
    return fixed, defaults


def weights_file(path: str) -> str | None:
    """The weights file of a Hugging Face directory (safetensors first, as transformers), or None."""
    return next((os.path.join(path, n) for n in WEIGHT_FILES if os.path.isfile(os.path.join(path, n))), None)


def read_weights(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face directory's weights (see :func:`weights_file`), on the CPU."""
    file = weights_file(path)
    if file is None:
        raise HFCheckpointError(f"{path}: no weights ({', '.join(WEIGHT_FILES)})")
    if file.endswith(".index.json"):
        out: dict[str, torch.Tensor] = {}
        for shard in _index_files(file):
            out.update(_read_file(os.path.join(path, shard)))
        return out
    return _read_file(file)


def _index_files(file: str) -> list[str]:
    """The weight files a sharded checkpoint's ``*.index.json`` names in its ``weight_map`` (tensor -> file name):
    names of files in the index's own directory; anything else is an :class:`HFCheckpointError` naming the index."""
    weight_map = read_json_object(file).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise HFCheckpointError(f"{file}: not a weight index (no weight_map object of tensor names -> file names)")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str):
            raise HFCheckpointError(f"{file}: weight_map[{tensor!r}] is {json.dumps(shard)}, not a file name")
        norm = os.path.normpath(shard) if shard else ""
        if not shard or os.path.isabs(shard) or norm in (os.curdir, os.pardir) or norm.startswith(os.pardir + os.sep):
            raise HFCheckpointError(
                f"{file}: weight_map[{tensor!r}] names {shard!r}, not a file of the checkpoint's directory; an index "
                f"names the weight files next to it"
            )
    return sorted(set(weight_map.values()))


def _read_file(file: str) -> dict[str, torch.Tensor]:
    """The tensors of one weights file, every one finite (``checkpoint_files.check_finite``)."""
    from trainer.engine.checkpoint_files import NonFiniteWeightsError, check_finite

    state = _read_tensors(file)
    try:
        check_finite(state, file)
    except NonFiniteWeightsError as e:
        raise HFCheckpointError(str(e)) from None
    return state


def _read_tensors(file: str) -> dict[str, torch.Tensor]:
    if file.endswith(".safetensors"):
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ConfigError("reading model.safetensors needs safetensors: pip install 'spanprep[hf]'") from None
        try:
            return load_file(file)
        except Exception as e:  # safetensors raises its own SafetensorError (not an OSError) on a damaged file
            raise HFCheckpointError(f"{file}: cannot read it ({str(e).splitlines()[0]})") from None
    from trainer.engine.checkpoint_files import UntrustedCheckpointError, load_tensors

    try:
        state = load_tensors(file)  # torch.load(weights_only=True): refuses a pickle that would run code
    except UntrustedCheckpointError as e:
        raise HFCheckpointError(str(e)) from None
    except (RuntimeError, EOFError) as e:
        raise HFCheckpointError(f"{file}: cannot read it ({str(e).splitlines()[0]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HFCheckpointError(f"{file}: not a state dict of tensors")
    return state
