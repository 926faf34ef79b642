"""One big uncompressed input file, 1 worker against 2: does splitting it into byte ranges keep both busy?

    .venv/bin/python benchmarks/bench_split_file.py               # the whole Wikipedia sample (40 MB), 2 rounds
    .venv/bin/python benchmarks/bench_split_file.py --copies 2    # 80 MB (the articles twice, distinct ids)

Input: ../shared/data/wikipedia-en-sample/pages.jsonl.zst decompressed into ONE plain JSONL file in a
temporary directory (``--copies N`` repeats the articles with distinct ids). The tokenizer is trained once
beforehand (not timed) and passed with ``--tokenizer``. Then ``python -m pipeline.build_shards`` runs as a
user runs it, in alternating rounds (other work on the machine changes between runs; the load average is
printed before each):

- 1 worker: ``--direct_running_mode multi_processing --direct_num_workers 1`` (its default
  ``--encoder-threads`` is cores / workers = all cores);
- 2 workers: the same with ``--direct_num_workers 2`` (the file is read as byte ranges, ``--split-bytes``;
  one encoder thread each);
- 2 workers, ``--split-bytes 0`` (``--no-split-run`` to skip): the file as one piece of work, as before;
- 1 worker with ``--encoder-threads 1``: one worker limited to about one core, the case splitting is for.

Printed per run: wall time, the average number of busy cores (CPU seconds of the job's process tree / wall
time) and CPU seconds of every process of the tree (sampled with psutil), so one can see whether both
workers worked; then the ratios of the medians,
and whether every output (shards, unigram.arrow, dead letters, the manifest apart from build id, time,
command and output path) is byte-identical between the runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import zstandard

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "data" / "wikipedia-en-sample" / "pages.jsonl.zst"
sys.path.insert(0, str(REPO))
MANIFEST_FIELDS_THAT_DIFFER = ("build_id", "created_at", "command", "options")


def write_corpus(path: Path, copies: int) -> tuple[int, list[str]]:
    """The sample as one plain JSONL file (``copies`` times, ids made distinct); returns (bytes, some texts)."""
    with open(SAMPLE, "rb") as f:
        raw = io.TextIOWrapper(
            zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True), encoding="utf-8"
        ).read()
    rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    with open(path, "w", encoding="utf-8") as out:
        for c in range(copies):
            for r in rows:
                out.write(
                    json.dumps({**r, "id": f"{r['id']}" if c == 0 else f"{r['id']}-copy{c}"}, ensure_ascii=False) + "\n"
                )
    return path.stat().st_size, [r["text"] for r in rows[:2000]]


class CpuSampler:
    """Samples the CPU time of a process and all its descendants every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.root = psutil.Process(pid)
        self.cpu: dict[int, float] = {}
        self.label: dict[int, str] = {}
        self.series: dict[int, list[tuple[float, float]]] = {}
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.Error:
                procs = []
            now = time.perf_counter()
            for p in procs:
                try:
                    t = p.cpu_times()
                    cpu = t.user + t.system  # not children_*: reaped workers would count twice
                    if p.pid not in self.label:
                        cmd = " ".join(p.cmdline())
                        self.label[p.pid] = (
                            "job"
                            if p.pid == self.root.pid
                            else ("worker" if "sdk_worker" in cmd or "worker_pool" in cmd else "other")
                        )
                except psutil.Error:
                    continue
                self.cpu[p.pid] = cpu
                self.series.setdefault(p.pid, []).append((now, cpu))
            time.sleep(self._interval)

    def stop(self) -> list[tuple[str, int, float, float]]:
        """(label, pid, CPU seconds, share of the samples in which it used > 50% of a core), busiest first."""
        self._stop.set()
        self._thread.join()
        out = []
        for pid, cpu in self.cpu.items():
            s = self.series[pid]
            busy = [b[1] - a[1] > 0.5 * (b[0] - a[0]) for a, b in zip(s, s[1:])]
            out.append((self.label[pid], pid, cpu, sum(busy) / max(1, len(busy))))
        return sorted(out, key=lambda r: -r[2])


