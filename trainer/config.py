"""Typed configuration of the trainer: the model, the optimizer and the run.

Every component gets a keyword-only dataclass whose defaults are the documented ones (the help text
next to each field says where a default comes from) and whose ``__post_init__`` refuses bad values
with a message naming the option. A bad value is a :class:`ConfigError`; the entry script turns it
into one line on stderr and exit status 2, never a traceback.

The data side (``trainer.data.DataConfig``, ``trainer.masking.MaskingConfig``) follows the same
convention; :func:`add_dataclass_arguments` / :func:`dataclass_from_args` turn any of these dataclasses
into command-line flags (``hidden_size`` -> ``--hidden-size``) so the entry script stays thin.

Model presets (``ModelConfig.preset``): ``tiny`` for tests and demos, ``base`` and ``large`` with
BERT's sizes (SpanBERT trained BERT-large sizes on a cased ~29k WordPiece vocabulary).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

OBJECTIVES = ("mlm+sbo", "mlm")

# Files the trainer writes into every checkpoint (RUN_DIR/checkpoints/<tag>/) next to DeepSpeed's, so that a
# checkpoint directory is self-describing: `python -m trainer.export` needs nothing else.
CHECKPOINT_META_FILE = "spanprep_trainer.json"  # model config, tokenizer summary, step, data position
CHECKPOINT_TOKENIZER_FILE = "tokenizer.json"  # the artifact's tokenizer, byte for byte


class ConfigError(ValueError):
    """An option has a value the trainer cannot run with; the message says which and why."""


FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max


def opt(default: Any, help: str, **kwargs: Any) -> Any:
    """A dataclass field with a default and the help text the command line shows."""
    return field(default=default, metadata={"help": help, **kwargs})


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class ModelConfig:
    """A BERT encoder with the MLM head and (objective ``mlm+sbo``) SpanBERT's span boundary head."""

    vocab_size: int = opt(
        28996,
        "WordPiece vocabulary size; the trainer takes it from the artifact's tokenizer (28,996 = cased BERT, SpanBERT's vocabulary)",
    )
    hidden_size: int = opt(768, "width of the encoder (BERT-base 768, BERT-large 1024)")
    num_layers: int = opt(12, "number of Transformer layers (BERT-base 12, BERT-large 24)")
    num_heads: int = opt(12, "attention heads per layer; must divide hidden_size (BERT-base 12, BERT-large 16)")
    intermediate_size: int = opt(3072, "width of the feed-forward layer (4 x hidden_size in BERT)")
    max_position_embeddings: int = opt(
        512, "learned absolute positions; must be >= the artifact's max_seq_len (512 in BERT and SpanBERT)"
    )
    type_vocab_size: int = opt(
        2,
        "token type (segment) embeddings; 2 as in BERT so exported models fine-tune on pairs, 0 = none (pre-training uses one segment)",
    )
    hidden_dropout: float = opt(0.1, "dropout on embeddings and after every sub-layer (BERT 0.1)")
    attention_dropout: float = opt(0.1, "dropout on attention probabilities (BERT 0.1)")
    layer_norm_eps: float = opt(1e-12, "LayerNorm epsilon (BERT 1e-12)")
    initializer_range: float = opt(0.02, "standard deviation of the normal initialisation (BERT 0.02)")
    pad_token_id: int = opt(0, "id of [PAD]; the trainer takes it from the artifact's tokenizer")
    objective: Literal["mlm+sbo", "mlm"] = opt(
        "mlm+sbo", "mlm+sbo: SpanBERT (masked LM + span boundary objective); mlm: the BERT-1seq baseline"
    )
    nsp: bool = opt(
        False, "next sentence prediction head and loss (BERT, and SpanBERT's 2seq baselines); needs --segments 2"
    )
    sbo_max_span_positions: int = opt(
        32, "SBO position embeddings: positions within a span the head can encode (the masking collator clips to this)"
    )

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "sbo_max_span_positions",
        ):
            value = getattr(self, name)
            require(
                isinstance(value, int) and not isinstance(value, bool) and value > 0,
                f"model.{name} must be a positive integer, got {value!r}",
            )
        require(
            isinstance(self.type_vocab_size, int) and self.type_vocab_size >= 0,
            f"model.type_vocab_size must be an integer >= 0, got {self.type_vocab_size!r}",
        )
        require(
            self.hidden_size % self.num_heads == 0,
            f"model.hidden_size ({self.hidden_size}) must be a multiple of model.num_heads ({self.num_heads})",
        )
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            require(0.0 <= value < 1.0, f"model.{name} must be in [0, 1), got {value!r}")
        require(self.layer_norm_eps > 0, f"model.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        require(self.initializer_range > 0, f"model.initializer_range must be > 0, got {self.initializer_range!r}")
        require(
            0 <= self.pad_token_id < self.vocab_size,
            f"model.pad_token_id ({self.pad_token_id}) must be a token id below vocab_size ({self.vocab_size})",
        )
        require(
            self.objective in OBJECTIVES,
            f"model.objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}",
        )
        require(isinstance(self.nsp, bool), f"model.nsp must be true or false, got {self.nsp!r}")
        require(
            not self.nsp or self.type_vocab_size >= 2,
            f"model.nsp needs token types A and B: --type-vocab-size must be >= 2, got {self.type_vocab_size}",
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def use_sbo(self) -> bool:
        return self.objective == "mlm+sbo"

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """``ModelConfig.preset("base", vocab_size=30522)``: a preset's sizes with some fields replaced."""
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


# Sizes only; everything else keeps the ModelConfig defaults.
PRESETS: dict[str, dict[str, int]] = {
    # Tests and `make demo`: trains in seconds on one CPU core.
    "tiny": dict(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256),
    # BERT-base (Devlin et al., 2019): 110M parameters with a 30k vocabulary.
    "base": dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072),
    # BERT-large, the size SpanBERT reports: 340M parameters.
    "large": dict(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
}


# ---------------------------------------------------------------------------------------------
# Optimizer and learning-rate schedule
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class OptimConfig:
    """AdamW with linear warmup then linear decay to zero, and gradient clipping.

    The optimizer *implementation* (fused Adam on GPU, ``torch_adam`` on CPU) and the precision come from
    the DeepSpeed JSON; these hyper-parameters are written into it, so each has exactly one source.
    """

    lr: float = opt(1e-4, "peak learning rate (BERT and SpanBERT 1e-4)")
    warmup_steps: int | None = opt(
        None,
        "optimizer steps of linear warmup from 0 to lr; must be < --max-steps. Not given: 1%% of --max-steps (BERT and SpanBERT: 10k of 1M), rounded; the resolved value is in RUN_DIR/config.json",
    )
    adam_beta1: float = opt(0.9, "Adam beta1")
    adam_beta2: float = opt(0.999, "Adam beta2 (BERT 0.999; RoBERTa uses 0.98 with large batches)")
    adam_eps: float = opt(1e-8, "Adam epsilon (SpanBERT 1e-8)")
    weight_decay: float = opt(0.01, "decoupled weight decay; not applied to biases and LayerNorm weights (BERT 0.01)")
    grad_clip: float = opt(1.0, "clip the global gradient norm to this value; 0 disables (BERT 1.0)")

    def __post_init__(self) -> None:
        # float32's largest value: the optimizer holds the rate in float32 (above it: an overflow traceback)
        require(0 < self.lr <= FLOAT32_MAX, f"optim.lr (--lr) must be > 0 and finite, got {self.lr!r}")
        require(
            self.warmup_steps is None
            or (
                isinstance(self.warmup_steps, int)
                and not isinstance(self.warmup_steps, bool)
                and self.warmup_steps >= 0
            ),
            f"optim.warmup_steps must be an integer >= 0 (or not given: 1% of max_steps), got {self.warmup_steps!r}",
        )
        for name in ("adam_beta1", "adam_beta2"):
            value = getattr(self, name)
            require(0.0 <= value < 1.0, f"optim.{name} must be in [0, 1), got {value!r}")
        require(self.adam_eps > 0, f"optim.adam_eps must be > 0, got {self.adam_eps!r}")
        require(self.weight_decay >= 0, f"optim.weight_decay must be >= 0, got {self.weight_decay!r}")
        require(self.grad_clip >= 0, f"optim.grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip!r}")


class WarmupLinearDecay:
    """Learning-rate factor for optimizer step ``i`` (0-based, as ``LambdaLR`` counts).

    Step ``s = i + 1`` gets ``s / warmup`` during warmup (so the first step already learns), then the
    factor falls linearly from 1 towards 0, reaching ``1 / (total - warmup + 1)`` at the last step.
    A class, not a lambda, so the scheduler's state dict pickles.
    """

    def __init__(self, warmup_steps: int, total_steps: int):
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, i: int) -> float:
        s = i + 1
        if s <= self.warmup_steps:
            return s / self.warmup_steps
        return max(0.0, (self.total_steps - s + 1) / (self.total_steps - self.warmup_steps + 1))


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class RunConfig:
    """What to train on, where to write, how long, and how often to evaluate, log and checkpoint."""

    data: str | list[str] = opt(
        "",
        "the preprocessed-corpus artifact (local directory or gs://, s3://, hdfs:// URI); or, repeated, the sources of a "
        "weighted mixture NAME=PATH[:WEIGHT] (trainer/data/sources.py)",
        required=True,
    )
    output_dir: str = opt(
        "", "RUN_DIR: checkpoints/, monitor/ (CSV), tensorboard/ and config.json go here", required=True
    )
    max_steps: int = opt(0, "optimizer steps to train for (the schedule decays to zero at this step)", required=True)
    deepspeed_config: str = opt(
        "auto",
        "DeepSpeed JSON (ZeRO stage, precision, micro batch, accumulation); auto = trainer/configs/zero2.json on GPU, zero2_cpu.json on CPU",
    )
    seed: int = opt(1234, "seed of the initialisation, the data order, the masks and dropout")
    save_every: int = opt(1000, "checkpoint every N optimizer steps (0: only at the end and on SIGTERM/SIGINT)")
    keep_checkpoints: int = opt(3, "keep the newest N checkpoints, delete older ones (0 keeps all)")
    eval_every: int = opt(1000, "evaluate on the held-out shards every N steps (0: never)")
    eval_batches: int = opt(50, "micro-batches per rank in each evaluation")
    log_every: int = opt(10, "write metrics to the monitor every N steps")
    resume: bool = opt(
        False,
        "continue from the latest checkpoint in OUTPUT_DIR/checkpoints (model, optimizer, schedule, step, data position)",
    )
    elastic_resume: bool = opt(
        True,
        "--resume may change the number of ranks: a checkpoint written by another number converts to a DeepSpeed universal checkpoint first (--no-elastic-resume refuses instead)",
    )
    peak_tflops: float = opt(
        0.0,
        "peak dense TFLOP/s of one accelerator for model FLOPs utilisation; 0 = look it up for known GPUs (A100, H100, ...); never on CPU",
    )
    progress: bool = opt(True, "show a progress bar on rank 0 when stderr is a terminal")
    log_level: Literal["debug", "info", "warning", "error"] = opt("warning", "level of DeepSpeed's own log messages")

    def __post_init__(self) -> None:
        if isinstance(self.data, (list, tuple)):
            self.data = self.data[0] if len(self.data) == 1 else list(self.data)  # one --data: a string, as before
        require(bool(self.data), "run.data: give the artifact with --data ARTIFACT")
        require(bool(self.output_dir), "run.output_dir: give a run directory with --output-dir RUN_DIR")
        require(
            isinstance(self.seed, int) and 0 <= self.seed < 2**32,
            f"run.seed must be an integer in [0, 2**32), got {self.seed!r}",
        )
        require(
            isinstance(self.max_steps, int) and self.max_steps > 0,
            f"run.max_steps must be a positive integer, got {self.max_steps!r}",
        )
        for name in ("save_every", "keep_checkpoints", "eval_every"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 0, f"run.{name} must be an integer >= 0, got {value!r}")
        for name in ("eval_batches", "log_every"):
            value = getattr(self, name)
            require(isinstance(value, int) and value > 0, f"run.{name} must be a positive integer, got {value!r}")
        require(self.peak_tflops >= 0, f"run.peak_tflops must be >= 0, got {self.peak_tflops!r}")
        require(
            self.log_level in ("debug", "info", "warning", "error"),
            f"run.log_level must be debug, info, warning or error, got {self.log_level!r}",
        )


DEFAULT_WARMUP_SHARE = 0.01  # BERT and SpanBERT: 10k warmup steps of 1M


def resolve_schedule(optim: OptimConfig, run: RunConfig) -> OptimConfig:
    """``optim`` with ``warmup_steps`` resolved (not given: 1% of ``run.max_steps``, rounded), checked against
    the run length."""
    if optim.warmup_steps is None:
        optim = dataclasses.replace(optim, warmup_steps=int(math.floor(DEFAULT_WARMUP_SHARE * run.max_steps + 0.5)))
    check_schedule(optim, run)
    return optim


def check_schedule(optim: OptimConfig, run: RunConfig) -> None:
    """Cross-check the schedule against the run length (``optim.warmup_steps`` resolved)."""
    require(
        optim.warmup_steps is not None and optim.warmup_steps < run.max_steps,
        f"--warmup-steps ({optim.warmup_steps}) must be smaller than --max-steps ({run.max_steps}); "
        f"BERT warms up for about 1% of training",
    )


# ---------------------------------------------------------------------------------------------
# Command line <-> dataclasses
# ---------------------------------------------------------------------------------------------
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _resolve_type(cls: type, f: dataclasses.Field) -> Any:
    hints = typing.get_type_hints(cls)
    return hints[f.name]


def _comment_help(cls: type) -> dict[str, str]:
    """``name: type = default  # comment`` lines of a dataclass's source: the comment is the help text."""
    import inspect
    import re

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    for m in re.finditer(r"^\s+(\w+)\s*:[^#\n]*#\s*(.+)$", source, flags=re.M):
        out.setdefault(m.group(1), m.group(2).strip())
    return out


def add_dataclass_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    prefix: str = "",
    skip: tuple[str, ...] = (),
    dest_prefix: str | None = None,
) -> None:
    """Add one ``--kebab-case`` flag per field of ``cls`` (int, float, str, bool, Literal, X | None).

    The flag's default is ``None`` (= "not given"); :func:`dataclass_from_args` keeps the dataclass's own
    default for flags that were not given, so the dataclass stays the single source of defaults.
    Fields of other types (lists, nested dataclasses) are skipped: set those through a JSON file.
    """
    dest_prefix = prefix if dest_prefix is None else dest_prefix
    comments = _comment_help(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        tp = _resolve_type(cls, f)
        help_text = f.metadata.get("help") or comments.get(f.name, "")
        default = f.default if f.default is not dataclasses.MISSING else None
        if default is not None and not f.metadata.get("required"):
            help_text += f" (default: {default})"
        kwargs: dict[str, Any] = dict(dest=dest_prefix + f.name, default=None, help=help_text)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            if len(rest) != 1:
                continue
            tp, origin, args = rest[0], typing.get_origin(rest[0]), typing.get_args(rest[0])
        if tp is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif origin is Literal:
            kwargs["choices"] = list(args)
            kwargs["type"] = type(args[0])
        elif tp in (int, float, str):
            kwargs["type"] = tp
            kwargs["metavar"] = f.name.upper() if tp is str else tp.__name__.upper()
        else:
            continue
        if f.metadata.get("required"):
            kwargs["required"] = True
        flags = [_flag(prefix + f.name)]
        alias = f.metadata.get("alias")
        if alias:
            flags.append(alias)
        parser.add_argument(*flags, **kwargs)


def given_fields(args: argparse.Namespace, cls: type, *, dest_prefix: str = "") -> dict[str, Any]:
    """The fields of ``cls`` that were given on the command line."""
    out = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, dest_prefix + f.name, None)
        if value is not None:
            out[f.name] = value
    return out


def dataclass_from_args(cls: type, args: argparse.Namespace, *, dest_prefix: str = "", **extra: Any):
    """Build ``cls`` from the flags given, the dataclass defaults for the others, and ``extra``.

    A ``TypeError`` from the constructor (a required field missing) becomes a :class:`ConfigError`.
    """
    values = {**given_fields(args, cls, dest_prefix=dest_prefix), **extra}
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"{cls.__name__}: {e}") from None


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested), tuples and paths as plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def dumps(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=True) + "\n"


def config_from_dict(cls, d):
    """``cls(**d)`` for a config dataclass, refusing keys it does not know with a message naming them."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(
            f"{cls.__name__}: unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    return cls(**d)
