"""Benchmark: the n-gram dictionary job against a plain single-process ``collections.Counter``, same input,
same run, same rules. Not a test: it prints numbers (and checks that both produce the same dictionary).

    python benchmarks/bench_ngram_dictionary.py                  # WikiText-2 (valid + test) x 10, 2 workers
    python benchmarks/bench_ngram_dictionary.py --copies 20 --repeat 3
    python benchmarks/bench_ngram_dictionary.py --corpus wikipedia  # distinct text: memory vs distinct n-grams

Both sides run as subprocesses, timed from start to exit (interpreter start and imports included: they are
part of what a user waits for), with peak memory measured on each process tree (the job's worker processes
included) by sampling /proc every 20 ms: "peak RSS" is the largest sum of the tree's RSS seen at one time.

The baseline reads the file line by line, skips headings, splits the rest on whitespace and ``<unk>``, and
counts every 2..5-gram with ``Counter.update`` (C-accelerated), then keeps count >= min count. The job runs
``python -m pipeline.build_ngram_dictionary`` with its defaults and ``--direct_running_mode multi_processing
--direct_num_workers W``, and once in-process (FnApiRunner, one worker) for reference.

Throughput is tokens/s with tokens = the paragraph tokens of the input (what both count over). CPU seconds
(user + system, all processes of the tree) are printed too: on a shared machine the wall clock depends on the
other load, CPU time much less.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
WIKITEXT2 = SHARED / "wikitext-2"
WIKIPEDIA = SHARED / "wikipedia-en-sample" / "pages.jsonl.zst"


# --------------------------------------------------------------------------------------------------
# The baseline (runs in its own process: `bench_ngram_dictionary.py --baseline INPUT OUT.tsv MIN_COUNT`)


def baseline(input_path: str, out_tsv: str, min_count: int, max_n: int = 5, min_n: int = 2) -> None:
    sys.path.insert(0, str(REPO))
    from pipeline.read.wikitext import UNK, heading_level

    started = time.perf_counter()
    counts: collections.Counter[str] = collections.Counter()
    with open(input_path, encoding="utf-8") as f:
        for line in f:
            tokens = line.split()
            if not tokens or heading_level(line):
                continue
            runs, run = [], []
            for token in tokens:
                if token == UNK:
                    if run:
                        runs.append(run)
                    run = []
                else:
                    run.append(token)
            if run:
                runs.append(run)
            for run in runs:
                for n in range(min_n, max_n + 1):
                    counts.update([" ".join(run[i : i + n]) for i in range(len(run) - n + 1)])
    counted = time.perf_counter() - started
    kept = sorted(((g, c) for g, c in counts.items() if c >= min_count), key=lambda kv: (-kv[1], kv[0]))
    with open(out_tsv, "w", encoding="utf-8") as f:
        f.write("ngram\tn\tcount\n")
        for g, c in kept:
            f.write(f"{g}\t{g.count(' ') + 1}\t{c}\n")
    print(json.dumps({"counting_seconds": counted, "distinct_ngrams": len(counts), "kept": len(kept)}))


# --------------------------------------------------------------------------------------------------
# Measuring a process tree


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(cmd: list[str], *, cwd: Path) -> dict:
    """Run cmd; wall seconds, CPU seconds of its whole process tree (every process is reaped by its parent,
    so their CPU time adds up in ours), peak RSS of the tree (sampled), number of processes seen, stdout."""
    cpu_before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak_kb, seen = 0, set()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_kb
        while not done.is_set():
            tree, stack = [], [proc.pid]
            while stack:
                pid = stack.pop()
                tree.append(pid)
                stack.extend(_children(pid))
            seen.update(tree)
            peak_kb = max(peak_kb, sum(_rss_kb(pid) for pid in tree))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return {
        "wall": wall,
        "cpu": _children_cpu() - cpu_before,
        "peak_rss_mb": peak_kb / 1024,
        "processes": len(seen),
        "stdout": stdout,
    }


# --------------------------------------------------------------------------------------------------
# Inputs


def wikitext_input(path: Path, copies: int) -> None:
    parts = [(WIKITEXT2 / name).read_bytes() for name in ("wiki.valid.tokens", "wiki.test.tokens")]
    with open(path, "wb") as f:
        for _ in range(copies):
            for part in parts:
                f.write(part)


_WORD = re.compile(r"\w+|[^\w\s]")


def wikipedia_input(path: Path) -> None:
    """The Wikipedia sample in WikiText's line format: ' = Title = ', one paragraph per line, tokens split
    on word/punctuation boundaries (a stand-in for WikiText's tokenizer: distinct text, many distinct n-grams)."""
    import zstandard

    with open(WIKIPEDIA, "rb") as raw, open(path, "w", encoding="utf-8") as out:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(raw), encoding="utf-8")
        for record in reader:
            page = json.loads(record)
            out.write(f" \n = {' '.join(_WORD.findall(page['title']))} = \n \n")
            for paragraph in page["text"].split("\n\n"):
                tokens = _WORD.findall(paragraph)
                if tokens:
                    out.write(" " + " ".join(tokens) + " \n")


