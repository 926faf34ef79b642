"""Statistics from the shards (all of them, or a seeded sample of record batches) and the most frequent
entries of the n-gram dictionary the manifest names."""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.report.common import DEFAULT_EXAMPLES, DEFAULT_MAX_ROWS, TOP_NGRAMS, ReportError
from schemas import format as fmt
from schemas import ngram_dictionary as ngram_format
from schemas.artifact import Artifact
from schemas.ngram_dictionary import NgramDictionary


@dataclass
class Example:
    """One row chosen for display, with where it came from."""

    shard: str
    batch: int
    row: int
    doc_id: str
    seq_index: int
    input_ids: list[int]
    word_start: list[bool]
    spans: dict[str, list[tuple[int, int, str]]]


@dataclass
class Stats:
    """What ``collect`` read from the shards. Histograms are numpy int64 arrays indexed by the value."""

    rows_total: int
    batches_total: int = 0
    batches_read: int = 0  # sampled batches (row statistics)
    batches_followed: int = 0  # extra batches read only to finish a sampled document
    rows_read: int = 0
    tokens_read: int = 0
    sampled: bool = False
    seed: int = 0
    doc_level: bool = True  # False for full-sentences packing: rows cross documents
    doc_tokens: list[int] = field(default_factory=list)
    spans_per_row: dict[str, np.ndarray] = field(default_factory=dict)
    span_tokens: dict[str, np.ndarray] = field(default_factory=dict)
    span_words: dict[str, np.ndarray] = field(default_factory=dict)
    spans_read: dict[str, int] = field(default_factory=dict)
    tokens_covered: dict[str, int] = field(default_factory=dict)
    entity_labels: Counter = field(default_factory=Counter)
    examples: list[Example] = field(default_factory=list)

    def scope(self) -> str:
        """How much of the artifact the statistics cover, for captions."""
        if not self.sampled:
            return f"all {self.rows_read:,} rows"
        return (
            f"a sample of {self.rows_read:,} of {self.rows_total:,} rows ({self.batches_read:,} of "
            f"{self.batches_total:,} record batches, chosen with seed {self.seed})"
        )


def _add(acc: dict[str, np.ndarray], key: str, values: np.ndarray) -> None:
    counts = np.bincount(values.astype(np.int64), minlength=1) if values.size else np.zeros(1, np.int64)
    old = acc.get(key, np.zeros(1, np.int64))
    n = max(len(old), len(counts))
    acc[key] = np.pad(old, (0, n - len(old))) + np.pad(counts, (0, n - len(counts)))


def _flat_spans(batch: pa.RecordBatch, column: str) -> tuple[np.ndarray, pa.Array]:
    arr = batch.column(column)
    per_row = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return per_row, arr.flatten()


