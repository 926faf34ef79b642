"""SBO targets over maximal masked runs, and the budget fallback for rows no whole unit fits in.

Span boundary objective (SpanBERT, Joshi et al. 2020, section 3.2): each token x_i of a masked span
(x_s..x_e) is predicted from the encodings of the *observed* boundary tokens x_{s-1} and x_{e+1}. When two
masked units touch (two spans, two words, a candidate and a word), the token next to one unit is itself a
target, so it is not observed. The boundaries are therefore taken around the *maximal masked run*: the longest
stretch of consecutive target tokens of a row. ``x_{s-1}`` and ``x_{e+1}`` are then always tokens that are
not targets: an unmasked content token, or the [CLS]/[SEP] the collator adds (or a [SEP] inside a row, which
is never a target). The position ``p_i`` counts from the run's first token. The 80/10/10 replacement is
still decided per unit; runs only change what the SBO head sees.

Functions work on units sorted by (row, start) that do not overlap (what every scheme of
``trainer.masking`` produces).
"""

from __future__ import annotations

import numpy as np

from trainer.masking.rows import IGNORE_INDEX


def run_bounds(u_row: np.ndarray, u_start: np.ndarray, u_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per unit, the row-local ``[start, end)`` of the maximal masked run holding it.

    Units must be sorted by (row, start) and must not overlap; a unit starting where the previous unit of
    the same row ends continues that run.
    """
    k = len(u_row)
    if k == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    touch = (u_row[1:] == u_row[:-1]) & (u_start[1:] == u_end[:-1])
    new_run = np.concatenate([[True], ~touch])
    first = np.flatnonzero(new_run)  # first unit of every run
    last = np.concatenate([first[1:] - 1, [k - 1]])  # last unit of every run
    run_id = np.cumsum(new_run) - 1
    return u_start[first][run_id], u_end[last][run_id]


def fill_empty_rows(
    gens: list,
    budget: np.ndarray,
    has_unit: np.ndarray,
    offsets: np.ndarray,
    wpos: np.ndarray,
    wend: np.ndarray,
    woff: np.ndarray,
    word_bad: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One unit for every row with a budget but no unit, so every such row has targets.

    A row ends up here when no whole unit fits in its budget (every word it has alone is longer than the
    budget; with ``span``, no span could be drawn whose first word fits). Its unit is the first
    ``min(budget, word length)`` tokens of one of its words (uniform among the words without special tokens):
    the budget is kept exactly, at the price of masking part of a word. Draws: two uniforms from the row's
    generator *after* all the scheme's draws (which word, then the unit's action), so the masks stay a pure
    function of (seed, epoch, sample id). Rows without an eligible word stay without targets.

    Returns ``(row, start, end, words, action_uniform)`` of the new units (row-local token ranges; ``words``
    is 1 when the whole word fits, else 0).
    """
    need = np.flatnonzero((budget > 0) & ~has_unit)
    out_row, out_s, out_e, out_w, out_a = [], [], [], [], []
    for i in need:
        lo, hi = int(woff[i]), int(woff[i + 1])
        ok = np.flatnonzero(~word_bad[lo:hi])
        if len(ok) == 0:
            continue
        u = gens[i].random(2)
        w = lo + int(ok[min(int(u[0] * len(ok)), len(ok) - 1)])
        start = int(wpos[w] - offsets[i])
        length = int(wend[w] - wpos[w])
        take = min(int(budget[i]), length)
        out_row.append(i)
        out_s.append(start)
        out_e.append(start + take)
        out_w.append(1 if take == length else 0)
        out_a.append(float(u[1]))
    as_i = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    return as_i(out_row), as_i(out_s), as_i(out_e), as_i(out_w), np.asarray(out_a, dtype=np.float64)


def boundary_stats(
    labels: np.ndarray, span_left: np.ndarray, span_right: np.ndarray, offsets: np.ndarray
) -> dict[str, float]:
    """How many MLM targets have a boundary (``span_left``/``span_right``) that is itself a target.

    Arrays are flat per token like ``trainer.masking.Masked`` (final-sequence boundary positions: content
    token ``j`` of a row is position ``j + 1``; position 0 and ``n + 1`` are [CLS]/[SEP], never targets).
    """
    n = np.diff(offsets)
    is_target = labels != IGNORE_INDEX
    tgt = np.flatnonzero(is_target)
    if len(tgt) == 0:
        return {"targets_checked": 0, "masked_boundary_targets": 0, "masked_boundary_share": 0.0}
    row = np.searchsorted(offsets, tgt, side="right") - 1
    base = offsets[row]

    def target_at(pos: np.ndarray) -> np.ndarray:
        inside = (pos >= 1) & (pos <= n[row])
        flat = np.clip(base + pos - 1, 0, max(len(labels) - 1, 0))
        return inside & is_target[flat]

    bad = target_at(span_left[tgt]) | target_at(span_right[tgt])
    return {
        "targets_checked": int(len(tgt)),
        "masked_boundary_targets": int(bad.sum()),
        "masked_boundary_share": float(bad.mean()),
    }
