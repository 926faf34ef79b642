"""From the parsed command line to a checked :class:`TrainSetup`, before any process group exists.

In: the ``argparse`` namespace of ``trainer/pretrain.py``. Out: every config resolved and cross-checked (model
against the artifact's tokenizer, sequence length, DeepSpeed JSON, resume compatibility, the loaders indexed), or
one of ``SETUP_ERRORS`` with a one-line message. ``write_resolved_config`` records the result in ``RUN_DIR/config.json``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from schemas.artifact import Artifact
from schemas.format import SPECIAL_TOKENS
from trainer.config import (
    CHECKPOINT_META_FILE,
    ConfigError,
    ModelConfig,
    OptimConfig,
    RunConfig,
    dataclass_from_args,
    dumps,
    given_fields,
    resolve_schedule,
    to_jsonable,
)
from trainer.data import (
    DataConfig,
    MixtureStream,
    build_eval_loader,
    build_mixture_loaders,
    build_train_loader,
    parse_sources,
)
from trainer.data.config import DATA_FIELDS_SET_BY_TRAINER as DATA_FIELDS_SET_BY_TRAINER  # re-exported
from trainer.engine import runtime  # noqa: F401  (before DeepSpeed is imported: the environment it reads)
from trainer.engine.checkpoints import (
    ElasticResume,
    checkpoint_dir,
    checkpoint_tags,
    elastic_resume_plan,
    latest_tag,
)
from trainer.engine.distributed import Dist, accelerator_is_gpu, env_rank
from trainer.engine.ds_config import load_deepspeed_json, resolve_deepspeed_config
from trainer.engine.init_weights import InitWeights, check_init_fits_artifact, init_model_config, load_init, open_init
from trainer.engine.resume_check import changed_options, check_data_stream, check_same_artifact, check_zero_stage
from trainer.engine.resume_point import ResumePoint, find_resume_point
from trainer.masking import MaskingConfig

# Errors `prepare` reports as one line (FormatError and ConfigError are ValueErrors; the data side's
# config classes raise ValueError; unreadable files are OSErrors).
SETUP_ERRORS = (ValueError, OSError)


@dataclass
class TrainSetup:
    """Everything the loop needs, resolved and validated before any process group exists."""

    model: ModelConfig
    optim: OptimConfig
    run: RunConfig
    data: Any  # trainer.data.DataConfig
    masking: Any  # trainer.masking.MaskingConfig
    deepspeed_path: str
    deepspeed: dict  # resolved DeepSpeed config
    artifact: Any  # schemas.artifact.Artifact
    train_loader: Any  # trainer.data.StreamLoader of this rank (not iterated yet)
    eval_loader: Any  # trainer.data.StreamLoader over the held-out shards, a mixture's {source name: loader}, or None
    elastic: ElasticResume | None = None  # --resume of a checkpoint written by another number of ranks
    resume_changes: list[str] = field(default_factory=list)  # options that differ from the checkpoint's run
    resume_point: ResumePoint | None = None  # --resume: the checkpoint to load (None: none, start at step 0)
    init: InitWeights | None = None  # --init's weights (None without --init, or when --resume finds a checkpoint)
    init_path: str | None = None  # --init as given

    def options(self, world_size: int) -> dict:
        return run_options(self.run, self.optim, self.data, self.masking, self.deepspeed, world_size)

    def resolved(self, world_size: int) -> dict:
        ds = self.deepspeed
        elastic = None
        if self.elastic is not None:
            elastic = {
                "checkpoint": self.elastic.tag,
                "saved_world_size": self.elastic.saved_world_size,
                "universal_checkpoint": self.elastic.universal,
            }
        return {
            "model": to_jsonable(self.model),
            "optim": to_jsonable(self.optim),
            "run": to_jsonable(self.run),
            "data": to_jsonable(self.data),
            "masking": to_jsonable(self.masking),
            "deepspeed_config_file": self.deepspeed_path,
            "deepspeed": ds,
            "world_size": world_size,
            "global_batch_size": ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * world_size,
            "elastic_resume": elastic,
            "init": self.init.summary() if self.init is not None else self.init_path,
            "artifact": {
                "uri": self.artifact.uri,
                "format_version": self.artifact.manifest.get("format_version"),
                "tokenizer": self.artifact.manifest["tokenizer"],
                "max_seq_len": self.artifact.manifest.get("max_seq_len"),
                "rows": self.artifact.manifest.get("counts", {}).get("rows"),
            },
            "versions": _versions(),
            **_mixture_record(self.train_loader.dataset),
        }


def _mixture_record(dataset: Any) -> dict:
    """A mixture's sources and proportions for config.json (nothing for one artifact)."""
    if not isinstance(dataset, MixtureStream):
        return {}
    return {
        "mixture": {
            "samples_per_epoch": dataset.order.M,
            "sources": [
                {"name": s.name, "uri": s.uri, "weight": s.weight, "rows": st.num_samples, "per_epoch": n}
                for s, st, n in zip(dataset.sources, dataset.streams, dataset.order.n)
            ],
        }
    }


