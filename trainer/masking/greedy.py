"""Vectorised building blocks of BERT's "random order, take a unit if it still fits" rule (``trainer.masking.units``):
ordering units by priority within their rows and the exact greedy fit against each row's budget."""

from __future__ import annotations

import numpy as np


def segment_cumsum(values: np.ndarray, seg_starts: np.ndarray, seg_ids: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` restarting at every segment (segments contiguous)."""
    c = np.cumsum(values)
    base = np.concatenate([[0], c])[seg_starts]
    return c - base[seg_ids]


def greedy_fit(row: np.ndarray, tokens: np.ndarray, budget: np.ndarray, num_rows: int) -> np.ndarray:
    """BERT's rule, vectorised: walk each row's units in the given order (``row`` must be sorted, units
    of a row in priority order); take a unit if its ``tokens`` still fit in the row's budget, else skip it.

    Exact: each pass takes, among the untaken units that fit individually, the longest prefix that fits;
    the first unit past that prefix no longer fits and never will (the budget only shrinks).
    """
    taken = np.zeros(len(row), dtype=bool)
    if len(row) == 0:
        return taken
    rem = budget.astype(np.int64).copy()
    seg_starts = np.searchsorted(row, np.arange(num_rows), side="left")
    while True:
        elig = ~taken & (tokens <= rem[row])
        if not elig.any():
            return taken
        cs = segment_cumsum(np.where(elig, tokens, 0), seg_starts, row)
        take = elig & (cs <= rem[row])
        taken |= take
        rem -= np.bincount(row[take], weights=tokens[take], minlength=num_rows).astype(np.int64)


def order_by_priority(unit_row: np.ndarray, prio: np.ndarray, valid: np.ndarray, num_rows: int) -> np.ndarray:
    """Indices of the valid units sorted by (row, priority). Units must be grouped by row (``unit_row``
    non-decreasing). A padded [rows, units] argsort: much faster than a lexsort over all units."""
    if len(unit_row) == 0:
        return np.zeros(0, np.int64)
    counts = np.bincount(unit_row, minlength=num_rows)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    width = int(counts.max())
    key = np.full((num_rows, width), np.inf)
    within = np.arange(len(unit_row)) - start[unit_row]
    key[unit_row, within] = np.where(valid, prio, np.inf)
    order = np.argsort(key, axis=1)
    nvalid = np.bincount(unit_row[valid], minlength=num_rows)
    keep = np.arange(width)[None, :] < nvalid[:, None]
    return (start[:, None] + order)[keep]