class _Collector:
    def __init__(self, art: Artifact, stats: Stats, examples: int, seed: int):
        self.art = art
        self.s = stats
        self.kinds = [k for k in fmt.CANDIDATE_KINDS if k in (art.manifest.get("candidates") or {}).get("kinds", [])]
        self.want_examples = examples
        self.example_rng = np.random.default_rng([seed, 1])
        self.heap: list[tuple[float, int, Example]] = []  # (-key, tiebreak, example): the k smallest keys
        self.open_doc: int | None = None
        for kind in fmt.CANDIDATE_KINDS:
            self.s.spans_per_row[kind] = np.zeros(1, np.int64)
            self.s.span_tokens[kind] = np.zeros(1, np.int64)
            self.s.span_words[kind] = np.zeros(1, np.int64)
            self.s.spans_read[kind] = 0
            self.s.tokens_covered[kind] = 0

    def documents(self, batch: pa.RecordBatch, lengths: np.ndarray, sampled: bool) -> None:
        """Tokens per document: a document counts when its first row (seq_index 0) is in a sampled batch."""
        starts = np.flatnonzero(batch.column("seq_index").to_numpy(zero_copy_only=False) == 0)
        head = int(lengths[: starts[0]].sum()) if starts.size else int(lengths.sum())
        if self.open_doc is not None:
            self.open_doc += head
            if starts.size:
                self.s.doc_tokens.append(self.open_doc)
                self.open_doc = None
        if sampled and starts.size:
            sums = np.add.reduceat(lengths.astype(np.int64), starts)
            self.s.doc_tokens.extend(int(x) for x in sums[:-1])
            self.open_doc = int(sums[-1])

    def end_of_shard(self) -> None:
        if self.open_doc is not None:
            self.s.doc_tokens.append(self.open_doc)
            self.open_doc = None

    def rows(self, shard: str, b: int, batch: pa.RecordBatch, lengths: np.ndarray) -> None:
        s = self.s
        n = batch.num_rows
        s.rows_read += n
        s.tokens_read += int(lengths.sum())
        base = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        total = int(lengths.sum())
        word_start = batch.column("word_start").flatten().to_numpy(zero_copy_only=False).astype(bool)
        words_before = np.concatenate([[0], np.cumsum(word_start)])  # words started before token position
        spans_in_row = np.zeros(n, np.int64)
        for kind, column in fmt.CANDIDATE_KINDS.items():
            per_row, flat = _flat_spans(batch, column)
            spans_in_row += per_row
            _add(s.spans_per_row, kind, per_row)
            if not len(flat):
                continue
            starts = flat.field("start").to_numpy().astype(np.int64)
            ends = flat.field("end").to_numpy().astype(np.int64)
            row_of = np.repeat(np.arange(n), per_row)
            a, z = base[row_of] + starts, base[row_of] + ends
            s.spans_read[kind] += len(flat)
            _add(s.span_tokens, kind, ends - starts)
            _add(s.span_words, kind, words_before[z] - words_before[a])
            depth = np.zeros(total + 1, np.int64)
            np.add.at(depth, a, 1)
            np.add.at(depth, z, -1)
            s.tokens_covered[kind] += int((np.cumsum(depth)[:-1] > 0).sum())
            if kind == "entities":
                for item in pc.value_counts(flat.field("label")).to_pylist():
                    s.entity_labels[item["values"]] += item["counts"]
        self._examples(shard, b, batch, spans_in_row)

    def _examples(self, shard: str, b: int, batch: pa.RecordBatch, spans_in_row: np.ndarray) -> None:
        if not self.want_examples:
            return
        keys = self.example_rng.random(batch.num_rows)
        eligible = spans_in_row > 0 if self.kinds else np.ones(batch.num_rows, bool)
        for i in np.flatnonzero(eligible):
            key = float(keys[i])
            if len(self.heap) == self.want_examples and -self.heap[0][0] <= key:
                continue
            row = batch.slice(int(i), 1).to_pylist()[0]
            spans = {
                k: [(d["start"], d["end"], d.get("label", "")) for d in row[col]]
                for k, col in fmt.CANDIDATE_KINDS.items()
            }
            ex = Example(
                shard,
                b,
                int(i),
                row["doc_id"],
                row["seq_index"],
                list(row["input_ids"]),
                list(row["word_start"]),
                spans,
            )
            item = (-key, len(self.heap) + b * 1000003 + int(i), ex)
            if len(self.heap) < self.want_examples:
                heapq.heappush(self.heap, item)
            else:
                heapq.heapreplace(self.heap, item)

    def finish(self) -> None:
        self.s.examples = sorted((ex for _, _, ex in self.heap), key=lambda e: (e.shard, e.batch, e.row))


