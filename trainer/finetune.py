"""Fine-tune and evaluate a pre-trained encoder: GLUE-style classification/regression and extractive QA.

Heads (``--head``): ``cls`` (BERT's linear layer on [CLS]), ``span`` (QA start/end, SpanBERT/BERT),
``spex`` (SpEx-BERT: the choices appended as text, the label extracted as a span), ``span-ft`` (Span
Fine-tuning: n-gram dictionary segments through a hierarchical CNN). ``--init`` is a pre-training run
directory or a Hugging Face export; the tokenizer is the one it carries. docs/FINETUNING.md has the details.

Two CPU ranks (gloo), RTE with Span Fine-tuning, from a pre-training run:

    OMP_NUM_THREADS=1 DS_ACCELERATOR=cpu .venv/bin/deepspeed --num_gpus 2 trainer/finetune.py --deepspeed_config trainer/configs/zero1_cpu.json \\
        --init runs/tiny --task rte --head span-ft --ngram-dictionary dictionaries/wikitext2 \\
        --data-dir ../shared/data/finetune --output-dir runs/rte-spanft

One process without the launcher (RANK=0, WORLD_SIZE=1, MASTER_ADDR/PORT are filled in), SpEx-BERT on RTE
from a Hugging Face export:

    .venv/bin/python trainer/finetune.py --init hf_model --task rte --head spex --data-dir ../shared/data/finetune \\
        --output-dir runs/rte-spex

Extractive QA (SQuAD v1.1 JSON; v2.0 with ``--task squad2``), 512-token windows with stride 128; writes
RUN_DIR/predictions.json:

    .venv/bin/deepspeed trainer/finetune.py --init runs/base --task squad1 --head span --train-file train-v1.1.json \\
        --dev-file dev-v1.1.json --epochs 4 --lr 3e-5 --output-dir runs/squad

Writes RUN_DIR/metrics.json, config.json, bad_rows.jsonl, predictions.json[l] and the monitor (monitor/*.csv).
User errors (missing files, bad options, a wrong header) are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import signal

from schemas.ngram_dictionary import NgramDictionary
from trainer.config import OptimConfig, add_dataclass_arguments, dataclass_from_args, given_fields
from trainer.engine.distributed import default_single_process_env, env_rank, say_setup_error
from trainer.engine.signals import exit_on_sigterm
from trainer.engine.threads import CPU_THREADS_HELP, check_cpu_threads, set_cpu_threads
from trainer.finetuning.options import FinetuneConfig

# The imports above need neither torch nor DeepSpeed (tests/trainer/test_quick_refusal.py): a refusal of the command
# line, the n-gram dictionary or a missing --init comes before the 10-60 s of importing them.

OPTIM_FIELDS_SET_BY_FINETUNE = ("lr", "warmup_steps")  # --lr and --warmup-ratio


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainer/finetune.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1, help="set by the deepspeed launcher")
    add_dataclass_arguments(p.add_argument_group("fine-tuning"), FinetuneConfig, skip=("deepspeed_config",))
    p.add_argument("--cpu-threads", type=int, default=None, metavar="N", help=CPU_THREADS_HELP)
    p.add_argument(
        "--deepspeed_config",
        "--deepspeed-config",
        dest="deepspeed_config",
        default=None,
        help=FinetuneConfig.__dataclass_fields__["deepspeed_config"].metadata["help"],
    )
    add_dataclass_arguments(
        p.add_argument_group("optimizer"), OptimConfig, skip=OPTIM_FIELDS_SET_BY_FINETUNE, dest_prefix="optim."
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    default_single_process_env(args.local_rank)
    if env_rank()[0] == 0:  # rank 0 says it; the other ranks keep the default (a rank blocked in C stays killable)
        exit_on_sigterm("finetune")
    try:
        check_cpu_threads(args.cpu_threads)
        cfg = dataclass_from_args(FinetuneConfig, args, deepspeed_config=args.deepspeed_config or "auto")
        optim_flags = given_fields(args, OptimConfig, dest_prefix="optim.")
        OptimConfig(**optim_flags)  # a bad optimizer option is reported before any work
        if cfg.head == "span-ft" and cfg.segmentation == "ngram":  # before the checkpoint loads, not after
            try:
                NgramDictionary.open(cfg.ngram_dictionary)
            except ValueError as e:
                raise ValueError(f"--ngram-dictionary {e}") from None
        if not os.path.isdir(cfg.init):  # what load_pretrained says first, said before torch is imported
            raise ValueError(f"--init {cfg.init}: no such directory")
        # torch and DeepSpeed: only once the quick checks passed
        from trainer.engine import accelerator_is_gpu
        from trainer.finetuning import loop
        from trainer.finetuning.checkpoint import load_pretrained

        # fine-tuning batches are made in this process: no data workers
        said = set_cpu_threads(args.cpu_threads, 0, one_process=env_rank()[2] == 1, on_gpu=accelerator_is_gpu())
        if said and env_rank()[1] == 0:
            print(said, flush=True)
        encoder, tokenizer, source = load_pretrained(cfg.init)
        setup = loop.prepare(cfg, optim_flags, encoder, tokenizer, source)
    except (ValueError, OSError) as e:  # ConfigError, DataError, CheckpointError, unreadable files
        say_setup_error("finetune", e)
        return 2
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # start-up is over: SIGTERM ends the run as before
    loop.run(setup)
    return 0


if __name__ == "__main__":
    from schemas.quick_exit import quick_exit

    quick_exit(main())
