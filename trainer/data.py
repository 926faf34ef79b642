"""Streaming loader: the artifact's Arrow shards -> masked SpanBERT batches, resumable at any step.

Interface (what ``trainer/pretrain.py`` calls)
----------------------------------------------
::

    from trainer.data import DataConfig, build_train_loader, build_eval_loader, check_tokenizer
    from trainer.masking import MaskingConfig

    data_cfg = DataConfig(artifact="gs://bucket/corpus", seed=0, micro_batch_size=8, num_workers=2)
    mask_cfg = MaskingConfig(scheme="span", seed=0)
    loader, dataset = build_train_loader(data_cfg, mask_cfg, rank=rank, world_size=world_size,
                                         expected_vocab_size=model_cfg.vocab_size,
                                         expected_special_token_ids={"pad": 0, "cls": 2, "sep": 3, "mask": 4})
    loader.load_state_dict(saved)      # optional, BEFORE iterating (resume; any world size)
    it = iter(loader)                  # infinite unless DataConfig.num_epochs is set
    batch = next(it)                   # dict, see trainer/masking.py: input_ids, attention_mask, labels,
                                       # span_left, span_right, span_position [B, T] and sample_id [B];
                                       # DataConfig.segments == 2 adds token_type_ids [B, T] and
                                       # next_sentence_label [B] (trainer/segments.py)
    state = loader.state_dict()        # == dataset.state_dict(): plain dict, save it in the checkpoint

    eval_loader, eval_set = build_eval_loader(data_cfg, mask_cfg, rank=rank, world_size=world_size)
    for batch in eval_loader: ...      # one pass over the held-out shards, same batches every time

``loader`` is a :class:`StreamLoader` (a ``torch.utils.data.DataLoader``); ``dataset`` an
:class:`ArtifactStream` (a ``torch.utils.data.IterableDataset``). ``check_tokenizer(artifact, vocab_size=,
special_token_ids=)`` raises :class:`TokenizerMismatchError` naming both sides; the builders call it when
given ``expected_*``. Every artifact problem (missing, incomplete, unknown format version, corrupt shard)
raises ``schemas.format.FormatError`` with a message naming the file; config mistakes raise ``ValueError``.
Building a loader checks its split's shards against the manifest first (size, and sha256 as
``DataConfig.verify_shards`` says: once per node by default; ``schemas/integrity.py``).

Splits
------
The last ``DataConfig.eval_shards`` shards (manifest order) are held out for evaluation, the others are
trained on. Shards are filled by a hash of the document id, so the held-out shards are a random sample of
documents, disjoint from the training documents. Sample id = global row index: the row's position when the
rows of *all* shards are numbered in manifest order (shard 0's rows, then shard 1's, ...); masks are keyed
on it, so it is the same id in both splits and for every reader.

Global order (a pure function of (seed, epoch))
-----------------------------------------------
A *block* is one record batch of a shard (``rows_per_batch`` = 128 rows, fewer in a shard's last one).
For epoch ``e`` of the training split:

1. permute all blocks of all training shards (``Philox(key=(seed << 32 | e, 0))``);
2. cut the permuted list into windows of ``shuffle_window`` consecutive blocks;
3. shuffle the rows within each window (window ``w``: ``Philox(key=(seed << 32 | e, w + 1))``);
4. the epoch's stream is the windows' rows one after another: ``N`` rows, positions ``0..N-1``.

So samples are shuffled across shards (step 1) and across rows of ``shuffle_window`` blocks (step 3); a
worker holds at most about two windows of decoded rows. The evaluation split is not shuffled: blocks in
manifest order, rows in shard order.

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

Layout assumption: every record batch of a shard holds ``rows_per_batch`` rows except the last; the loader
checks each shard's batch count when it opens it and each batch's row count when it reads it, and fails
naming the shard otherwise.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from schemas import format as fmt
from schemas.artifact import Artifact
from trainer import segments
from trainer.masking import Masker, MaskingConfig, Rows

STATE_FORMAT = "spanprep-loader-state"
STATE_VERSION = 1
# A worker masks and collates this many rows at most at a time (a chunk of micro-batches); the chunk's
# tensors share one storage, so it crosses to the training process as one shared-memory segment.
MAX_CHUNK_ROWS = 256
_SEED_LIMIT = 1 << 32


class TokenizerMismatchError(ValueError):
    """The artifact was tokenized with another vocabulary than the model expects."""


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
    max_seq_len: int = 512  # [CLS] + row + [SEP] must fit; the artifact's rows must be <= max_seq_len - 2
    eval_shards: int = 1  # the last eval_shards shards (manifest order) are held out for evaluation
    num_epochs: int | None = None  # None: the training stream never ends; else it stops after num_epochs epochs
    worker_chunk_batches: int | None = None  # micro-batches per worker chunk; None: one shuffle window, at most 256 rows
    verify_shards: Literal["once", "always", "off"] = "once"  # check each shard's sha256 against the manifest: once per node (cached), always, or off (sizes only)
    segments: int = 1  # 1: one segment per row (SpanBERT); 2: [CLS] A [SEP] B [SEP] pairs for NSP (BERT; trainer/segments.py)
    short_seq_prob: float = 0.1  # segments 2: share of pairs with a random shorter target length (BERT 0.1)

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
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < _SEED_LIMIT:
            bad(f"seed must be an integer in [0, 2**32); got {self.seed!r}")
        if not isinstance(self.pin_memory, bool):
            bad(f"pin_memory must be a bool; got {self.pin_memory!r}")
        if self.verify_shards not in ("once", "always", "off"):
            bad(f"verify_shards must be once, always or off; got {self.verify_shards!r}")
        if self.segments not in (1, 2) or isinstance(self.segments, bool):
            bad(f"segments must be 1 or 2; got {self.segments!r}")
        if self.segments == 2 and self.max_seq_len < 5:
            bad(f"segments 2 needs max_seq_len >= 5 ([CLS] A [SEP] B [SEP]); got {self.max_seq_len}")
        if isinstance(self.short_seq_prob, bool) or not isinstance(self.short_seq_prob, (int, float)) or not 0 <= self.short_seq_prob <= 1:
            bad(f"short_seq_prob must be in [0, 1]; got {self.short_seq_prob!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DataConfig":
        from trainer.config import config_from_dict

        return config_from_dict(cls, d)


# ------------------------------------------------------------------------------------------------
def check_tokenizer(artifact: Artifact | Mapping[str, Any], *, vocab_size: int, special_token_ids: Mapping[str, int] | None = None) -> None:
    """Raise :class:`TokenizerMismatchError` unless the artifact's tokenizer matches the model's.

    ``artifact``: an :class:`Artifact` or its manifest. ``vocab_size`` must be equal; every special token
    named in ``special_token_ids`` (any of pad, unk, cls, sep, mask) must have the same id.
    """
    manifest = artifact.manifest if isinstance(artifact, Artifact) else artifact
    where = artifact.uri if isinstance(artifact, Artifact) else "artifact"
    tok = manifest.get("tokenizer") or {}
    a_vocab = tok.get("vocab_size")
    a_special = dict(tok.get("special_token_ids") or {})
    problems = []
    if a_vocab != vocab_size:
        problems.append(f"vocab_size {a_vocab} (artifact) != {vocab_size} (model)")
    for name, mid in (special_token_ids or {}).items():
        if a_special.get(name) != mid:
            problems.append(f"[{name.upper()}] id {a_special.get(name)} (artifact) != {mid} (model)")
    if problems:
        raise TokenizerMismatchError(
            f"{where}: tokenizer mismatch: {'; '.join(problems)}. The artifact was tokenized with "
            f"vocab_size={a_vocab}, special_token_ids={a_special}; the model config expects vocab_size={vocab_size}, "
            f"special_token_ids={dict(special_token_ids or {})}. Train with a model config of the artifact's tokenizer "
            f"(its tokenizer.json) or rebuild the artifact with the model's tokenizer."
        )


def open_artifact(uri: str) -> Artifact:
    """``Artifact.open`` (refuses missing/incomplete/unknown-version artifacts with a FormatError)."""
    return Artifact.open(uri)


def split_shards(artifact: Artifact, eval_shards: int) -> tuple[list[int], list[int]]:
    """(train shard indices, eval shard indices): the last ``eval_shards`` shards are held out."""
    num = len(artifact.manifest["shards"])
    if eval_shards >= num:
        raise ValueError(
            f"DataConfig.eval_shards={eval_shards} but {artifact.uri} has {num} shard(s): at least one shard must remain "
            f"for training (rebuild with more --num-shards or lower eval_shards)"
        )
    return list(range(num - eval_shards)), list(range(num - eval_shards, num))


# ------------------------------------------------------------------------------------------------
class _BlockReader:
    """Reads and decodes blocks (record batches) for one process, with an LRU cache of decoded blocks."""

    def __init__(self, artifact: Artifact, vocab_size: int, max_row_tokens: int, span_column: str | None, excluded_labels: tuple[str, ...], capacity: int,
                 segments: bool = False):
        self.segments = segments  # also read sentence_start and doc_id (trainer.segments)
        self.artifact = artifact
        self.vocab_size = vocab_size
        self.max_row_tokens = max_row_tokens
        self.span_column = span_column
        self.excluded_labels = pa.array(list(excluded_labels), type=pa.string())
        self.capacity = capacity
        self._readers: OrderedDict[str, Any] = OrderedDict()
        self._cache: OrderedDict[tuple[str, int], dict] = OrderedDict()
        self.blocks_read: list[tuple[str, int]] = []  # (shard path, batch index) in read order, for tests

    def _reader(self, rel: str):
        r = self._readers.get(rel)
        if r is None:
            r = self.artifact.open_shard(rel)
            self._readers[rel] = r
            while len(self._readers) > 16:
                self._readers.popitem(last=False)
        else:
            self._readers.move_to_end(rel)
        return r

    def block(self, rel: str, batch_index: int, expected_rows: int) -> dict:
        key = (rel, batch_index)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        where = self.artifact.display(rel)
        reader = self._reader(rel)
        try:
            rb = reader.get_batch(batch_index)
            rb.validate(full=True)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise fmt.FormatError(f"{where}: record batch {batch_index} cannot be read (corrupt or truncated shard): {e}") from None
        self.blocks_read.append(key)
        dec = self._decode(rb, where, batch_index, expected_rows)
        self._cache[key] = dec
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return dec

    @staticmethod
    def _list(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        offs = arr.offsets.to_numpy().astype(np.int64)
        vals = arr.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
        return offs - offs[0], vals

    def _decode(self, rb: pa.RecordBatch, where: str, batch_index: int, expected_rows: int) -> dict:
        def bad(msg: str) -> None:
            raise fmt.FormatError(f"{where}: record batch {batch_index}: {msg}")

        if rb.num_rows != expected_rows:
            bad(f"has {rb.num_rows} rows, expected {expected_rows} (every batch but a shard's last holds rows_per_batch rows)")
        offs, vals = self._list(rb.column("input_ids"))
        ids = vals.to_numpy(zero_copy_only=False)
        ws_offs, ws_vals = self._list(rb.column("word_start"))
        if not np.array_equal(offs, ws_offs):
            bad("word_start and input_ids have different lengths")
        lengths = np.diff(offs)
        if len(lengths) and lengths.max() > self.max_row_tokens:
            bad(f"a row has {int(lengths.max())} tokens, more than {self.max_row_tokens} (max_seq_len - 2)")
        if len(ids) and int(ids.max()) >= self.vocab_size:
            bad(f"token id {int(ids.max())} >= vocab_size {self.vocab_size}")
        out = {"ids": ids, "offs": offs, "ws": ws_vals.to_numpy(zero_copy_only=False)}
        if self.segments:
            ss_offs, ss_vals = self._list(rb.column("sentence_start"))
            if not np.array_equal(offs, ss_offs):
                bad("sentence_start and input_ids have different lengths")
            out.update(ss_flags=ss_vals.to_numpy(zero_copy_only=False), doc=rb.column("doc_id").to_numpy(zero_copy_only=False))
        if self.span_column is not None:
            s_offs, s_vals = self._list(rb.column(self.span_column))
            starts = s_vals.field("start").to_numpy().astype(np.int64)
            ends = s_vals.field("end").to_numpy().astype(np.int64)
            srow = np.repeat(np.arange(rb.num_rows), np.diff(s_offs))
            if len(starts) and ((starts < 0).any() or (ends <= starts).any() or (ends > lengths[srow]).any()):
                bad(f"{self.span_column} has a span outside its row or empty (0 <= start < end <= len(input_ids) violated)")
            if self.span_column == "entity_spans" and len(self.excluded_labels) and len(starts):
                keep = ~pc.is_in(s_vals.field("label"), value_set=self.excluded_labels).to_numpy(zero_copy_only=False)
                starts, ends, srow = starts[keep], ends[keep], srow[keep]
                s_offs = np.concatenate([[0], np.cumsum(np.bincount(srow, minlength=rb.num_rows))]).astype(np.int64)
            out.update(ss=starts, se=ends, soffs=s_offs)
        return out

    def gather(self, where_rows: list[tuple[str, int, int, int]]) -> Rows:
        """Rows for ``(shard path, batch index, expected rows of that batch, row in batch)``, in order."""
        ids, ws, lens = [], [], []
        ss, se, sc = [], [], []
        sent, docs = [], []
        for rel, b, nrows, r in where_rows:
            blk = self.block(rel, b, nrows)
            a, z = blk["offs"][r], blk["offs"][r + 1]
            ids.append(blk["ids"][a:z])
            ws.append(blk["ws"][a:z])
            lens.append(z - a)
            if self.segments:
                sent.append(blk["ss_flags"][a:z])
                docs.append(blk["doc"][r])
            if self.span_column is not None:
                p, q = blk["soffs"][r], blk["soffs"][r + 1]
                ss.append(blk["ss"][p:q])
                se.append(blk["se"][p:q])
                sc.append(q - p)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        rows = Rows(
            input_ids=np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, np.int64),
            offsets=offsets,
            word_start=np.concatenate(ws).astype(bool) if ws else np.zeros(0, bool),
        )
        if self.span_column is not None:
            rows.span_starts = np.concatenate(ss) if ss else np.zeros(0, np.int64)
            rows.span_ends = np.concatenate(se) if se else np.zeros(0, np.int64)
            rows.span_offsets = np.concatenate([[0], np.cumsum(sc)]).astype(np.int64)
        if self.segments:
            rows.sentence_start = np.concatenate(sent).astype(bool) if sent else np.zeros(0, bool)
            rows.doc_id = np.array(docs, dtype=object)
        return rows


@dataclass(frozen=True)
class _Blocks:
    """The blocks of a split, in manifest order (parallel arrays)."""

    shard_paths: tuple[str, ...]  # relative shard paths of the split
    shard: np.ndarray  # index into shard_paths
    batch: np.ndarray  # record batch index within the shard
    rows: np.ndarray  # rows in the block
    first_sample: np.ndarray  # global sample id of the block's first row

    @property
    def num_samples(self) -> int:
        return int(self.rows.sum())


def _index_blocks(artifact: Artifact, shard_indices: list[int]) -> _Blocks:
    manifest = artifact.manifest
    rpb = int(manifest.get("rows_per_batch", fmt.ROWS_PER_BATCH))
    shard_rows = [int(s["rows"]) for s in manifest["shards"]]
    first_of_shard = np.concatenate([[0], np.cumsum(shard_rows)]).astype(np.int64)
    paths, shard, batch, rows, first = [], [], [], [], []
    for k, si in enumerate(shard_indices):
        rel = manifest["shards"][si]["path"]
        paths.append(rel)
        reader = artifact.open_shard(rel)
        nb = reader.num_record_batches
        expected = -(-shard_rows[si] // rpb)
        if nb != expected:
            raise fmt.FormatError(
                f"{artifact.display(rel)}: {nb} record batches for {shard_rows[si]} rows (manifest); expected {expected} "
                f"batches of {rpb} rows (the last one may be shorter)"
            )
        for b in range(nb):
            shard.append(k)
            batch.append(b)
            rows.append(min(rpb, shard_rows[si] - b * rpb))
            first.append(first_of_shard[si] + b * rpb)
    a = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return _Blocks(tuple(paths), a(shard), a(batch), a(rows), a(first))


class _EpochOrder:
    """Stream position -> (block, row in block) for one epoch (see the module docstring)."""

    def __init__(self, blocks: _Blocks, seed: int, epoch: int, window: int, shuffle: bool):
        self.blocks, self.seed, self.epoch, self.window, self.shuffle = blocks, seed, epoch, window, shuffle
        nb = len(blocks.rows)
        if shuffle:
            self.perm = self._rng(0).permutation(nb)
        else:
            self.perm = np.arange(nb)
            self.window = max(nb, 1)  # one window, rows unshuffled
        prow = blocks.rows[self.perm]
        self.nwin = -(-nb // self.window)
        win_rows = np.add.reduceat(prow, np.arange(0, nb, self.window)) if nb else np.zeros(0, np.int64)
        self.win_start = np.concatenate([[0], np.cumsum(win_rows)]).astype(np.int64)
        self._perm_prows = prow
        self._cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def _rng(self, k: int) -> np.random.Generator:
        return np.random.Generator(np.random.Philox(key=[(self.seed << 32) | self.epoch, k]))

    def _window(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        hit = self._cache.get(w)
        if hit is not None:
            return hit
        lo, hi = w * self.window, min((w + 1) * self.window, len(self.perm))
        cum = np.concatenate([[0], np.cumsum(self._perm_prows[lo:hi])]).astype(np.int64)
        n = int(cum[-1])
        rowperm = self._rng(w + 1).permutation(n) if self.shuffle else np.arange(n)
        self._cache[w] = (cum, rowperm)
        while len(self._cache) > 4:
            self._cache.popitem(last=False)
        return cum, rowperm

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(block index into the split's blocks, row within block) for stream positions."""
        positions = np.asarray(positions, dtype=np.int64)
        w = np.searchsorted(self.win_start, positions, side="right") - 1
        blk = np.empty_like(positions)
        row = np.empty_like(positions)
        for wu in np.unique(w):
            sel = w == wu
            cum, rowperm = self._window(int(wu))
            local = rowperm[positions[sel] - self.win_start[wu]]
            b = np.searchsorted(cum, local, side="right") - 1
            blk[sel] = self.perm[wu * self.window + b]
            row[sel] = local - cum[b]
        return blk, row

    def sample_ids(self, positions: np.ndarray) -> np.ndarray:
        blk, row = self.locate(positions)
        return self.blocks.first_sample[blk] + row


