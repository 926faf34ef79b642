"""Where the data come from and how they are streamed: :class:`DataConfig`, validated on construction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainer.config import config_from_dict
from trainer.masking.config import SEED_LIMIT

# DataConfig fields the trainer fills in from its own options and the artifact (trainer/engine/setup.py).
DATA_FIELDS_SET_BY_TRAINER = ("artifact", "seed", "micro_batch_size")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the data come from and how they are streamed. Validated on construction."""

    artifact: str  # artifact URI: a local directory or gs:// / s3:// / hdfs:// (anything pyarrow.fs opens)
    seed: int = 0  # global sample order = f(seed, epoch); 0 <= seed < 2**32
    micro_batch_size: int = 8  # rows per rank per micro step (DeepSpeed train_micro_batch_size_per_gpu)
    eval_micro_batch_size: int | None = None  # None: micro_batch_size
    num_workers: int = 2  # DataLoader worker processes per rank (0: load in the training process)
    prefetch_factor: int = 2  # chunks each worker prepares ahead (only with num_workers > 0)
    pin_memory: bool = False  # pin batches (GPU training)
    shuffle_window: int = 16  # blocks (record batches of <= 128 rows) whose rows are shuffled together
    max_seq_len: int = 512  # [CLS] + row + [SEP] must fit; the artifact's rows must be <= max_row_tokens(max_seq_len) (schemas/format.py)
    eval_shards: int = 1  # the last eval_shards shards (manifest order) are held out for evaluation
    num_epochs: int | None = None  # None: the training stream never ends; else it stops after num_epochs epochs
    worker_chunk_batches: int | None = (
        None  # micro-batches per worker chunk; None: one shuffle window, at most 256 rows
    )
    verify_shards: Literal["once", "always", "off"] = (
        "once"  # check each shard's sha256 against the manifest: once per node (cached), always, or off (sizes only)
    )
    cache_dir: str | None = (
        None  # local directory caching whole shards (checked on fill, shared by the node's ranks); for gs:// / s3:// artifacts
    )
    cache_max_gb: float = 50.0  # cache_dir size bound: least recently used shards not in use are evicted
    read_ahead: int = 2  # with cache_dir: shards filled ahead in a background thread (0: none)
    segments: int = (
        1  # 1: one segment per row (SpanBERT); 2: [CLS] A [SEP] B [SEP] pairs for NSP (BERT; trainer/data/segments.py)
    )
    short_seq_prob: float = 0.1  # segments 2: share of pairs with a random shorter target length (BERT 0.1)
    samples_per_epoch: int | None = (
        None  # a mixture of several --data sources: samples per epoch; None: until the first source runs out (trainer/data/mixture_order.py)
    )

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"DataConfig: {msg}")

        if not isinstance(self.artifact, str) or not self.artifact.strip():
            bad(f"artifact must be a non-empty path or URI; got {self.artifact!r}")

        def integer(name: str, lo: int, optional: bool = False) -> None:
            v = getattr(self, name)
            if optional and v is None:
                return
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                bad(f"{name} must be an integer >= {lo}{' or None' if optional else ''}; got {v!r}")

        integer("micro_batch_size", 1)
        integer("eval_micro_batch_size", 1, optional=True)
        integer("num_workers", 0)
        integer("prefetch_factor", 1)
        integer("shuffle_window", 1)
        integer("max_seq_len", 3)
        integer("eval_shards", 0)
        integer("num_epochs", 1, optional=True)
        integer("worker_chunk_batches", 1, optional=True)
        integer("read_ahead", 0)
        integer("samples_per_epoch", 1, optional=True)
        if self.cache_dir is not None and (not isinstance(self.cache_dir, str) or not self.cache_dir.strip()):
            bad(f"cache_dir must be a local directory or None; got {self.cache_dir!r}")
        if self.cache_dir is not None and "://" in self.cache_dir:
            bad(f"cache_dir must be a local directory (flock), not a URI; got {self.cache_dir!r}")
        if (
            isinstance(self.cache_max_gb, bool)
            or not isinstance(self.cache_max_gb, (int, float))
            or self.cache_max_gb < 0
        ):
            bad(f"cache_max_gb must be a number >= 0; got {self.cache_max_gb!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < SEED_LIMIT:
            bad(f"seed must be an integer in [0, 2**32); got {self.seed!r}")
        if not isinstance(self.pin_memory, bool):
            bad(f"pin_memory must be a bool; got {self.pin_memory!r}")
        if self.verify_shards not in ("once", "always", "off"):
            bad(f"verify_shards must be once, always or off; got {self.verify_shards!r}")
        if self.segments not in (1, 2) or isinstance(self.segments, bool):
            bad(f"segments must be 1 or 2; got {self.segments!r}")
        if self.segments == 2 and self.max_seq_len < 5:
            bad(f"segments 2 needs max_seq_len >= 5 ([CLS] A [SEP] B [SEP]); got {self.max_seq_len}")
        if (
            isinstance(self.short_seq_prob, bool)
            or not isinstance(self.short_seq_prob, (int, float))
            or not 0 <= self.short_seq_prob <= 1
        ):
            bad(f"short_seq_prob must be in [0, 1]; got {self.short_seq_prob!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DataConfig:
        return config_from_dict(cls, d)
