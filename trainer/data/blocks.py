"""Shard blocks: the splits' shards, the index of their record batches ("blocks") and the reader that decodes
them and checks the row invariants (``schemas/invariants.py``, shared with ``pipeline.verify``).

Splits
------
The last ``DataConfig.eval_shards`` shards (manifest order) are held out for evaluation, the others are
trained on. Shards are filled by a hash of the document id, so the held-out shards are a random sample of
documents, disjoint from the training documents. Sample id = global row index: the row's position when the
rows of *all* shards are numbered in manifest order (shard 0's rows, then shard 1's, ...); masks are keyed
on it, so it is the same id in both splits and for every reader.


Layout assumption: every record batch of a shard holds ``rows_per_batch`` rows except the last; the loader
checks each shard's batch count when it opens it and each batch's row count when it reads it, and fails
naming the shard otherwise.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import format as fmt
from schemas import invariants as inv
from schemas.artifact import Artifact
from trainer.data.shard_cache import ShardCache
from trainer.masking import Rows


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


def special_added_tokens(artifact: Artifact, shard_cache: ShardCache | None = None) -> dict[int, str]:
    """id -> content of the added tokens the artifact's tokenizer.json marks special (FORMAT.md: no row holds one,
    except the roles ``schemas.invariants.ALLOWED_SPECIAL_ROLES`` allows)."""
    entry = artifact.manifest["tokenizer"]
    where = artifact.display(entry["file"])
    try:
        data = shard_cache.read_file(entry["file"], entry) if shard_cache is not None else None
        added = json.loads(artifact.tokenizer_json(data)).get("added_tokens") or []
        return {int(t["id"]): str(t.get("content")) for t in added if t.get("special")}
    except FileNotFoundError:  # the loader needs no tokenizer.json (the trainer reads it, pipeline.verify checks it)
        return {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise fmt.FormatError(f"{where}: not a readable tokenizer.json (its added_tokens): {e}") from None


@dataclass(frozen=True)
class Blocks:
    """The blocks of a split, in manifest order (parallel arrays)."""

    shard_paths: tuple[str, ...]  # relative shard paths of the split
    shard: np.ndarray  # index into shard_paths
    batch: np.ndarray  # record batch index within the shard
    rows: np.ndarray  # rows in the block
    first_sample: np.ndarray  # global sample id of the block's first row

    @property
    def num_samples(self) -> int:
        return int(self.rows.sum())


def index_blocks(artifact: Artifact, shard_indices: list[int], shard_cache: ShardCache | None = None) -> Blocks:
    """The blocks of the shards ``shard_indices``, from each shard's footer (a cached copy's when ``shard_cache``
    has one); checks each shard's batch count against its manifest row count."""
    manifest = artifact.manifest
    rpb = int(manifest.get("rows_per_batch", fmt.ROWS_PER_BATCH))
    shard_rows = [int(s["rows"]) for s in manifest["shards"]]
    first_of_shard = np.concatenate([[0], np.cumsum(shard_rows)]).astype(np.int64)
    paths, shard, batch, rows, first = [], [], [], [], []
    for k, si in enumerate(shard_indices):
        rel = manifest["shards"][si]["path"]
        paths.append(rel)
        reader = shard_cache.open_shard(rel) if shard_cache is not None else artifact.open_shard(rel)
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
    return Blocks(tuple(paths), a(shard), a(batch), a(rows), a(first))


