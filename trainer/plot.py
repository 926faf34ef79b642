"""Training curves of a run: loss (total, MLM, SBO), accuracy, learning rate and throughput, as PNG files.

    .venv/bin/python -m trainer.plot RUN_DIR                 # writes RUN_DIR/plots/*.png
    .venv/bin/python -m trainer.plot RUN_DIR --out figures/  # somewhere else

Reads the CSV files that DeepSpeed's CSV monitor writes for the trainer (``trainer/engine/``) in
``RUN_DIR/monitor/``: one file per metric, named after the event with ``/`` turned into ``_``, each a
``step,<metric>`` header and one ``step,value`` line per logged step:

    train_loss.csv  train_mlm_loss.csv  train_sbo_loss.csv   every --log-every steps (sbo without --objective mlm)
    train_lr.csv  train_seq_per_s.csv  train_tokens_per_s.csv  train_mfu.csv (GPUs only)
    eval_mlm_loss.csv  eval_mlm_acc.csv  eval_sbo_loss.csv  eval_sbo_acc.csv   every --eval-every steps

A resumed run appends to the same files (the header is written again, and steps after the checkpoint it
resumed from are logged again): the later values win and the restart is marked on the plots. DeepSpeed's own
``Train_Samples_*.csv`` (by samples, not steps) repeat ``train_lr`` and are not plotted. ``RUN_DIR`` may also be
the monitor directory itself.
"""

from __future__ import annotations

import argparse
import csv
import glob
import math
import os
import sys
from dataclasses import dataclass, field

from schemas import commands

MONITOR_DIR = "monitor"
PLOTS_DIR = "plots"
SMOOTH_FROM = 50  # with at least this many points, draw an exponential moving average over the raw curve


class PlotError(Exception):
    """No monitor CSV, or nothing that can be plotted; reported without a traceback."""


@dataclass
class Series:
    """One metric: steps strictly increasing, the values logged at them, and the steps where a resumed run
    started logging again (went back to or below an earlier step)."""

    name: str
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    skipped: int = 0  # malformed lines (a run killed while writing, say)


def read_series(path: str) -> Series:
    """Parse one monitor CSV written by DeepSpeed's csvMonitor (tolerates repeated headers and restarts)."""
    name = os.path.basename(path).removesuffix(".csv")
    s = Series(name)
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for row in csv.reader(f):
            if not row or row[0].strip() == "step":
                continue
            try:
                step, value = int(float(row[0])), float(row[1])
            except (ValueError, IndexError):
                s.skipped += 1
                continue
            if not math.isfinite(value):
                s.skipped += 1
                continue
            if s.steps and step <= s.steps[-1]:
                # A resumed run logs again from its checkpoint: drop what it repeats, keep the new values.
                cut = next(i for i, x in enumerate(s.steps) if x >= step)
                del s.steps[cut:], s.values[cut:]
                s.restarts.append(step)
            s.steps.append(step)
            s.values.append(value)
    return s


def find_monitor_dir(run_dir: str) -> str:
    if not os.path.isdir(run_dir):
        raise PlotError(f"{run_dir}: no such directory (give the trainer's --output-dir RUN_DIR)")
    for candidate in (os.path.join(run_dir, MONITOR_DIR), run_dir):
        if glob.glob(os.path.join(candidate, "*.csv")):
            return candidate
    raise PlotError(
        f"{run_dir}: no monitor CSV files in {os.path.join(run_dir, MONITOR_DIR)}/ (the trainer writes train_loss.csv "
        f"and the others there every --log-every steps; is this a run directory, and has the run logged yet?)"
    )


def read_run(run_dir: str) -> dict[str, Series]:
    """Every ``*.csv`` of the run's monitor directory that holds at least one value, by metric name."""
    monitor = find_monitor_dir(run_dir)
    out = {}
    for path in sorted(glob.glob(os.path.join(monitor, "*.csv"))):
        s = read_series(path)
        if s.steps:
            out[s.name] = s
    if not out:
        raise PlotError(f"{monitor}: the CSV files hold no values yet")
    return out


# figure file -> (title, panels side by side: (panel title, y label, [(metric, label, style)])). style: "train"
# lines, "eval" markers joined by dashes. A panel without any of its metrics is left out.
FIGURES = {
    "loss.png": ("Loss", [
        ("total", "loss", [("train_loss", "train (MLM + SBO)", "train")]),
        ("MLM and SBO", "loss (nats per target)", [
            ("train_mlm_loss", "train MLM", "train"), ("train_sbo_loss", "train SBO", "train"),
            ("eval_mlm_loss", "eval MLM", "eval"), ("eval_sbo_loss", "eval SBO", "eval")]),
    ]),
    "accuracy.png": ("Accuracy of the predicted targets", [
        ("", "accuracy", [("eval_mlm_acc", "eval MLM", "eval"), ("eval_sbo_acc", "eval SBO", "eval"),
                          ("train_mlm_acc", "train MLM", "train"), ("train_sbo_acc", "train SBO", "train")]),
    ]),
    "lr.png": ("Learning rate", [("", "learning rate", [("train_lr", "learning rate", "train")])]),
}  # fmt: skip
THROUGHPUT = [("train_tokens_per_s", "tokens / s"), ("train_seq_per_s", "sequences / s"), ("train_mfu", "MFU")]
COLORS = {
    "train_loss": "#111827", "train_mlm_loss": "#2563eb", "train_sbo_loss": "#d97706", "eval_mlm_loss": "#1d4ed8",
    "eval_sbo_loss": "#b45309", "eval_mlm_acc": "#2563eb", "eval_sbo_acc": "#d97706", "train_mlm_acc": "#60a5fa",
    "train_sbo_acc": "#fbbf24", "train_lr": "#7c3aed", "train_tokens_per_s": "#059669", "train_seq_per_s": "#0891b2",
    "train_mfu": "#dc2626",
}  # fmt: skip
IGNORED_PREFIXES = ("Train_Samples_",)  # DeepSpeed's own events, keyed by samples


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'spanprep[report]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 9.5,
            "axes.titlesize": 11,
            "axes.titleweight": "bold",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.25,
            "savefig.dpi": 110,
        }
    )
    return plt


