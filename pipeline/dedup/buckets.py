"""LSH buckets in batches (``--dedup near``'s candidates, docs/DEDUP.md): the band keys of the documents exact kept go
to the grouping a batch at a time, one batch per shard of the band keys, not one element per band key.

A document has 20 band keys and nearly every bucket holds one document, so one element per key (what a ``GroupByKey``
on the band key takes) made the two steps around that grouping cost Beam's per-element work 20 times per document:
0.4 s of the 2.7 s that near added to a 20 MB build, for 48,660 buckets of which 35 held two documents. Here
:class:`ExactCopiesFn` gathers, per bundle, each shard's band keys (one bytes object, 10 bytes a key) and the kept
document of each key, and :func:`star_pairs` takes a shard's batches: a first pass finds which band keys occur more
than once (numpy, over a 64-bit number per key of the shard), a second puts the members of those buckets only through
the cap (at most ``2 * cap`` keys held per bucket, the ``cap`` smallest kept). The pairs are what one element per band
key gave: each member of a bucket's ``cap`` smallest with the bucket's smallest, and a bucket past the cap counted
(tag ``capped``).

Memory: the batches themselves are held too where the runner hands a group's values over whole (the FnApiRunner does;
a runner that pages a large group through the state API, as Dataflow does, has the second pass read it again), and a
batch carries the kept key once per band key, each decoded into an object of its own: about 310 bytes per band key
with a 52-character path and 8-character ids (tracemalloc, 400,000 band keys), 6 KB per document of the shard with 20
bands, where the first pass adds about 50 bytes per band key at its peak (the numbers, their concatenation and
``np.unique``'s sort).

The shards: :func:`shard_count` of the input's size, a power of two (one per 64 MiB of input, 256 when the size is
not known), so a shard's batches stay a bounded part of the corpus however large it is; the pairs do not depend on
the count.
"""

from __future__ import annotations

import heapq

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipeline import faults
from pipeline.dedup import minhash

INPUT_BYTES_PER_SHARD = 64 << 20
MAX_SHARDS = 1 << 14
UNKNOWN_SIZE_SHARDS = 256
FLUSH_KEYS = 1 << 16  # band keys a bundle gathers before it hands its batches on (memory: ~10 bytes and a key each)
_WIDTH = minhash.BAND_KEY_BYTES


def shard_count(input_bytes: int | None) -> int:
    """Shards of the band keys for an input of ``input_bytes`` (None or 0: not known): a power of two."""
    if not input_bytes:
        return UNKNOWN_SIZE_SHARDS
    wanted = -(-input_bytes // INPUT_BYTES_PER_SHARD)
    return min(MAX_SHARDS, 1 << max(0, (wanted - 1).bit_length()))


def _shard(band: bytes, shards: int) -> int:
    return int.from_bytes(band[2:4], "little") & (shards - 1)  # the key's hash bytes (after its band index)


class ExactCopiesFn(beam.DoFn):
    """(digest, [(key, band keys)]) -> (its key, the kept key) for every copy of the smallest key; the smallest's
    band keys (``near``) gathered into batches, tag ``bands``: (shard, (band keys joined, the kept key of each))."""

    def __init__(self, shards: int):
        self._shards = shards

    def start_bundle(self):
        self._blobs: dict[int, list[bytes]] = {}
        self._keys: dict[int, list] = {}
        self._held = 0

    def process(self, digest_members):
        _, members = digest_members
        members = sorted(members)
        kept, bands = members[0]
        if bands:
            self._gather(kept, bands)
            if self._held >= FLUSH_KEYS:
                yield from self._batches()
        for key, _ in members[1:]:
            yield key, kept

    def _gather(self, kept, bands) -> None:
        if self._shards == 1:
            self._blobs.setdefault(0, []).append(b"".join(bands))
            self._keys.setdefault(0, []).extend([kept] * len(bands))
        else:
            for band in bands:
                shard = _shard(band, self._shards)
                self._blobs.setdefault(shard, []).append(band)
                self._keys.setdefault(shard, []).append(kept)
        self._held += len(bands)

    def _batches(self):
        for shard in sorted(self._blobs):
            yield TaggedOutput("bands", (shard, (b"".join(self._blobs[shard]), self._keys[shard])))
        self._blobs, self._keys, self._held = {}, {}, 0

    def finish_bundle(self):
        for out in self._batches():
            yield TaggedOutput(out.tag, WindowedValue(out.value, MIN_TIMESTAMP, (GlobalWindow(),)))


def _numbers(blob: bytes) -> np.ndarray:
    """A 64-bit number per band key of ``blob`` (its hash, the band index folded into the top bits): equal keys give
    equal numbers (a number shared by two keys only makes the second pass look at both)."""
    keys = np.frombuffer(blob, dtype=np.uint8).reshape(-1, _WIDTH)
    band = keys[:, 0].astype(np.uint64) << np.uint64(56) | keys[:, 1].astype(np.uint64) << np.uint64(48)
    return np.ascontiguousarray(keys[:, 2:]).view("<u8").ravel() ^ band


def star_pairs(shard_batches, cap: int):
    """(shard, its batches) -> (the bucket's smallest, a member) for every member of each bucket's ``cap``
    smallest; a bucket of more than ``cap`` members -> tag ``capped`` (its size). The batches are read twice (a
    ``GroupByKey``'s values can be)."""
    faults.reached("bands")
    _, batches = shard_batches
    numbers = [_numbers(blob) for blob, _ in batches]
    if not numbers:
        return
    values, counts = np.unique(np.concatenate(numbers), return_counts=True)
    shared = values[counts > 1]
    if not len(shared):  # nearly every shard of a corpus with few near copies
        return
    buckets: dict[bytes, list] = {}
    sizes: dict[bytes, int] = {}
    for (blob, keys), found in zip(batches, numbers, strict=True):
        for i in np.flatnonzero(np.isin(found, shared)).tolist():
            band = blob[i * _WIDTH : (i + 1) * _WIDTH]
            members = buckets.setdefault(band, [])
            members.append(keys[i])
            sizes[band] = sizes.get(band, 0) + 1
            if len(members) >= 2 * cap:
                members[:] = heapq.nsmallest(cap, members)
    for band in sorted(buckets):
        members = heapq.nsmallest(cap, buckets[band])
        for b in members[1:]:
            yield members[0], b
        if sizes[band] > cap:
            yield TaggedOutput("capped", sizes[band])
