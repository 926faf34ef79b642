"""The epoch order: stream position -> (block, row) for one epoch, a pure function of (seed, epoch).

Global order (a pure function of (seed, epoch))
-----------------------------------------------
A *block* is one record batch of a shard (``rows_per_batch`` = 128 rows, fewer in a shard's last one).
For epoch ``e`` of the training split:

1. permute all blocks of all training shards (``Philox(key=(seed << 32 | e, 0))``);
2. cut the permuted list into windows of ``shuffle_window`` consecutive blocks;
3. shuffle the rows within each window (window ``w``: ``Philox(key=(seed << 32 | e, w + 1))``);
4. the epoch's stream is the windows' rows one after another: ``N`` rows, positions ``0..N-1``.

So samples are shuffled across shards (step 1) and across rows of ``shuffle_window`` blocks (step 3); a
worker holds at most about two windows of decoded rows. The evaluation split is not shuffled: blocks in
manifest order, rows in shard order.

"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from trainer.data.blocks import Blocks


class EpochOrder:
    """Stream position -> (block, row in block) for one epoch (see the module docstring)."""

    def __init__(self, blocks: Blocks, seed: int, epoch: int, window: int, shuffle: bool):
        self.blocks, self.seed, self.epoch, self.window, self.shuffle = blocks, seed, epoch, window, shuffle
        nb = len(blocks.rows)
        if shuffle:
            self.perm = self._rng(0).permutation(nb)
        else:
            self.perm = np.arange(nb)
            self.window = max(nb, 1)  # one window, rows unshuffled
        prow = blocks.rows[self.perm]
        self.nwin = -(-nb // self.window)
        win_rows = np.add.reduceat(prow, np.arange(0, nb, self.window)) if nb else np.zeros(0, np.int64)
        self.win_start = np.concatenate([[0], np.cumsum(win_rows)]).astype(np.int64)
        self._perm_prows = prow
        self._cache: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def _rng(self, k: int) -> np.random.Generator:
        return np.random.Generator(np.random.Philox(key=[(self.seed << 32) | self.epoch, k]))

    def _window(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        hit = self._cache.get(w)
        if hit is not None:
            return hit
        lo, hi = w * self.window, min((w + 1) * self.window, len(self.perm))
        cum = np.concatenate([[0], np.cumsum(self._perm_prows[lo:hi])]).astype(np.int64)
        n = int(cum[-1])
        rowperm = self._rng(w + 1).permutation(n) if self.shuffle else np.arange(n)
        self._cache[w] = (cum, rowperm)
        while len(self._cache) > 4:
            self._cache.popitem(last=False)
        return cum, rowperm

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(block index into the split's blocks, row within block) for stream positions."""
        positions = np.asarray(positions, dtype=np.int64)
        w = np.searchsorted(self.win_start, positions, side="right") - 1
        blk = np.empty_like(positions)
        row = np.empty_like(positions)
        for wu in np.unique(w):
            sel = w == wu
            cum, rowperm = self._window(int(wu))
            local = rowperm[positions[sel] - self.win_start[wu]]
            b = np.searchsorted(cum, local, side="right") - 1
            blk[sel] = self.perm[wu * self.window + b]
            row[sel] = local - cum[b]
        return blk, row

    def sample_ids(self, positions: np.ndarray) -> np.ndarray:
        blk, row = self.locate(positions)
        return self.blocks.first_sample[blk] + row
