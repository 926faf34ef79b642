"""GLUE metrics as GLUE reports them: accuracy, F1 (of the positive class, label id 1), Matthews correlation
(CoLA), Pearson and Spearman correlation (STS-B). Plain Python: no scipy/sklearn needed. Values are fractions
in [0, 1] (correlations in [-1, 1]); metrics.json reports them x 100 like the papers' tables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def accuracy(pred: Sequence[int], gold: Sequence[int]) -> float:
    _check(pred, gold)
    return sum(p == g for p, g in zip(pred, gold)) / len(gold)


def f1_binary(pred: Sequence[int], gold: Sequence[int], positive: int = 1) -> float:
    _check(pred, gold)
    tp = sum(p == positive and g == positive for p, g in zip(pred, gold))
    fp = sum(p == positive and g != positive for p, g in zip(pred, gold))
    fn = sum(p != positive and g == positive for p, g in zip(pred, gold))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def matthews(pred: Sequence[int], gold: Sequence[int], positive: int = 1) -> float:
    """Matthews correlation of a binary task; 0 when a row or column of the confusion matrix is empty."""
    _check(pred, gold)
    tp = sum(p == positive and g == positive for p, g in zip(pred, gold))
    tn = sum(p != positive and g != positive for p, g in zip(pred, gold))
    fp = sum(p == positive and g != positive for p, g in zip(pred, gold))
    fn = sum(p != positive and g == positive for p, g in zip(pred, gold))
    den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if den == 0 else (tp * tn - fp * fn) / den


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r; 0.0 when either side is constant (r is undefined there: scipy returns NaN; 0 keeps
    metrics.json valid JSON and ranks a constant predictor with an uncorrelated one)."""
    _check(x, y)
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return 0.0 if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties get the mean of the ranks they span (as Spearman's rho needs)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(ranks(x), ranks(y))


def _check(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} predictions for {len(b)} gold labels")
    if not b:
        raise ValueError("no examples to score")


METRICS = {"accuracy": accuracy, "f1": f1_binary, "matthews": matthews, "pearson": pearson, "spearman": spearman}


def glue_metrics(names: Sequence[str], pred: Sequence, gold: Sequence) -> dict[str, float]:
    """The task's metrics x 100, rounded to 4 decimals (JSON-stable)."""
    return {name: round(100.0 * METRICS[name](pred, gold), 4) for name in names}
