"""One rank's stream of masked micro-batches over a weighted mixture of artifacts (:class:`MixtureStream`).

The order is ``trainer.data.mixture_order`` (proportions, epochs, passes); every source is read through its own
``ArtifactStream`` (``trainer.data.sources``), so its shards are checked against its manifest, it uses the shard
cache, and its rows are masked with its own masker. Consumption, ranks and workers work as for one artifact
(``trainer.data.stream``): one global step takes ``G = micro_batch_size * world_size`` consecutive positions, rank
``r`` the ``r``-th ``B`` of them, DataLoader worker ``k`` the chunks ``m`` with ``m % num_workers == k``, so the
batches do not depend on ``num_workers`` and the stream does not depend on the world size. Unlike one artifact,
the stream is continuous across epochs (nothing is left out at an epoch's end). Everything per source is keyed by
its name, never by its place in ``--data``: the sources are taken in name order (``trainer.data.sources.by_name``),
so the order, the state and the batches are the same for any order of ``--data``. Batches carry ``source`` [B] (the
source's index in name order, ``MixtureStream.names``) next to ``sample_id`` [B] (the row's sample id in its own
artifact). A micro-batch holds the rows of its ``B`` positions grouped by source (in name order), each source's rows
in stream order: the order within a micro-batch does not matter to training, and each source's rows are collated
straight from its own masked chunk.

State dict (plain dict)::

    {"format": "spanprep-mixture-state", "version": 2, "split": "train",
     "consumed_samples": 4096,            # positions delivered since the segment began (below)
     "epoch": 2,                          # the mixture epoch of the next position
     "total_consumed_samples": 123904,    # since the start of the run
     "samples_per_epoch": 31000, "per_epoch": {"wiki": 1000, "books": 30000},
     "segment": {"epoch": 0, "base": {"wiki": 0, "books": 0}},
     "sources": {"wiki": {"uri": ..., "fingerprint": ..., "num_samples": 1000, "samples": 2130, "passes": 2}, ...},
     "seed": 0, "shuffle_window": 16, "segments": 1, "world_size": 2, "micro_batch_size": 8,
     "mask_scheme": "span", "mask_seed": 0}

``sources[name]["samples"]`` is how many samples of the source the stream has delivered since the start of the
run, ``passes`` how many full passes over it that makes.

Resuming with other weights or another ``--samples-per-epoch`` (the same sources): the run continues, and a new
*segment* of the stream begins: every source continues its own stream where it stopped (``segment.base`` = its
samples drawn so far, so within each source nothing is repeated or skipped), the new proportions apply from there,
and the epoch under way counts as ended (the segment starts at the next epoch number). Another set of sources,
another content of a source, seed, shuffle window, segments or (strict) masking is refused naming the difference.

Version 1 states (written while the order followed ``--data`` and its windows grew with the ratio of the weights)
resume as a new segment too: their per-source counts are by name, so nothing is repeated or skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from schemas.artifact import Artifact
from trainer.data.blocks import open_artifact
from trainer.data.checks import check_tokenizer
from trainer.data.config import DataConfig
from trainer.data.mixture_order import MixtureOrder
from trainer.data.segments import add_pair_fields
from trainer.data.sources import Source, by_name, check_sources, source_stream
from trainer.data.stream import MAX_CHUNK_ROWS, ArtifactStream
from trainer.data.stream_loader import Stream, StreamLoader, this_workers_chunks
from trainer.masking import Collator, Masked, MaskingConfig

STATE_FORMAT = "spanprep-mixture-state"
STATE_VERSION = 2
OLD_STATE_VERSIONS = (1,)  # resumed as a new segment (module docstring)


def collate_grouped(collator: Collator, parts: list[Masked], part: np.ndarray, row: np.ndarray, src: np.ndarray,
                    micro_batch_size: int) -> tuple[list[dict[str, torch.Tensor]], np.ndarray]:  # fmt: skip
    """Batches of ``micro_batch_size`` consecutive positions, position ``j`` being row ``row[j]`` of
    ``parts[part[j]]`` (source ``src[j]``); within a batch the rows are grouped by part (source, then pass), each
    part's rows in stream order, so each is written straight from its part (no merged copy). Every tensor of the
    chunk shares one storage (one shared-memory segment from a worker, as ``Collator.collate_chunk``). Returns the
    batches and the positions in batch order (for per-row extras such as NSP fields)."""
    B = micro_batch_size
    n = len(part)
    order = np.lexsort((np.arange(n), part, np.arange(n) // B))
    runs = []  # per batch: (part, first row, rows, source)
    for b in range(n // B):
        rows = order[b * B : (b + 1) * B]
        cut = np.flatnonzero(np.diff(part[rows])) + 1
        runs.append([(int(part[r[0]]), int(row[r[0]]), len(r), int(src[r[0]])) for r in np.split(rows, cut)])
    shapes = [max(collator._batch_shape(parts[k], a, a + m)[1] for k, a, m, _ in rr) for rr in runs]
    sizes = [6 * B * T + 2 * B for T in shapes]
    buf = np.empty(int(sum(sizes)), dtype=np.int64)
    t = torch.from_numpy(buf)
    batches, off = [], 0
    for rr, T, size in zip(runs, shapes, sizes):
        block = buf[off : off + 6 * B * T].reshape(6, B, T)
        ids, first = buf[off + 6 * B * T : off + 6 * B * T + B], 0
        source = buf[off + 6 * B * T + B : off + size]
        for k, a, m, s_ in rr:
            collator._fill(parts[k], a, a + m, block[:, first : first + m, :])
            ids[first : first + m] = parts[k].sample_ids[a : a + m]
            source[first : first + m] = s_
            first += m
        batch = Collator._as_batch(t[off : off + 6 * B * T].view(6, B, T), t[off + 6 * B * T : off + 6 * B * T + B])
        batch["source"] = t[off + 6 * B * T + B : off + size]
        batches.append(batch)
        off += size
    return batches, order


class MixtureStream(Stream):
    """One rank's stream over a mixture of sources (module docstring); iterating yields chunks of batch dicts."""

    def __init__(
        self,
        sources: list[Source],
        streams: list[ArtifactStream],
        data_cfg: DataConfig,
        mask_cfg: MaskingConfig,
        *,
        rank: int = 0,
        world_size: int = 1,
    ):
        super().__init__()
        sources, streams = by_name(list(sources), list(streams))  # name order, never --data order
        self.sources, self.streams = sources, streams
        self.names = [s.name for s in sources]
        self.data_cfg, self.mask_cfg = data_cfg, mask_cfg
        self.rank, self.world_size, self.split = rank, world_size, "train"
        weights = None if sources[0].weight is None else [float(s.weight or 0) for s in sources]
        self.order = MixtureOrder(
            self.names, [st.num_samples for st in streams], weights, data_cfg.seed, data_cfg.samples_per_epoch
        )
        self.micro_batch_size = data_cfg.micro_batch_size
        self.global_batch_size = self.micro_batch_size * world_size
        if data_cfg.worker_chunk_batches is not None:
            self.chunk_batches = data_cfg.worker_chunk_batches
        else:
            # each source masks about as many rows at a time as one artifact's loader does (a mask call has a fixed
            # cost: half-size calls cost 7% of the throughput; benchmarks/RESULTS.md)
            per_source = min(streams[0].chunk_batches, MAX_CHUNK_ROWS // self.micro_batch_size)
            self.chunk_batches = max(1, len(streams) * per_source)
        self.shard_cache = streams[0].shard_cache  # the first source's files (tokenizer.json) for the checkpoint
        self.shard_checks = {
            k: sum((st.shard_checks or {}).get(k, 0) for st in streams) for k in ("hashed", "cached", "size")
        }
        self.masker = streams[0].masker  # collates: every source has the same special ids (check_sources)
        self._epoch0 = 0  # the segment's first epoch
        self._base = np.zeros(len(streams), dtype=np.int64)  # samples of each source drawn before the segment
        self._consumed = 0  # positions delivered in this segment
        self._total_consumed = 0
        self._generation = 0
        self.weights_changed_on_resume: list[str] = []

    # -- sizes -------------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return self.order.M

    @property
    def epoch(self) -> int:
        return self._epoch0 + self._consumed // self.order.M

    def _limit(self) -> float:
        """Positions of this segment the stream may deliver (--num-epochs)."""
        if self.data_cfg.num_epochs is None:
            return math.inf
        return max(0, self.data_cfg.num_epochs - self._epoch0) * self.order.M

    @property
    def num_batches(self) -> int | None:
        limit = self._limit()
        if limit == math.inf:
            return None
        return max(0, int(limit) - self._consumed) // self.global_batch_size

    def drawn(self) -> dict[str, int]:
        """Samples of each source delivered since the start of the run."""
        counts = self._base + self.order.drawn(self._consumed, self._epoch0)
        return {n: int(c) for n, c in zip(self.names, counts)}

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        drawn = self.drawn()
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "split": "train",
            "consumed_samples": self._consumed,
            "epoch": self.epoch,
            "total_consumed_samples": self._total_consumed,
            "samples_per_epoch": self.order.M,
            "per_epoch": self.order.per_epoch,
            "segment": {"epoch": self._epoch0, "base": {n: int(b) for n, b in zip(self.names, self._base)}},
            "sources": {
                s.name: {
                    "uri": s.uri,
                    "fingerprint": st.fingerprint,
                    "num_samples": st.num_samples,
                    "samples": drawn[s.name],
                    "passes": drawn[s.name] // st.num_samples,
                }
                for s, st in zip(self.sources, self.streams)
            },
            "seed": self.data_cfg.seed,
            "shuffle_window": self.data_cfg.shuffle_window,
            "segments": self.data_cfg.segments,
            "world_size": self.world_size,
            "micro_batch_size": self.micro_batch_size,
            "mask_scheme": self.mask_cfg.scheme,
            "mask_seed": self.mask_cfg.seed,
        }

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Continue from ``state`` (any world size / micro batch size; other weights start a new segment)."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"the saved data position is not a mixture's (format {state.get('format') if isinstance(state, Mapping) else None!r}): "
                f"a run trained on one artifact resumes with that one --data PATH"
            )
        version = state.get("version")
        if version != STATE_VERSION and version not in OLD_STATE_VERSIONS:
            raise ValueError(f"mixture state version {version} is not supported (this code writes {STATE_VERSION})")
        mine = self.state_dict()
        saved_names, names = sorted(state["sources"]), sorted(self.names)
        if saved_names != names:
            raise ValueError(
                f"the checkpoint's mixture has sources {', '.join(saved_names)}, this run {', '.join(names)}: "
                f"resume with the same --data NAME=PATH sources (weights may change)"
            )
        diff = [
            f"{n}.{k}: saved {state['sources'][n][k]!r}, now {mine['sources'][n][k]!r}"
            for n in self.names
            for k in ("fingerprint", "num_samples")
            if state["sources"][n][k] != mine["sources"][n][k]
        ]
        keys = ["split", "seed", "shuffle_window", "segments"] + (["mask_scheme", "mask_seed"] if strict else [])
        diff += [f"{k}: saved {state.get(k)!r}, now {mine[k]!r}" for k in keys if state.get(k) != mine[k]]
        if diff:
            raise ValueError(
                "cannot resume the mixture: the saved state belongs to another stream (" + "; ".join(diff) + "). "
                "Resume with the same sources (content and held-out shards), seed, shuffle_window, segments"
                + (" and masking config" if strict else "")
            )
        consumed = int(state["consumed_samples"])
        if consumed < 0:
            raise ValueError(f"mixture state has consumed_samples {consumed}")
        seg = state["segment"]
        same_order = version == STATE_VERSION
        if same_order and state["samples_per_epoch"] == self.order.M and state["per_epoch"] == self.order.per_epoch:
            self._epoch0, self._consumed = int(seg["epoch"]), consumed
            self._base = np.asarray([int(seg["base"][n]) for n in self.names], dtype=np.int64)
            self.weights_changed_on_resume = []
        else:  # a new segment: each source continues where it stopped, the epoch under way ends
            old_m = int(state["samples_per_epoch"])
            self._epoch0 = int(seg["epoch"]) + -(-consumed // old_m)
            self._base = np.asarray([int(state["sources"][n]["samples"]) for n in self.names], dtype=np.int64)
            self._consumed = 0
            per_epoch = ", ".join(f"{n} {state['per_epoch'].get(n)} -> {self.order.per_epoch[n]}" for n in self.names)
            what = (
                f"mixture weights: samples per epoch {old_m} -> {self.order.M} ({per_epoch})"
                if same_order
                else f"mixture order: the checkpoint's loader state is version {version}, this code's order is "
                f"version {STATE_VERSION} (sources in name order)"
            )
            self.weights_changed_on_resume = [
                f"{what}; every source continues its own stream where it stopped, and epoch {self._epoch0} starts "
                + ("with the new proportions" if same_order else "in the new order")
            ]
        self._total_consumed = int(state.get("total_consumed_samples", 0))
        self._generation += 1

    def _advance(self) -> None:
        """One micro-batch of this rank was delivered: one global step of G samples is consumed."""
        self._total_consumed += self.global_batch_size
        self._consumed += self.global_batch_size

    # -- iteration ---------------------------------------------------------------------------
    def _chunks(self) -> Iterator[list[int]]:
        """This rank's micro-batches from the current position (first segment positions), in chunks."""
        G, B, limit = self.global_batch_size, self.micro_batch_size, self._limit()
        c, cur = self._consumed, []
        while c + G <= limit:
            cur.append(c + self.rank * B)
            c += G
            if len(cur) == self.chunk_batches:
                yield cur
                cur = []
        if cur:
            yield cur

    def sources_at(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source index, pass, position in that pass's order) of segment positions."""
        src, count = self.order.locate(positions, self._epoch0)
        count = count + self._base[src]
        sizes = np.asarray([st.num_samples for st in self.streams], dtype=np.int64)[src]
        return src, count // sizes, count % sizes

    def make_chunk(self, firsts: list[int]) -> list[dict[str, torch.Tensor]]:
        """Read, mask and collate the micro-batches starting at segment positions ``firsts``."""
        B = self.micro_batch_size
        positions = (np.asarray(firsts, dtype=np.int64)[:, None] + np.arange(B)[None, :]).ravel()
        src, passes, pos = self.sources_at(positions)
        parts: list[Masked] = []
        a_len, label = np.zeros(len(positions), np.int64), np.zeros(len(positions), np.int64)
        part, row = np.empty(len(positions), np.int64), np.empty(len(positions), np.int64)
        for s, p in sorted(set(zip(src.tolist(), passes.tolist()))):
            sel = np.flatnonzero((src == s) & (passes == p))
            masked, pairs = self.streams[s].masked_rows(p, pos[sel])
            part[sel], row[sel] = len(parts), np.arange(len(sel))
            parts.append(masked)
            if pairs is not None:
                a_len[sel], label[sel] = pairs
        batches, order = collate_grouped(self.masker.collator, parts, part, row, src, B)
        if self.data_cfg.segments == 2:
            add_pair_fields(batches, a_len[order], label[order])
        return batches

    def __iter__(self) -> Iterator[Any]:
        return this_workers_chunks(self._chunks(), self.make_chunk)


def build_mixture_loaders(
    sources: list[Source],
    data_cfg: DataConfig,
    mask_cfg: MaskingConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    expected_vocab_size: int | None = None,
    expected_special_token_ids: Mapping[str, int] | None = None,
    with_eval: bool = False,
    artifacts: list[Artifact] | None = None,
    length_from: str = "DataConfig.max_seq_len",
) -> tuple[StreamLoader, MixtureStream, dict[str, StreamLoader]]:
    """(loader, dataset) of this rank's training stream over the mixture, and (``with_eval``) each source's
    evaluation loader over its held-out shards, by name. The sources are taken in name order and checked against each other first
    (``trainer.data.sources.check_sources``; ``length_from`` says where ``data_cfg.max_seq_len`` came from)."""
    artifacts = artifacts if artifacts is not None else [open_artifact(s.uri) for s in sources]
    sources, artifacts = by_name(sources, artifacts)  # name order, never --data order
    check_sources(sources, artifacts, data_cfg.max_seq_len, mask_cfg, length_from)
    if expected_vocab_size is not None or expected_special_token_ids:
        check_tokenizer(
            artifacts[0],
            vocab_size=expected_vocab_size if expected_vocab_size is not None else artifacts[0].vocab_size,
            special_token_ids=expected_special_token_ids,
        )

    def stream(k: int, split: str) -> ArtifactStream:
        return source_stream(
            sources[k], artifacts[k], data_cfg, mask_cfg, rank=rank, world_size=world_size, split=split
        )

    dataset = MixtureStream(
        sources, [stream(k, "train") for k in range(len(sources))], data_cfg, mask_cfg, rank=rank, world_size=world_size
    )
    evals = {s.name: StreamLoader(stream(k, "eval")) for k, s in enumerate(sources)} if with_eval else {}
    return StreamLoader(dataset), dataset, evals
