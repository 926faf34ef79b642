"""The Wikipedia sample built from Parquet against the same documents built from JSONL (issue 43).

    .venv/bin/python benchmarks/bench_columnar.py              # 3 alternating rounds
    .venv/bin/python benchmarks/bench_columnar.py --rounds 5 --row-group 500

Input: ../shared/data/wikipedia-en-sample/pages.jsonl.zst (4,576 articles) decompressed into one plain JSONL file,
and the same rows written by pyarrow as one Parquet file (row groups of ``--row-group`` documents, pyarrow's
default compression, snappy). The tokenizer is trained once beforehand (not timed) and passed with
``--tokenizer``. Then ``.venv/bin/python -m pipeline.build_shards`` runs as a user runs it (the default runner, the
default ``--split-bytes``: both files are split, the JSONL over byte ranges of lines, the Parquet over its row
groups), JSONL and Parquet in each round, the first of the two alternating between rounds; the load average is
printed before each run.

Printed: every run's wall time and CPU seconds (the build's process: the default runner works in it), the medians,
the ratio Parquet / JSONL (issue 43's target: at most 1.0), the median of the rounds' ratios, and whether the shards
of every run are byte-identical to the first JSONL run's.

``--readers-only``: no build; the readers alone in this process (``pipeline.read.ranges.read_file``, a whole-file
read of each input: records, progress and the input's sha256), alternating, ``--rounds`` times: the part of the
build the input format changes, without the tokenizing that dominates a build's time and noise.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "data" / "wikipedia-en-sample" / "pages.jsonl.zst"
sys.path.insert(0, str(REPO))


def write_inputs(tmp: Path, row_group: int) -> tuple[Path, Path, list[str]]:
    with open(SAMPLE, "rb") as f:
        raw = io.TextIOWrapper(
            zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True), encoding="utf-8"
        ).read()
    rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    jsonl = tmp / "pages.jsonl"
    jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    parquet = tmp / "pages.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet, row_group_size=row_group)
    return jsonl, parquet, [r["text"] for r in rows[:2000]]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_job(corpus: Path, input_format: str, tokenizer: Path, out: Path) -> tuple[float, float]:
    """Wall seconds of the build, and CPU seconds of its process (and of any it waited for)."""
    cmd = [
        sys.executable,
        "-m",
        "pipeline.build_shards",
        "--input",
        str(corpus),
        "--input-format",
        input_format,
        "--output",
        str(out),
        "--tokenizer",
        str(tokenizer),
        "--num-shards",
        "4",
        "--overwrite",
    ]
    started, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"job failed:\n{proc.stderr[-3000:]}")
    return elapsed, _children_cpu() - cpu


def read_all(path: Path, input_format: str) -> tuple[float, int]:
    """Seconds of CPU to read every record of ``path`` whole, and how many documents it gave."""
    from pipeline.elements import Document
    from pipeline.read.ranges import read_file
    from pipeline.read.records import ReaderOptions

    started = time.process_time()
    docs = sum(isinstance(r, Document) for r in read_file(str(path), ReaderOptions(input_format=input_format)))
    return time.process_time() - started, docs


def readers_only(jsonl: Path, parquet: Path, rounds: int) -> None:
    times: dict[str, list[float]] = {"jsonl": [], "parquet": []}
    for rnd in range(rounds):
        counts = []
        for name, path in (("jsonl", jsonl), ("parquet", parquet)):
            seconds, docs = read_all(path, name)
            times[name].append(seconds)
            counts.append(docs)
        assert counts[0] == counts[1] > 0, counts
        print(
            f"round {rnd + 1}: JSONL {times['jsonl'][-1]:.2f} CPU-s, Parquet {times['parquet'][-1]:.2f} CPU-s "
            f"({counts[0]} documents each; load average {' '.join(open('/proc/loadavg').read().split()[:3])})"
        )
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"readers, median CPU-s: JSONL {med['jsonl']:.2f}, Parquet {med['parquet']:.2f}; "
        f"Parquet / JSONL {med['parquet'] / med['jsonl']:.2f}"
    )


def shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "shards").glob("*.arrow"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the two builds")
    ap.add_argument("--row-group", type=int, default=500, help="documents per Parquet row group")
    ap.add_argument("--readers-only", action="store_true", help="time the two readers in this process, no build")
    args = ap.parse_args()
    if not SAMPLE.exists():
        raise SystemExit(f"{SAMPLE} not found: this benchmark needs ../shared/data")

    from pipeline.tokenize import tokenizer

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        jsonl, parquet, texts = write_inputs(tmp, args.row_group)
        groups = pq.ParquetFile(parquet).metadata.num_row_groups
        print(
            f"inputs: JSONL {jsonl.stat().st_size / 1e6:.1f} MB; Parquet {parquet.stat().st_size / 1e6:.1f} MB, "
            f"{groups} row groups of up to {args.row_group} documents"
        )
        if args.readers_only:
            readers_only(jsonl, parquet, args.rounds)
            return
        spec = tokenizer.make_spec(tokenizer.train(texts, vocab_size=28996), "trained")
        (tmp / "tokenizer.json").write_text(spec.json)
        times: dict[str, list[float]] = {"jsonl": [], "parquet": []}
        cpus: dict[str, list[float]] = {"jsonl": [], "parquet": []}
        reference: dict[str, bytes] | None = None
        identical = True
        for rnd in range(args.rounds):
            pair = [("jsonl", jsonl), ("parquet", parquet)]
            for name, corpus in pair if rnd % 2 == 0 else pair[::-1]:  # which runs first alternates
                load = " ".join(open("/proc/loadavg").read().split()[:3])
                out = tmp / f"out-{name}"
                elapsed, cpu = run_job(corpus, name, tmp / "tokenizer.json", out)
                times[name].append(elapsed)
                cpus[name].append(cpu)
                got = shards(out)
                reference = reference or got
                identical = identical and got == reference and len(got) == 4
                print(
                    f"round {rnd + 1} {name:8s} {elapsed:6.1f} s, {cpu:6.1f} CPU-s  (load average before: {load})",
                    flush=True,
                )
        med = {k: statistics.median(v) for k, v in times.items()}
        ratios = [p / j for j, p in zip(times["jsonl"], times["parquet"], strict=True)]
        print(f"median: JSONL {med['jsonl']:.1f} s, Parquet {med['parquet']:.1f} s")
        print(
            f"Parquet / JSONL: {med['parquet'] / med['jsonl']:.2f} (of the medians); median of the rounds' ratios "
            f"{statistics.median(ratios):.2f}; target <= 1.0"
        )
        cpu_med = {k: statistics.median(v) for k, v in cpus.items()}
        print(
            f"CPU seconds, medians: JSONL {cpu_med['jsonl']:.1f}, Parquet {cpu_med['parquet']:.1f}; "
            f"Parquet / JSONL {cpu_med['parquet'] / cpu_med['jsonl']:.2f}"
        )
        print(f"shards byte-identical across all runs: {identical}")


if __name__ == "__main__":
    main()