def run_options(run, optim, data, masking, ds: dict, world_size: int) -> dict:
    """The options a checkpoint records, to list what a resume changes (``trainer.engine.resume_check``)."""
    recorded = to_jsonable(run)
    if isinstance(recorded.get("data"), list):  # a mixture's --data flags in name order: their order is no change
        recorded["data"] = sorted(recorded["data"], key=lambda spec: str(spec).partition("=")[0])
    return {
        "run": recorded,
        "optim": to_jsonable(optim),
        "data": to_jsonable(data),
        "masking": to_jsonable(masking),
        "world_size": world_size,
        "zero_stage": ds.get("zero_optimization", {}).get("stage", 0),
        "global_batch_size": ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * world_size,
    }


def _versions() -> dict:
    import deepspeed

    return {"python": sys.version.split()[0], "torch": torch.__version__, "deepspeed": deepspeed.__version__}


def _check_model_matches_artifact(model_given: dict, artifact) -> dict:
    """vocab_size and pad_token_id come from the artifact; if also given, they must agree."""
    tok = artifact.manifest["tokenizer"]
    ids = artifact.special_token_ids
    vocab = artifact.vocab_size
    for name in SPECIAL_TOKENS:
        if name not in ids or not 0 <= int(ids[name]) < vocab:
            raise ConfigError(
                f"{artifact.uri}: the tokenizer's special token {name!r} has no id below its vocabulary size {vocab}"
            )
    fixed = {"vocab_size": vocab, "pad_token_id": int(ids["pad"])}
    for key, value in fixed.items():
        if key in model_given and model_given[key] != value:
            raise ConfigError(
                f"--{key.replace('_', '-')} {model_given[key]} does not match the artifact {artifact.uri}: its tokenizer "
                f"({tok.get('file')}, sha256 {str(tok.get('sha256'))[:12]}) has {key} {value}"
            )
    return fixed