def _identity(x):
    return x


class ArtifactStream(IterableDataset):
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
        max_row = int(manifest.get("max_row_tokens", data_cfg.max_seq_len - 2))
        if max_row > data_cfg.max_seq_len - 2:
            raise ValueError(
                f"{artifact.uri} holds rows of up to {max_row} tokens (built for max_seq_len {manifest.get('max_seq_len')}); "
                f"DataConfig.max_seq_len={data_cfg.max_seq_len} leaves room for {data_cfg.max_seq_len - 2}: raise max_seq_len "
                f"or rebuild the artifact"
            )
        if split == "eval" and data_cfg.eval_shards == 0:
            raise ValueError("DataConfig.eval_shards is 0: there are no held-out shards to evaluate on")
        train_idx, eval_idx = split_shards(artifact, data_cfg.eval_shards)
        self.shard_indices = train_idx if split == "train" else eval_idx
        paths = [manifest["shards"][i]["path"] for i in self.shard_indices]
        self.shard_checks = artifact.check_shards(paths, data_cfg.verify_shards, start=rank)
        self.blocks = _index_blocks(artifact, self.shard_indices)
        self.micro_batch_size = data_cfg.micro_batch_size if split == "train" else (data_cfg.eval_micro_batch_size or data_cfg.micro_batch_size)
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
        self.masker = Masker.from_artifact(mask_cfg, artifact, max_seq_len=data_cfg.max_seq_len)
        self._max_row = data_cfg.max_seq_len - 2
        self._epoch = 0
        self._consumed = 0
        self._total_consumed = 0
        self._generation = 0
        self._reader: _BlockReader | None = None
        self._orders: OrderedDict[int, _EpochOrder] = OrderedDict()

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
        return left + max(0, self.data_cfg.num_epochs - self._epoch - 1) * self.steps_per_epoch if self._epoch < self.data_cfg.num_epochs else 0

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
    def order(self, epoch: int) -> _EpochOrder:
        o = self._orders.get(epoch)
        if o is None:
            o = _EpochOrder(self.blocks, self.data_cfg.seed, epoch, self.data_cfg.shuffle_window, self.shuffle)
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
            raise ValueError(f"loader state version {state.get('version')} is not supported (this code writes {STATE_VERSION})")
        mine = self.state_dict()
        keys = ["split", "seed", "shuffle_window", "num_samples", "fingerprint", "segments"] + (["mask_scheme", "mask_seed"] if strict else [])
        saved = {"segments": 1, **state}  # states written before two-segment inputs existed were one-segment
        diff = [f"{k}: saved {saved.get(k)!r}, now {mine[k]!r}" for k in keys if saved.get(k) != mine[k]]
        if diff:
            raise ValueError(
                "cannot resume the data stream: the saved state belongs to another stream (" + "; ".join(diff) + "). "
                "Resume with the same artifact, eval_shards, seed, shuffle_window, segments" + (" and masking config" if strict else "")
                + (" (or load_state_dict(..., strict=False) to change the masking)" if strict else "")
            )
        epoch, consumed = int(state["epoch"]), int(state["consumed_samples"])
        if epoch < 0 or not 0 <= consumed <= self.num_samples:
            raise ValueError(f"loader state has epoch {epoch}, consumed_samples {consumed}: out of range for {self.num_samples} samples")
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
        cur_e, cur = None, []
        for e, p in self._batches():
            if cur and (e != cur_e or len(cur) == self.chunk_batches):
                yield cur_e, cur
                cur = []
            cur_e = e
            cur.append(p)
        if cur:
            yield cur_e, cur

    def block_reader(self) -> _BlockReader:
        if self._reader is None:
            self._reader = _BlockReader(
                self.artifact,
                self.artifact.vocab_size,
                self._max_row,
                self.mask_cfg.candidate_column,
                self.mask_cfg.excluded_entity_labels,
                capacity=2 * self.data_cfg.shuffle_window + 4,
                segments=self.data_cfg.segments == 2,
            )
        return self._reader

    def make_chunk(self, epoch: int, firsts: list[int]) -> list[dict[str, torch.Tensor]]:
        """Read, mask and collate the micro-batches starting at stream positions ``firsts`` of ``epoch``."""
        B = self.micro_batch_size
        positions = (np.asarray(firsts, dtype=np.int64)[:, None] + np.arange(B)[None, :]).ravel()
        blk, row = self.order(epoch).locate(positions)
        b = self.blocks
        where = [(b.shard_paths[b.shard[k]], int(b.batch[k]), int(b.rows[k]), int(r)) for k, r in zip(blk, row)]
        rows = self.block_reader().gather(where)
        sample_ids = b.first_sample[blk] + row
        mask_epoch = epoch if self.split == "train" else 0
        pairs = None
        if self.data_cfg.segments == 2:
            rows, *pairs = self._pair_rows(mask_epoch, epoch, positions, rows, sample_ids)
        masked = self.masker.mask(rows, sample_ids, mask_epoch)
        batches = self.masker.collate_chunk(masked, B)
        if pairs is not None:
            segments.add_pair_fields(batches, *pairs)
        return batches

    def _pair_rows(self, draw_epoch: int, epoch: int, positions: np.ndarray, rows: Rows, sample_ids: np.ndarray):
        """(A [SEP] B rows, A lengths, NSP labels): trainer.segments, B's other rows from the same window."""
        draws = segments.pair_draws(self.data_cfg.seed, draw_epoch, sample_ids)
        order = self.order(epoch)
        w = np.searchsorted(order.win_start, positions, side="right") - 1
        cand = segments.other_positions(draws, order.win_start[w], order.win_start[w + 1])
        blk, row = order.locate(cand.ravel())
        b = self.blocks
        others = self.block_reader().gather([(b.shard_paths[b.shard[k]], int(b.batch[k]), int(b.rows[k]), int(r)) for k, r in zip(blk, row)])
        return segments.build_pairs(rows, others, draws, max_seq_len=self.data_cfg.max_seq_len,
                                    short_seq_prob=self.data_cfg.short_seq_prob, sep_id=self.masker.sep_id)

    def __iter__(self) -> Iterator[list[dict[str, torch.Tensor]]]:
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        for m, (epoch, firsts) in enumerate(self._chunks()):
            if m % nw == wid:
                yield self.make_chunk(epoch, firsts)


