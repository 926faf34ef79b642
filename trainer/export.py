"""Export a trainer checkpoint to Hugging Face format.

    .venv/bin/python -m trainer.export RUN_DIR/checkpoints --out DIR [--tag global_step5000]
    .venv/bin/python -m trainer.export RUN_DIR/checkpoints --out s3://bucket/models/x   (or gs://: written locally, then uploaded)

CHECKPOINT_DIR is the DeepSpeed checkpoint directory (the one holding ``latest``); any ZeRO stage works
because the weights are consolidated with DeepSpeed's ``get_fp32_state_dict_from_zero_checkpoint``.
DIR receives what ``transformers.BertForMaskedLM.from_pretrained(DIR)`` and
``transformers.AutoTokenizer.from_pretrained(DIR)`` load:

    config.json             BertConfig (architectures: BertForMaskedLM)
    model.safetensors       encoder + MLM head in Hugging Face's names (the decoder is tied, as HF saves it)
    tokenizer.json          the artifact's tokenizer, byte for byte (truncation and padding off, as it has them);
                            one without a post-processor gets one that adds cls/sep as the trainer's inputs had them
    tokenizer_config.json   BertTokenizer, lower-casing and accents as the artifact's tokenizer, model_max_length
    vocab.txt               the vocabulary (WordPieces, BPE tokens, Unigram pieces) in id order
    special_tokens_map.json

The SBO head is a pre-training device and is not exported (BertForMaskedLM has no place for it). A model
trained with NSP (``--nsp``) exports as ``BertForPreTraining`` (architectures in config.json): the same files
plus ``bert.pooler`` and ``cls.seq_relationship``, so ``transformers.BertForPreTraining.from_pretrained(DIR)``
gives both the MLM and the next sentence logits (``BertForMaskedLM`` still loads it, without the pooler).
The Hugging Face names come from ``trainer.hf_bert``, the table both ``--init`` options read too. Needs the ``hf`` extra's ``safetensors`` (and DeepSpeed's consolidation needs ``huggingface_hub``);
``transformers`` itself is not needed to export.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import sys
import tempfile

import pyarrow as pa
import torch

from schemas import commands
from schemas.format import split_uri
from schemas.tokenizer_json import without_truncation_and_padding
from trainer.config import CHECKPOINT_META_FILE, CHECKPOINT_TOKENIZER_FILE, ConfigError, ModelConfig
from trainer.engine.checkpoint_files import NonFiniteWeightsError, UntrustedCheckpointError, check_finite, load_tensors
from trainer.hf_bert import hf_config, to_hf_state_dict  # the one table of Hugging Face names
from trainer.model import SpanBert


class ExportError(RuntimeError):
    """The checkpoint cannot be exported; the message says why."""


def resolve_tag(checkpoint_dir: str, tag: str | None = None) -> str:
    if not os.path.isdir(checkpoint_dir):
        raise ExportError(f"{checkpoint_dir}: checkpoint directory does not exist")
    if tag is None:
        latest = os.path.join(checkpoint_dir, "latest")
        if not os.path.isfile(latest):
            raise ExportError(
                f"{checkpoint_dir}: no 'latest' file; pass the DeepSpeed checkpoint directory "
                f"(RUN_DIR/checkpoints) or name a checkpoint with --tag"
            )
        with open(latest, "rb") as f:
            tag = f.read(4096).decode("utf-8", errors="replace").strip()
        if not tag:  # a save interrupted between DeepSpeed's open and write of it
            raise ExportError(
                f"{latest}: empty; name the checkpoint to export with --tag "
                f"(the directories: {', '.join(sorted(os.listdir(checkpoint_dir))[-4:])})"
            )
    if not tag or os.sep in tag or tag in (".", "..") or not os.path.isdir(os.path.join(checkpoint_dir, tag)):
        raise ExportError(f"{checkpoint_dir}/{tag}: checkpoint does not exist")
    return tag


def read_meta(checkpoint_dir: str, tag: str) -> dict:
    """The trainer's description of a checkpoint: model config, tokenizer summary, step."""
    path = os.path.join(checkpoint_dir, tag, CHECKPOINT_META_FILE)
    if not os.path.isfile(path):
        raise ExportError(f"{path}: missing; this checkpoint was not written by trainer/pretrain.py")
    with open(path) as f:
        return json.load(f)