def run_job(
    corpus: Path, tokenizer: Path, out: Path, workers: int, split_bytes: int | None, threads: int | None = None
) -> tuple[float, list]:
    cmd = [
        sys.executable,
        "-m",
        "pipeline.build_shards",
        "--input",
        str(corpus),
        "--input-format",
        "jsonl",
        "--output",
        str(out),
        "--tokenizer",
        str(tokenizer),
        "--num-shards",
        "8",
        "--overwrite",
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        str(workers),
    ]
    if split_bytes is not None:
        cmd += ["--split-bytes", str(split_bytes)]
    if threads is not None:
        cmd += ["--encoder-threads", str(threads)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = CpuSampler(proc.pid)
    _, err = proc.communicate()
    elapsed = time.perf_counter() - started
    procs = sampler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"job failed:\n{err[-3000:]}")
    return elapsed, procs


def artifact_bytes(out: Path) -> dict[str, bytes]:
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = json.loads(files.pop("manifest.json"))
    for k in MANIFEST_FIELDS_THAT_DIFFER:
        manifest.pop(k)
    files["manifest.json (minus " + ", ".join(MANIFEST_FIELDS_THAT_DIFFER) + ")"] = json.dumps(
        manifest, sort_keys=True
    ).encode()
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=1, help="repeat the articles this many times (distinct ids)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the runs")
    ap.add_argument("--split-bytes", type=int, default=None, help="pass --split-bytes (default: the job's default)")
    ap.add_argument("--no-split-run", action="store_true", help="skip the 2-worker run with --split-bytes 0")
    args = ap.parse_args()
    if not SAMPLE.exists():
        raise SystemExit(f"{SAMPLE} not found: this benchmark needs ../shared/data")

    from pipeline.tokenize import tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = tmp / "pages.jsonl"
        size, texts = write_corpus(corpus, args.copies)
        print(
            f"input: one plain JSONL file of {size / 1e6:.1f} MB ({args.copies} cop{'y' if args.copies == 1 else 'ies'} of the Wikipedia sample)"
        )
        spec = tokenizer.make_spec(tokenizer.train(texts, vocab_size=28996), "trained")
        (tmp / "tokenizer.json").write_text(spec.json)
        # (name, workers, --split-bytes, --encoder-threads); by default a worker gets cores / workers encoder threads
        runs = [("1 worker", 1, args.split_bytes, None), ("2 workers", 2, args.split_bytes, None)]
        if not args.no_split_run:
            runs.append(("2 workers, --split-bytes 0", 2, 0, None))
        runs.append(("1 worker, 1 encoder thread", 1, args.split_bytes, 1))
        times: dict[str, list[float]] = {name: [] for name, *_ in runs}
        outputs: dict[str, dict[str, bytes]] = {}
        for rnd in range(args.rounds):
            for name, workers, split, threads in runs:
                load = open("/proc/loadavg").read().split()[:3]
                out = tmp / f"out-{workers}-{split}-{threads}"
                elapsed, procs = run_job(corpus, tmp / "tokenizer.json", out, workers, split, threads)
                times[name].append(elapsed)
                busy = ", ".join(
                    f"{label} {cpu:.1f} CPU-s ({share:.0%} of samples >50% busy)"
                    for label, _, cpu, share in procs[:4]
                    if cpu > 0.5
                )
                cores = sum(cpu for *_, cpu, _ in procs) / elapsed
                print(
                    f"round {rnd + 1} {name:27s} load {' '.join(load)}: {elapsed:6.1f} s, {cores:.2f} cores busy on average; {busy}"
                )
                got = artifact_bytes(out)
                first = outputs.setdefault("first", got)
                same = got == first
                if not same:
                    print(
                        "   OUTPUT DIFFERS from the first run:",
                        [k for k in set(first) | set(got) if first.get(k) != got.get(k)],
                    )
        one, two = statistics.median(times["1 worker"]), statistics.median(times["2 workers"])
        single = statistics.median(times["1 worker, 1 encoder thread"])
        print(
            f"median: 1 worker {one:.1f} s, 2 workers {two:.1f} s: ratio 2 workers / 1 worker = {two / one:.2f} "
            f"(0.50 if one worker kept one core busy and nothing were fixed; the busy cores per run are above)"
        )
        print(
            f"        1 worker with 1 encoder thread {single:.1f} s: 2 workers take {two / single:.2f} of its time (ideal 0.50)"
        )
        if not args.no_split_run:
            whole = statistics.median(times["2 workers, --split-bytes 0"])
            print(f"        2 workers without splitting {whole:.1f} s: ratio {whole / one:.2f}")
        identical = all(artifact_bytes(tmp / f"out-{w}-{s}-{t}") == outputs["first"] for _, w, s, t in runs)
        print(f"outputs byte-identical across all runs ({len(outputs['first'])} files compared): {identical}")
        print(f"machine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