class StreamLoader(DataLoader):
    """A DataLoader over an :class:`ArtifactStream` that yields micro-batches and tracks consumption.

    Iterating yields batch dicts; the dataset's state advances by one global step per batch *handed out*,
    so ``state_dict()`` taken between batches resumes exactly at the next one. Every ``iter()`` starts
    from the current state (the training split) or from the start (the evaluation split).
    """

    def __init__(self, dataset: ArtifactStream):
        cfg = dataset.data_cfg
        super().__init__(
            dataset,
            batch_size=None,
            num_workers=cfg.num_workers,
            collate_fn=_identity,
            pin_memory=cfg.pin_memory,
            prefetch_factor=cfg.prefetch_factor if cfg.num_workers > 0 else None,
            persistent_workers=False,
            in_order=True,
        )

    def __iter__(self):
        ds: ArtifactStream = self.dataset
        ds._generation += 1
        generation = ds._generation
        return self._flatten(super().__iter__(), ds, generation)

    @staticmethod
    def _flatten(chunks, ds: ArtifactStream, generation: int):
        for chunk in chunks:
            for batch in chunk:
                if ds._generation != generation:
                    raise RuntimeError("the loader's state was loaded or a new iterator was created: iterate the loader again")
                if ds.split == "train":
                    ds._advance()
                yield batch

    def __len__(self) -> int:
        n = self.dataset.num_batches
        if n is None:
            raise TypeError("the training stream is infinite (DataConfig.num_epochs is None): it has no length")
        return n

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        self.dataset.load_state_dict(state, strict=strict)


