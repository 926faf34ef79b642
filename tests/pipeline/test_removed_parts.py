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
from pipeline.write.removed import WriteRemoved, part_of, plan_parts
from tests.pipeline.test_reason_files import _create, _entry, _expected, _removed


def _contaminated(n: int) -> list[RemovedDocument]:
    detail = {"ngram_size": 13, "ngrams_found": 1, "evaluation": [{"file": "e", "examples": 1, "example_ids": ["1"]}]}
    return [
        RemovedDocument("contaminated", f"c{i}", Source("corpus/part-9.jsonl", i, 997 * i), detail) for i in range(n)
    ]


def test_parts_are_consecutive_cells_of_at_least_the_target_whatever_the_counts_order():
    rng = random.Random(5)
    counts = [(("duplicate", (f"f{i % 3}", i)), rng.randrange(1, 40)) for i in range(60)]
    counts += [(("contaminated", ("f0", 0)), 3)]
    plan = plan_parts(counts, 100)
    for _ in range(3):
        rng.shuffle(counts)
        assert plan_parts(counts, 100) == plan
    assert plan["contaminated"] == [("f0", 0)]
    cells = sorted((c, n) for (reason, c), n in counts if reason == "duplicate")
    parts = [part_of(plan, "duplicate", c) for c, _ in cells]
    assert parts == sorted(parts) and parts[0] == 0 and set(parts) == set(range(len(plan["duplicate"])))
    held = [sum(n for (c, n), p in zip(cells, parts) if p == i) for i in range(len(plan["duplicate"]))]
    assert len(held) > 5 and all(h >= 100 for h in held[:-1]) and sum(held) == sum(n for _, n in cells)


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
    one = _write(tmp_path / "one", records, [])  # the default parts: one part per reason on this little
    assert one == {f"{r}.jsonl": _expected([d for d in records if d.reason == r], removed._sort_key) for r in REASONS}
    random.Random(8).shuffle(records)
    options, parts = ["--direct_num_workers", "2"], {"cell_bytes": 1 << 13, "part_records": 20}
    assert _write(tmp_path / "two", records, options, **parts) == one
    for reason, least in (("duplicate", 30), ("contaminated", 10)):
        written = sorted((tmp_path / "two" / "_tmp" / "removed" / reason).iterdir())
        assert len(written) > least, written  # one writer per reason before: no parts at all
        keys = [
            [verify_removed.sort_key(json.loads(line)) for line in p.read_text("utf-8").splitlines()] for p in written
        ]
        assert all(k and k == sorted(k) for k in keys)
        assert all(a[-1] <= b[0] for a, b in zip(keys, keys[1:]))  # part i's records all sort before part i+1's
        assert b"".join(p.read_bytes() for p in written) == one[f"{reason}.jsonl"]
