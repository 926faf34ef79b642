"""Show an artifact: plots and ``report/index.html``, and a dataset card ``README.md``.

    python -m pipeline.report ARTIFACT                      # local path, gs://, s3://, hdfs://
    python -m pipeline.report ARTIFACT --license cc-by-sa-3.0 \\
        --source-license "WikiText-103: CC BY-SA 3.0 (Merity et al., 2016)" --pretty-name "WikiText-103 for SpanBERT"
    python -m pipeline.build_shards ... --report            # the same, at the end of the build

Reads only the artifact (through ``schemas.artifact.Artifact``; the n-gram dictionary named in the manifest
is read too when it is reachable) and writes, through the same filesystem:

    ARTIFACT/report/index.html      self-contained page (inline CSS, no scripts, no external resources)
    ARTIFACT/report/*.png           the plots it shows
    ARTIFACT/README.md              a dataset card in the style of Hugging Face's (numbers from the manifest)

Neither is listed in the manifest, so ``python -m pipeline.verify`` is unaffected. The shards are read
record batch by record batch. Artifacts of more than ``--max-rows`` rows are sampled: a fixed-seed random
choice of record batches (each row equally likely); a document is counted in "tokens per document" when its
first row is in a sampled batch, and is then followed to its end, so long documents are not under-counted.
The same artifact and options give the same report, byte for byte.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import heapq
import html
import io
import json
import logging
import math
import os
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from schemas import format as fmt
from schemas.artifact import Artifact

README_FILE = "README.md"
INDEX_FILE = "index.html"
DEFAULT_MAX_ROWS = 200_000
DEFAULT_EXAMPLES = 4
DEFAULT_LICENSE = "unknown"
# Span lengths and spans per row are plotted up to these values; longer ones go into the last bar.
MAX_PLOTTED_SPAN_LEN = 12
SPANS_PER_ROW_BARS = 24  # at most this many bars per kind
TOP_LABELS = 15
TOP_NGRAMS = 25

KIND_NAMES = {"entities": "entities", "noun_phrases": "noun phrases", "ngrams": "n-grams"}
KIND_COLORS = {"entities": "#d97706", "noun_phrases": "#2563eb", "ngrams": "#059669"}
KIND_CSS = {"entities": "ent", "noun_phrases": "np", "ngrams": "ng"}
# Punkt model names (build_shards --language) -> ISO 639-1, for the card's language field.
PUNKT_LANGUAGES = {
    "czech": "cs", "danish": "da", "dutch": "nl", "english": "en", "estonian": "et", "finnish": "fi",
    "french": "fr", "german": "de", "greek": "el", "italian": "it", "malayalam": "ml", "norwegian": "no",
    "polish": "pl", "portuguese": "pt", "russian": "ru", "slovene": "sl", "spanish": "es", "swedish": "sv",
    "turkish": "tr",
}  # fmt: skip


log = logging.getLogger("pipeline.report")


class ReportError(fmt.FormatError):
    """The report cannot be made (a FormatError, so callers that print those need no extra handler)."""


# ---------------------------------------------------------------------------------------------
# Statistics from the shards
# ---------------------------------------------------------------------------------------------
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
        return (f"a sample of {self.rows_read:,} of {self.rows_total:,} rows ({self.batches_read:,} of "
                f"{self.batches_total:,} record batches, chosen with seed {self.seed})")


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
            spans = {k: [(d["start"], d["end"], d.get("label", "")) for d in row[col]] for k, col in fmt.CANDIDATE_KINDS.items()}
            ex = Example(shard, b, int(i), row["doc_id"], row["seq_index"], list(row["input_ids"]), list(row["word_start"]), spans)
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
            chosen = {i: set((picks[(picks >= bounds[i]) & (picks < bounds[i + 1])] - bounds[i]).tolist()) for i in range(len(shards))}
            say(f"{stats.rows_total:,} rows > --max-rows {max_rows:,}: sampling {k:,} of {stats.batches_total:,} record batches (seed {seed})")
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
# Plots
# ---------------------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ReportError("matplotlib is not installed: pip install 'spanprep[report]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.dpi": 100, "savefig.dpi": 110, "font.size": 9.5, "axes.titlesize": 11, "axes.titleweight": "bold",
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.25,
        "axes.axisbelow": True, "svg.hashsalt": "spanprep",
    })  # fmt: skip
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _message_figure(plt, title: str, message: str):
    """A figure that says why there is nothing to plot (instead of an empty axis)."""
    fig, ax = plt.subplots(figsize=(7.2, 1.6))
    ax.set_axis_off()
    ax.set_title(title, loc="left")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=11, color="#4b5563", wrap=True,
            bbox={"boxstyle": "round,pad=0.8", "facecolor": "#f3f4f6", "edgecolor": "#d1d5db"}, transform=ax.transAxes)
    return fig


def _label_bars(ax, bars, values, fmt_value=lambda v: f"{v:,}") -> None:
    for bar, v in zip(bars, values):
        ax.annotate(fmt_value(v), (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8.5)


def plot_documents(plt, m: dict):
    c = m["counts"]
    if not c["documents_read"]:
        return _message_figure(plt, "Documents", "no documents were read (empty input)")
    labels = ["read", "written"] + [f"dead-lettered: {r}" for r in sorted(c["dead_lettered_by_reason"])]
    values = [c["documents_read"], c["documents_written"]] + [c["dead_lettered_by_reason"][r] for r in sorted(c["dead_lettered_by_reason"])]
    colors = ["#6b7280", "#16a34a"] + ["#dc2626"] * (len(values) - 2)
    fig, ax = plt.subplots(figsize=(7.2, 0.4 * len(values) + 1.1))
    bars = ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.18)
    _label_bars(ax, bars, values)
    ax.set_title("Documents", loc="left")
    ax.set_xlabel("documents")
    return fig


def plot_row_lengths(plt, m: dict):
    h = m["row_length_histogram"]
    counts, width = np.asarray(h["counts"], dtype=np.int64), int(h["bin_width"])
    if not counts.sum():
        return _message_figure(plt, "Row lengths", "the artifact has no rows")
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    lefts = np.arange(len(counts)) * width
    ax.bar(lefts + 0.5, counts, width=width, align="edge", color="#4f46e5", edgecolor="white", linewidth=0.5)
    ax.axvline(m["max_row_tokens"], color="#dc2626", linestyle="--", linewidth=1, label=f"row limit ({m['max_row_tokens']} tokens)")
    ax.legend(frameon=False, fontsize=8.5, loc="best")
    ax.set_xlabel(f"tokens per row (bins of {width})")
    ax.set_ylabel("rows")
    ax.set_title("Row lengths (all rows, from the manifest)", loc="left")
    return fig


def plot_shards(plt, m: dict):
    tokens = np.array([s["tokens"] for s in m["shards"]], dtype=np.int64)
    if not tokens.sum():
        return _message_figure(plt, "Tokens per shard", "every shard is empty")
    fig, ax = plt.subplots(figsize=(7.2, 2.8))
    ax.bar(np.arange(len(tokens)), tokens, width=0.85 if len(tokens) < 80 else 1.0, color="#0891b2")
    ax.axhline(tokens.mean(), color="#374151", linestyle=":", linewidth=1)
    ax.set_xlabel("shard index")
    ax.set_ylabel("tokens")
    ax.set_title("Tokens per shard", loc="left")
    if len(tokens) <= 20:
        ax.set_xticks(np.arange(len(tokens)))
    return fig


def plot_doc_tokens(plt, stats: Stats):
    title = "Tokens per document"
    if not stats.doc_level:
        return _message_figure(plt, title, "full-sentences packing: rows cross documents, so tokens per document\ncannot be read from the rows")
    if not stats.doc_tokens:
        return _message_figure(plt, title, "no document was read")
    x = np.asarray(stats.doc_tokens, dtype=np.int64)
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    lo, hi = max(1, int(x.min())), int(x.max())
    if hi / lo > 50:
        bins = np.unique(np.geomspace(lo, hi + 1, 40).astype(np.int64))
        ax.set_xscale("log")
    else:
        bins = min(40, max(5, len(np.unique(x))))
    ax.hist(x, bins=bins, color="#7c3aed", edgecolor="white", linewidth=0.5)
    ax.axvline(np.median(x), color="#111827", linestyle="--", linewidth=1, label=f"median {int(np.median(x)):,}")
    ax.legend(frameon=False, fontsize=8.5)
    ax.set_xlabel("tokens per document (sum of its rows)")
    ax.set_ylabel("documents")
    ax.set_title(title, loc="left")
    return fig


def _grouped_bars(ax, series: dict[str, np.ndarray], start: int, stop: int, normalise: bool) -> None:
    """Bars for values start..stop (the last one gathers everything above) per kind, side by side."""
    kinds = list(series)
    width = 0.8 / max(1, len(kinds))
    xs = np.arange(start, stop + 1)
    for j, kind in enumerate(kinds):
        h = series[kind]
        vals = np.array([h[v] if v < len(h) else 0 for v in xs[:-1]] + [h[stop:].sum()], dtype=float)
        if normalise and vals.sum():
            vals = vals / h.sum()
        ax.bar(xs + (j - (len(kinds) - 1) / 2) * width, vals, width=width, color=KIND_COLORS[kind], label=KIND_NAMES[kind])
    labels = [str(v) for v in xs]
    labels[-1] = f"{stop}+"
    ax.set_xticks(xs, labels, fontsize=8)
    ax.legend(frameon=False, fontsize=8.5)


def _no_candidates(m: dict, stats: Stats) -> str | None:
    kinds = (m.get("candidates") or {}).get("kinds", [])
    if not kinds:
        return "no mask candidates: the artifact was built without --mask-candidates"
    if not any(stats.spans_read.get(k) for k in kinds):
        return f"no candidate spans in the rows read ({', '.join(KIND_NAMES[k] for k in kinds)} were looked for)"
    return None


def plot_spans_per_row(plt, m: dict, stats: Stats):
    title = "Candidate spans per row"
    why = _no_candidates(m, stats)
    if why:
        return _message_figure(plt, title, why)
    kinds = list(m["candidates"]["kinds"])
    top = max(int(np.flatnonzero(stats.spans_per_row[k]).max()) for k in kinds)
    width = max(1, math.ceil((top + 1) / SPANS_PER_ROW_BARS))
    nbins = top // width + 1
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    bar = 0.8 * width / len(kinds)
    for j, k in enumerate(kinds):
        h = np.pad(stats.spans_per_row[k], (0, nbins * width))[: nbins * width].reshape(nbins, width).sum(axis=1)
        xs = np.arange(nbins) * width + (width - 1) / 2 + (j - (len(kinds) - 1) / 2) * bar
        ax.bar(xs, h / max(1, h.sum()), width=bar, color=KIND_COLORS[k], label=KIND_NAMES[k])
    ax.legend(frameon=False, fontsize=8.5)
    ax.set_xlabel("spans in the row" + (f" (bins of {width})" if width > 1 else ""))
    ax.set_ylabel("fraction of rows")
    ax.set_title(title, loc="left")
    return fig


def plot_span_lengths(plt, m: dict, stats: Stats):
    title = "Candidate span lengths"
    why = _no_candidates(m, stats)
    if why:
        return _message_figure(plt, title, why)
    kinds = [k for k in m["candidates"]["kinds"] if stats.spans_read[k]]
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.2), sharey=True)
    for ax, hists, unit in ((axes[0], stats.span_tokens, "tokens"), (axes[1], stats.span_words, "words")):
        _grouped_bars(ax, {k: hists[k] for k in kinds}, 1, MAX_PLOTTED_SPAN_LEN, normalise=True)
        ax.set_xlabel(f"span length in {unit}")
    axes[0].set_ylabel("fraction of spans")
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold", fontsize=11)
    return fig


def plot_entity_labels(plt, m: dict, stats: Stats):
    title = "Entity labels"
    if "entities" not in (m.get("candidates") or {}).get("kinds", []):
        return _message_figure(plt, title, "no entity candidates: the artifact was built without --mask-candidates entities")
    if not stats.entity_labels:
        return _message_figure(plt, title, "no entity span in the rows read")
    top = sorted(stats.entity_labels.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_LABELS]
    fig, ax = plt.subplots(figsize=(7.2, 0.32 * len(top) + 1.0))
    bars = ax.barh(range(len(top)), [v for _, v in top], color=KIND_COLORS["entities"])
    ax.set_yticks(range(len(top)), [k for k, _ in top])
    ax.invert_yaxis()
    ax.set_xlim(0, top[0][1] * 1.15)
    _label_bars(ax, bars, [v for _, v in top])
    ax.set_xlabel("entity spans")
    ax.set_title(title, loc="left")
    return fig


def plot_ngrams(plt, top: list[dict]):
    rows = top[:TOP_NGRAMS]
    fig, ax = plt.subplots(figsize=(7.2, 0.3 * len(rows) + 1.0))
    bars = ax.barh(range(len(rows)), [r["count"] for r in rows], color=KIND_COLORS["ngrams"])
    ax.set_yticks(range(len(rows)), [r["ngram"] for r in rows], fontsize=8.5)
    ax.invert_yaxis()
    ax.set_xlim(0, rows[0]["count"] * 1.15)
    _label_bars(ax, bars, [r["count"] for r in rows])
    ax.set_xlabel("occurrences in the dictionary's corpus")
    ax.set_title("Most frequent dictionary n-grams", loc="left")
    return fig


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
        fs, root = pafs.FileSystem.from_uri(path.rstrip("/")) if "://" in path else (pafs.LocalFileSystem(), os.path.abspath(path))
        arrow = f"{root}/ngrams.arrow"
        if fs.get_file_info(arrow).type != pafs.FileType.File:
            return Dictionary(path, False, f"{unreachable} (no ngrams.arrow there); its n-grams cannot be shown")
        h = hashlib.sha256()
        with fs.open_input_stream(arrow) as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
        with fs.open_input_file(arrow) as f:
            table = ipc.open_file(f).read_all().select(["ngram", "n", "count"])
    except (OSError, pa.ArrowInvalid, KeyError, ValueError) as e:
        return Dictionary(path, False, f"{unreachable} ({e}); its n-grams cannot be shown")
    order = pc.sort_indices(table, sort_keys=[("count", "descending"), ("ngram", "ascending")])
    table = table.take(order)
    per_n = {}
    for n in sorted(set(table.column("n").to_pylist())):
        rows = table.filter(pc.equal(table["n"], n))
        per_n[int(n)] = (rows.num_rows, rows.slice(0, per_n_limit).to_pylist())
    if h.hexdigest() != info.get("sha256"):
        message = (f"{path}: ngrams.arrow differs from the one used for this artifact (sha256 {h.hexdigest()[:12]}… vs "
                   f"{str(info.get('sha256'))[:12]}… in the manifest): the n-grams below may not be the ones used")
    else:
        message = f"{path} (sha256 matches the manifest)"
    return Dictionary(path, True, message, table.slice(0, limit).to_pylist(), per_n)


# ---------------------------------------------------------------------------------------------
# Example rows, decoded, with their candidate spans marked
# ---------------------------------------------------------------------------------------------
def _segment_texts(tok, ids: list[int], bounds: list[int]) -> list[str]:
    """Text of each token range [bounds[j], bounds[j+1]) as the tokenizer decodes the row (prefix decoding,
    so spaces and WordPiece joins come out as in the whole row)."""
    out, prev = [], ""
    for a, b in zip(bounds, bounds[1:]):
        full = tok.decode(ids[:b], skip_special_tokens=False)
        if full.startswith(prev):
            out.append(full[len(prev):])
        else:  # the decoder rewrote earlier text: decode the piece alone
            out.append((" " if a else "") + tok.decode(ids[a:b], skip_special_tokens=False))
        prev = full
    return out


def render_example(tok, ex: Example, kinds: list[str]) -> str:
    """HTML of one row: the decoded text with each kind's spans marked (escaped; spans may nest or cross)."""
    n = len(ex.input_ids)
    cover = {k: np.zeros(n + 1, np.int64) for k in kinds}
    bounds = {0, n}
    for k in kinds:
        for s, e, _ in ex.spans[k]:
            cover[k][s] += 1
            cover[k][e] -= 1
            bounds.update((s, e))
    for k in kinds:
        cover[k] = np.cumsum(cover[k])
    cuts = sorted(bounds)
    texts = _segment_texts(tok, ex.input_ids, cuts)
    starts = {k: {s for s, _, _ in ex.spans[k]} for k in kinds}
    ends: dict[int, list[str]] = {}
    for s, e, label in ex.spans.get("entities", []) if "entities" in kinds else []:
        ends.setdefault(e, []).append(label)
    end_sets = {k: {e for _, e, _ in ex.spans[k]} for k in kinds}
    parts = []
    for (a, b), text in zip(zip(cuts, cuts[1:]), texts):
        body_classes, lead_classes = [], []
        for k in kinds:
            if cover[k][a] > 0:
                body_classes.append(KIND_CSS[k])
                if a in starts[k]:
                    body_classes.append(KIND_CSS[k] + "-s")
                elif a > 0 and cover[k][a - 1] > 0 and a not in end_sets[k]:
                    lead_classes.append(KIND_CSS[k])  # the space inside a span that goes on
        lead = text[: len(text) - len(text.lstrip())]
        for classes, piece in ((lead_classes, lead), (body_classes, text[len(lead):])):
            if classes and piece:
                parts.append(f'<span class="{" ".join(classes)}">{html.escape(piece)}</span>')
            else:
                parts.append(html.escape(piece))
        for label in ends.get(b, []):
            parts.append(f'<span class="lbl">{html.escape(label)}</span>')
    return "".join(parts)


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------
CSS = """
:root { color-scheme: light; }
body { font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #111827;
       margin: 0; background: #f9fafb; }
main { max-width: 1060px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 1.6em; margin: 0 0 2px; }
h2 { font-size: 1.2em; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid #e5e7eb; }
.sub { color: #4b5563; margin: 0 0 18px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .88em; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(175px, 1fr)); gap: 12px; margin: 8px 0 10px; }
.card { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 14px; }
.card .k { color: #6b7280; font-size: .82em; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 1.45em; font-weight: 650; }
.card .d { color: #4b5563; font-size: .85em; }
table { border-collapse: collapse; background: #fff; border: 1px solid #e5e7eb; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #f0f1f3; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f4f6; font-weight: 600; font-size: .9em; }
.tables { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 14px; align-items: start; }
.tables table { width: 100%; }
figure { margin: 0 0 22px; background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 12px; }
figure img { max-width: 100%; height: auto; display: block; }
figcaption { color: #374151; font-size: .92em; margin-top: 6px; }
.note { background: #fffbeb; border: 1px solid #fde68a; border-radius: 6px; padding: 8px 12px; color: #78350f; }
.bad { color: #b91c1c; font-weight: 600; }
.example { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 14px; margin: 0 0 14px; }
.example .meta { color: #6b7280; font-size: .85em; margin-bottom: 6px; }
.example .text { line-height: 2.0; max-height: 18em; overflow-y: auto; white-space: pre-wrap; overflow-wrap: anywhere; }
.ent { background: #fde68a; border-radius: 2px; }
.ent-s { margin-left: 2px; }
.np { text-decoration: underline 2px #2563eb; text-underline-offset: 4px; }
.np-s { margin-left: 2px; }
.ng { border-top: 2px dotted #059669; }
.lbl { font-size: .62em; font-weight: 700; color: #92400e; vertical-align: super; margin: 0 2px 0 1px; }
.legend span { margin-right: 16px; }
footer { color: #6b7280; font-size: .85em; margin-top: 36px; }
"""


