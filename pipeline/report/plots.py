"""The report's plots: matplotlib figures (Agg backend) from the manifest and the statistics, as PNG bytes."""

from __future__ import annotations

import io
import math

import numpy as np

from pipeline.report.common import (
    KIND_COLORS,
    KIND_NAMES,
    MAX_PLOTTED_SPAN_LEN,
    SPANS_PER_ROW_BARS,
    TOP_LABELS,
    TOP_NGRAMS,
    ReportError,
)
from pipeline.report.statistics import Stats


def pyplot():
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


def png(fig) -> bytes:
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
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        fontsize=11,
        color="#4b5563",
        wrap=True,
        bbox={"boxstyle": "round,pad=0.8", "facecolor": "#f3f4f6", "edgecolor": "#d1d5db"},
        transform=ax.transAxes,
    )
    return fig


def _label_bars(ax, bars, values, fmt_value=lambda v: f"{v:,}") -> None:
    for bar, v in zip(bars, values):
        ax.annotate(
            fmt_value(v),
            (bar.get_width(), bar.get_y() + bar.get_height() / 2),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=8.5,
        )


def plot_documents(plt, m: dict):
    c = m["counts"]
    if not c["documents_read"]:
        return _message_figure(plt, "Documents", "no documents were read (empty input)")
    labels = ["read", "written"] + [f"dead-lettered: {r}" for r in sorted(c["dead_lettered_by_reason"])]
    values = [c["documents_read"], c["documents_written"]] + [
        c["dead_lettered_by_reason"][r] for r in sorted(c["dead_lettered_by_reason"])
    ]
    colors = ["#6b7280", "#16a34a"] + ["#dc2626"] * (len(values) - 2)
    for key, label, color in (("documents_duplicate", "left out: duplicate", "#d97706"),
                              ("documents_contaminated", "left out: evaluation overlap", "#7c3aed")):  # fmt: skip
        if c.get(key):
            labels.append(label)
            values.append(c[key])
            colors.append(color)
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
    ax.axvline(
        m["max_row_tokens"],
        color="#dc2626",
        linestyle="--",
        linewidth=1,
        label=f"row limit ({m['max_row_tokens']} tokens)",
    )
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
        return _message_figure(
            plt,
            title,
            "full-sentences packing: rows cross documents, so tokens per document\ncannot be read from the rows",
        )
    if not stats.doc_tokens:
        return _message_figure(plt, title, "no document was read")
    x = np.asarray(stats.doc_tokens, dtype=np.int64)
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    lo, hi = max(1, int(x.min())), int(x.max())
    bins: np.ndarray | int
    if hi / lo > 50:
        bins = np.unique(np.geomspace(lo, hi + 1, 40).astype(np.int64))
        ax.set_xscale("log")
    else:
        bins = min(40, max(5, int(len(np.unique(x)))))
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
        ax.bar(
            xs + (j - (len(kinds) - 1) / 2) * width, vals, width=width, color=KIND_COLORS[kind], label=KIND_NAMES[kind]
        )
    labels = [str(v) for v in xs]
    labels[-1] = f"{stop}+"
    ax.set_xticks(xs, labels, fontsize=8)
    ax.legend(frameon=False, fontsize=8.5)


def no_candidates(m: dict, stats: Stats) -> str | None:
    kinds = (m.get("candidates") or {}).get("kinds", [])
    if not kinds:
        return "no mask candidates: the artifact was built without --mask-candidates"
    if not any(stats.spans_read.get(k) for k in kinds):
        return f"no candidate spans in the rows read ({', '.join(KIND_NAMES[k] for k in kinds)} were looked for)"
    return None


def plot_spans_per_row(plt, m: dict, stats: Stats):
    title = "Candidate spans per row"
    why = no_candidates(m, stats)
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
    why = no_candidates(m, stats)
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
        return _message_figure(
            plt, title, "no entity candidates: the artifact was built without --mask-candidates entities"
        )
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