class BlockReader:
    """Reads and decodes blocks (record batches) for one process, with an LRU cache of decoded blocks."""

    def __init__(
        self,
        artifact: Artifact,
        vocab_size: int,
        max_row_tokens: int,
        span_column: str | None,
        excluded_labels: tuple[str, ...],
        capacity: int,
        segments: bool = False,
        shard_cache: ShardCache | None = None,
        shard_order: tuple[str, ...] = (),
    ):
        self.shard_cache = shard_cache  # None: ranged reads from the artifact's filesystem
        self.shard_order = shard_order  # the split's shards: opening shard k reads ahead the next ones (cyclic)
        self.segments = segments  # also read sentence_start and doc_id (trainer.data.segments)
        self.artifact = artifact
        self.vocab_size = vocab_size
        self.max_row_tokens = max_row_tokens
        self.span_column = span_column
        self.excluded_labels = pa.array(list(excluded_labels), type=pa.string())
        # Special ids no row may hold (FORMAT.md): the manifest's roles and tokenizer.json's special added tokens;
        # the rows of a batch are checked when it is decoded.
        added = special_added_tokens(artifact, shard_cache)
        self.forbidden_ids = inv.forbidden_special_ids(artifact.manifest, added)
        self._special_names = {
            **added,
            **{int(i): f"[{n.upper()}]" for n, i in artifact.special_token_ids.items() if i is not None},
        }
        self.rows_per_batch = int(artifact.manifest.get("rows_per_batch", fmt.ROWS_PER_BATCH))
        # Rows starting inside a word (continuation rows, word_start[0] false) exist since format 2.0; they mask as
        # any row (the masker takes element 0 as a word start). A 1.x artifact holding one was written wrong.
        self.format_version = str(artifact.manifest["format_version"])
        self.continuation_rows_allowed = fmt.continuation_rows_allowed(self.format_version)
        self.capacity = capacity
        self._readers: OrderedDict[str, Any] = OrderedDict()
        self._cache: OrderedDict[tuple[str, int], dict] = OrderedDict()
        self.blocks_read: list[tuple[str, int]] = []  # (shard path, batch index) in read order, for tests

    def _reader(self, rel: str):
        r = self._readers.get(rel)
        if r is None:
            cache = self.shard_cache
            if cache is None:
                r = self.artifact.open_shard(rel)
            else:
                if rel in self.shard_order:
                    k, n = self.shard_order.index(rel), len(self.shard_order)
                    cache.prefetch([self.shard_order[(k + j) % n] for j in range(1, min(cache.read_ahead, n - 1) + 1)])
                r = self.artifact.open_shard(rel, local_copy=cache.acquire(rel))
            self._readers[rel] = r
            while len(self._readers) > 16:
                old, _ = self._readers.popitem(last=False)
                if cache is not None:
                    cache.release(old)
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
            raise fmt.FormatError(
                f"{where}: record batch {batch_index} cannot be read (corrupt or truncated shard): {e}"
            ) from None
        self.blocks_read.append(key)
        dec = self._decode(rb, where, batch_index, expected_rows)
        self._cache[key] = dec
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return dec

    @staticmethod
    def _list(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
        offs = arr.offsets.to_numpy().astype(np.int64)
        vals = arr.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
        return offs - offs[0], vals

    def _decode(self, rb: pa.RecordBatch, where: str, batch_index: int, expected_rows: int) -> dict:
        def bad(msg: str) -> None:
            raise fmt.FormatError(f"{where}: record batch {batch_index}: {msg}")

        if rb.num_rows != expected_rows:
            bad(
                f"has {rb.num_rows} rows, expected {expected_rows} (every batch but a shard's last holds rows_per_batch rows)"
            )
        offs, vals = self._list(rb.column("input_ids"))
        ids = vals.to_numpy(zero_copy_only=False)
        ws_offs, ws_vals = self._list(rb.column("word_start"))
        if not inv.flags_align(offs, ws_offs):
            bad("word_start and input_ids have different lengths")
        lengths = np.diff(offs)
        if inv.rows_too_long(lengths, self.max_row_tokens).any():
            bad(
                f"a row has {int(lengths.max())} tokens, more than {self.max_row_tokens} (max_seq_len - {fmt.SPECIAL_POSITIONS})"
            )
        top = inv.token_id_beyond_vocab(ids, self.vocab_size)
        if top is not None:
            bad(f"token id {top} >= vocab_size {self.vocab_size}")
        pos = inv.first_forbidden_id(ids, self.forbidden_ids)
        if pos is not None:
            r = int(np.searchsorted(offs, pos, side="right")) - 1
            token = int(ids[pos])
            raise fmt.FormatError(
                f"{where}: row {batch_index * self.rows_per_batch + r} (record batch {batch_index}, row {r}) holds the "
                f"special token id {token} ({self._special_names.get(token, '?')}) at token {pos - offs[r]}; "
                f"rows hold text only (FORMAT.md): rebuild the artifact (pipeline.verify lists every such row)"
            )
        ws = ws_vals.to_numpy(zero_copy_only=False)
        if not self.continuation_rows_allowed:
            inside = np.flatnonzero(inv.rows_starting_inside_a_word(ws, offs))
            if len(inside):
                bad(
                    f"row {int(inside[0])} starts inside a word (word_start[0] false), which a format "
                    f"{self.format_version} artifact never holds (continuation rows exist since format 2.0)"
                )
        out = {"ids": ids, "offs": offs, "ws": ws}
        if self.segments:
            ss_offs, ss_vals = self._list(rb.column("sentence_start"))
            if not inv.flags_align(offs, ss_offs):
                bad("sentence_start and input_ids have different lengths")
            out.update(
                ss_flags=ss_vals.to_numpy(zero_copy_only=False), doc=rb.column("doc_id").to_numpy(zero_copy_only=False)
            )
        if self.span_column is not None:
            s_offs, s_vals = self._list(rb.column(self.span_column))
            starts = s_vals.field("start").to_numpy().astype(np.int64)
            ends = s_vals.field("end").to_numpy().astype(np.int64)
            srow = np.repeat(np.arange(rb.num_rows), np.diff(s_offs))
            if inv.spans_outside_rows(starts, ends, srow, lengths).any():
                bad(
                    f"{self.span_column} has a span outside its row or empty (0 <= start < end <= len(input_ids) violated)"
                )
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