def _check_resume(
    run: RunConfig, model: ModelConfig, artifact, world_size: int, ds: dict
) -> tuple[ElasticResume | None, dict | None, str, ResumePoint | None]:
    """Check that the checkpoint ``--resume`` continues from (``resume_point``: the newest complete one) can be
    resumed; plan an elastic resume when it was written by another number of ranks (this sets
    ``checkpoint.load_universal`` in ``ds``). Returns (the plan, the checkpoint's meta or None without a checkpoint,
    the checkpoint's path, the resume point or None without a checkpoint)."""
    ckpt = checkpoint_dir(run.output_dir)
    if not run.resume:
        tags = [t for _, t in checkpoint_tags(ckpt)]
        if tags or os.path.exists(os.path.join(ckpt, "latest")):
            raise ConfigError(
                f"{run.output_dir} already holds checkpoints (latest: {latest_tag(ckpt) or 'unreadable'}"
                f"{'' if latest_tag(ckpt) else ', directories: ' + ', '.join(tags[-3:])}); pass --resume to continue "
                f"that run, or choose another --output-dir"
            )
        return None, None, ckpt, None
    point = find_resume_point(ckpt)
    if point.tag is None:
        return None, None, ckpt, None
    tag = point.tag
    meta_path = os.path.join(ckpt, tag, CHECKPOINT_META_FILE)
    if not os.path.isfile(meta_path):
        raise ConfigError(f"{meta_path}: missing; cannot resume from a checkpoint the trainer did not write")
    with open(meta_path) as f:
        meta = json.load(f)
    saved_tok, tok = meta.get("tokenizer", {}), artifact.manifest["tokenizer"]
    if saved_tok.get("sha256") != tok.get("sha256") or saved_tok.get("special_token_ids") != tok.get(
        "special_token_ids"
    ):
        raise ConfigError(
            f"cannot resume {ckpt}/{tag} on {artifact.uri}: the checkpoint was trained with another tokenizer "
            f"(sha256 {str(saved_tok.get('sha256'))[:12]}, vocabulary {saved_tok.get('vocab_size')}, special ids "
            f"{saved_tok.get('special_token_ids')}) than the artifact's (sha256 {str(tok.get('sha256'))[:12]}, "
            f"vocabulary {tok.get('vocab_size')}, special ids {tok.get('special_token_ids')})"
        )
    check_same_artifact(meta, artifact, f"{ckpt}/{tag}")
    saved_model, now = meta.get("model", {}), to_jsonable(model)
    diff = [f"{k}: checkpoint {saved_model.get(k)!r}, now {now[k]!r}" for k in now if saved_model.get(k) != now[k]]
    if diff:
        raise ConfigError(
            f"cannot resume {ckpt}/{tag} with another model configuration: "
            + "; ".join(diff)
            + " (give the model options the run started with, its --preset or --init included)"
        )
    saved_world = meta.get("world_size")
    where = f"{ckpt}/{tag}"
    if saved_world in (None, world_size):
        return None, meta, where, point
    return elastic_resume_plan(run, ds, where, tag, meta, int(saved_world), world_size), meta, where, point