def _versions(m: dict) -> list[tuple[str, str]]:
    """(software, version) from created_by: the package first, then the libraries."""
    cb = dict(m.get("created_by") or {})
    first = [(str(cb.pop("package", "spanprep")), str(cb.pop("version", "?")))]
    return first + [(k, str(v)) for k, v in sorted(cb.items()) if not isinstance(v, (dict, list))]


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _n(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


def _table(headers: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f'<th class="n">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>" for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            raw = v if isinstance(v, _Html) else _e(v if not isinstance(v, (int, float)) or isinstance(v, bool) else _n(v))
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            cells.append(f'<td class="n">{raw}</td>' if i in numeric and number else f"<td>{raw}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Html(str):
    """Already-escaped HTML."""


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def _dead_letter_examples(art: Artifact) -> dict[str, dict]:
    """The first record of each dead-letter file (read up to its first newline only)."""
    out = {}
    for d in art.manifest.get("dead_letter", []):
        try:
            with art.fs.open_input_stream(art.path(d["path"])) as f:
                head = f.read(1 << 16).split(b"\n", 1)[0]
            rec = json.loads(head.decode("utf-8", "replace"))
            out[d["path"]] = rec if isinstance(rec, dict) else {}
        except (OSError, ValueError):
            out[d["path"]] = {}
    return out


@dataclass
class Figure:
    file: str
    alt: str
    caption: str


def build_html(art: Artifact, stats: Stats, figures: list[Figure], dictionary: Dictionary | None, tok, pretty_name: str) -> str:
    m = art.manifest
    c = m["counts"]
    cand = m.get("candidates") or {}
    kinds = [k for k in fmt.CANDIDATE_KINDS if k in cand.get("kinds", [])]
    total_bytes = sum(s["bytes"] for s in m["shards"])
    doc_tokens = np.asarray(stats.doc_tokens, dtype=np.int64)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(pretty_name)}: spanprep artifact report</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<h1>{_e(pretty_name)}</h1>",
        f'<p class="sub">spanprep preprocessed corpus <code>{_e(art.uri)}</code> · format {_e(m["format_version"])} · '
        f'built {_e(m.get("created_at", "?"))} by spanprep {_e(m.get("created_by", {}).get("version", "?"))} · '
        f'dataset card: <a href="../{README_FILE}">README.md</a> · <a href="../{fmt.MANIFEST_FILE}">manifest.json</a></p>',
    ]
    # -- key figures -------------------------------------------------------------------------
    dead = c["documents_dead_lettered"]
    cards = [
        ("documents written", _n(c["documents_written"]), f"of {_n(c['documents_read'])} read"),
        ("dead-lettered", _n(dead), f"{_percent(dead, c['documents_read'])} of documents read"),
        ("rows", _n(c["rows"]), f"≤ {m['max_row_tokens']} tokens each, mean {c['tokens'] / c['rows']:.0f}" if c["rows"] else "no rows"),
        ("tokens", _n(c["tokens"]), f"{_plural(len(m['shards']), 'shard')}, {total_bytes / 1e6:,.1f} MB"),
    ]
    if kinds:
        spans = cand.get("spans", {})
        cards.append(("candidate spans", _n(sum(spans.get(k, 0) for k in kinds)), ", ".join(f"{KIND_NAMES[k]} {_n(spans.get(k, 0))}" for k in kinds)))
    else:
        cards.append(("candidate spans", "none", "built without --mask-candidates"))
    out.append('<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div><div class="d">{_e(d)}</div></div>' for k, v, d in cards
    ) + "</div>")

    tok_info = m["tokenizer"]
    docs_rows = [
        ["documents read", c["documents_read"]],
        ["documents written", c["documents_written"]],
        ["documents dead-lettered", c["documents_dead_lettered"]],
        *[[_Html(f"&nbsp;&nbsp;reason <code>{_e(r)}</code>"), n] for r, n in sorted(c["dead_lettered_by_reason"].items())],
        ["documents cleaned (control characters removed)", c.get("documents_cleaned", 0)],
        ["duplicate document ids", c.get("duplicate_doc_ids", 0)],
    ]
    rows_rows = [
        ["rows", c["rows"]],
        ["tokens", c["tokens"]],
        ["sentences", c["sentences"]],
        ["sentences longer than a row (cut)", c["sentences_cut"]],
        ["max tokens per row (max_seq_len − 2)", m["max_row_tokens"]],
        ["mean tokens per row", round(c["tokens"] / c["rows"], 1) if c["rows"] else "n/a"],
        ["packing", m["pack"]],
        ["shards", len(m["shards"])],
    ]
    build_rows = [
        ["tokenizer", f"WordPiece, {tok_info['source']}, {'uncased' if tok_info.get('lowercase') else 'cased'}"],
        ["vocabulary", tok_info["vocab_size"]],
        ["input_ids type", m.get("input_ids_type", "")],
        ["inputs", len(m["inputs"])],
        ["runner", m.get("options", {}).get("beam", {}).get("runner", "?")],
        ["created by", ", ".join(f"{k} {v}" for k, v in _versions(m))],
    ]
    cand_rows: list[list[Any]] = []
    if kinds:
        for k in kinds:
            covered = stats.tokens_covered.get(k, 0)
            cand_rows.append([KIND_NAMES[k], cand.get("spans", {}).get(k, 0), cand.get("dropped_at_row_boundary", {}).get(k, 0),
                              _percent(covered, stats.tokens_read)])
        model = cand.get("spacy_model") or {}
    out.append("<h2>Summary</h2>")
    out.append('<div class="tables">')
    out.append(_table(["documents", ""], docs_rows, {1}))
    out.append(_table(["rows and tokens", ""], rows_rows, {1}))
    out.append(_table(["build", ""], build_rows, {1}))
    if kinds:
        extra = []
        if cand.get("spacy_model"):
            extra.append(f"spaCy {model.get('name', '?')} {model.get('version', '')}")
        if cand.get("np_chunker"):
            extra.append(f"noun phrases by {cand['np_chunker']}")
        out.append("<div>" + _table(["mask candidates", "spans", "cut by a row end (dropped)", "tokens covered*"], cand_rows, {1, 2, 3})
                   + f'<p class="d">{_e("; ".join(extra))}. *in {_e(stats.scope())}.</p></div>')
    out.append("</div>")
    if dead:
        firsts = _dead_letter_examples(art)
        dl_rows = []
        for d in m.get("dead_letter", []):
            rec = firsts.get(d["path"], {})
            reason = d["path"].rsplit("/", 1)[-1].removesuffix(".jsonl")
            src = rec.get("source") or {}
            where = f"{src.get('path', '?')}:{src.get('line', '?')}" if src else ""
            dl_rows.append([_Html(f'<a href="../{_e(d["path"])}"><code>{_e(reason)}</code></a>'), d["records"],
                            f"{where} {rec.get('detail', '')}".strip(), (rec.get("preview") or "")[:160]])
        out.append("<h2>Dead letters</h2>")
        out.append(_table(["reason (file)", "records", "first: where and why", "first: preview"], dl_rows, {1}))
    # -- plots -------------------------------------------------------------------------------
    out.append("<h2>Plots</h2>")
    out.append(f'<p class="sub">Row lengths, documents and shards come from the manifest (every row); the other plots from {_e(stats.scope())}.</p>')
    for f in figures:
        out.append(f'<figure><img src="{_e(f.file)}" alt="{_e(f.alt)}"><figcaption>{_e(f.caption)}</figcaption></figure>')
    # -- n-gram dictionary ---------------------------------------------------------------------
    if cand.get("ngram_dictionary"):
        out.append("<h2>N-gram dictionary</h2>")
        info = cand["ngram_dictionary"]
        out.append(f"<p>{_n(int(info.get('entries', 0)))} entries (n ≤ {_e(info.get('max_n', '?'))}) from <code>{_e(info.get('path'))}</code>.</p>")
        if dictionary is None or not dictionary.reachable:
            out.append(f'<p class="note">{_e(dictionary.message if dictionary else "not reachable")}</p>')
        else:
            if not dictionary.message.endswith("matches the manifest)"):
                out.append(f'<p class="note">{_e(dictionary.message)}</p>')
            rows = [[n, entries, " · ".join(f"{r['ngram']} ({r['count']:,})" for r in top)]
                    for n, (entries, top) in sorted(dictionary.per_n.items())]
            out.append(_table(["n", "entries", "most frequent (occurrences)"], rows, {0, 1}))
    # -- examples ----------------------------------------------------------------------------
    out.append("<h2>Example rows</h2>")
    if stats.examples:
        legend = " ".join(f'<span class="{KIND_CSS[k]}">{_e(KIND_NAMES[k])}</span>' for k in kinds)
        chosen = "rows with at least one candidate span" if kinds else "rows"
        out.append(f'<p class="legend">{len(stats.examples)} {chosen} chosen at random (seed {stats.seed}) from {_e(stats.scope())}, decoded with '
                   f"the artifact's tokenizer.json. {('Marks: ' + legend + '; entity labels are raised after the entity.') if kinds else ''}</p>")
        for ex in stats.examples:
            counts = ", ".join(f"{len(ex.spans[k])} {KIND_NAMES[k]}" for k in kinds)
            meta = f"document {ex.doc_id}, row {ex.seq_index} · {len(ex.input_ids)} tokens" + (f" · {counts}" if counts else "") + f" · {ex.shard}"
            out.append(f'<div class="example"><div class="meta">{_e(meta)}</div><div class="text">{render_example(tok, ex, kinds)}</div></div>')
    else:
        out.append('<p class="note">no row to show</p>')
    out.append(
        f"<footer>Made by <code>python -m pipeline.report</code> from the manifest and the shards. Check the artifact with "
        f"<code>python -m pipeline.verify {_e(art.uri)}</code>. Format: schemas/FORMAT.md, version {_e(m['format_version'])}."
        + (f" Tokens per document: {len(doc_tokens):,} documents, median {int(np.median(doc_tokens)):,}, mean {doc_tokens.mean():,.0f}, max {int(doc_tokens.max()):,}." if len(doc_tokens) else "")
        + "</footer>"
    )
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Dataset card
# ---------------------------------------------------------------------------------------------
def size_category(n: int) -> str:
    """Hugging Face's size_categories bucket for n examples (rows)."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
              (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
              (10_000_000_000, "1B<n<10B"), (100_000_000_000, "10B<n<100B"), (1_000_000_000_000, "100B<n<1T")]  # fmt: skip
    for bound, name in bounds:
        if n < bound:
            return name
    return "n>1T"


def _md(value: Any) -> str:
    """A markdown table cell."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _build_option_names() -> list[str] | None:
    """The job's own option names (not Beam's), from BuildShardsOptions; None if it cannot be imported."""
    try:
        from pipeline.build_shards import BuildShardsOptions
    except Exception:  # noqa: BLE001 - the card falls back to listing every option
        return None
    parser = argparse.ArgumentParser(add_help=False)
    BuildShardsOptions._add_argparse_args(parser)
    return [a.dest for a in parser._actions if a.dest != "help"]