# --------------------------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--baseline":
        baseline(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=["wikitext2", "wikipedia"], default="wikitext2")
    parser.add_argument("--copies", type=int, default=10, help="WikiText-2 valid+test concatenated this many times")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--min-count", type=int, default=11)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each side (interleaved); medians reported")
    parser.add_argument("--no-single", action="store_true", help="skip the in-process (1 worker) job run")
    args = parser.parse_args()
    if args.corpus == "wikitext2" and not (WIKITEXT2 / "wiki.valid.tokens").exists():
        sys.exit(f"error: {WIKITEXT2} is not available")
    if args.corpus == "wikipedia" and not WIKIPEDIA.exists():
        sys.exit(f"error: {WIKIPEDIA} is not available")

    tmp = Path(tempfile.mkdtemp(prefix="bench_ngram_"))
    try:
        corpus = tmp / "corpus.tokens"
        if args.corpus == "wikitext2":
            wikitext_input(corpus, args.copies)
            label = f"WikiText-2 valid+test x {args.copies}"
        else:
            wikipedia_input(corpus)
            label = "Wikipedia sample (4,576 articles) in WikiText line format"
        size_mb = corpus.stat().st_size / 1e6
        py = sys.executable
        job_cmd = [
            py,
            "-m",
            "pipeline.build_ngram_dictionary",
            "--input",
            str(corpus),
            "--min-count",
            str(args.min_count),
        ]
        sides = {
            "baseline": lambda i: [
                py,
                str(Path(__file__).resolve()),
                "--baseline",
                str(corpus),
                str(tmp / f"baseline{i}.tsv"),
                str(args.min_count),
            ],
            f"job, {args.workers} workers": lambda i: (
                job_cmd
                + [
                    "--output",
                    str(tmp / f"multi{i}"),
                    "--direct_running_mode",
                    "multi_processing",
                    "--direct_num_workers",
                    str(args.workers),
                ]
            ),
        }
        if not args.no_single:
            sides["job, in-process"] = lambda i: job_cmd + ["--output", str(tmp / f"single{i}")]
        results: dict[str, list[dict]] = {name: [] for name in sides}
        loads = [os.getloadavg()[0]]
        for i in range(args.repeat):
            for name, cmd in sides.items():
                results[name].append(measure(cmd(i), cwd=REPO))
                loads.append(os.getloadavg()[0])
                print(
                    f"  run {i + 1}/{args.repeat} {name}: {results[name][-1]['wall']:.1f} s wall, "
                    f"{results[name][-1]['cpu']:.1f} s CPU, peak RSS {results[name][-1]['peak_rss_mb']:.0f} MB, "
                    f"load {loads[-1]:.1f}",
                    file=sys.stderr,
                )

        manifest = json.loads((tmp / "multi0" / "manifest.json").read_text())
        tokens = manifest["corpus"]["paragraph_tokens"]
        same = all(
            (tmp / f"{d}{i}" / "ngrams.tsv").read_bytes() == (tmp / f"baseline{i}.tsv").read_bytes()
            for i in range(args.repeat)
            for d in (["multi"] + ([] if args.no_single else ["single"]))
        )
        base_info = json.loads(results["baseline"][0]["stdout"].strip().splitlines()[-1])

        def med(name: str, key: str) -> float:
            return statistics.median(r[key] for r in results[name])

        print(
            f"\nn-gram dictionary benchmark: {label}: {size_mb:.1f} MB, {tokens:,} paragraph tokens; "
            f"n = 2..5, min count {args.min_count}; {manifest['total_entries']:,} entries "
            f"({base_info['distinct_ngrams']:,} distinct 2..5-grams counted by the baseline)"
        )
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M %Z')}; medians of {args.repeat} run(s); 1-min load average "
            f"{min(loads):.1f}..{max(loads):.1f} during the runs"
        )
        print(f"same dictionary as the baseline (byte-identical TSV): {same}")
        base_wall, base_cpu = med("baseline", "wall"), med("baseline", "cpu")
        base_rss = med("baseline", "peak_rss_mb")
        print(
            f"{'':20} {'wall s':>7} {'tokens/s':>10} {'vs base':>8} {'CPU s':>7} {'tok/CPU-s':>10} {'vs base':>8} "
            f"{'peak RSS MB':>11} {'vs base':>8} {'procs':>5}"
        )
        for name in sides:
            wall, cpu, rss = med(name, "wall"), med(name, "cpu"), med(name, "peak_rss_mb")
            print(
                f"{name:20} {wall:7.2f} {tokens / wall:10,.0f} {base_wall / wall:7.2f}x {cpu:7.2f} "
                f"{tokens / cpu:10,.0f} {base_cpu / cpu:7.2f}x {rss:11.0f} {rss / base_rss:7.2f}x "
                f"{results[name][0]['processes']:5d}"
            )
        print(
            f"(baseline counting alone, without interpreter start and output: "
            f"{statistics.median(json.loads(r['stdout'].strip().splitlines()[-1])['counting_seconds'] for r in results['baseline']):.2f} s)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
