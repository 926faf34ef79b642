"""Writing ``removed/duplicate.jsonl`` with 2 workers: one writer per reason (before) against parts (issue 42, Cost).

    .venv/bin/python benchmarks/bench_removed_write.py --removed ARTIFACT/removed/duplicate.jsonl [--rounds 3]

Input: the ``removed/duplicate.jsonl`` of a real build (e.g. ``benchmarks/bench_split_file.py``'s file with
``--copies 5``, 200 MB, built with ``--dedup exact``: 18,304 records, 23.1 MB). Its lines are read back into
``RemovedDocument``s inside the pipeline (each of ``--chunks`` elements reads a share of the lines, so the records
are not pickled into the job's graph), and written again, in alternating rounds, each a Beam job on the FnApiRunner
with ``--direct_running_mode multi_processing --direct_num_workers 2`` (worker start-up included in every run):

- ``read``: the records read and counted, nothing written: the floor both writers share;
- ``one writer``: grouped by reason and written by one call (``pipeline.write.removed._write_reason``, what
  ``WriteRemoved`` did before);
- ``parts``: ``WriteRemoved`` as it is (parts, ``CELL_BYTES`` of an input file each, sorted on the workers, then
  concatenated).

Printed per run: wall seconds, CPU seconds of each worker process (psutil samples, as ``bench_split_file.py``),
the load average before it; then the medians, the write's cost (median minus the ``read`` median) of each writer
and their ratio, and whether both writers wrote the input file's bytes exactly (they must: same records, same
order). ``--scale N`` reads each record N times, copy k as if from input file ``PATH.k`` (N times the records, the
files of a corpus of N inputs); the writers' files are then compared with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pipeline.runners.jobs  # noqa: E402, F401  (before Beam, as the jobs import it)

# isort: split

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from benchmarks.bench_split_file import CpuSampler  # noqa: E402
from pipeline.elements import RemovedDocument, Source  # noqa: E402
from pipeline.write import removed  # noqa: E402

TWO_WORKERS = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


def _records(path: str, chunk: int, chunks: int, scale: int):
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i % chunks == chunk:
                r = json.loads(line)
                detail = {k: v for k, v in r.items() if k not in ("reason", "doc_id", "source", "preview")}
                for k in range(scale):  # copy k as if read from another input file
                    source = Source(**{**r["source"], "path": r["source"]["path"] + (f".{k}" if k else "")})
                    yield RemovedDocument(r["reason"], r["doc_id"], source, detail, r.get("preview", ""))


def run(variant: str, source: str, out: Path, chunks: int, scale: int) -> tuple[float, list[float]]:
    (out / "removed").mkdir(parents=True)
    sampler = CpuSampler(os.getpid())
    start = time.perf_counter()
    with beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(TWO_WORKERS)) as p:
        docs = (
            p
            | beam.Create(range(chunks))
            | beam.Reshuffle()
            | beam.FlatMap(lambda c: _records(source, c, chunks, scale))
        )
        if variant == "read":
            _ = docs | beam.combiners.Count.Globally()
        elif variant == "one writer":
            output = str(out)
            _ = (
                docs
                | beam.Map(lambda r: (r.reason, r))
                | beam.GroupByKey()
                | beam.Map(lambda group: removed._write_reason(output, group))
            )
        else:
            _ = docs | removed.WriteRemoved(str(out))
    wall = time.perf_counter() - start
    workers = [cpu for label, _pid, cpu, _busy in sampler.stop() if label == "worker"]
    return wall, workers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--removed", required=True, help="a removed/duplicate.jsonl written by a build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--scale", type=int, default=1, help="each record this many times, from as many input files")
    a = ap.parse_args(argv)
    expected = Path(a.removed).read_bytes()
    lines = expected.count(b"\n") * a.scale
    print(f"{a.removed} x {a.scale}: {lines:,} records, {len(expected) * a.scale / 1e6:.1f} MB; parts of "
          f"{removed.CELL_BYTES >> 20} MiB of an input file", flush=True)  # fmt: skip
    variants = ("read", "one writer", "parts")
    walls: dict[str, list[float]] = {v: [] for v in variants}
    identical, first = True, b""
    with tempfile.TemporaryDirectory(prefix="bench-removed-") as tmp:
        for r in range(a.rounds):
            for v in variants if r % 2 == 0 else reversed(variants):
                load = os.getloadavg()[0]
                out = Path(tmp) / f"{r}-{v.replace(' ', '-')}"
                wall, workers = run(v, a.removed, out, a.chunks, a.scale)
                walls[v].append(wall)
                written = out / "removed" / "duplicate.jsonl"
                data = b"" if v == "read" else written.read_bytes()
                if a.scale > 1 and data and not first:
                    first = data  # no file to compare with: the first writer's, compared with every other's
                same = v == "read" or data == (expected if a.scale == 1 else first)
                identical &= same
                cpu = ", ".join(f"{c:.1f}" for c in workers)
                print(f"round {r + 1} {v:>10}: {wall:6.2f} s  workers' CPU s [{cpu}]  load {load:.1f}"
                      + ("" if same else "  DIFFERENT BYTES"), flush=True)  # fmt: skip
    med = {v: statistics.median(w) for v, w in walls.items()}
    one, parts = med["one writer"] - med["read"], med["parts"] - med["read"]
    print("medians: " + ", ".join(f"{v} {m:.2f} s" for v, m in med.items()))
    print(f"the write (median - read): one writer {one:.2f} s, parts {parts:.2f} s, parts / one writer "
          f"{parts / one if one > 0 else float('nan'):.2f}; whole jobs parts / one writer "
          f"{med['parts'] / med['one writer']:.2f}")  # fmt: skip
    what = "the input's bytes" if a.scale == 1 else "the same bytes"
    print(f"both writers wrote {what}: " + ("yes" if identical else "NO"))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