def prepare(args) -> TrainSetup:
    """Build and cross-check every config from the parsed command line, open and check the artifact."""
    run = dataclass_from_args(RunConfig, args, deepspeed_config=args.deepspeed_config or "auto")
    optim = dataclass_from_args(OptimConfig, args)
    optim = resolve_schedule(optim, run)  # warmup not given: 1% of --max-steps
    model_given = given_fields(args, ModelConfig)
    init_path = getattr(args, "init", None)
    preset = getattr(args, "preset", None)
    if init_path:  # continued pre-training: the sizes are the checkpoint's
        init = open_init(init_path, model_given, preset)
    else:
        init = None
        ModelConfig.preset(preset or "base", **model_given)  # report a bad model option before opening the artifact

    sources = parse_sources(run.data)  # None: one artifact (--data PATH)
    artifacts = [Artifact.open(src.uri) for src in sources] if sources else [Artifact.open(str(run.data))]
    # a mixture's tokenizer, sequence length and checkpoint identity: its first source's by name (parse_sources)
    artifact = artifacts[0]
    # Sequence length: the artifact's (its rows hold at most max_row_tokens(max_seq_len) tokens) unless --max-seq-len says otherwise.
    max_seq_len = getattr(args, "data.max_seq_len", None) or int(artifact.manifest.get("max_seq_len", 512))
    if init is not None:
        check_init_fits_artifact(init, artifact, max_seq_len)
    fixed = _check_model_matches_artifact(model_given, artifact)
    if init is not None:
        model = init_model_config(init, model_given, fixed)
    else:
        model = ModelConfig.preset(preset or "base", **{**model_given, **fixed})
    if model.max_position_embeddings < max_seq_len:
        raise ConfigError(
            f"--max-position-embeddings {model.max_position_embeddings} is smaller than the sequence length "
            f"{max_seq_len} (--max-seq-len, default: the max_seq_len of {artifact.uri})"
        )

    masking = dataclass_from_args(
        MaskingConfig,
        args,
        dest_prefix="masking.",
        seed=run.seed % (1 << 32),
        max_span_positions=model.sbo_max_span_positions,
    )
    on_gpu = accelerator_is_gpu()
    ds_path, ds_raw = load_deepspeed_json(run.deepspeed_config, on_gpu)
    ds = resolve_deepspeed_config(ds_path, ds_raw, optim, run.output_dir, on_gpu)
    pin = {} if getattr(args, "data.pin_memory", None) is not None else {"pin_memory": on_gpu}  # default: pin on GPUs
    data = dataclass_from_args(
        DataConfig,
        args,
        dest_prefix="data.",
        artifact=sources[0].uri if sources else str(run.data),
        seed=run.seed,
        micro_batch_size=ds["train_micro_batch_size_per_gpu"],
        max_seq_len=max_seq_len,
        **pin,
    )
    if model.nsp and data.segments != 2:
        raise ConfigError("--nsp predicts whether segment B follows segment A: add --segments 2")
    if run.eval_every and data.eval_shards == 0:
        raise ConfigError(
            "--eval-every needs held-out shards: set --eval-shards >= 1, or --eval-every 0 to not evaluate"
        )
    for art in artifacts:  # the data layer says it of DataConfig; here it is said of the command line
        if data.eval_shards >= len(art.manifest["shards"]):
            raise ConfigError(
                f"--eval-shards {data.eval_shards}: {art.uri} has {len(art.manifest['shards'])} shard(s), and at least "
                "one must remain for training (lower --eval-shards, or rebuild the artifact with more --num-shards)"
            )
    rank, _, world_size = env_rank()
    elastic, resume_meta, checkpoint, resume_point = _check_resume(run, model, artifact, world_size, ds)
    # --init's weights; a resumed run continues from its own checkpoint instead
    init_weights = load_init(init, model) if init is not None and resume_meta is None else None
    # The loaders only index the shards here (no reading, no workers yet), so their errors are clear messages too.
    expected: dict[str, Any] = dict(
        expected_vocab_size=model.vocab_size, expected_special_token_ids={"pad": model.pad_token_id}
    )
    eval_loader: Any = None
    if sources:
        length_from = (
            "--max-seq-len"
            if getattr(args, "data.max_seq_len", None)
            else f"the max_seq_len of {sources[0].describe()}"
        )
        train_loader, _, evals = build_mixture_loaders(
            sources, data, masking, rank=rank, world_size=world_size, with_eval=bool(run.eval_every),
            artifacts=artifacts, length_from=length_from, **expected,
        )  # fmt: skip
        eval_loader = evals or None  # {source name: loader}: eval/NAME/... metrics
    else:
        if data.samples_per_epoch is not None:
            raise ConfigError("--samples-per-epoch sets the epoch of a mixture (several --data NAME=PATH[:WEIGHT])")
        train_loader, _ = build_train_loader(data, masking, rank=rank, world_size=world_size, **expected)
    changes = []
    if resume_meta is not None:
        check_zero_stage(resume_meta, ds.get("zero_optimization", {}).get("stage", 0), checkpoint)
        check_data_stream(resume_meta, train_loader, checkpoint)
        changes = changed_options(resume_meta, run_options(run, optim, data, masking, ds, world_size))
        changes += getattr(train_loader.dataset, "weights_changed_on_resume", [])
    if run.eval_every and not sources:
        eval_loader, _ = build_eval_loader(data, masking, rank=rank, world_size=world_size, **expected)
    return TrainSetup(
        model=model,
        optim=optim,
        run=run,
        data=data,
        masking=masking,
        deepspeed_path=ds_path,
        deepspeed=ds,
        artifact=artifact,
        train_loader=train_loader,
        eval_loader=eval_loader,
        elastic=elastic,
        resume_changes=changes,
        resume_point=resume_point,
        init=init_weights,
        init_path=init_path,
    )


def write_resolved_config(setup: TrainSetup, dist: Dist) -> None:
    if dist.is_main:
        os.makedirs(setup.run.output_dir, exist_ok=True)
        with open(os.path.join(setup.run.output_dir, "config.json"), "w") as f:
            f.write(dumps(setup.resolved(dist.world_size)))
