"""removed/<reason>.jsonl is serialised and sorted in parts, each a range of the sort key grouped on its own (so
several workers share a reason's records), and the parts concatenated in order: the file is the bytes of one sort
whatever the parts, the worker count and the order records arrive in (issue 42, Cost)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from pipeline.elements import RemovedDocument, Source
from pipeline.verify import removed as verify_removed
from pipeline.verify.removed import REASONS
from pipeline.write import removed
from pipeline.write.removed import WriteRemoved
from tests.pipeline.test_reason_files import _create, _entry, _expected, _removed


def _contaminated(n: int) -> list[RemovedDocument]:
    detail = {"ngram_size": 13, "ngrams_found": 1, "evaluation": [{"file": "e", "examples": 1, "example_ids": ["1"]}]}
    return [
        RemovedDocument("contaminated", f"c{i}", Source("corpus/part-9.jsonl", i, 997 * i), detail) for i in range(n)
    ]


def _write(tmp: Path, records: list, options: list[str], **parts) -> dict[str, bytes]:
    (tmp / "removed").mkdir(parents=True)
    expected = [
        _entry(
            f"removed/{reason}.jsonl",
            reason,
            _expected(mine, removed._sort_key),
            len(mine),
        )
        for reason in sorted({r.reason for r in records})
        for mine in [[r for r in records if r.reason == reason]]
    ]
    with beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(options)) as p:
        results = p | _create(records, "Records") | WriteRemoved(str(tmp), buffer_bytes=4096, **parts)
        assert_that(results, equal_to(expected))
    return {f.name: f.read_bytes() for f in sorted((tmp / "removed").iterdir())}


def test_the_files_are_the_bytes_of_one_sort_for_one_and_two_workers_any_order_and_any_parts(tmp_path):
    records = _removed(1200, seed=7) + _contaminated(300)
    one = _write(tmp_path / "one", records, [])  # the default parts: one per input file and reason on this little
    assert one == {f"{r}.jsonl": _expected([d for d in records if d.reason == r], removed._sort_key) for r in REASONS}
    random.Random(8).shuffle(records)
    options = ["--direct_running_mode", "multi_threading", "--direct_num_workers", "2"]
    assert _write(tmp_path / "two", records, options, cell_bytes=1 << 13) == one
    for reason, least in (("duplicate", 30), ("contaminated", 10)):
        written = list((tmp_path / "two" / "_tmp" / "removed" / reason).iterdir())
        assert len(written) > least, written  # one writer per reason before: no parts at all
        parts = [p.read_bytes() for p in written]
        keys = [[verify_removed.sort_key(json.loads(line)) for line in p.decode().splitlines()] for p in parts]
        assert all(k and k == sorted(k) for k in keys)
        ranges = sorted(zip(keys, parts))
        assert all(a[-1] <= b[0] for (a, _), (b, _) in zip(ranges, ranges[1:]))  # ranges of the key: no overlap
        assert b"".join(p for _, p in ranges) == one[f"{reason}.jsonl"]


def test_small_input_files_share_a_part_and_the_file_stays_the_bytes_of_one_sort(tmp_path):
    """Many small files (names in an order unlike their hashes') with copies in each: the parts are packs of
    about ``cell_bytes`` of input, not one per file (each part is an object written, renamed, read and deleted on a
    bucket), a large file still in ranges; a path the launcher did not list still lands in order."""
    names = [f"{p}-{(i * 37) % 200:03d}.jsonl" for i, p in enumerate(["a", "Z", "ü", "日本", "é"] * 40)]
    files = [(f"corpus/{n}", 3000) for n in names] + [("corpus/龍-big.jsonl", 10 << 14)]
    rng = random.Random(3)
    copy = {"method": "exact", "duplicate_of": {"doc_id": "k"}, "similarity": 1.0}
    records = [
        RemovedDocument("duplicate", f"d{i}", Source(path, o // 100 + 1, o), copy)
        for i, (path, size) in enumerate(rng.choice(files) for _ in range(900))
        for o in [rng.randrange(size)]
    ]
    records += [RemovedDocument("duplicate", "u", Source(p, 1, 0), copy) for p in ("a-unlisted", "corpus/b-unlisted")]
    one = _write(tmp_path / "one", records, [])  # no files: a part per input file, as before
    cell = 1 << 14  # 16 KiB: the 200 small files (600 kB) in packs of 6, the big file (160 KiB) in 10 ranges
    options = ["--direct_running_mode", "multi_threading", "--direct_num_workers", "2"]
    assert _write(tmp_path / "packed", records, options, cell_bytes=cell, files=files) == one
    parts = sorted((tmp_path / "packed" / "_tmp" / "removed" / "duplicate").iterdir())
    packs = removed.Packs(files, cell)
    # full packs hold >= cell bytes; at most two are not full (before the big file's pack, and the last)
    assert packs.starts is not None and len(packs.starts) <= 200 * 3000 // cell + 2 + 1, packs.starts
    assert len(parts) == len({packs.cell_of(r) for r in records})
    assert 10 < len(parts) <= len(packs.starts) + 9 + 1, len(parts)  # + the big file's other ranges, "a-unlisted"
    assert len(list((tmp_path / "one" / "_tmp" / "removed" / "duplicate").iterdir())) > 150  # a part per file
