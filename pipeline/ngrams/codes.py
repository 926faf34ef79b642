"""Numbers, not strings: how n-grams, partial counts and frequent tables travel between the counting stages.

Pure functions and helpers (numpy, no Beam): a (k+1)-gram's code is ``(id of its first k words) << 32 | (id of
its last word)``; partial counts are sharded by key into ``SHARDS`` ranges; frequent tables are decoded back to
strings at the end (:func:`decode_tables`). Also the progress log lines of the long counting passes.
"""

from __future__ import annotations

import collections
import logging
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

_LOG = logging.getLogger("spanprep.ngrams")

PROGRESS_EVERY_SECONDS = 30.0

SHARDS = 64  # partial counts are shuffled and merged in this many key ranges
NO_ID = -1
SHIFT = 32  # a code is (id of the first n-1 words) << 32 | (id of the last word)
LOW = (1 << SHIFT) - 1
I8 = "<i8"  # counts and codes travel as little-endian int64 bytes
I4 = "<i4"  # word ids travel as little-endian int32 bytes

# Elements between stages (plain tuples of ints and bytes, which Beam encodes without pickling):
#   partial counts:  (shard, (keys, counts))    keys: words joined by "\n" (UTF-8) for n = 1, else int64 codes
#   frequent table:  (n, shard, keys, counts)   one shard of the frequent n-grams of one length, sorted by key
#   id chunk:        bytes                      int32 word ids, -1 between runs and for infrequent words


def encode_code(prefix_id: int, word_id: int) -> int:
    """The code of an n-gram: the id of its first n-1 words (a word id, or a frequent (n-1)-gram's rank) and
    the id of its last word."""
    return (prefix_id << SHIFT) | word_id


def word_blob(words: Sequence[str]) -> bytes:
    return "\n".join(words).encode("utf-8")


def blob_words(blob: bytes) -> list[str]:
    return blob.decode("utf-8").split("\n") if blob else []


def _word_shard(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % SHARDS  # stable across processes, unlike hash()


def sharded_word_counts(counts: dict[str, int]) -> Iterator[tuple[int, tuple[bytes, bytes]]]:
    import numpy as np

    by_shard: dict[int, list[tuple[str, int]]] = collections.defaultdict(list)
    for word, count in counts.items():
        by_shard[_word_shard(word)].append((word, count))
    for shard in sorted(by_shard):
        items = by_shard[shard]
        yield shard, (word_blob([w for w, _ in items]), np.array([c for _, c in items], I8).tobytes())


def sharded_code_counts(codes, counts) -> Iterator[tuple[int, tuple[bytes, bytes]]]:
    import numpy as np

    shard_of = codes % SHARDS
    order = np.argsort(shard_of, kind="stable")
    bounds = np.searchsorted(shard_of[order], np.arange(SHARDS + 1))
    for shard in range(SHARDS):
        at = order[bounds[shard] : bounds[shard + 1]]
        if len(at):
            yield shard, (codes[at].astype(I8).tobytes(), counts[at].astype(I8).tobytes())


def sum_code_counts(parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """[(codes, counts)] arrays -> (distinct sorted codes, summed counts)."""
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    codes = np.concatenate([c for c, _ in parts])
    counts = np.concatenate([c for _, c in parts])
    distinct, inverse = np.unique(codes, return_inverse=True)
    sums = np.zeros(len(distinct), dtype=np.int64)
    np.add.at(sums, inverse, counts)
    return distinct, sums


class CodeCounts:
    """Partial counts of codes within a bundle, merged with numpy, flushed at ``max_keys`` distinct codes."""

    def __init__(self, max_keys: int):
        self._max_keys = max_keys
        self._parts: list = []
        self._size = 0

    def add(self, codes_in_chunk) -> None:
        import numpy as np

        codes, counts = np.unique(codes_in_chunk, return_counts=True)
        if len(codes):
            self._parts.append((codes, counts.astype(np.int64)))
            self._size += len(codes)
        if len(self._parts) > 1 and self._size >= self._max_keys:
            self._parts = [sum_code_counts(self._parts)]
            self._size = len(self._parts[0][0])

    def flush(self, *, force: bool) -> list[tuple[int, tuple[bytes, bytes]]]:
        if not self._parts or (not force and self._size < self._max_keys):
            return []
        codes, counts = sum_code_counts(self._parts)
        self._parts, self._size = [], 0
        return list(sharded_code_counts(codes, counts))


def tables_by_length(tables: Iterable[tuple[int, int, bytes, bytes]]) -> dict[int, list[tuple[bytes, bytes]]]:
    by_length: dict[int, list[tuple[bytes, bytes]]] = collections.defaultdict(list)
    for n, _shard, keys, counts in tables:
        by_length[n].append((keys, counts))
    return by_length


def sorted_words(parts: list[tuple[bytes, bytes]]) -> tuple[list[str], Any]:
    import numpy as np

    words = [w for keys, _ in parts for w in blob_words(keys)]
    counts = np.concatenate([np.frombuffer(c, I8) for _, c in parts]) if parts else np.empty(0, np.int64)
    order = sorted(range(len(words)), key=words.__getitem__)
    return [words[i] for i in order], counts[order] if len(order) else counts


def sorted_codes(parts: list[tuple[bytes, bytes]]) -> tuple[Any, Any]:
    import numpy as np

    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    codes = np.concatenate([np.frombuffer(k, I8) for k, _ in parts])
    counts = np.concatenate([np.frombuffer(c, I8) for _, c in parts])
    order = np.argsort(codes, kind="stable")
    return codes[order], counts[order]


def decode_tables(tables: Iterable[tuple[int, int, bytes, bytes]], *, min_n: int = 1) -> Iterator[tuple[str, int]]:
    """Frequent tables of lengths 1..max_n -> ``(ngram, count)`` for the lengths >= min_n."""
    by_length = tables_by_length(tables)
    words, counts = sorted_words(by_length.get(1, []))
    strings = words
    if min_n <= 1:
        yield from zip(words, counts.tolist())
    for n in range(2, max(by_length, default=1) + 1):
        codes, counts = sorted_codes(by_length.get(n, []))
        strings = [f"{strings[code >> SHIFT]} {words[code & LOW]}" for code in codes.tolist()]
        if n >= min_n:
            yield from zip(strings, counts.tolist())


class Progress:
    """Log lines for long passes: every PROGRESS_EVERY_SECONDS, and at the end of each bundle."""

    def __init__(self, label: str):
        self._label = label

    def start(self) -> None:
        self.lines = self.tokens = self.bytes = 0
        self._started = self._last = time.monotonic()

    def line(self, raw: bytes) -> None:
        self.lines += 1
        self.bytes += len(raw) + 1
        if self.lines % 1024 == 0:
            self.maybe_log()

    def maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_SECONDS:
            self._last = now
            _LOG.info(
                "%s: %d lines, %d tokens, %.1f MB so far in this worker bundle (%.0f s)",
                self._label,
                self.lines,
                self.tokens,
                self.bytes / 1e6,
                now - self._started,
            )

    def done(self) -> None:
        elapsed = time.monotonic() - self._started
        if self.lines:
            _LOG.info(
                "%s: bundle done: %d lines, %d tokens, %.1f MB in %.1f s",
                self._label,
                self.lines,
                self.tokens,
                self.bytes / 1e6,
                elapsed,
            )
        elif self.tokens:
            _LOG.info("%s: bundle done: %d word-id positions in %.1f s", self._label, self.tokens, elapsed)
