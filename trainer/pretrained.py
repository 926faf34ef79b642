"""Where training starts from: the ``--init PATH`` of ``trainer/pretrain.py`` and ``trainer/finetune.py``.

PATH is

- a Hugging Face BERT directory: ``config.json`` + ``model.safetensors`` or ``pytorch_model.bin`` (names mapped by
  ``trainer.hf_bert``, the one table of them), its tokenizer read as ``transformers.AutoTokenizer`` reads the
  directory (``schemas.tokenizers.hf_directory``, the one reader: ``tokenizer.json`` or ``vocab.txt``, the class and
  casing ``tokenizer_config.json`` gives, added tokens), or refused in one line;
- a spanprep pre-training run: ``RUN_DIR``, ``RUN_DIR/checkpoints`` or one ``RUN_DIR/checkpoints/global_stepN``
  (weights consolidated from any ZeRO stage by ``trainer.export``, tokenizer and model configuration from the
  checkpoint's ``tokenizer.json`` and ``spanprep_trainer.json``).

:func:`open_pretrained` reads only the small files; :meth:`Pretrained.state` reads the weights for a given model
configuration and says which of the model's parameters the checkpoint lacks (initialised fresh) and which of its
tensors the model has no place for. :meth:`CheckpointTokenizer.roles` gives the token of each special role (the
checkpoint's artifact manifest, or the directory's ``special_tokens_map.json`` / ``tokenizer_config.json``, else
a known set of names). :func:`vocabulary_difference` compares a tokenizer with the checkpoint's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

from schemas.tokenizer_json import without_truncation_and_padding
from trainer.config import CHECKPOINT_META_FILE, CHECKPOINT_TOKENIZER_FILE, ModelConfig
from trainer.hf_bert import (
    HFCheckpointError,
    from_hf_state_dict,
    model_fields,
    read_config,
    read_json_object,
    read_weights,
    weights_file,
)

# ModelConfig fields a spanprep checkpoint fixes (its tensors' shapes and the encoder's function).
SPANPREP_FIXED = (
    "vocab_size",
    "hidden_size",
    "num_layers",
    "num_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
)
SPANPREP_DEFAULTS = ("hidden_dropout", "attention_dropout", "initializer_range", "sbo_max_span_positions")


class PretrainedError(ValueError):
    """``--init`` names nothing training can start from, or it does not fit; the message says why."""


@dataclass
class CheckpointTokenizer:
    """A checkpoint's tokenizer: its tokens by id, how it normalizes text, and (:meth:`json`) the tokenizer itself."""

    source: str  # the file(s) it was read from, for messages
    tokens: list[str]
    normalization: dict  # lowercase, strip_accents, tokenize_chinese_chars (or the normalizer's JSON)
    text: str  # its tokenizers JSON
    named_roles: dict[str, str] = field(default_factory=dict)  # role -> token, as the checkpoint's files name them

    def roles(self) -> dict[str, str]:
        """The token of each special role (pad, unk, cls, sep, mask): the ones the checkpoint names (its artifact's
        manifest, or the Hugging Face directory's special_tokens_map.json / tokenizer_config.json), the others from
        the first known set of names the tokenizer has (``schemas.tokenizers.families.special_roles``, the one rule).
        :class:`PretrainedError` in one line when a role has no token in the vocabulary."""
        from tokenizers import Tokenizer

        from schemas.tokenizers.families import TokenizerError, special_roles

        try:
            return special_roles(Tokenizer.from_str(self.json()), self.named_roles)
        except TokenizerError as e:
            raise PretrainedError(f"{self.source}: {e}") from None

    def json(self) -> str:
        """The ``tokenizers`` JSON."""
        return self.text


@dataclass
class Pretrained:
    """What ``--init`` names, with its small files read."""

    path: str
    kind: str  # "huggingface" or "spanprep"
    fixed: dict  # ModelConfig fields the checkpoint fixes (sizes)
    defaults: dict  # ModelConfig fields it only defaults (dropouts, initialisation)
    tokenizer: CheckpointTokenizer
    info: dict = field(default_factory=dict)  # description for logs and RUN_DIR/config.json
    checkpoint: tuple[str, str] | None = None  # spanprep: (checkpoints directory, tag)

    def state(self, cfg: ModelConfig) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
        """(our state dict of what the checkpoint has for ``cfg``'s model, the model's parameters it lacks, the
        checkpoint's tensors the model has no place for). Shapes are checked against ``cfg``."""
        from trainer.model import SpanBert

        with torch.device("meta"):
            expected = {k: v.shape for k, v in SpanBert(cfg).state_dict().items()}
        if self.kind == "huggingface":
            state, unused = from_hf_state_dict(read_weights(self.path), cfg, self.path)
        else:
            from trainer.export import ExportError, consolidated_state_dict

            assert self.checkpoint is not None  # set for every spanprep source
            try:
                state = consolidated_state_dict(*self.checkpoint)
            except ExportError as e:
                raise PretrainedError(str(e)) from None
            unused = sorted(k for k in state if k not in expected)
            state = {k: v.float() for k, v in state.items() if k in expected and k != "mlm_head.decoder.weight"}
        for name, tensor in state.items():
            if tuple(tensor.shape) != tuple(expected[name]):
                sizes = ", ".join(f"{k} {v}" for k, v in self.fixed.items())
                raise PretrainedError(
                    f"{self.path}: {name} has shape {list(tensor.shape)} but its configuration ({sizes}) gives "
                    f"{list(expected[name])}"
                )
        missing = [k for k in expected if k not in state and k != "mlm_head.decoder.weight"]  # the decoder is tied
        return state, missing, unused


