"""The 200 MB single file on Prism (EXTERNAL: the project's worker pool) against the FnApiRunner with 2 worker
processes: wall time, CPU seconds of every process (launcher, Prism, pool, SDK workers), peak RSS.

    .venv/bin/python benchmarks/bench_prism.py              # 5 copies of the Wikipedia sample: ~200 MB, 1 round
    .venv/bin/python benchmarks/bench_prism.py --copies 1   # 40 MB

Input as ``bench_split_file.py`` makes it (one plain JSONL file, the articles repeated with distinct ids); the
tokenizer is trained once and given with ``--tokenizer``. Needs ``make prism`` and ../shared/data. The two artifacts
are compared (every file, the manifest less build id, time, command and options).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_split_file import SAMPLE, artifact_bytes, write_corpus  # noqa: E402


class Sampler:
    """CPU seconds and peak RSS of every process below the given roots, sampled every ``interval`` seconds."""

    def __init__(self, roots: list[int], interval: float = 0.5):
        self.roots = [psutil.Process(pid) for pid in roots]
        self.cpu: dict[int, float] = {}
        self.rss: dict[int, int] = {}
        self.label: dict[int, str] = {}
        self.peak_total_rss = 0
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for root in self.roots:
                try:
                    procs = [root] + root.children(recursive=True)
                except psutil.Error:
                    continue
                for p in procs:
                    try:
                        t, m = p.cpu_times(), p.memory_info().rss
                        if p.pid not in self.label:
                            self.label[p.pid] = _label(" ".join(p.cmdline()), p.name())
                    except psutil.Error:
                        continue
                    self.cpu[p.pid] = t.user + t.system
                    self.rss[p.pid] = max(self.rss.get(p.pid, 0), m)
                    total += m
            self.peak_total_rss = max(self.peak_total_rss, total)
            time.sleep(self._interval)

    def stop(self) -> list[tuple[str, float, int]]:
        self._stop.set()
        self._thread.join()
        rows = [(self.label[pid], self.cpu[pid], self.rss[pid]) for pid in self.cpu if self.label[pid] != "sh"]
        return sorted(rows, key=lambda r: -r[1])


def _label(command: str, name: str) -> str:
    if name == "sh":
        return "sh"
    if "prism" in name:
        return "prism"
    if "pipeline.worker_pool" in command:
        return "pool"
    if "sdk_worker" in command:
        return "sdk worker"
    return "launcher" if "pipeline.build_shards" in command else name


def run(argv: list[str], roots: list[int]) -> tuple[float, list[tuple[str, float, int]], int]:
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = Sampler([proc.pid, *roots])
    _, err = proc.communicate()
    elapsed = time.perf_counter() - started
    rows = sampler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"job failed:\n{err[-3000:]}")
    return elapsed, rows, sampler.peak_total_rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=5, help="repeat the articles this many times (distinct ids)")
    args = ap.parse_args()
    if not SAMPLE.exists():
        raise SystemExit(f"{SAMPLE} not found: this benchmark needs ../shared/data")
    from pipeline.runners import prism
    from pipeline.tokenize import tokenizer
    from tests.conftest import free_port

    if prism.built_binary() is None:
        raise SystemExit(f"no Prism binary at {prism.checkout_binary()}: run `make prism`")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        corpus = tmp / "pages.jsonl"
        size, texts = write_corpus(corpus, args.copies)
        print(f"input: one plain JSONL file of {size / 1e6:.1f} MB ({args.copies} copies of the Wikipedia sample)")
        spec = tokenizer.make_spec(tokenizer.train(texts, vocab_size=28996), "trained")
        (tmp / "tokenizer.json").write_text(spec.json)
        port = free_port()
        pool = subprocess.Popen(
            [sys.executable, "-m", "pipeline.worker_pool", "--service_port", str(port)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(5)
            base = [sys.executable, "-m", "pipeline.build_shards", "--input", str(corpus), "--tokenizer",
                    str(tmp / "tokenizer.json"), "--num-shards", "8"]  # fmt: skip
            runs = {
                "FnApiRunner, 2 worker processes": (
                    ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
                    [],
                ),
                "Prism, EXTERNAL (worker pool)": (
                    [
                        "--runner",
                        "PrismRunner",
                        "--environment_type",
                        "EXTERNAL",
                        "--environment_config",
                        f"localhost:{port}",
                    ],
                    [pool.pid],
                ),  # fmt: skip
            }
            outputs = {}
            for name, (extra, roots) in runs.items():
                load = " ".join(open("/proc/loadavg").read().split()[:3])
                out = tmp / name.split(",")[0]
                elapsed, rows, peak = run(base + ["--output", str(out)] + extra, roots)
                cpu = ", ".join(f"{label} {c:.1f} s (peak RSS {r / 1e6:.0f} MB)" for label, c, r in rows if c > 0.1)
                total = sum(c for _, c, _ in rows)
                print(f"{name}: load {load}: {elapsed:.1f} s wall, {total:.1f} CPU-s in all: {cpu}; "
                      f"peak RSS of all processes together {peak / 1e6:.0f} MB")  # fmt: skip
                outputs[name] = artifact_bytes(out)
            first, second = outputs.values()
            print("artifacts byte-identical:", first == second)
        finally:
            pool.terminate()
            pool.wait()


if __name__ == "__main__":
    main()
