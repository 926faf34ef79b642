"""The storage of the chunk cache: entries (a chunk's bytes as words, its ids) and a hash index over them.

Everything is numpy arrays, worked on a batch of keys at a time. The index is an open-addressing table of
64-bit keys (0 marks an empty slot) with linear probing, at most a quarter full; entries live in append-only
buffers, so arrays handed out by :meth:`ChunkTable.entries` stay valid (and unchanged) while later entries
are added or the table is cleared. Not thread-safe: ``chunk_cache.ChunkCache`` holds a lock around it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

_LOAD = 4  # the index has at least this many slots per entry: few probes per lookup


class _Buffer:
    """An append-only numpy array. ``buf`` may be replaced by a larger copy; a reference taken earlier
    keeps everything appended before it, so readers never see data move under them."""

    def __init__(self, dtype, capacity: int = 1 << 10):
        self.buf = np.empty(capacity, dtype)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def append(self, values: np.ndarray) -> int:
        start, end = self.n, self.n + len(values)
        if end > len(self.buf):
            grown = np.empty(max(end, len(self.buf) * 3 // 2), self.buf.dtype)
            grown[:start] = self.buf[:start]
            self.buf = grown
        self.buf[start:end] = values
        self.n = end
        return start


def exclusive_cumsum(counts: np.ndarray) -> tuple[np.ndarray, int]:
    """(start of each run, total) for runs of ``counts`` elements laid end to end."""
    cum = np.cumsum(counts)
    return cum - counts, int(cum[-1]) if len(cum) else 0


def run_indices(offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(offsets[i], offsets[i] + counts[i])``."""
    first, total = exclusive_cumsum(counts)
    idx = np.repeat(offsets - first, counts)
    idx += np.arange(total, dtype=idx.dtype)
    return idx


class Entries(NamedTuple):
    """The entry arrays at one moment: entry e's ids are ``ids[ids_at[e] : ids_at[e] + ids_count[e]]``, its
    chunk is ``length[e]`` bytes held in the words ``words[words_at[e] :]`` (zero past its end)."""

    ids: np.ndarray
    ids_at: np.ndarray
    ids_count: np.ndarray
    words: np.ndarray
    words_at: np.ndarray
    length: np.ndarray


class ChunkTable:
    """``values``: the dtype of what the table holds per token (ids, or ids packed with what else a cache keeps)."""

    def __init__(self, values=np.int32):
        self._values = np.dtype(values)
        self.clear()

    def __len__(self) -> int:
        return len(self._length)

    def clear(self) -> None:
        self._keys = np.zeros(1 << 8, np.uint64)  # the index: 0 = empty slot
        self._slot_entry = np.zeros(1 << 8, np.int64)
        self._ids = _Buffer(self._values)  # every entry's ids (values), one after another
        self._words = _Buffer(np.uint64)  # every entry's chunk as words
        self._ids_at, self._ids_count = _Buffer(np.int64), _Buffer(np.int64)
        self._words_at, self._length = _Buffer(np.int64), _Buffer(np.int64)

    def nbytes_with(self, entries: int = 0, words: int = 0, ids: int = 0) -> int:
        """Bytes the arrays hold with that many more entries, words and ids (allocations: at most 1.5 times)."""
        entries += len(self._length)
        slots = len(self._keys)
        while _LOAD * entries > slots:
            slots *= 2
        return (
            32 * entries + 8 * (len(self._words) + words) + self._values.itemsize * (len(self._ids) + ids) + 16 * slots
        )

    def entries(self) -> Entries:
        return Entries(
            self._ids.buf, self._ids_at.buf, self._ids_count.buf, self._words.buf, self._words_at.buf, self._length.buf
        )

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, entry) per key (non-zero), by linear probing."""
        found = np.zeros(len(keys), bool)
        entries = np.zeros(len(keys), np.int64)
        pending = np.arange(len(keys))
        slot = self._slots(keys)
        mask = len(self._keys) - 1
        while len(pending):
            there = self._keys[slot]
            match = there == keys[pending]
            found[pending[match]] = True
            entries[pending[match]] = self._slot_entry[slot[match]]
            go_on = ~match & (there != 0)
            pending, slot = pending[go_on], (slot[go_on] + 1) & mask
        return found, entries

    def add(
        self,
        keys: np.ndarray,
        lengths: np.ndarray,
        words: np.ndarray,
        n_words: np.ndarray,
        ids: np.ndarray,
        n_ids: np.ndarray,
    ) -> None:
        """New entries for distinct keys that are not in the index: each entry's chunk length, its words
        (``n_words`` of them, one entry's after another) and its ids (``n_ids``, likewise)."""
        first = len(self._length)
        self._ids_at.append(self._ids.append(ids) + exclusive_cumsum(n_ids)[0])
        self._ids_count.append(n_ids)
        self._words_at.append(self._words.append(words) + exclusive_cumsum(n_words)[0])
        self._length.append(lengths)
        while _LOAD * len(self._length) > len(self._keys):
            used = np.flatnonzero(self._keys)
            old_keys, old_entries = self._keys[used], self._slot_entry[used]
            self._keys = np.zeros(2 * len(self._keys), np.uint64)
            self._slot_entry = np.zeros(len(self._keys), np.int64)
            self._place(old_keys, old_entries)
        self._place(keys, np.arange(first, first + len(keys)))

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        bits = len(self._keys).bit_length() - 1
        return (keys >> np.uint64(64 - bits)).astype(np.int64)

    def _place(self, keys: np.ndarray, entries: np.ndarray) -> None:
        """Put distinct keys that are not in the index into empty slots by linear probing."""
        slot = self._slots(keys)
        mask = len(self._keys) - 1
        pending = np.arange(len(keys))
        while len(pending):
            free = self._keys[slot] == 0
            cand = np.flatnonzero(free)
            _, first = np.unique(slot[cand], return_index=True)  # one key per free slot this round
            won = cand[first]
            self._keys[slot[won]] = keys[pending[won]]
            self._slot_entry[slot[won]] = entries[pending[won]]
            lost = np.ones(len(pending), bool)
            lost[won] = False
            pending, slot = pending[lost], slot[lost]
            slot[~free[lost]] += 1
            slot &= mask