def open_pretrained(path: str) -> Pretrained:
    """The checkpoint ``path`` names (see the module docstring), its weights not read yet."""
    if not os.path.isdir(path):
        raise PretrainedError(f"{path}: no such directory")
    if os.path.isfile(os.path.join(path, "config.json")) and weights_file(path):
        return _open_hf(path)
    for ckpt_dir, tag in (
        (os.path.join(path, "checkpoints"), None),
        (path, None),
        (os.path.dirname(os.path.abspath(path)), os.path.basename(os.path.abspath(path))),
    ):
        marker = os.path.join(ckpt_dir, "latest") if tag is None else os.path.join(ckpt_dir, tag, CHECKPOINT_META_FILE)
        if os.path.isfile(marker):
            return _open_spanprep(ckpt_dir, tag)
    raise PretrainedError(
        f"{path}: neither a Hugging Face BERT directory (config.json + model.safetensors or pytorch_model.bin) nor a "
        f"spanprep pre-training run (RUN_DIR with checkpoints/latest, or a checkpoint directory)"
    )


def _open_hf(path: str) -> Pretrained:
    try:
        hf = read_config(path)
    except HFCheckpointError as e:
        raise PretrainedError(str(e)) from None
    fixed, defaults = model_fields(hf)
    if isinstance(hf.get("pad_token_id"), int):  # else the tokenizer's pad role decides (fine-tuning) or the artifact's
        defaults["pad_token_id"] = hf["pad_token_id"]
    info = {"kind": "huggingface", "path": path, "weights": os.path.basename(weights_file(path) or "")}
    info["max_seq_len"] = fixed["max_position_embeddings"]
    return Pretrained(path, "huggingface", fixed, defaults, hf_tokenizer(path), info)


def _open_spanprep(ckpt_dir: str, tag: str | None) -> Pretrained:
    from trainer.export import ExportError, read_meta, resolve_tag

    try:
        tag = resolve_tag(ckpt_dir, tag)
        meta = read_meta(ckpt_dir, tag)
    except ExportError as e:
        raise PretrainedError(str(e)) from None
    where = os.path.join(ckpt_dir, tag)
    model = meta.get("model") or {}
    missing = [k for k in SPANPREP_FIXED if k not in model]
    if missing:
        raise PretrainedError(f"{where}/{CHECKPOINT_META_FILE}: the model configuration lacks {', '.join(missing)}")
    tok_path = os.path.join(where, CHECKPOINT_TOKENIZER_FILE)
    if not os.path.isfile(tok_path):
        raise PretrainedError(f"{tok_path}: missing; the checkpoint does not carry its tokenizer")
    with open(tok_path, encoding="utf-8") as f:
        tokenizer = tokenizer_from_json(f.read(), tok_path)
    named = (meta.get("tokenizer") or {}).get("special_tokens")  # the artifact's manifest: role -> token
    tokenizer.named_roles = {str(k): str(v) for k, v in named.items()} if isinstance(named, dict) else {}
    info = {
        "kind": "spanprep",
        "path": where,
        "step": meta.get("step"),
        "artifact": meta.get("artifact"),
        "tokenizer_sha256": meta.get("tokenizer", {}).get("sha256"),
        "max_seq_len": meta.get("max_seq_len"),
    }
    fixed = {k: model[k] for k in SPANPREP_FIXED}
    defaults = {k: model[k] for k in SPANPREP_DEFAULTS if k in model} | {"pad_token_id": model.get("pad_token_id", 0)}
    return Pretrained(where, "spanprep", fixed, defaults, tokenizer, info, checkpoint=(ckpt_dir, tag))


# -- tokenizers --------------------------------------------------------------------------------------
def _normalization(normalizer: dict | None) -> dict:
    """What a ``tokenizers`` normalizer does to text, in tokenizer_config.json's terms (BertNormalizer), or the
    normalizer itself for any other kind."""
    if not normalizer or normalizer.get("type") != "BertNormalizer":
        return {"normalizer": normalizer}
    lower = bool(normalizer.get("lowercase", True))
    accents = normalizer.get("strip_accents")
    return {
        "lowercase": lower,
        "strip_accents": lower if accents is None else bool(accents),  # None: strip when lower-casing (BERT)
        "tokenize_chinese_chars": bool(normalizer.get("handle_chinese_chars", True)),
    }