def collect(
    art: Artifact,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    seed: int = 0,
    examples: int = DEFAULT_EXAMPLES,
    progress: Callable[[str], None] | None = None,
) -> Stats:
    """Read the shards batch by batch (all of them, or a seeded sample of record batches when the artifact
    has more than ``max_rows`` rows) and gather the report's statistics."""
    say = progress or (lambda _msg: None)
    m = art.manifest
    stats = Stats(rows_total=int(m["counts"]["rows"]), seed=seed, doc_level=m.get("pack") == "doc-sentences")
    shards = art.shard_paths
    chosen: dict[int, set[int]] | None = None
    if stats.rows_total > max_rows:
        # Sample record batches: count them (one footer read per shard), then choose with the seed.
        counts = []
        for rel in shards:
            counts.append(art.open_shard(rel).num_record_batches)
        stats.batches_total = sum(counts)
        rows_per_batch = stats.rows_total / max(1, stats.batches_total)
        k = min(stats.batches_total, max(1, math.ceil(max_rows / rows_per_batch)))
        if k < stats.batches_total:
            stats.sampled = True
            picks = np.sort(np.random.default_rng(seed).choice(stats.batches_total, size=k, replace=False))
            bounds = np.concatenate([[0], np.cumsum(counts)])
            chosen = {
                i: set((picks[(picks >= bounds[i]) & (picks < bounds[i + 1])] - bounds[i]).tolist())
                for i in range(len(shards))
            }
            say(
                f"{stats.rows_total:,} rows > --max-rows {max_rows:,}: sampling {k:,} of {stats.batches_total:,} record batches (seed {seed})"
            )
    c = _Collector(art, stats, examples, seed)
    started = time.time()
    for i, rel in enumerate(shards):
        reader = art.open_shard(rel)
        n_batches = reader.num_record_batches
        if chosen is None:
            stats.batches_total += n_batches
            wanted = set(range(n_batches))
        else:
            wanted = chosen[i]
        order = sorted(wanted)
        b = order[0] if order else n_batches
        while b < n_batches:
            try:
                batch = reader.get_batch(b)
            except (pa.ArrowInvalid, OSError) as e:
                raise ReportError(f"{art.display(rel)}: record batch {b} unreadable: {e}") from None
            lengths = pc.list_value_length(batch.column("input_ids")).to_numpy(zero_copy_only=False).astype(np.int64)
            sampled = b in wanted
            if stats.doc_level:
                c.documents(batch, lengths, sampled)
            if sampled:
                stats.batches_read += 1
                c.rows(rel, b, batch, lengths)
            else:
                stats.batches_followed += 1
            if c.open_doc is not None:  # finish the document (the next batch may not be sampled)
                b += 1
            else:
                j = bisect.bisect_right(order, b)
                b = order[j] if j < len(order) else n_batches
        c.end_of_shard()
        if progress and (i + 1 == len(shards) or (i + 1) % max(1, len(shards) // 10) == 0):
            say(f"read {i + 1}/{len(shards)} shards, {stats.rows_read:,} rows ({time.time() - started:.1f} s)")
    c.finish()
    return stats


# ---------------------------------------------------------------------------------------------
# The n-gram dictionary (outside the artifact: read only when reachable)
# ---------------------------------------------------------------------------------------------
@dataclass
class Dictionary:
    path: str
    reachable: bool
    message: str
    top: list[dict] = field(default_factory=list)  # the most frequent entries: {ngram, n, count}
    per_n: dict[int, tuple[int, list[dict]]] = field(default_factory=dict)  # n -> (entries, the most frequent)


def read_dictionary(info: dict | None, limit: int = TOP_NGRAMS, per_n_limit: int = 8) -> Dictionary | None:
    """The most frequent entries of the n-gram dictionary the manifest names (overall and for each n), or why
    they cannot be shown. The dictionary is outside the artifact: it may have moved, or be on a path of the
    machine that built the artifact."""
    if not info:
        return None
    path = str(info.get("path", ""))
    unreachable = f"the n-gram dictionary {path} is not reachable from here"
    try:
        dictionary = NgramDictionary.open(path)
        sha256 = dictionary.arrow_sha256()
        table = dictionary.read_table().select(list(ngram_format.COLUMNS))
    except (OSError, pa.ArrowInvalid, KeyError, ValueError) as e:
        return Dictionary(path, False, f"{unreachable} ({e}); its n-grams cannot be shown")
    order = pc.sort_indices(table, sort_keys=[("count", "descending"), ("ngram", "ascending")])
    table = table.take(order)
    per_n = {}
    for n in sorted(set(table.column("n").to_pylist())):
        rows = table.filter(pc.equal(table["n"], n))
        per_n[int(n)] = (rows.num_rows, rows.slice(0, per_n_limit).to_pylist())
    if sha256 != info.get("sha256"):
        message = (
            f"{path}: {ngram_format.ARROW_FILE} differs from the one used for this artifact (sha256 {sha256[:12]}… vs "
            f"{str(info.get('sha256'))[:12]}… in the manifest): the n-grams below may not be the ones used"
        )
    else:
        message = f"{path} (sha256 matches the manifest)"
    return Dictionary(path, True, message, table.slice(0, limit).to_pylist(), per_n)
