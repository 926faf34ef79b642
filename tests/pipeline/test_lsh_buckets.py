"""LSH buckets in batches (pipeline/dedup/buckets.py): the candidate pairs are those of one bucket at a time, whatever
the batches, their order, the shards and the bundles' flushes."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

from pipeline.dedup import buckets
from tests.conftest import build
from tests.pipeline.test_dedup import planted_corpus


def _band(index: int, value: int) -> bytes:
    return index.to_bytes(2, "big") + hashlib.blake2b(value.to_bytes(8, "little"), digest_size=8).digest()


def _reference(entries: list[tuple[bytes, tuple]], cap: int) -> tuple[list, list]:
    """One bucket at a time: each of a bucket's ``cap`` smallest with its smallest; the sizes of those past the cap."""
    members: dict[bytes, list] = {}
    for band, key in entries:
        members.setdefault(band, []).append(key)
    pairs, capped = [], []
    for keys in members.values():
        keys = sorted(keys)
        pairs += [(keys[0], b) for b in keys[1 : min(cap, len(keys))]]
        if len(keys) > cap:
            capped.append(len(keys))
    return sorted(pairs), sorted(capped)


def _run(batches: list, cap: int) -> tuple[list, list]:
    pairs, capped = [], []
    for out in buckets.star_pairs((0, batches), cap):
        if getattr(out, "tag", None) == "capped":
            capped.append(out.value)
        else:
            pairs.append(out)
    return sorted(pairs), sorted(capped)


def _entries(rng: random.Random) -> list[tuple[bytes, tuple]]:
    """Buckets of 1 to 12 documents in 20 bands (most of one), and one of 500 (a template family)."""
    entries = []
    for value in range(400):
        size = 1 if rng.random() < 0.7 else rng.randrange(2, 13)
        band = _band(value % 20, value)
        entries += [(band, ("f", rng.randrange(10**6), rng.randrange(10**4), f"d{value}-{i}")) for i in range(size)]
    template = _band(3, 10**6)
    entries += [(template, ("g", rng.randrange(10**6), i, f"t{i}")) for i in range(500)]
    return entries


def _batches(entries: list, rng: random.Random) -> list:
    """``entries`` shuffled and cut at random into (band keys joined, keys) batches."""
    entries = entries[:]
    rng.shuffle(entries)
    cuts = sorted(rng.sample(range(1, len(entries)), 9))
    return [
        (b"".join(band for band, _ in part), [key for _, key in part])
        for part in (entries[a:b] for a, b in zip([0, *cuts], [*cuts, len(entries)]))
    ]


def test_the_pairs_of_batched_buckets_are_those_of_one_bucket_at_a_time():
    rng = random.Random(11)
    entries = _entries(rng)
    for cap in (2, 7, 10_000):
        expected = _reference(entries, cap)
        assert expected[0] and (expected[1] or cap == 10_000)  # pairs, and capped buckets below the largest cap
        for _ in range(3):
            assert _run(_batches(entries, rng), cap) == expected


def test_two_band_keys_with_the_same_number_are_two_buckets():
    """The first pass's 64-bit numbers only choose what the second looks at: keys that share a number but differ
    (the band index folded into the hash's top bits) are still two buckets of one document each."""
    a = _band(0, 1)
    b = (1).to_bytes(2, "big") + (int.from_bytes(a[2:], "little") ^ (1 << 48)).to_bytes(8, "little")
    assert a != b and np.array_equal(buckets._numbers(a), buckets._numbers(b))
    assert _run([(a + b, [("f", 1, 1, "x"), ("f", 2, 2, "y")])], 7) == ([], [])
    assert _run([(a + a, [("f", 1, 1, "x"), ("f", 2, 2, "y")])], 7) == ([(("f", 1, 1, "x"), ("f", 2, 2, "y"))], [])