def _build(split: str, data_cfg: DataConfig, mask_cfg: MaskingConfig, rank: int, world_size: int, expected_vocab_size, expected_special_token_ids):
    artifact = open_artifact(data_cfg.artifact)
    if expected_vocab_size is not None or expected_special_token_ids:
        check_tokenizer(
            artifact,
            vocab_size=expected_vocab_size if expected_vocab_size is not None else artifact.vocab_size,
            special_token_ids=expected_special_token_ids,
        )
    dataset = ArtifactStream(artifact, data_cfg, mask_cfg, rank=rank, world_size=world_size, split=split)
    return StreamLoader(dataset), dataset


def build_train_loader(
    data_cfg: DataConfig,
    mask_cfg: MaskingConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    expected_vocab_size: int | None = None,
    expected_special_token_ids: Mapping[str, int] | None = None,
) -> tuple[StreamLoader, ArtifactStream]:
    """(loader, dataset) of this rank's training stream (module docstring). ``expected_*``: the model's
    tokenizer settings, checked against the artifact's (:func:`check_tokenizer`)."""
    return _build("train", data_cfg, mask_cfg, rank, world_size, expected_vocab_size, expected_special_token_ids)


def build_eval_loader(
    data_cfg: DataConfig,
    mask_cfg: MaskingConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    expected_vocab_size: int | None = None,
    expected_special_token_ids: Mapping[str, int] | None = None,
) -> tuple[StreamLoader, ArtifactStream]:
    """(loader, dataset) of this rank's part of one pass over the held-out shards: unshuffled, masks with
    epoch 0 (the same every evaluation), ``len(loader)`` batches on every rank (the tail that does not fill a
    global step is not used)."""
    return _build("eval", data_cfg, mask_cfg, rank, world_size, expected_vocab_size, expected_special_token_ids)