def consolidated_state_dict(checkpoint_dir: str, tag: str) -> dict[str, torch.Tensor]:
    """fp32 weights of the whole model from the (possibly partitioned) DeepSpeed checkpoint; an :class:`ExportError`
    naming the checkpoint and the tensor when one holds NaN or infinity (``checkpoint_files.check_finite``)."""
    tag_dir = os.path.join(checkpoint_dir, tag)
    if not glob.glob(os.path.join(tag_dir, "*zero_pp_rank_*optim_states.pt")):
        # ZeRO stage 0: the full module is in the model-states file.
        source = os.path.join(tag_dir, "mp_rank_00_model_states.pt")
        try:
            states = load_tensors(source)
        except UntrustedCheckpointError as e:
            raise ExportError(str(e)) from None
        state = {k: v.float() for k, v in states["module"].items()}
    else:
        from deepspeed.utils import zero_to_fp32

        source = tag_dir
        with contextlib.redirect_stdout(io.StringIO()), contextlib.ExitStack() as stack:  # it prints progress lines
            if not sys.stderr.isatty():  # and its tqdm bars: a line of carriage returns in a log
                stack.callback(setattr, zero_to_fp32, "tqdm", zero_to_fp32.tqdm)
                zero_to_fp32.tqdm = lambda iterable, **_: iterable
            state = zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=tag)
    try:
        check_finite(state, source)
    except NonFiniteWeightsError as e:
        raise ExportError(str(e)) from None
    return state


def load_model(checkpoint_dir: str, tag: str | None = None) -> tuple[SpanBert, dict]:
    """Our model with the checkpoint's fp32 weights, in eval mode, and the checkpoint's meta."""
    tag = resolve_tag(checkpoint_dir, tag)
    meta = read_meta(checkpoint_dir, tag)
    model = SpanBert(ModelConfig(**meta["model"]))
    state = consolidated_state_dict(checkpoint_dir, tag)
    if "mlm_head.decoder.weight" not in state:  # tied: one tensor, two names
        state["mlm_head.decoder.weight"] = state["embeddings.word_embeddings.weight"]
    model.load_state_dict(state, strict=True)
    return model.eval(), meta


def _tokenizer_class(tokenizer_json: str, tokenizer_meta: dict) -> dict:
    """The class AutoTokenizer builds and its settings. transformers rebuilds BertTokenizer's normalizer from
    ``do_lower_case``, ``strip_accents`` and ``tokenize_chinese_chars`` (defaults: lower-case, strip accents when
    lower-casing), whatever tokenizer.json holds: all three are written as the tokenizer's BertNormalizer has them.
    A tokenizer without a BertNormalizer is loaded as is (PreTrainedTokenizerFast)."""
    norm = json.loads(tokenizer_json).get("normalizer") or {}
    if norm.get("type") != "BertNormalizer":
        return {"tokenizer_class": "PreTrainedTokenizerFast"}
    return {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": bool(norm.get("lowercase", tokenizer_meta.get("lowercase", False))),
        "strip_accents": norm.get("strip_accents"),
        "tokenize_chinese_chars": bool(norm.get("handle_chinese_chars", True)),
    }


def with_the_trainers_wrapping(tokenizer_json: str, tokenizer_meta: dict) -> str:
    """``tokenizer_json`` with a post-processor that adds the special tokens as the trainer's inputs had them, when it
    has none: ``cls A sep`` and, for pairs, ``cls A sep B sep`` with type ids 0 and 1 (trainer/masking/collate.py,
    trainer/data/segments.py). Without one (a SentencePiece-style Unigram, a BPE trained without it), the export
    encoded text with no ``cls``/``sep`` at all, which the model never saw. A tokenizer with a post-processor is
    kept byte for byte."""
    data = json.loads(tokenizer_json)
    if data.get("post_processor") is not None:
        return tokenizer_json
    from tokenizers import processors

    cls, sep = (tokenizer_meta["special_tokens"][role] for role in ("cls", "sep"))
    ids = tokenizer_meta["special_token_ids"]
    if any(not token or token.split() != [token] for token in (cls, sep)):
        raise ExportError(f"cannot write a post-processor for the special tokens {cls!r} / {sep!r} (whitespace)")
    template = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, int(ids["cls"])), (sep, int(ids["sep"]))],
    )
    # into the JSON as it is (a round trip through Tokenizer would rewrite a Unigram's scores in another precision)
    data["post_processor"] = json.loads(template.__getstate__())
    return json.dumps(data, ensure_ascii=False)


