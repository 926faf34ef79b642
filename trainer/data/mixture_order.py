"""The order of a weighted mixture of sources: stream position -> (source, how many of its samples came before).

Definitions (what ``--data NAME=PATH:WEIGHT`` means; docs/TRAINING.md repeats them)
------------------------------------------------------------------------------------
* **Proportions are of samples (rows), not of tokens**: a source of weight ``w`` gives ``w / sum(w)`` of the rows
  drawn. Rows of every artifact are packed up to the same ``max_seq_len``, so on full-length packing rows and
  tokens agree closely; counting rows keeps the schedule exact and independent of the data. A source without
  weight takes its natural size (its number of training rows); weights are all given or all left out.
* **An epoch of the mixture** is ``M`` samples: ``DataConfig.samples_per_epoch`` if set, else the largest ``M`` at
  which no source is drawn more than its size: ``M = floor(min_s N_s * W / w_s)``, so the source that runs out
  first is read once per epoch (all of it, or all but a sample or two of rounding) and the others are read partly (they continue where they stopped in the
  next epoch). Weights equal to the natural sizes give ``M = sum N_s`` and every sample of every source exactly
  once per epoch.
* **Sources are taken in the order of their names** (``sorted(names)``), never in ``--data`` order: the counts,
  the interleaving and the source indices below are functions of the names, so any order of ``--data`` gives the
  same stream from the start and resumes any checkpoint of it.
* **Counts per epoch are exact**: source ``s`` gets ``n_s = floor(M P_s / W) - floor(M P_{s-1} / W)`` samples of an
  epoch (``P_s`` the cumulative weights in name order, exact rational arithmetic), so ``sum n_s = M``. A source
  whose share of an epoch is below one sample (``M w_s < W``) is refused, whatever its place; every other source
  gets ``n_s >= floor(M w_s / W) >= 1``.
* **Interleaving**: an epoch is cut into windows of ``K = 4096`` positions; source ``s`` has
  ``floor(x Q_s / M) - floor(x Q_{s-1} / M)`` of the first ``x`` positions at every window boundary ``x``
  (``Q_s = n_1 + ... + n_s``): the proportions hold within one sample per source at every window boundary. Inside
  a window the window's source labels are shuffled (``Philox(key=(mix_seed << 32 | epoch, w))``). A window is built
  when it is read (a few are kept), so the order's memory is ``O(K + number of sources)`` whatever the weights and
  ``M`` (a 1:20,000,000 mixture needs no more than 1:1).
* **Each source is an endless stream of its own passes**: the ``k``-th sample the mixture draws from ``s`` (counted
  from the start of training) is position ``k mod N_s`` of pass ``k // N_s`` of ``s``; pass ``p`` of ``s`` is the
  single-artifact epoch order (``trainer.data.order``) with epoch ``p`` and seed ``source_seed(seed, name)``, and
  its masks use epoch ``p``. So a source that runs out repeats with a new order (and new masks) per pass, and the
  passes are counted (``passes`` in the loader state).

Nothing is dropped: the stream is continuous across epochs (a global step may span an epoch boundary), so every
position is delivered exactly once whatever the number of ranks.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from fractions import Fraction

import numpy as np

MIX_WINDOW = 4096  # positions whose source labels are shuffled together


def source_seed(seed: int, name: str) -> int:
    """The seed of source ``name``'s order and masks: a 32-bit hash of (seed, name), so reordering ``--data``
    changes nothing and two sources never share draws."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{name}".encode()).digest()[:4], "big")