def build_card(m: dict, *, pretty_name: str, license: str | None, source_license: str | None, language: str | None,
               uri: str) -> str:
    c = m["counts"]
    cand = m.get("candidates") or {}
    kinds = [k for k in fmt.CANDIDATE_KINDS if k in cand.get("kinds", [])]
    opts = m.get("options", {})
    lang = language or PUNKT_LANGUAGES.get(str(opts.get("language", "")).lower())
    lic_line = f"license: {json.dumps(license)}" if license else f"license: {DEFAULT_LICENSE}  # not given: set it with python -m pipeline.report --license <id>"
    front = [
        "---",
        f"pretty_name: {json.dumps(pretty_name)}",
        lic_line,
        "language:",
        f"- {lang}" if lang else "- unknown  # set it with --language <ISO 639-1 code>",
        "task_categories:",
        "- fill-mask",
        "task_ids:",
        "- masked-language-modeling",
        "size_categories:",
        f"- {size_category(int(c['rows']))}",
        "tags:",
        "- spanbert",
        "- spanprep",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        f"    path: {fmt.SHARDS_DIR}/*.arrow",
        "---",
    ]
    command = ["python", "-m", "pipeline.build_shards", *[str(a) for a in m.get("command", [])]]
    tok = m["tokenizer"]
    names = _build_option_names()
    shown = {k: v for k, v in opts.items() if k != "beam" and (names is None or k in names) and v not in (None, "")}
    beam = opts.get("beam", {})
    lines = front + [
        "",
        f"# {pretty_name}",
        "",
        "## What it is",
        "",
        f"A preprocessed corpus for SpanBERT-style pre-training, made by spanprep (`python -m pipeline.build_shards`): "
        f"{c['rows']:,} rows of at most {m['max_row_tokens']} WordPiece tokens ({c['tokens']:,} tokens in all) from "
        f"{_plural(c['documents_written'], 'document')}, in {_plural(len(m['shards']), 'Arrow IPC file')} (`{fmt.SHARDS_DIR}/*.arrow`, zstd). "
        f"One row is one training sequence without its special tokens: a trainer adds `[CLS]` before and `[SEP]` after "
        f"(max_seq_len {m['max_seq_len']}). Packing: `{m['pack']}`"
        + (" (whole sentences, never across documents, as SpanBERT)." if m["pack"] == "doc-sentences" else " (across documents with [SEP], RoBERTa FULL-SENTENCES).")
        + (f" Mask candidates are stored per row as token spans: {', '.join(KIND_NAMES[k] for k in kinds)}." if kinds else " No mask candidates were stored (the span columns are empty)."),
        "",
        f"Format `{m['format']}` version {m['format_version']} (spanprep's `schemas/FORMAT.md`). Files: `manifest.json` "
        "(counts, checksums, options; written last), `tokenizer.json` (the exact tokenizer), `unigram.arrow` (token "
        "frequencies), `shards/`, `dead_letter/` (rejected input records with the reason), `report/index.html` (plots "
        "and example rows).",
        "",
        "| column | type | meaning |",
        "|---|---|---|",
        "| `doc_id` | string | the source document |",
        "| `seq_index` | int32 | row number within the document |",
        f"| `input_ids` | list<{m.get('input_ids_type', 'uint16')}> | WordPiece ids, no [CLS]/[SEP] |",
        "| `word_start` | list<bool> | token begins a word |",
        "| `sentence_start` | list<bool> | token begins a sentence |",
        "| `entity_spans` | list<struct<start, end, label>> | named-entity candidates, token range [start, end) |",
        "| `noun_phrase_spans` | list<struct<start, end>> | noun-phrase candidates |",
        "| `ngram_spans` | list<struct<start, end>> | dictionary n-gram segments |",
        "",
        "## How it was built",
        "",
        _fence(shlex.join(command), "bash"),
        "",
        "| software | version |",
        "|---|---|",
        *[f"| {_md(k)} | {_md(v)} |" for k, v in _versions(m)],
        "",
        f"Built {m.get('created_at', '?')} on the `{beam.get('runner', '?')}` Beam runner. Tokenizer: WordPiece, "
        f"{'uncased' if tok.get('lowercase') else 'cased'}, {tok['vocab_size']:,} ids, source `{tok['source']}` "
        f"(sha256 `{tok['sha256']}`).",
    ]
    if kinds:
        model = cand.get("spacy_model") or {}
        bits = []
        if model:
            bits.append(f"spaCy model `{model.get('name')}` {model.get('version', '')} (spaCy {model.get('spacy', '?')})")
        if cand.get("np_chunker"):
            bits.append(f"noun phrases from `{cand['np_chunker']}`")
        if cand.get("ngram_dictionary"):
            d = cand["ngram_dictionary"]
            bits.append(f"n-gram dictionary `{d.get('path')}` ({int(d.get('entries', 0)):,} entries, sha256 `{d.get('sha256')}`)")
        lines += ["", "Mask candidates: " + "; ".join(bits) + "."]
    lines += [
        "",
        "Options of the job:",
        "",
        "| option | value |",
        "|---|---|",
        *[f"| `{_md(k)}` | {_md(json.dumps(v) if not isinstance(v, str) else v)} |" for k, v in sorted(shown.items())],
        "",
        "## Source data",
        "",
        "| input | bytes | sha256 | documents read | truncated |",
        "|---|---:|---|---:|---|",
        *[f"| `{_md(i['path'])}` | {i['bytes']:,} | `{i['sha256']}` | {i['documents_read']:,} | {'yes' if i.get('truncated') else 'no'} |" for i in m["inputs"]],
        "",
        "### Licence of the sources",
        "",
        source_license.strip() if source_license else
        "Not stated: whoever made this card did not give `--source-license`. Check the terms of the sources above "
        "before you use or share this dataset.",
        "",
        "### Licence of this dataset",
        "",
        f"`{license}`." if license else "Unknown: set it with `python -m pipeline.report ARTIFACT --license <id>`.",
        "",
        "## Counts",
        "",
        "All from `manifest.json` (`counts`); every document read is either written or dead-lettered.",
        "",
        "| count | value |",
        "|---|---:|",
        *[f"| `{k}` | {c[k]:,} |" for k in ("documents_read", "documents_written", "documents_dead_lettered", "documents_cleaned",
                                            "duplicate_doc_ids", "inputs_with_byte_order_mark", "rows", "tokens", "sentences", "sentences_cut") if k in c],
        *[f"| `dead_lettered_by_reason.{_md(r)}` | {n:,} |" for r, n in sorted(c["dead_lettered_by_reason"].items())],
        *[f"| `candidates.spans.{k}` | {int(cand.get('spans', {}).get(k, 0)):,} |" for k in kinds],
        *[f"| `candidates.dropped_at_row_boundary.{k}` | {int(cand.get('dropped_at_row_boundary', {}).get(k, 0)):,} |" for k in kinds],
        "",
        "## How to use it",
        "",
        "With pyarrow (one shard):",
        "",
        _fence(f'import pyarrow.ipc as ipc\ntable = ipc.open_file("{uri}/{m["shards"][0]["path"] if m["shards"] else "shards/part-00000-of-00001.arrow"}").read_all()', "python"),
        "",
        "With Hugging Face `datasets`:",
        "",
        _fence(f'import datasets\nds = datasets.load_dataset("arrow", data_files="{uri}/{fmt.SHARDS_DIR}/*.arrow", split="train")', "python"),
        "",
        "Pre-training SpanBERT on it with spanprep's trainer:",
        "",
        _fence(f"deepspeed trainer/pretrain.py --deepspeed_config trainer/configs/zero2.json --data {shlex.quote(uri)} \\\n"
               f"    --preset base --max-steps 100000 --output-dir runs/base", "bash"),
        "",
        f"Check it first (checksums, counts, invariants): `python -m pipeline.verify {shlex.quote(uri)}`. The decoded text: "
        "`tokenizers.Tokenizer.from_file(\"tokenizer.json\").decode(ids)`.",
        "",
        "## Limitations",
        "",
        f"- Text is lossy where the tokenizer is: {'it lowercases, and ' if tok.get('lowercase') else ''}characters outside the "
        "vocabulary become `[UNK]`; the original text is not stored, only token ids.",
        "- Rows hold whole sentences; a sentence longer than a row is cut at a word boundary "
        f"({c['sentences_cut']:,} here). Rows never contain `[CLS]`/`[SEP]`"
        + (" except the document separators of full-sentences packing." if m["pack"] != "doc-sentences" else "."),
        f"- {c['documents_dead_lettered']:,} input records were rejected and are not in the shards (see `dead_letter/`).",
    ]
    if kinds:
        lines.append("- Mask candidates come from automatic tools (spaCy's statistical tagger, parser and NER; greedy dictionary "
                     "matching) and contain their errors; a candidate cut by a row boundary is dropped, not clipped.")
    lines += [
        "- Documents with the same id are kept"
        + (f" ({c.get('duplicate_doc_ids', 0):,} duplicate ids here)" if c.get("duplicate_doc_ids") else "")
        + "; no deduplication of text was done, and no filtering for quality, personal data or toxicity.",
        "- There is one split, `train`; a trainer holds out shards for evaluation itself.",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------
def _write(art: Artifact, relative: str, data: bytes) -> None:
    try:
        with art.fs.open_output_stream(art.path(relative)) as f:
            f.write(data)
    except OSError as e:
        raise ReportError(f"cannot write {art.display(relative)}: {e}") from None


def _decoder(art: Artifact):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(art.tokenizer_json())
    except (OSError, Exception) as e:  # noqa: BLE001 - tokenizers raises its own Exception type
        raise ReportError(f"{art.display(art.manifest['tokenizer']['file'])}: cannot load the tokenizer: {e}") from None


def write_report(
    uri: str | Artifact,
    *,
    license: str | None = None,
    source_license: str | None = None,
    pretty_name: str | None = None,
    language: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    seed: int = 0,
    examples: int = DEFAULT_EXAMPLES,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write ARTIFACT/report/ (plots, index.html) and ARTIFACT/README.md. Returns what was written.

    ``uri`` is the artifact's path or URI, or an opened :class:`Artifact`. Progress goes to ``progress``
    (default: this module's logger at INFO, which ``build_shards --report`` shows).

    Raises :class:`schemas.format.FormatError` (``ReportError`` is one) with a message when the artifact is
    missing, incomplete or unreadable, or the report cannot be written."""
    say = progress or log.info
    if max_rows < 1:
        raise ReportError(f"--max-rows must be at least 1, got {max_rows}")
    art = uri if isinstance(uri, Artifact) else Artifact.open(uri)
    plt = _pyplot()
    m = art.manifest
    name = pretty_name or os.path.basename(art.root.rstrip("/")) or "spanprep artifact"
    tok = _decoder(art)
    started = time.time()
    say(f"{art.uri}: {m['counts']['rows']:,} rows in {len(m['shards'])} shards")
    stats = collect(art, max_rows=max_rows, seed=seed, examples=examples, progress=say)
    dictionary = read_dictionary((m.get("candidates") or {}).get("ngram_dictionary"))

    c = m["counts"]
    dl = ", ".join(f"{r} {n:,}" for r, n in sorted(c["dead_lettered_by_reason"].items()))
    hist = m["row_length_histogram"]
    full = hist["counts"][-1] if hist["counts"] else 0
    tokens = [s["tokens"] for s in m["shards"]]
    kinds = (m.get("candidates") or {}).get("kinds", [])
    why_no_spans = _no_candidates(m, stats)

    def words_caption() -> str:
        parts = []
        for k in kinds:
            if stats.spans_read.get(k):
                mean_t = float((np.arange(len(stats.span_tokens[k])) * stats.span_tokens[k]).sum()) / stats.spans_read[k]
                mean_w = float((np.arange(len(stats.span_words[k])) * stats.span_words[k]).sum()) / stats.spans_read[k]
                parts.append(f"{KIND_NAMES[k]} {mean_t:.1f} tokens / {mean_w:.1f} words")
        return "Mean span length: " + "; ".join(parts) + f" (in {stats.scope()}); the last bar gathers {MAX_PLOTTED_SPAN_LEN} and longer."

    doc_arr = np.asarray(stats.doc_tokens, dtype=np.int64)
    plan = [
        ("documents.png", "Documents read, written and dead-lettered by reason", lambda: plot_documents(plt, m),
         f"{c['documents_read']:,} documents read, {c['documents_written']:,} written, {c['documents_dead_lettered']:,} dead-lettered"
         + (f" ({dl})." if dl else ".")),
        ("row_lengths.png", "Histogram of row lengths in tokens", lambda: plot_row_lengths(plt, m),
         f"{c['rows']:,} rows, {c['tokens']:,} tokens; {full:,} rows ({_percent(full, c['rows'])}) are in the last bin, "
         f"up to the limit of {m['max_row_tokens']} tokens."),
        ("doc_tokens.png", "Histogram of tokens per document", lambda: plot_doc_tokens(plt, stats),
         (f"Tokens per document (sum of its rows' lengths) over {len(doc_arr):,} documents"
          + (" whose first row was sampled" if stats.sampled else "")
          + f": median {int(np.median(doc_arr)):,}, mean {doc_arr.mean():,.0f}, max {int(doc_arr.max()):,}.")
         if len(doc_arr) else "Tokens per document: not available (see the plot)."),
        ("shards.png", "Tokens per shard", lambda: plot_shards(plt, m),
         f"{len(tokens)} shards; tokens per shard from {min(tokens, default=0):,} to {max(tokens, default=0):,} "
         f"(documents go to shards by a hash of their id)."),
        ("spans_per_row.png", "Candidate spans per row by kind", lambda: plot_spans_per_row(plt, m, stats),
         (why_no_spans.capitalize() + ".") if why_no_spans else f"How many candidate spans a row holds, by kind, in {stats.scope()}."),
        ("span_lengths.png", "Candidate span lengths in tokens and in words by kind", lambda: plot_span_lengths(plt, m, stats),
         (why_no_spans.capitalize() + ".") if why_no_spans else words_caption()),
        ("entity_labels.png", "Most frequent entity labels", lambda: plot_entity_labels(plt, m, stats),
         (f"Top {min(TOP_LABELS, len(stats.entity_labels))} of {len(stats.entity_labels)} spaCy entity labels over "
          f"{sum(stats.entity_labels.values()):,} entity spans in {stats.scope()}.") if stats.entity_labels
         else (why_no_spans or "no entity span in the rows read").capitalize() + "."),
    ]
    if dictionary is not None and dictionary.reachable and dictionary.top:
        plan.append(("ngrams.png", "Most frequent n-grams of the dictionary", lambda: plot_ngrams(plt, dictionary.top),
                     f"The {min(TOP_NGRAMS, len(dictionary.top))} most frequent entries of the n-gram dictionary {dictionary.path}."))

    # Everything is made in memory first, so a failure leaves the previous report as it was.
    figures = [Figure(file, alt, caption) for file, alt, _, caption in plan]
    pngs = {file: _png(make()) for file, _, make, _ in plan}
    page = build_html(art, stats, figures, dictionary, tok, name)
    card = build_card(m, pretty_name=name, license=license, source_license=source_license, language=language, uri=art.uri)
    try:
        art.fs.delete_dir_contents(art.path(fmt.REPORT_DIR), missing_dir_ok=True)
        art.fs.create_dir(art.path(fmt.REPORT_DIR), recursive=True)
    except OSError as e:
        raise ReportError(f"cannot write {art.display(fmt.REPORT_DIR)}: {e}") from None
    for file, data in pngs.items():
        _write(art, f"{fmt.REPORT_DIR}/{file}", data)
    _write(art, f"{fmt.REPORT_DIR}/{INDEX_FILE}", page.encode("utf-8"))
    _write(art, README_FILE, card.encode("utf-8"))
    say(f"wrote {art.display(fmt.REPORT_DIR + '/' + INDEX_FILE)} and {art.display(README_FILE)} in {time.time() - started:.1f} s")
    return {"index": art.display(f"{fmt.REPORT_DIR}/{INDEX_FILE}"), "card": art.display(README_FILE),
            "plots": [art.display(f"{fmt.REPORT_DIR}/{f.file}") for f in figures], "stats": stats}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipeline.report", description=__doc__.split("\n\n")[0])
    p.add_argument("artifact", help="artifact directory or URI (gs://, s3://, hdfs://)")
    p.add_argument("--license", default=None, help="licence of this dataset for the card (a Hugging Face licence id, e.g. cc-by-sa-3.0); default: unknown")
    p.add_argument("--source-license", "--source_license", dest="source_license", default=None,
                   help="the licence terms of the sources, as text for the card")
    p.add_argument("--pretty-name", "--pretty_name", dest="pretty_name", default=None, help="dataset name (default: the directory name)")
    p.add_argument("--language", default=None, help="ISO 639-1 code for the card (default: from the build's --language)")
    p.add_argument("--max-rows", "--max_rows", dest="max_rows", type=int, default=DEFAULT_MAX_ROWS,
                   help=f"read at most about this many rows for the statistics; larger artifacts are sampled (default {DEFAULT_MAX_ROWS:,})")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of the example rows (default 0)")
    p.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES, help=f"example rows to show (default {DEFAULT_EXAMPLES})")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    return p


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` and write the report; raises FormatError on a missing, incomplete or unreadable artifact."""
    a = build_parser().parse_args(argv)
    progress = (lambda msg: None) if a.quiet else (lambda msg: print(f"report: {msg}", file=sys.stderr, flush=True))
    return write_report(a.artifact, license=a.license, source_license=a.source_license, pretty_name=a.pretty_name,
                        language=a.language, max_rows=a.max_rows, seed=a.seed, examples=max(0, a.examples), progress=progress)


def main(argv: list[str] | None = None) -> int:
    try:
        result = run(argv)
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 1
    except fmt.FormatError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    print(result["index"])
    print(result["card"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