def tokenizer_from_json(text: str, source: str) -> CheckpointTokenizer:
    """A ``tokenizers`` JSON -> its tokens by id and its normalization, truncation and padding off (the one rule:
    ``schemas.tokenizer_json``; a hub tokenizer.json often sets them, and fine-tuning would cut every text)."""
    from tokenizers import Tokenizer

    from schemas.tokenizers.rust_calls import guarded  # imports neither Beam nor torch

    text = without_truncation_and_padding(text)

    def refused(message: str) -> PretrainedError:
        return PretrainedError(f"{source}: not a Hugging Face tokenizers JSON file ({message})")

    # tokenizers raises a bare Exception from Rust, or panics (a BaseException): one line either way
    tok = guarded(lambda: Tokenizer.from_str(text), refused)
    normalizer = json.loads(text).get("normalizer")
    # By id, not from get_vocab(): a Unigram's piece list may hold a piece twice (its trainer's <unk>), so the
    # token -> id map has fewer entries than the ids.
    size = tok.get_vocab_size(with_added_tokens=True)
    tokens = [tok.id_to_token(i) for i in range(size)]
    missing = next((i for i, t in enumerate(tokens) if t is None), None)
    beyond = [(t, i) for t, i in tok.get_vocab(with_added_tokens=True).items() if not 0 <= i < size]
    if missing is not None or beyond:
        detail = f"{beyond[0][0]!r} has id {beyond[0][1]}" if beyond else f"no token has id {missing}"
        raise PretrainedError(f"{source}: token ids are not 0..{size - 1} ({detail})")
    return CheckpointTokenizer(source, [str(t) for t in tokens], _normalization(normalizer), text=text)


def _json_object(path: str) -> dict:
    try:
        return read_json_object(path)
    except HFCheckpointError as e:
        raise PretrainedError(str(e)) from None


def hf_tokenizer(path: str) -> CheckpointTokenizer:
    """The tokenizer of a Hugging Face directory, read as ``transformers.AutoTokenizer`` reads it, by the one reader
    of such directories (``schemas.tokenizers.hf_directory.from_directory``: the class the files name, added tokens,
    ``vocab.txt`` lines, the config's casing; what it cannot read as transformers does it refuses in one line), with
    truncation and padding off. One refusal of its own: a ``vocab.txt`` with no ``tokenizer.json`` and neither
    ``do_lower_case`` nor ``tokenizer_class`` in ``tokenizer_config.json`` (transformers lower-cases it after
    config.json's model type, which is wrong for a cased model such as SpanBERT's released one: the user says)."""
    tc_path = os.path.join(path, "tokenizer_config.json")
    tc = _json_object(tc_path) if os.path.isfile(tc_path) else {}
    has_json = os.path.isfile(os.path.join(path, "tokenizer.json"))
    if (
        not has_json
        and os.path.isfile(os.path.join(path, "vocab.txt"))
        and not {"do_lower_case", "tokenizer_class"} & set(tc)
    ):
        raise PretrainedError(
            f"{path}: vocab.txt without a tokenizer.json or a tokenizer_config.json saying do_lower_case: cannot "
            f"tell whether the model lower-cases (transformers would assume it does); write {tc_path} with "
            f'{{"do_lower_case": false}} for a cased model, true for an uncased one'
        )
    from schemas.tokenizers.families import TokenizerError
    from schemas.tokenizers.files import LOCAL
    from schemas.tokenizers.hf_directory import from_directory

    try:
        tok, source, roles = from_directory(path, LOCAL)
    except TokenizerError as e:
        raise PretrainedError(str(e)) from None
    where = os.path.join(path, source) + (f" with {os.path.basename(tc_path)}" if tc else "")
    result = tokenizer_from_json(tok.to_str(), where)
    result.named_roles = dict(roles or {})
    return result


def vocabulary_difference(ours: CheckpointTokenizer, theirs: CheckpointTokenizer) -> str | None:
    """The first difference between two tokenizers (tokens by id, then normalization), or None when they agree."""
    a, b = ours.tokens, theirs.tokens
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return f"token {i} is {a[i]!r} in {ours.source} but {b[i]!r} in {theirs.source}"
    if len(a) != len(b):
        return f"{ours.source} has {len(a)} tokens, {theirs.source} {len(b)}"
    na, nb = ours.normalization, theirs.normalization
    for key in sorted(set(na) | set(nb)):
        if na.get(key) != nb.get(key):
            name = {"lowercase": "lower-casing (do_lower_case)"}.get(key, key)
            return f"{name} is {na.get(key)!r} in {ours.source} but {nb.get(key)!r} in {theirs.source}"
    return None
