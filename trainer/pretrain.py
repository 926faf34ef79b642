"""Pre-train SpanBERT (or the BERT-1seq baseline) on a preprocessed-corpus artifact with DeepSpeed ZeRO.

One GPU node, 8 GPUs, ZeRO-2, BERT-base sizes:

    .venv/bin/deepspeed trainer/pretrain.py --deepspeed_config trainer/configs/zero2.json \\
        --data ARTIFACT --preset base --max-steps 100000 --output-dir runs/base

Several nodes (a hostfile of ``hostname slots=8`` lines; RUN_DIR on a shared filesystem):

    .venv/bin/deepspeed --hostfile hostfile trainer/pretrain.py --deepspeed_config trainer/configs/zero3.json \\
        --data gs://bucket/artifact --preset large --max-steps 2400000 --output-dir /shared/runs/large

CPU, two processes (gloo), the tiny preset (what the tests and ``make demo`` run):

    OMP_NUM_THREADS=1 DS_ACCELERATOR=cpu .venv/bin/deepspeed --num_gpus 2 trainer/pretrain.py --deepspeed_config trainer/configs/zero2_cpu.json \\
        --data demo/artifact --preset tiny --max-steps 40 --warmup-steps 4 --lr 1e-3 --output-dir runs/tiny

One process without the launcher (RANK=0, WORLD_SIZE=1, MASTER_ADDR/PORT are filled in):

    .venv/bin/python trainer/pretrain.py --data demo/artifact --preset tiny --max-steps 40 --warmup-steps 4 --output-dir runs/tiny

Continued pre-training from a Hugging Face BERT directory (or a spanprep run); sizes and vocabulary are the
checkpoint's, the artifact must be built with its vocab.txt (docs/TRAINING.md, "Continued pre-training"):

    .venv/bin/deepspeed trainer/pretrain.py --deepspeed_config trainer/configs/zero2.json \\
        --data artifacts/domain-cased --init models/bert-base-cased --max-steps 100000 --output-dir runs/dapt

A weighted mixture of artifacts (same tokenizer; proportions of samples; docs/TRAINING.md):
``--data wiki=gs://bucket/wiki-v3:0.7 --data books=gs://bucket/books-v1:0.3`` instead of ``--data ARTIFACT``.

Resume after a stop (SIGTERM/SIGINT save a checkpoint and exit 0): add ``--resume``; with another number of ranks
than the checkpoint's, it goes through a DeepSpeed universal checkpoint (docs/TRAINING.md, elastic resume). The BERT-1seq baseline:
``--objective mlm``; BERT's two segments with next sentence prediction: ``--segments 2 --nsp``. Masking scheme: ``--scheme span|whole_word|subword|entity|noun_phrase|ngram``.
Export: ``.venv/bin/python -m trainer.export RUN_DIR/checkpoints --out hf_model``. All options: ``--help``;
docs/TRAINING.md explains them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from schemas import commands
from schemas.artifact import Artifact
from schemas.format import FormatError
from trainer.config import (
    PRESETS,
    ModelConfig,
    OptimConfig,
    RunConfig,
    add_dataclass_arguments,
    dataclass_from_args,
    given_fields,
    resolve_schedule,
)
from trainer.data.config import DATA_FIELDS_SET_BY_TRAINER, DataConfig
from trainer.data.sources import parse_sources
from trainer.engine.distributed import default_single_process_env, env_rank, say_setup_error
from trainer.engine.ds_config import load_deepspeed_json
from trainer.engine.run_lock import acquire as acquire_run_lock
from trainer.engine.signals import exit_on_sigterm
from trainer.engine.threads import CPU_THREADS_HELP, check_cpu_threads, set_cpu_threads
from trainer.masking.config import SCHEMES, MaskingConfig

# The imports above need neither torch nor DeepSpeed (tests/trainer/test_quick_refusal.py): a refusal of the command
# line, the DeepSpeed JSON or the artifact comes in seconds, before the 10-60 s of importing them (trainer.engine).

# Filled in from other options, so they cannot disagree.
MASKING_FIELDS_SET_BY_TRAINER = ("seed", "max_span_positions")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trainer/pretrain.py",
        description="SpanBERT pre-training with DeepSpeed; see the launch commands in docs/TRAINING.md",
    )
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1, help="set by the deepspeed launcher")
    g = p.add_argument_group("run")
    g.add_argument("--cpu-threads", type=int, default=None, metavar="N", help=CPU_THREADS_HELP)
    add_dataclass_arguments(g, RunConfig, skip=("deepspeed_config",))
    g.add_argument(
        "--deepspeed_config",
        "--deepspeed-config",
        dest="deepspeed_config",
        default=None,
        help=RunConfig.__dataclass_fields__["deepspeed_config"].metadata["help"],
    )
    g.add_argument(
        "--data",
        action="append",
        required=True,
        metavar="ARTIFACT | NAME=PATH[:WEIGHT]",
        help="the preprocessed-corpus artifact (directory, gs://, s3://, hdfs://); or repeat --data NAME=PATH[:WEIGHT] "
        "to train on a mixture: WEIGHT is the share of samples (rows) drawn from the source (all weights or none: none = "
        "each source's number of rows); an epoch ends when the first source runs out (or after --samples-per-epoch); a "
        "source that runs out repeats with a new order per pass; eval/NAME/... per source (docs/TRAINING.md, mixtures)",
    )
    g = p.add_argument_group("model")
    g.add_argument("--preset", choices=list(PRESETS), default=None, help="model sizes (default: base; not with --init)")
    g.add_argument(
        "--init",
        metavar="PATH",
        default=None,
        help="continued pre-training: start from a Hugging Face BERT directory (config.json + model.safetensors or "
        "pytorch_model.bin) or a spanprep run/checkpoint; sizes and vocabulary are the checkpoint's (docs/TRAINING.md)",
    )
    add_dataclass_arguments(g, ModelConfig)
    add_dataclass_arguments(p.add_argument_group("optimizer"), OptimConfig)
    add_dataclass_arguments(
        p.add_argument_group("data"), DataConfig, skip=DATA_FIELDS_SET_BY_TRAINER, dest_prefix="data."
    )
    add_dataclass_arguments(
        p.add_argument_group("masking"), MaskingConfig, skip=MASKING_FIELDS_SET_BY_TRAINER, dest_prefix="masking."
    )
    for action in p._actions:
        if action.dest == "masking.scheme":
            action.choices = list(SCHEMES)
            action.metavar = None
            action.help = "masking scheme (default: span, SpanBERT's)"
        if action.dest == "data.pin_memory":
            action.help = "pin batches in page-locked memory for faster copies to the GPU (default: on with GPUs)"
        if action.dest == "data.max_seq_len":
            action.help = "sequence length, [CLS] row [SEP] (default: the artifact's max_seq_len)"
    return p


def check_before_torch(args: argparse.Namespace) -> None:
    """What ``engine.prepare`` checks that needs neither torch nor DeepSpeed, checked first: the options, the model
    sizes (without --init), the DeepSpeed JSON when one is named, and each artifact's manifest. Raises ValueError
    (ConfigError, FormatError) or OSError, as ``prepare`` does; ``prepare`` checks all of it again with the rest."""
    check_cpu_threads(args.cpu_threads)
    run = dataclass_from_args(RunConfig, args, deepspeed_config=args.deepspeed_config or "auto")
    resolve_schedule(dataclass_from_args(OptimConfig, args), run)
    if not getattr(args, "init", None):
        ModelConfig.preset(getattr(args, "preset", None) or "base", **given_fields(args, ModelConfig))
    if run.deepspeed_config != "auto":  # "auto" depends on the accelerator, which DeepSpeed detects
        load_deepspeed_json(run.deepspeed_config, on_gpu=False)
    sources = parse_sources(run.data)
    for uri in [src.uri for src in sources] if sources else [str(run.data)]:
        Artifact.open(uri)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    default_single_process_env(args.local_rank)
    rank, local_rank, world = env_rank()
    lock = None
    try:  # the lock is released on every way out that Python sees (errors and tracebacks included)
        try:
            if rank == 0 and args.output_dir:  # one rank owns the run directory's lock, before anything is written
                lock = acquire_run_lock(args.output_dir)
                # until training's own handler (save, then exit) takes over: the lock is released on the way out
                exit_on_sigterm("pretrain")
            check_before_torch(args)
            from trainer import engine  # torch and DeepSpeed: only once the quick checks passed

            workers = getattr(args, "data.num_workers", None)
            said = set_cpu_threads(
                args.cpu_threads,
                DataConfig.num_workers if workers is None else workers,
                one_process=world == 1,
                on_gpu=engine.accelerator_is_gpu(),
            )
            if said and local_rank == 0:
                print(said, flush=True)
            setup = engine.prepare(args)
        except (ValueError, OSError) as e:  # engine.SETUP_ERRORS
            say_setup_error("pretrain", e)
            return 2
        try:
            code = engine.train(setup)
        except FormatError as e:  # a shard found damaged or missing while training (e.g. by a --cache-dir fill)
            print(f"pretrain: error: {e}", file=sys.stderr)
            return 2
        checkpoints = os.path.join(args.output_dir or "", "checkpoints")
        if code == 0 and rank == 0 and args.output_dir and os.path.isdir(checkpoints):
            print(f"export: {commands.module('trainer.export')} {shlex.quote(checkpoints)} --out hf_model", flush=True)
        return code
    finally:
        if lock is not None:
            lock.release()


if __name__ == "__main__":
    from schemas.quick_exit import quick_exit

    quick_exit(main())