def write_tokenizer_files(tokenizer_json: str, tokenizer_meta: dict, max_seq_len: int, out: str) -> None:
    """tokenizer.json as trained (truncation and padding off: ``schemas.tokenizer_json``; with the trainer's
    wrapping when it has no post-processor), plus the files BertTokenizer / AutoTokenizer expect next to it."""
    tokenizer_json = with_the_trainers_wrapping(without_truncation_and_padding(tokenizer_json), tokenizer_meta)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tokenizer_json)
    vocab = json.loads(tokenizer_json)["model"]["vocab"]
    if isinstance(vocab, list):  # Unigram: [piece, score] in id order (a piece may repeat: the trainer's <unk>)
        by_id = [(entry[0], i) for i, entry in enumerate(vocab)]
    else:
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ExportError("the tokenizer's vocabulary ids are not 0..N-1 without gaps; cannot write vocab.txt")
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token, _ in by_id)
    special = tokenizer_meta["special_tokens"]
    special_map = {f"{k}_token": special[k] for k in ("unk", "sep", "pad", "cls", "mask")}
    with open(os.path.join(out, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(special_map, f, indent=2, sort_keys=True)
    tokenizer_config = {
        **_tokenizer_class(tokenizer_json, tokenizer_meta),
        "model_max_length": max_seq_len,
        "clean_up_tokenization_spaces": False,
        **special_map,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f, indent=2, sort_keys=True)


def upload_directory(local: str, uri: str) -> list[str]:
    """Copy every file of the flat directory ``local`` to ``uri`` (gs://, s3://, ...); returns the names."""
    fs, root = split_uri(uri)
    names = sorted(n for n in os.listdir(local) if os.path.isfile(os.path.join(local, n)))
    for name in names:
        with open(os.path.join(local, name), "rb") as src, fs.open_output_stream(f"{root.rstrip('/')}/{name}") as dst:
            while chunk := src.read(1 << 24):
                dst.write(chunk)
    return names


def export(checkpoint_dir: str, out: str, tag: str | None = None) -> dict:
    """Write the Hugging Face files for one checkpoint to a directory or a bucket URI; returns a short summary."""
    if "://" in out:  # object stores have no directories to write into: export locally, then upload each file
        with tempfile.TemporaryDirectory(prefix="spanprep-export-") as local:
            summary = export(checkpoint_dir, local, tag)
            try:
                upload_directory(local, out)
            except (OSError, pa.ArrowException) as e:
                raise ExportError(f"{out}: cannot write the export there ({str(e).splitlines()[0]})") from None
        return {**summary, "out": out}
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise ExportError("export needs safetensors: pip install 'spanprep[hf]'") from None
    tag = resolve_tag(checkpoint_dir, tag)
    meta = read_meta(checkpoint_dir, tag)
    cfg = ModelConfig(**meta["model"])
    tokenizer_path = os.path.join(checkpoint_dir, tag, CHECKPOINT_TOKENIZER_FILE)
    if not os.path.isfile(tokenizer_path):
        raise ExportError(f"{tokenizer_path}: missing; the checkpoint does not carry its tokenizer")
    state = consolidated_state_dict(checkpoint_dir, tag)
    hf_state = to_hf_state_dict(state, cfg)
    os.makedirs(out, exist_ok=True)
    save_file(hf_state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    # safetensors writes through a private temporary file (mode 0600); the export's files share open()'s mode
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(os.path.join(out, "model.safetensors"), 0o666 & ~umask)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(cfg), f, indent=2, sort_keys=True)
    with open(tokenizer_path, encoding="utf-8") as f:
        tokenizer_json = f.read()
    write_tokenizer_files(
        tokenizer_json, meta["tokenizer"], int(meta.get("max_seq_len", cfg.max_position_embeddings)), out
    )
    return {"tag": tag, "step": meta.get("step"), "parameters": sum(t.numel() for t in hf_state.values()), "out": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=commands.module("trainer.export"), description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkpoint_dir", help="DeepSpeed checkpoint directory (holds 'latest'), e.g. RUN_DIR/checkpoints"
    )
    parser.add_argument(
        "--out", required=True, help="output directory (or gs:// / s3:// URI) for the Hugging Face files"
    )
    parser.add_argument("--tag", default=None, help="checkpoint to export (default: the one 'latest' names)")
    args = parser.parse_args(argv)
    try:
        summary = export(args.checkpoint_dir, args.out, args.tag)
    except (ExportError, ConfigError) as e:
        print(f"export: error: {e}", file=sys.stderr)
        return 2
    print(
        f"exported {args.checkpoint_dir}/{summary['tag']} (step {summary['step']}, "
        f"{summary['parameters']:,} parameters) to {summary['out']}"
    )
    return 0


if __name__ == "__main__":
    from schemas.quick_exit import quick_exit

    quick_exit(main())
