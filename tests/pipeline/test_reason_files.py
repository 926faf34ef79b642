"""removed/<reason>.jsonl and dead_letter/<reason>.jsonl are written through a bounded external sort: the bytes of
one in-memory sort, whatever the budget, with memory held to the budget (review D3 of issue 35)."""

from __future__ import annotations

import hashlib
import json
import random
import tracemalloc
import typing

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.elements import DeadLetter, RemovedDocument, Source
from pipeline.write import dead_letters, removed
from pipeline.write.dead_letters import LINE_OVERHEAD, SortedLines, WriteDeadLetters, write_reason_file
from pipeline.write.removed import WriteRemoved

_WORDS = ["the", "commune", "Aisne", "naïve", "Straße", "東京", "é", "river", "1,000", "—"]


def _preview(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(0, 200)))[:1000]


def _removed(n: int, seed: int = 0) -> list[RemovedDocument]:
    """``n`` duplicate records from a few files, in shuffled order; two records may share a source path and line."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        path = f"corpus/part-{rng.randrange(5)}.jsonl"
        offset = rng.randrange(10**6)
        detail = {"method": "near", "duplicate_of": {"doc_id": f"k{i % 7}"}, "similarity": round(rng.random(), 6)}
        records.append(
            RemovedDocument("duplicate", f"d{i}", Source(path, offset // 100, offset), detail, _preview(rng))
        )
    rng.shuffle(records)
    return records


def _expected(records: list, key) -> bytes:
    """What the writer wrote before it was bounded: one in-memory sort and one join."""
    ordered = sorted(records, key=key)
    return "".join(json.dumps(r.as_dict(), ensure_ascii=False, sort_keys=True) + "\n" for r in ordered).encode()


def _entry(relative: str, reason: str, data: bytes, records: int) -> dict:
    sha = hashlib.sha256(data).hexdigest()
    return {"path": relative, "reason": reason, "records": records, "bytes": len(data), "sha256": sha}


def test_tiny_budget_spills_many_runs_and_writes_the_bytes_of_one_sort(tmp_path):
    records = _removed(3000)
    (tmp_path / "out" / "removed").mkdir(parents=True)
    spill = tmp_path / "spill"
    spill.mkdir()
    lines = SortedLines(iter(records), removed._sort_key, 4096, str(spill))
    data = b"".join(lines)
    expected = _expected(records, removed._sort_key)
    assert data == expected
    assert lines.runs > 100  # merged in more than one pass (MAX_FAN_IN)
    assert not list(spill.iterdir())  # every run merged is deleted

    relative = "removed/duplicate.jsonl"
    result = write_reason_file(str(tmp_path / "out"), relative, "duplicate", iter(records), removed._sort_key, 4096)
    assert (tmp_path / "out" / "removed" / "duplicate.jsonl").read_bytes() == expected
    assert result == _entry("removed/duplicate.jsonl", "duplicate", expected, 3000)


def test_the_lines_held_are_bounded_by_the_budget(tmp_path):
    records = _removed(2000, seed=1)
    budget = 8192
    lines = SortedLines(iter(records), removed._sort_key, budget, str(tmp_path))
    assert sum(1 for _ in lines) == 2000
    assert lines.runs > 0
    assert 1 < lines.peak_buffered <= budget // LINE_OVERHEAD + 1  # a line costs at least LINE_OVERHEAD


def test_ties_keep_their_arrival_order_across_runs(tmp_path):
    """Dead letters with equal sort keys (same position, reason and detail; another preview) come out in the order
    they arrived, as ``sorted`` would give, although they land in different runs."""
    letters = [
        DeadLetter("empty_text", "x", Source("a", 1 + i % 3, 10 * (i % 3)), None, f"p{i:04d}") for i in range(600)
    ]
    (tmp_path / "dead_letter").mkdir()
    key = dead_letters._sort_key
    result = write_reason_file(str(tmp_path), "dead_letter/empty_text.jsonl", "empty_text", iter(letters), key, 2048)
    data = (tmp_path / "dead_letter" / "empty_text.jsonl").read_bytes()
    assert data == _expected(letters, key)
    previews = [json.loads(line)["preview"] for line in data.splitlines()]
    assert previews[:3] == ["p0000", "p0003", "p0006"] and result["records"] == 600


def test_writing_a_reason_holds_memory_to_the_budget_not_the_records(tmp_path):
    """20,000 records of about 1 kB (20 MB of lines) written with a 64 kB budget: the traced peak stays a few MB.
    Holding the records, or the file's bytes, whole (the writer before D3) takes over 20 MB."""
    n = 20_000

    def records():  # made as they are read, as a GroupByKey's iterable pages them in
        rng = random.Random(2)
        for i in range(n):
            detail = {"method": "exact", "duplicate_of": {"doc_id": "k"}, "similarity": 1.0}
            yield RemovedDocument("duplicate", f"d{i}", Source("f", i, rng.randrange(10**9)), detail, "x" * 1000)

    (tmp_path / "removed").mkdir()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = removed._write_reason(str(tmp_path), ("duplicate", records()), 64 << 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result["records"] == n and result["bytes"] > n * 1000
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB for {result['bytes'] / 2**20:.1f} MiB of lines"


def _pipeline() -> TestPipeline:
    return TestPipeline(runner="FnApiRunner")


def _create(items, label):
    return label >> (beam.Create(range(len(items))) | beam.Map(lambda i: items[i]).with_output_types(typing.Any))


def test_write_removed_and_dead_letters_with_a_tiny_budget_in_a_pipeline(tmp_path):
    docs = _removed(1500, seed=3)
    reasons = ["empty_text", "malformed_json"] * 400
    letters = [
        DeadLetter(r, "bad", Source(f"in-{i % 4}", i, 7 * i), None, "y" * (i % 900)) for i, r in enumerate(reasons)
    ]
    random.Random(4).shuffle(letters)
    (tmp_path / "removed").mkdir()
    (tmp_path / "dead_letter").mkdir()
    with _pipeline() as p:
        results = (
            p | _create(docs, "Docs") | WriteRemoved(str(tmp_path), buffer_bytes=4096),
            p | _create(letters, "Letters") | WriteDeadLetters(str(tmp_path), buffer_bytes=4096),
        ) | beam.Flatten()
        expected = [_entry("removed/duplicate.jsonl", "duplicate", _expected(docs, removed._sort_key), 1500)]
        for reason in ("empty_text", "malformed_json"):
            mine = [d for d in letters if d.reason == reason]
            expected.append(
                _entry(f"dead_letter/{reason}.jsonl", reason, _expected(mine, dead_letters._sort_key), len(mine))
            )
        assert_that(results, equal_to(expected))
    assert (tmp_path / "removed" / "duplicate.jsonl").read_bytes() == _expected(docs, removed._sort_key)