@pytest.mark.parametrize("shards", [1, 8])
def test_exact_copies_gather_the_kept_band_keys_by_shard_and_flush_without_changing_the_pairs(shards, monkeypatch):
    """The step before the grouping: copies of a digest name its smallest key, and only the smallest's band keys go
    on, each in the batch of its shard, however often the bundle flushes (here every ~40 keys)."""
    monkeypatch.setattr(buckets, "FLUSH_KEYS", 40)
    rng = random.Random(shards)
    docs = [(("f", i, i, f"d{i}"), tuple(_band(b, rng.randrange(30)) for b in range(20))) for i in range(60)]
    digests = [(f"digest{i % 45}", [d for d in docs if docs.index(d) % 45 == i % 45]) for i in range(45)]
    fn = buckets.ExactCopiesFn(shards)
    fn.start_bundle()
    copies, batches = [], {}
    for element in digests:
        for out in fn.process(element):
            if getattr(out, "tag", None) == "bands":
                batches.setdefault(out.value[0], []).append(out.value[1])
            else:
                copies.append(out)
    for out in fn.finish_bundle():
        batches.setdefault(out.value.value[0], []).append(out.value.value[1])
    kept = [min(members) for _, members in digests]
    assert sorted(copies) == sorted((key, k[0]) for k, (_, members) in zip(kept, digests) for key, _ in members[1:])
    entries = [(band, key) for key, bands in kept for band in bands]
    found = [
        (blob[i * 10 : (i + 1) * 10], keys[i], shard)
        for shard, parts in batches.items()
        for blob, keys in parts
        for i in range(len(keys))
    ]
    assert sorted((band, key) for band, key, _ in found) == sorted(entries)
    assert all(shard == buckets._shard(band, shards) for band, _, shard in found)
    assert len(batches) == shards and sum(len(parts) for parts in batches.values()) > shards  # flushed on the way
    pairs, capped = [], []
    for parts in batches.values():
        found_pairs, found_capped = _run(parts, 3)
        pairs += found_pairs
        capped += found_capped
    assert (sorted(pairs), sorted(capped)) == _reference(entries, 3) and capped


def test_shards_follow_the_input_size():
    mib = 1 << 20
    assert [buckets.shard_count(n) for n in (None, 0, 1, 64 * mib, 64 * mib + 1, 200 * mib)] == [256, 256, 1, 1, 2, 4]
    assert buckets.shard_count(10 << 40) == buckets.MAX_SHARDS


def test_a_near_build_is_the_same_with_one_shard_of_band_keys_and_with_thousands_flushed_every_few_keys(
    tmp_path, monkeypatch
):
    """End to end on real pages with planted near copies, with a cap of 2 (buckets capped in several bands): the
    artifact built with one shard of the band keys (the input's size) equals, file for file and in the manifest's
    ``dedup`` counts, the one built with 16,384 shards (``INPUT_BYTES_PER_SHARD`` of a byte) whose bundles hand their
    batches on every 7 keys."""
    corpus = tmp_path / "corpus.jsonl"
    planted_corpus(corpus)
    common = ["--train-tokenizer", "--vocab-size", "2000", "--num-shards", "2", "--dedup", "near"]
    one = build(corpus, tmp_path / "one", *common, "--dedup-max-bucket", "2")
    monkeypatch.setattr(buckets, "INPUT_BYTES_PER_SHARD", 1)
    monkeypatch.setattr(buckets, "FLUSH_KEYS", 7)
    assert buckets.shard_count(corpus.stat().st_size) == buckets.MAX_SHARDS
    many = build(corpus, tmp_path / "many", *common, "--dedup-max-bucket", "2")

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    found_one, found_many = files(tmp_path / "one"), files(tmp_path / "many")
    assert found_one.pop("manifest.json") and found_many.pop("manifest.json")
    assert found_one == found_many and "removed/duplicate.jsonl" in found_one
    assert one["dedup"] == many["dedup"] and one["counts"] == many["counts"]
    assert one["dedup"]["buckets_capped"] > 0 and one["dedup"]["confirmed_pairs"] > 0