def _ema(values: list[float], alpha: float = 0.9) -> list[float]:
    out, acc = [], values[0]
    for v in values:
        acc = alpha * acc + (1 - alpha) * v
        out.append(acc)
    return out


def _draw(ax, s: Series, label: str, style: str, color: str) -> None:
    if style == "eval":
        ax.plot(s.steps, s.values, linestyle="--", marker="o", markersize=4, linewidth=1.2, color=color, label=label)
    elif len(s.steps) >= SMOOTH_FROM:
        ax.plot(s.steps, s.values, linewidth=0.8, alpha=0.3, color=color)
        ax.plot(s.steps, _ema(s.values), linewidth=1.6, color=color, label=f"{label} (EMA)")
    else:
        ax.plot(s.steps, s.values, linewidth=1.6, marker="." if len(s.steps) < 30 else None, color=color, label=label)


def _mark_restarts(ax, series: list[Series]) -> None:
    for step in sorted({r for s in series for r in s.restarts}):
        ax.axvline(step, color="#6b7280", linestyle=":", linewidth=1)
        ax.annotate(
            "resumed",
            (step, 1),
            xycoords=("data", "axes fraction"),
            xytext=(2, -10),
            textcoords="offset points",
            fontsize=8,
            color="#6b7280",
        )


def _save(plt, fig, path: str) -> None:
    fig.savefig(path, format="png", bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def plot_run(run_dir: str, out: str | None = None) -> list[str]:
    """Write the PNG files for the metrics the run has; return their paths."""
    metrics = read_run(run_dir)
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    out = out or os.path.join(run_dir, PLOTS_DIR)
    os.makedirs(out, exist_ok=True)
    title_run = os.path.basename(os.path.abspath(run_dir).rstrip("/"))
    written = []
    for file, (title, wanted_panels) in FIGURES.items():
        panels = [
            (sub, ylabel, [(metrics[m], label, style) for m, label, style in wanted if m in metrics])
            for sub, ylabel, wanted in wanted_panels
        ]
        panels = [p for p in panels if p[2]]
        if not panels:
            continue
        fig, axes = plt.subplots(
            1, len(panels), figsize=(4.6 * len(panels) + 2.6 * (len(panels) == 1), 3.4), squeeze=False
        )
        for ax, (sub, ylabel, present) in zip(axes[0], panels):
            for s, label, style in present:
                _draw(ax, s, label, style, COLORS.get(s.name, "#374151"))
            _mark_restarts(ax, [s for s, _, _ in present])
            ax.set_xlabel("optimizer step")
            ax.set_ylabel(ylabel)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if file == "lr.png":
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
            else:
                ax.legend(frameon=False, fontsize=8.5)
            if sub:
                ax.set_title(sub, loc="left", fontsize=10, fontweight="normal")
        fig.suptitle(f"{title} · {title_run}", x=0.01, ha="left", fontweight="bold", fontsize=11)
        path = os.path.join(out, file)
        _save(plt, fig, path)
        written.append(path)
    throughput = [(metrics[m], label) for m, label in THROUGHPUT if m in metrics]
    if throughput:
        fig, axes = plt.subplots(
            len(throughput), 1, figsize=(7.2, 2.2 * len(throughput) + 0.6), sharex=True, squeeze=False
        )
        for ax, (s, label) in zip(axes[:, 0], throughput):
            _draw(ax, s, label, "train", COLORS.get(s.name, "#374151"))
            _mark_restarts(ax, [s])
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[-1, 0].set_xlabel("optimizer step")
        axes[0, 0].set_title(f"Throughput · {title_run}", loc="left")
        path = os.path.join(out, "throughput.png")
        _save(plt, fig, path)
        written.append(path)
    known = {m for _, panels in FIGURES.values() for _, _, wanted in panels for m, _, _ in wanted} | {
        m for m, _ in THROUGHPUT
    }
    others = sorted(n for n in metrics if n not in known and not n.startswith(IGNORED_PREFIXES))
    if others:
        fig, axes = plt.subplots(len(others), 1, figsize=(7.2, 2.0 * len(others) + 0.6), sharex=True, squeeze=False)
        for ax, name in zip(axes[:, 0], others):
            _draw(ax, metrics[name], name, "train", "#374151")
            ax.set_ylabel(name)
        axes[-1, 0].set_xlabel("step")
        axes[0, 0].set_title(f"Other metrics · {title_run}", loc="left")
        path = os.path.join(out, "other.png")
        _save(plt, fig, path)
        written.append(path)
    if not written:
        raise PlotError(
            f"{run_dir}: none of the monitor's metrics is one this tool plots: {', '.join(sorted(metrics))}"
        )
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=commands.module("trainer.plot"), description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", metavar="RUN_DIR", help="the trainer's --output-dir (or its monitor/ directory)")
    p.add_argument("--out", default=None, help="directory for the PNG files (default: RUN_DIR/plots)")
    args = p.parse_args(argv)
    try:
        paths = plot_run(args.run_dir, args.out)
    except PlotError as e:
        print(f"plot: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"plot: error: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    from schemas.quick_exit import quick_exit

    quick_exit(main())
