"""The fine-tuning run's options: one keyword-only dataclass, validated, turned into flags by
``trainer.config.add_dataclass_arguments`` (the optimizer's other hyper-parameters are ``OptimConfig``'s).

Defaults follow the papers: learning rate 2e-5 and 3 epochs (BERT's GLUE grid {2,3,4,5}e-5, {2,3,4} epochs),
10% warmup; sequences of 128 tokens for GLUE (Span Fine-tuning: {128, 256}), 512 for QA (SpanBERT) with a
stride of 128, questions cut to 64 tokens, answers of at most 30 tokens from the 20 best starts and ends
(BERT's run_squad); Span Fine-tuning r = 16 spans of at most l = 64 tokens, kernel 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schemas import commands
from trainer.config import FLOAT32_MAX, opt, require
from trainer.finetuning.tasks import TASKS, check_head, get_task

# Here, not beside the heads (torch): trainer/finetune.py parses and checks its options before torch is imported.
HEADS = ("cls", "span", "spex", "span-ft")
SEGMENTATIONS = ("ngram", "random", "none")  # span-ft's segmentation (trainer/finetuning/span_ft.py)


@dataclass(kw_only=True)
class FinetuneConfig:
    init: str = opt(
        "",
        "where to start: a pre-training RUN_DIR (or RUN_DIR/checkpoints[/TAG]) or a Hugging Face export directory",
        required=True,
    )
    task: Literal[tuple(TASKS)] = opt(  # type: ignore[valid-type]  # choices built from the registries
        "rte", "task (its file layout and labels are declared in trainer/finetuning/tasks.py)", required=True
    )
    head: Literal[HEADS] = opt(  # type: ignore[valid-type]  # choices built from the registries
        "cls",
        "cls (linear layer on [CLS]), span (QA start/end), spex (SpEx-BERT), span-ft (Span Fine-tuning)",
        required=True,
    )
    output_dir: str = opt(
        "", "RUN_DIR: metrics.json, predictions.json (QA), bad_rows.jsonl, config.json, monitor/", required=True
    )
    data_dir: str = opt("", "directory the task's default files are relative to (e.g. ../shared/data/finetune)")
    train_file: str = opt("", "training file (default: the task's train file under --data-dir)")
    dev_file: str = opt("", "evaluation file (default: the task's dev file under --data-dir)")
    max_train_examples: int = opt(0, "use only the first N training examples (0: all)")
    max_eval_examples: int = opt(0, "evaluate only the first N examples / questions (0: all)")
    max_seq_len: int = opt(0, "tokens per input (0: 128 for GLUE tasks, 512 for QA; at most the encoder's positions)")
    epochs: int = opt(3, "passes over the training data (BERT: 2-4)")
    max_steps: int = opt(0, "optimizer steps; 0: --epochs passes")
    lr: float = opt(2e-5, "peak learning rate (BERT's GLUE grid 2e-5..5e-5)")
    warmup_ratio: float = opt(0.1, "fraction of the steps of linear warmup (BERT 0.1)")
    seed: int = opt(42, "seed of the head's initialisation, the example order, dropout and random segmentation")
    eval_batch_size: int = opt(0, "features per rank per evaluation batch (0: the micro batch size)")
    log_every: int = opt(10, "write the training loss to the monitor every N steps")
    segmentation: Literal[SEGMENTATIONS] = opt(  # type: ignore[valid-type]  # choices built from the registries
        "ngram", "span-ft: ngram (dictionary, greedy longest match), random (ablation), none (BERT + CNN ablation)"
    )
    ngram_dictionary: str = opt(
        "", "span-ft with --segmentation ngram: a dictionary directory from pipeline.build_ngram_dictionary"
    )
    max_spans: int = opt(16, "span-ft: r, the most spans per sentence (padding and cutting)")
    max_span_len: int = opt(64, "span-ft: l, the most tokens per span (64 or 128 in the paper)")
    doc_stride: int = opt(128, "QA: tokens between the starts of two windows of a long passage (BERT 128)")
    max_query_len: int = opt(64, "QA: questions are cut to this many tokens (BERT 64)")
    max_answer_len: int = opt(30, "QA: the longest answer decoded, in tokens (BERT 30)")
    n_best: int = opt(20, "QA: best start and end positions considered per window (BERT 20)")
    null_threshold: float = opt(
        0.0, "SQuAD 2.0: predict no answer when the [CLS] score beats the best span by more than this"
    )
    deepspeed_config: str = opt(
        "auto",
        "DeepSpeed JSON (ZeRO stage, precision, micro batch); auto = trainer/configs/zero2.json on GPU, zero2_cpu.json on CPU",
    )
    progress: bool = opt(True, "show progress bars on rank 0")
    log_level: Literal["debug", "info", "warning", "error"] = opt("warning", "level of DeepSpeed's own log messages")

    def __post_init__(self) -> None:
        for name in ("init", "output_dir"):
            require(bool(getattr(self, name)), f"--{name.replace('_', '-')} is required")
        task = get_task(self.task)
        check_head(task, self.head)
        for name in ("max_train_examples", "max_eval_examples", "max_seq_len", "max_steps", "eval_batch_size"):
            value = getattr(self, name)
            require(
                isinstance(value, int) and value >= 0,
                f"--{name.replace('_', '-')} must be an integer >= 0, got {value!r}",
            )
        for name in (
            "epochs",
            "log_every",
            "max_spans",
            "max_span_len",
            "doc_stride",
            "max_query_len",
            "max_answer_len",
            "n_best",
        ):
            value = getattr(self, name)
            require(
                isinstance(value, int) and value > 0,
                f"--{name.replace('_', '-')} must be a positive integer, got {value!r}",
            )
        require(0 < self.lr <= FLOAT32_MAX, f"--lr must be > 0 and finite, got {self.lr!r}")
        require(0.0 <= self.warmup_ratio < 1.0, f"--warmup-ratio must be in [0, 1), got {self.warmup_ratio!r}")
        require(0 <= self.seed < 2**32, f"--seed must be in [0, 2**32), got {self.seed!r}")
        if self.head == "span-ft" and self.segmentation == "ngram":
            require(
                bool(self.ngram_dictionary),
                "--head span-ft --segmentation ngram needs --ngram-dictionary DIR "
                f"({commands.module('pipeline.build_ngram_dictionary')}; or --segmentation random|none for the "
                "ablations)",
            )
        if self.task == "squad2" or self.null_threshold:
            require(self.task == "squad2", "--null-threshold applies to squad2 only")

    @property
    def resolved_max_seq_len(self) -> int:
        return self.max_seq_len or (512 if get_task(self.task).kind == "qa" else 128)