class MixtureOrder:
    """Positions of a mixture's stream -> (source, source count) (module docstring)."""

    def __init__(
        self,
        names: list[str],
        sizes: list[int],
        weights: list[float] | None,
        seed: int,
        samples_per_epoch: int | None = None,
    ):
        if len(names) != len(sizes) or not names:
            raise ValueError("a mixture needs one size per source and at least one source")
        if list(names) != sorted(names):
            raise ValueError(f"a mixture's sources are taken in name order: give them sorted, not {list(names)}")
        if any(int(n) <= 0 for n in sizes):
            raise ValueError(f"every source of a mixture needs training rows; sizes {dict(zip(names, sizes))}")
        self.names, self.sizes = list(names), [int(n) for n in sizes]
        # decimal weights exactly as written (0.7 is 7/10, not the nearest binary float)
        w = [Fraction(n) for n in self.sizes] if weights is None else [Fraction(str(x)) for x in weights]
        if any(x <= 0 for x in w):
            raise ValueError(f"mixture weights must be > 0; got {dict(zip(names, weights or []))}")
        total = sum(w)
        if samples_per_epoch is None:
            samples_per_epoch = int(min(Fraction(n) * total / x for n, x in zip(self.sizes, w)))
        self.M = int(samples_per_epoch)
        # a share below one sample is refused by the weight alone (not by rounding, which depends on the neighbours)
        tiny = [nm for nm, x in zip(names, w) if self.M * x < total]
        if tiny:
            raise ValueError(
                f"source(s) {', '.join(tiny)} get less than one of the {self.M} samples of a mixture epoch: raise "
                f"their weight or --samples-per-epoch"
            )
        cum = [sum(w[:i], Fraction(0)) for i in range(len(w) + 1)]
        bounds = [int(self.M * c / total) for c in cum]  # floor of an exact rational (non-negative)
        self.n = [bounds[i + 1] - bounds[i] for i in range(len(w))]  # each >= floor(M w / total) >= 1
        self.Q = [sum(self.n[:i]) for i in range(len(self.n) + 1)]  # cumulative counts, Q[-1] == M
        self.K = MIX_WINDOW  # not the weights': a window's labels are all the order ever holds (module docstring)
        self.mix_seed = source_seed(seed, "\0mixture")
        self._cache: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    @property
    def per_epoch(self) -> dict[str, int]:
        """Samples of each source per epoch."""
        return dict(zip(self.names, self.n))

    def before(self, x: int) -> np.ndarray:
        """Samples of each source among the first ``x`` positions of an epoch (``0 <= x <= M``; exact, integers)."""
        a = [x * q // self.M for q in self.Q]
        return np.asarray([a[i + 1] - a[i] for i in range(len(self.n))], dtype=np.int64)

    def _window(self, epoch: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        """(source label, count of that source in the epoch before this position) for window ``w`` of ``epoch``."""
        key = (epoch, w)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        lo, hi = w * self.K, min((w + 1) * self.K, self.M)
        start = self.before(lo)
        labels = np.repeat(np.arange(len(self.n)), self.before(hi) - start)
        rng = np.random.Generator(np.random.Philox(key=[(self.mix_seed << 32) | epoch, w]))
        labels = labels[rng.permutation(len(labels))]
        order = np.argsort(labels, kind="stable")
        first = np.searchsorted(labels[order], np.arange(len(self.n)))  # first slot of each label in sorted order
        local = np.empty(len(labels), dtype=np.int64)
        local[order] = np.arange(len(labels)) - first[labels[order]]
        out = (labels, start[labels] + local)
        self._cache[key] = out
        while len(self._cache) > 8:
            self._cache.popitem(last=False)
        return out

    def locate(self, positions: np.ndarray, epoch0: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(source index, samples of that source drawn before, counted from position 0) for stream positions
        (0 = the first position of epoch ``epoch0``; windows are keyed on the absolute epoch)."""
        p = np.asarray(positions, dtype=np.int64)
        e, q = np.divmod(p, self.M)
        w = q // self.K
        src = np.empty_like(p)
        count = np.empty_like(p)
        keys = e * (self.M // self.K + 1) + w
        for k in np.unique(keys):
            sel = keys == k
            ee, ww = int(e[sel][0]), int(w[sel][0])
            labels, local = self._window(epoch0 + ee, ww)
            j = q[sel] - ww * self.K
            src[sel] = labels[j]
            count[sel] = local[j] + ee * np.asarray(self.n, dtype=np.int64)[labels[j]]
        return src, count

    def drawn(self, consumed: int, epoch0: int = 0) -> np.ndarray:
        """Samples of each source among the first ``consumed`` positions (0 = the first of epoch ``epoch0``)."""
        e, q = divmod(int(consumed), self.M)
        w = q // self.K
        head = np.zeros(len(self.n), dtype=np.int64)
        if q > w * self.K:
            labels, _ = self._window(epoch0 + e, w)
            head = np.bincount(labels[: q - w * self.K], minlength=len(self.n))
        return np.asarray(self.n, dtype=np.int64) * e + self.before(w * self.K) + head
