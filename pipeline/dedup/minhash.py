"""MinHash signatures and LSH band keys of shingle sets (numpy; see docs/DEDUP.md for the choices).

A signature has ``bands * rows`` values; value ``i`` is ``min over shingles h of (a_i * h + b_i) mod 2**64 >> 32``
with ``a_i`` odd and ``b_i`` drawn once from a fixed seed (multiply-shift hashing of the shingle's 64-bit hash: no
division, unlike ``datasketch.MinHash``'s ``(a h + b) mod (2**61 - 1)``, and three times faster here). Two sets
agree on one value with probability about their Jaccard similarity ``s``, so they share at least one of ``bands``
bands of ``rows`` values with probability ``1 - (1 - s**rows)**bands`` (the S-curve; tests/pipeline/test_dedup.py
checks it on pairs of known similarity).

Not ``datasketch`` itself: its ``MinHashLSH`` is an in-memory index of the whole corpus, which a Beam job replaces
by a GroupByKey on band keys, and what is left (the permutations above) is the few lines below, run on the shingle
hashes the job already has for confirming pairs exactly (datasketch would hash every shingle again with SHA-1).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

_SHIFT = np.uint64(32)
_SEED = 1  # fixed: a signature is a pure function of the shingle set and (bands, rows)
_CHUNK = 8192  # shingles per step: memory stays at _CHUNK * bands * rows * 8 bytes for any document length


@dataclass(frozen=True)
class NearParams:
    """``--dedup near``: Jaccard threshold on ``shingle``-word shingles, LSH with ``bands`` bands of ``rows``."""

    threshold: float = 0.8
    shingle: int = 5
    bands: int = 20
    rows: int = 6
    max_bucket: int = 10_000  # an LSH bucket's members that become candidates: its smallest keys (docs/DEDUP.md)

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"--dedup-threshold must be in (0, 1], got {self.threshold}")
        if self.shingle < 1:
            raise ValueError(f"--dedup-shingle must be at least 1, got {self.shingle}")
        if self.bands < 1 or self.rows < 1:
            raise ValueError(f"--dedup-bands and --dedup-rows must be at least 1, got {self.bands} and {self.rows}")
        if self.bands * self.rows > 1024:
            raise ValueError(f"--dedup-bands * --dedup-rows must be at most 1024, got {self.bands * self.rows}")
        if self.max_bucket < 2:
            raise ValueError(f"--dedup-max-bucket must be at least 2, got {self.max_bucket}")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    def candidate_probability(self, s: float) -> float:
        """Chance that two sets of Jaccard similarity ``s`` share a band (become a candidate pair)."""
        return 1.0 - (1.0 - s**self.rows) ** self.bands

    def describe(self) -> dict:
        """For the manifest: the parameters and the S-curve's rates at the threshold."""
        return {
            "threshold": self.threshold,
            "shingle_words": self.shingle,
            "bands": self.bands,
            "rows": self.rows,
            "max_bucket": self.max_bucket,
            "false_negative_rate_at_threshold": round(1.0 - self.candidate_probability(self.threshold), 6),
            "candidate_rate_at_half_threshold": round(self.candidate_probability(self.threshold / 2), 6),
        }


def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(_SEED)
    a = rng.integers(0, 2**64, size=num_perm, dtype=np.uint64, endpoint=False) | np.uint64(1)
    b = rng.integers(0, 2**64, size=num_perm, dtype=np.uint64, endpoint=False)
    return a, b


_PERMS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def signature(shingles: np.ndarray, num_perm: int) -> np.ndarray:
    """The uint32 MinHash signature of a non-empty array of shingle hashes (a value there twice changes nothing: the
    signature is that of the set). The shift is taken after the minimum (it is monotonic, so the values are the
    same); the products are made in one buffer, a row per permutation, so each minimum is a reduction over
    contiguous memory (a quarter less CPU than a column per permutation on 20 MB of Wikipedia)."""
    if num_perm not in _PERMS:
        a, b = _permutations(num_perm)
        _PERMS[num_perm] = a[:, None], b[:, None]
    a, b = _PERMS[num_perm]
    sig = np.full(num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
    buf = np.empty((num_perm, min(_CHUNK, len(shingles))), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, len(shingles), _CHUNK):
            part = shingles[start : start + _CHUNK]
            values = buf[:, : len(part)]
            np.multiply(a, part, out=values)
            values += b
            np.minimum(sig, values.min(axis=1), out=sig)
    return (sig >> _SHIFT).astype(np.uint32)


BAND_KEY_BYTES = 10  # a band key: its band index (2 bytes, big-endian), then a 64-bit hash of the band's values


def band_keys(sig: np.ndarray, params: NearParams) -> list[bytes]:
    """The band index (2 bytes) and a 64-bit hash of the band's values, for each band: two documents share a key when
    their signatures agree on all ``rows`` values of that band. Bytes, not an int: Beam's coder writes a bytes key
    as it is, while an int past 2**63 (half of all 64-bit hashes) went through pickle, a quarter of the bands stage."""
    rows = params.rows
    data = sig.tobytes()
    width = sig.itemsize * rows
    return [
        i.to_bytes(2, "big") + hashlib.blake2b(data[i * width : (i + 1) * width], digest_size=8).digest()
        for i in range(params.bands)
    ]
