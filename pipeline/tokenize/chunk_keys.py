"""The chunks of one batch of documents as the chunk caches see them: byte ranges, 64-bit keys, word-by-word equality.

A chunk's bytes are read as little-endian 8-byte words (one unaligned view of the batch's buffer) and hashed into a
64-bit key; a cache hit is accepted only when the stored chunk's length and every one of its words equal the
chunk's (:meth:`Chunks.same_as`), so a hash collision costs a miss, never a wrong token. Where a batch is cut into
chunks is each family's rule (``chunk_cache`` for WordPiece, ``word_cache`` for byte-level BPE and Unigram).
"""

from __future__ import annotations

import numpy as np

from pipeline.tokenize.chunk_table import run_indices

# MASKS[k]: the low k bytes of a little-endian word (k = 8: all of it).
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_M1 = np.uint64(0xFF51AFD7ED558CCD)  # MurmurHash3's 64-bit finalizer constants
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S33 = np.uint64(33)
ALL_BITS = np.uint64((1 << 64) - 1)
LEAD_BYTE = bytes(int(c & 0xC0 != 0x80) for c in range(256))  # the first byte of a UTF-8 character


def _mix(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finalizer, in place: every input bit reaches every output bit."""
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


def byte_positions(data: bytes, chars: np.ndarray) -> np.ndarray:
    """The byte position in ``data`` (UTF-8) of each character position (``len(data)`` for the end)."""
    byte_at = np.append(np.flatnonzero(np.frombuffer(data.translate(LEAD_BYTE), bool)), len(data))
    return byte_at[chars]


class Chunks:
    """Chunks ``[starts[i], ends[i])`` of the bytes ``data``, in order; ``direct`` marks chunks whose ids the cache
    does not look up (WordPiece's punctuation runs); chunks longer than ``max_chunk_bytes`` are not cached.
    ``key_mask`` narrows the keys (tests force collisions with it)."""

    def __init__(
        self,
        data: bytes,
        starts: np.ndarray,
        ends: np.ndarray,
        direct: np.ndarray,
        max_chunk_bytes: int,
        key_mask: np.uint64,
    ):
        b = np.frombuffer(data, np.uint8)
        n = len(b)
        self.starts = starts
        self.ends = ends
        self.lengths = ends - starts
        self.bytes = b
        self.direct = direct
        self.near_token = np.zeros(n + 1, bool)  # where an added token written in the text ends or begins
        padded = np.zeros(n + 8, np.uint8)
        padded[:n] = b
        self._padded = padded  # keeps the unaligned word view's memory alive
        self._words = np.ndarray((n + 1,), dtype="<u8", buffer=padded.data, strides=(1,))
        self.first_words = self._words[self.starts] & _MASKS[np.minimum(self.lengths, 8)]
        self.cacheable = (self.lengths <= max_chunk_bytes) & ~self.direct
        self.keys = self._keys()
        if key_mask != ALL_BITS:  # tests narrow the keys to force collisions; mixed again to spread them
            self.keys = _mix(self.keys & key_mask)
        self.keys |= np.uint64(1)  # 0 marks an empty slot of the table

    def word(self, chunks: np.ndarray, j: int) -> np.ndarray:
        """Word j (bytes 8j..8j+7, zero past the chunk's end) of each chunk."""
        w = self._words[self.starts[chunks] + 8 * j]
        w &= _MASKS[np.clip(self.lengths[chunks] - 8 * j, 0, 8)]
        return w

    def later_words(self, chunks: np.ndarray):
        """For j = 1, 2, ...: (j, positions in ``chunks`` of the chunks longer than 8j bytes, their word j)."""
        j, k = 1, np.flatnonzero(self.lengths[chunks] > 8)
        while len(k):
            yield j, k, self.word(chunks[k], j)
            j += 1
            k = k[self.lengths[chunks[k]] > 8 * j]

    def same_as(self, which: np.ndarray, lengths: np.ndarray, first_words: np.ndarray, word_j) -> np.ndarray:
        """Whether each chunk ``which`` holds the bytes of another string given by its ``lengths``, its
        ``first_words`` and ``word_j(positions, j)`` (its word j, for those positions in ``which``): the
        lengths and first words, then word by word while they agree."""
        same = (self.lengths[which] == lengths) & (self.first_words[which] == first_words)
        for j, k, w in self.later_words(which):
            k, w = k[same[k]], w[same[k]]  # equal lengths only: the other string has word j too
            same[k[w != word_j(k, j)]] = False
        return same

    def words(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All words of each chunk, one chunk after another, and the number of words of each."""
        n_words = (self.lengths[chunks] + 7) // 8
        chunk = np.repeat(chunks, n_words)
        j = run_indices(np.zeros(len(chunks), np.int64), n_words)
        w = self._words[self.starts[chunk] + 8 * j]
        w &= _MASKS[np.minimum(self.lengths[chunk] - 8 * j, 8)]
        return w, n_words

    def _keys(self) -> np.ndarray:
        h = self.lengths.astype(np.uint64)
        h *= _GOLDEN
        h ^= self.first_words
        _mix(h)
        cacheable = np.flatnonzero(self.cacheable)
        for _, k, w in self.later_words(cacheable):
            h[cacheable[k]] = _mix(h[cacheable[k]] ^ w)
        return h
