"""One rank's stream of masked micro-batches over a split (:class:`ArtifactStream`) and its resumable state.

Consumption, ranks and workers
------------------------------
Everything is counted in *global samples*. One global step takes ``G = micro_batch_size * world_size``
consecutive stream positions; rank ``r`` takes ``[c + r*B, c + (r+1)*B)`` of the step starting at ``c``.
An epoch has ``N // G`` steps; the last ``N % G`` positions of an epoch are not used (every rank must run the
same number of steps), and the next epoch starts at position 0 of its own order. DataLoader workers of a rank
split that rank's micro-batches in chunks of consecutive micro-batches (chunk ``m`` goes to worker
``m % num_workers``; PyTorch's in-order round robin hands them back in order), so the batches a rank sees do
not depend on ``num_workers``. Masking happens in the workers, one chunk at a time.

Because the stream does not depend on the world size, a run can resume with another world size or micro
batch size: the state is ``(epoch, consumed samples in epoch)``, and the new ranks take their parts of the
next global steps from there (when fewer than ``G`` positions remain, the epoch ends there). Resuming jumps to
the block holding the next position by arithmetic; consumed blocks are not read again. Each rank reads the
blocks that hold its rows, i.e. within a window, nearly every block: the data are decoded about
``world_size`` times per epoch in total, the price of an order that is independent of the world size.

State dict (``ArtifactStream.state_dict()``, plain picklable dict)::

    {"format": "spanprep-loader-state", "version": 1, "split": "train", "epoch": 3,
     "consumed_samples": 4096,          # global samples of the epoch already delivered to the trainer
     "total_consumed_samples": 123904,  # since the start of the run (informational)
     "seed": 0, "shuffle_window": 16, "num_samples": 24012, "fingerprint": "<sha256 of the split's shards>",
     "world_size": 2, "micro_batch_size": 8, "mask_scheme": "span", "mask_seed": 0}

``state_dict()`` counts the batches the :class:`StreamLoader` has handed to the caller (not what the workers
have prefetched). ``load_state_dict`` refuses a state of another artifact split, seed or shuffle window,
and (unless ``strict=False``) of another masking scheme or mask seed.

"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from schemas import format as fmt
from schemas.artifact import Artifact
from trainer.data.blocks import BlockReader, index_blocks, split_shards
from trainer.data.config import DataConfig
from trainer.data.order import EpochOrder
from trainer.data.segments import add_pair_fields, build_pairs, other_positions, pair_draws
from trainer.data.shard_cache import ShardCache
from trainer.data.stream_loader import Stream, WorkerDataError, this_workers_chunks
from trainer.masking import Masked, Masker, MaskingConfig, Rows

STATE_FORMAT = "spanprep-loader-state"
STATE_VERSION = 1
# A worker masks and collates this many rows at most at a time (a chunk of micro-batches); the chunk's
# tensors share one storage, so it crosses to the training process as one shared-memory segment.
MAX_CHUNK_ROWS = 256


class ArtifactStream(Stream):
    """One rank's stream of masked micro-batches over a split of an artifact (module docstring).

    Iterating yields *chunks*: lists of consecutive batch dicts (the :class:`StreamLoader` flattens them).
    """

    def __init__(
        self,
        artifact: Artifact,
        data_cfg: DataConfig,
        mask_cfg: MaskingConfig,
        *,
        rank: int = 0,
        world_size: int = 1,
        split: str = "train",
    ):
        super().__init__()
        if not isinstance(data_cfg, DataConfig):
            raise TypeError(f"data_cfg must be a DataConfig, got {type(data_cfg).__name__}")
        if not isinstance(mask_cfg, MaskingConfig):
            raise TypeError(f"mask_cfg must be a MaskingConfig, got {type(mask_cfg).__name__}")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an integer >= 1; got {world_size!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an integer in [0, world_size={world_size}); got {rank!r}")
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval'; got {split!r}")
        self.artifact = artifact
        self.data_cfg, self.mask_cfg = data_cfg, mask_cfg
        self.rank, self.world_size, self.split = rank, world_size, split
        manifest = artifact.manifest
        room = fmt.max_row_tokens(data_cfg.max_seq_len)
        max_row = int(manifest.get("max_row_tokens", room))
        if max_row > room:
            raise ValueError(
                f"{artifact.uri} holds rows of up to {max_row} tokens (built for max_seq_len {manifest.get('max_seq_len')}); "
                f"DataConfig.max_seq_len={data_cfg.max_seq_len} leaves room for {room}: raise max_seq_len "
                f"or rebuild the artifact"
            )
        if split == "eval" and data_cfg.eval_shards == 0:
            raise ValueError("DataConfig.eval_shards is 0: there are no held-out shards to evaluate on")
        train_idx, eval_idx = split_shards(artifact, data_cfg.eval_shards)
        self.shard_indices = train_idx if split == "train" else eval_idx
        paths = [manifest["shards"][i]["path"] for i in self.shard_indices]
        self.shard_cache = (
            ShardCache(artifact, data_cfg.cache_dir, int(data_cfg.cache_max_gb * 2**30), data_cfg.read_ahead)
            if data_cfg.cache_dir
            else None
        )
        # With a shard cache every shard's sha256 is checked when it is filled: here sizes only, of the shards
        # not in the cache (a cached copy is the manifest's content: it needs no look at the bucket).
        if self.shard_cache is not None:
            paths = [p for p in paths if not self.shard_cache.has(p)]
        self.shard_checks = artifact.check_shards(
            paths, "off" if data_cfg.cache_dir else data_cfg.verify_shards, start=rank
        )
        self.blocks = index_blocks(artifact, self.shard_indices, self.shard_cache)
        self.micro_batch_size = (
            data_cfg.micro_batch_size
            if split == "train"
            else (data_cfg.eval_micro_batch_size or data_cfg.micro_batch_size)
        )
        self.global_batch_size = self.micro_batch_size * world_size
        self.num_samples = self.blocks.num_samples
        if self.num_samples < self.global_batch_size:
            raise ValueError(
                f"the {split} split of {artifact.uri} ({len(self.shard_indices)} shard(s)) has {self.num_samples} rows, fewer than "
                f"one global step of micro_batch_size {self.micro_batch_size} x world_size {world_size} = {self.global_batch_size}"
            )
        self.shuffle = split == "train"
        rpb = int(manifest.get("rows_per_batch", fmt.ROWS_PER_BATCH))
        if data_cfg.worker_chunk_batches is not None:
            self.chunk_batches = data_cfg.worker_chunk_batches
        else:
            per_window = -(-data_cfg.shuffle_window * rpb // self.global_batch_size)
            self.chunk_batches = max(1, min(per_window, MAX_CHUNK_ROWS // self.micro_batch_size))
        self.fingerprint = self._fingerprint()
        unigram = None
        if self.shard_cache is not None:
            entry = manifest["unigram"]
            unigram = artifact.unigram_counts(self.shard_cache.read_file(entry["file"], entry))
        self.masker = Masker.from_artifact(mask_cfg, artifact, max_seq_len=data_cfg.max_seq_len, unigram_counts=unigram)
        self._max_row = room
        self._epoch = 0
        self._consumed = 0
        self._total_consumed = 0
        self._generation = 0
        self._reader: BlockReader | None = None
        self._orders: OrderedDict[int, EpochOrder] = OrderedDict()

    # -- pickling: workers reopen files ------------------------------------------------------
    def __getstate__(self):
        d = dict(self.__dict__)
        d["_reader"] = None
        d["_orders"] = OrderedDict()
        return d

    # -- sizes -------------------------------------------------------------------------------
    @property
    def steps_per_epoch(self) -> int:
        """Global steps (= micro-batches per rank) in a full epoch."""
        return self.num_samples // self.global_batch_size

    @property
    def num_batches(self) -> int | None:
        """Micro-batches this rank yields from the current position to the end (None: infinite)."""
        if self.split == "eval":
            return self.steps_per_epoch
        if self.data_cfg.num_epochs is None:
            return None
        left = (self.num_samples - self._consumed) // self.global_batch_size
        return (
            left + max(0, self.data_cfg.num_epochs - self._epoch - 1) * self.steps_per_epoch
            if self._epoch < self.data_cfg.num_epochs
            else 0
        )

    @property
    def epoch(self) -> int:
        return self._epoch

    def _fingerprint(self) -> str:
        h = hashlib.sha256()
        for si in self.shard_indices:
            s = self.artifact.manifest["shards"][si]
            h.update(f"{s['path']}\0{s['rows']}\0{s.get('sha256', '')}\n".encode())
        h.update(f"rows_per_batch={self.artifact.manifest.get('rows_per_batch', fmt.ROWS_PER_BATCH)}".encode())
        return h.hexdigest()

    # -- order -------------------------------------------------------------------------------
    def order(self, epoch: int) -> EpochOrder:
        o = self._orders.get(epoch)
        if o is None:
            o = EpochOrder(self.blocks, self.data_cfg.seed, epoch, self.data_cfg.shuffle_window, self.shuffle)
            self._orders[epoch] = o
            while len(self._orders) > 2:
                self._orders.popitem(last=False)
        return o

    def global_order(self, epoch: int) -> np.ndarray:
        """Sample ids of the whole epoch's stream, in stream order (tests, debugging)."""
        return self.order(epoch).sample_ids(np.arange(self.num_samples))

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "split": self.split,
            "epoch": self._epoch,
            "consumed_samples": self._consumed,
            "total_consumed_samples": self._total_consumed,
            "seed": self.data_cfg.seed,
            "shuffle_window": self.data_cfg.shuffle_window,
            "num_samples": self.num_samples,
            "fingerprint": self.fingerprint,
            "world_size": self.world_size,
            "micro_batch_size": self.micro_batch_size,
            "mask_scheme": self.mask_cfg.scheme,
            "mask_seed": self.mask_cfg.seed,
            "segments": self.data_cfg.segments,
        }

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Continue from ``state`` (from ``state_dict()`` of any world size / micro batch size)."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a loader state dict (expected format {STATE_FORMAT!r}): {str(state)[:200]}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"loader state version {state.get('version')} is not supported (this code writes {STATE_VERSION})"
            )
        mine = self.state_dict()
        keys = ["split", "seed", "shuffle_window", "num_samples", "fingerprint", "segments"] + (
            ["mask_scheme", "mask_seed"] if strict else []
        )
        saved = {"segments": 1, **state}  # states written before two-segment inputs existed were one-segment
        diff = [f"{k}: saved {saved.get(k)!r}, now {mine[k]!r}" for k in keys if saved.get(k) != mine[k]]
        if diff:
            raise ValueError(
                "cannot resume the data stream: the saved state belongs to another stream (" + "; ".join(diff) + "). "
                "Resume with the same artifact, eval_shards, seed, shuffle_window, segments"
                + (" and masking config" if strict else "")
                + (" (or load_state_dict(..., strict=False) to change the masking)" if strict else "")
            )
        epoch, consumed = int(state["epoch"]), int(state["consumed_samples"])
        if epoch < 0 or not 0 <= consumed <= self.num_samples:
            raise ValueError(
                f"loader state has epoch {epoch}, consumed_samples {consumed}: out of range for {self.num_samples} samples"
            )
        self._epoch, self._consumed = self._normalise(epoch, consumed)
        self._total_consumed = int(state.get("total_consumed_samples", 0))
        self._generation += 1

    def _normalise(self, epoch: int, consumed: int) -> tuple[int, int]:
        if consumed + self.global_batch_size > self.num_samples:
            return epoch + 1, 0
        return epoch, consumed

    def _advance(self) -> None:
        """One micro-batch of this rank was delivered: one global step of G samples is consumed."""
        self._total_consumed += self.global_batch_size
        self._epoch, self._consumed = self._normalise(self._epoch, self._consumed + self.global_batch_size)

    # -- iteration ---------------------------------------------------------------------------
    def _batches(self) -> Iterator[tuple[int, int]]:
        """(epoch, first stream position) of this rank's micro-batches from the current position."""
        G, B, N = self.global_batch_size, self.micro_batch_size, self.num_samples
        end: float  # the epoch to stop before (math.inf: never)
        if self.split == "eval":
            e, c, end = 0, 0, 1
        else:
            e, c = self._epoch, self._consumed
            end = self.data_cfg.num_epochs if self.data_cfg.num_epochs is not None else math.inf
        while e < end:
            while c + G <= N:
                yield e, c + self.rank * B
                c += G
            e, c = e + 1, 0

    def _chunks(self) -> Iterator[tuple[int, list[int]]]:
        """Chunks of consecutive micro-batches of one epoch: (epoch, [first positions])."""
        cur_e = 0  # the epoch of cur's positions
        cur: list[int] = []
        for e, p in self._batches():
            if cur and (e != cur_e or len(cur) == self.chunk_batches):
                yield cur_e, cur
                cur = []
            cur_e = e
            cur.append(p)
        if cur:
            yield cur_e, cur

    def block_reader(self) -> BlockReader:
        if self._reader is None:
            self._reader = BlockReader(
                self.artifact,
                self.artifact.vocab_size,
                self._max_row,
                self.mask_cfg.candidate_column,
                self.mask_cfg.excluded_entity_labels,
                capacity=2 * self.data_cfg.shuffle_window + 4,
                segments=self.data_cfg.segments == 2,
                shard_cache=self.shard_cache,
                shard_order=self.blocks.shard_paths,
            )
        return self._reader

    def make_chunk(self, epoch: int, firsts: list[int]) -> list[dict[str, torch.Tensor]]:
        """Read, mask and collate the micro-batches starting at stream positions ``firsts`` of ``epoch``."""
        B = self.micro_batch_size
        positions = (np.asarray(firsts, dtype=np.int64)[:, None] + np.arange(B)[None, :]).ravel()
        masked, pairs = self.masked_rows(epoch, positions)
        batches = self.masker.collate_chunk(masked, B)
        if pairs is not None:
            add_pair_fields(batches, *pairs)
        return batches

    def masked_rows(self, epoch: int, positions: np.ndarray) -> tuple[Masked, tuple[np.ndarray, np.ndarray] | None]:
        """The rows at stream ``positions`` of ``epoch``, masked, and with two segments their (A lengths, NSP
        labels); ``make_chunk`` collates them, a mixture (``trainer.data.mixture``) interleaves several sources'."""
        blk, row = self.order(epoch).locate(positions)
        b = self.blocks
        where = [(b.shard_paths[b.shard[k]], int(b.batch[k]), int(b.rows[k]), int(r)) for k, r in zip(blk, row)]
        rows = self.block_reader().gather(where)
        sample_ids = b.first_sample[blk] + row
        mask_epoch = epoch if self.split == "train" else 0
        pairs = None
        if self.data_cfg.segments == 2:
            rows, a_len, label = self._pair_rows(mask_epoch, epoch, positions, rows, sample_ids)
            pairs = (a_len, label)
        return self.masker.mask(rows, sample_ids, mask_epoch), pairs

    def _pair_rows(self, draw_epoch: int, epoch: int, positions: np.ndarray, rows: Rows, sample_ids: np.ndarray):
        """(A [SEP] B rows, A lengths, NSP labels): trainer.data.segments, B's other rows from the same window."""
        draws = pair_draws(self.data_cfg.seed, draw_epoch, sample_ids)
        order = self.order(epoch)
        w = np.searchsorted(order.win_start, positions, side="right") - 1
        cand = other_positions(draws, order.win_start[w], order.win_start[w + 1])
        blk, row = order.locate(cand.ravel())
        b = self.blocks
        others = self.block_reader().gather(
            [(b.shard_paths[b.shard[k]], int(b.batch[k]), int(b.rows[k]), int(r)) for k, r in zip(blk, row)]
        )
        return build_pairs(
            rows,
            others,
            draws,
            max_seq_len=self.data_cfg.max_seq_len,
            short_seq_prob=self.data_cfg.short_seq_prob,
            sep_id=self.masker.sep_id,
        )

    def __iter__(self) -> Iterator[list[dict[str, torch.Tensor]] | WorkerDataError]:
        return this_workers_chunks(self._chunks(), lambda job: self.make_chunk(*job))
