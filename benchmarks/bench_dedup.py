"""What --dedup near and --decontaminate add to the shard job's wall time, same corpus, same machine, same run.

    .venv/bin/python benchmarks/bench_dedup.py                  # whole Wikipedia sample, 1 worker, 2 rounds
    .venv/bin/python benchmarks/bench_dedup.py --docs 1000 --rounds 1
    .venv/bin/python benchmarks/bench_dedup.py --docs 2433 --rounds 4 --variants plain,near --no-half  # 20 MB

Each round runs ``python -m pipeline.build_shards`` three times as a user does (a subprocess, FnApiRunner, a
tokenizer trained once beforehand and passed with --tokenizer, not timed): without either option; with
``--dedup near``; with ``--dedup near --decontaminate`` every fine-tuning file in ../shared/data/finetune. Printed:
the median wall times, the ratios to the plain job (issue 35's target: at most 1.25), peak RSS of the process tree
at half and all of the corpus, and what was removed. Each run's wall time and the 1-minute load average at its
start are printed as it ends, with its CPU time (user + system of the job's processes: less at the mercy of
other work on the machine than the wall time), and each round's ratio of each variant to that round's plain run (the jobs of a round
run back to back, so on a shared machine these ratios mean more than the medians).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from bench_shards import REPO, SAMPLE, load_texts, run_job, write_corpus

FINETUNE = SAMPLE.parents[1] / "finetune"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=None, help="first N documents (default: all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--variants", default="plain,near,near+decontaminate", help="comma-separated, plain first")
    parser.add_argument("--no-half", action="store_true", help="skip the half-corpus runs (peak RSS at half)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from pipeline.tokenize import tokenizer

    rows = load_texts(args.docs)
    evals = sorted(str(p) for p in FINETUNE.glob("*/*") if p.suffix in (".tsv", ".json"))
    variants = {
        "plain": [],
        "near": ["--dedup", "near"],
        "near+decontaminate": ["--dedup", "near", *sum((["--decontaminate", e] for e in evals), [])],
    }
    chosen = args.variants.split(",")
    if chosen[0] != "plain" or any(v not in variants for v in chosen):
        parser.error(f"--variants: plain first, then any of {', '.join(variants)}")
    variants = {v: variants[v] for v in chosen}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tok_path = root / "tokenizer.json"
        tok_path.write_text(tokenizer.train((r["text"] for r in rows), vocab_size=8000).to_str(), encoding="utf-8")
        halves = {"half": rows[: len(rows) // 2], "all": rows}
        for name, part in halves.items():
            write_corpus(part, root / name, 2)
        times: dict[str, list[float]] = {v: [] for v in variants}
        cpu: dict[str, list[float]] = {v: [] for v in variants}
        peaks: dict[tuple[str, str], int] = {}
        manifests = {}
        for r in range(args.rounds):
            for v, extra in variants.items():
                load = os.getloadavg()[0]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                elapsed, manifests[v], peaks[(v, "all")] = run_job(
                    root / "all", tok_path, root / v, args.workers, extra
                )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[v].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                times[v].append(elapsed)
                print(
                    f"round {r + 1} {v:>20}: {elapsed:6.2f} s  ratio {elapsed / times['plain'][-1]:.2f}  "
                    f"CPU {cpu[v][-1]:6.2f} s  ratio {cpu[v][-1] / cpu['plain'][-1]:.2f}  load {load:.2f}",
                    flush=True,
                )
        for v, extra in variants.items():
            if not args.no_half:
                _, _, peaks[(v, "half")] = run_job(root / "half", tok_path, root / f"{v}-half", args.workers, extra)
    print(f"{len(rows):,} documents, {args.workers} worker(s), {args.rounds} round(s), {len(evals)} evaluation files")
    base = statistics.median(times["plain"])
    for v in variants:
        t = statistics.median(times[v])
        c = manifests[v]["counts"]
        print(
            f"{v:>20}: {t:6.1f} s  ratio {t / base:.2f}  peak RSS half {peaks.get((v, 'half'), 0) / 2**20:,.0f} MiB, "
            f"all {peaks[(v, 'all')] / 2**20:,.0f} MiB  duplicates {c.get('documents_duplicate', 0)}, "
            f"contaminated {c.get('documents_contaminated', 0)}"
        )


if __name__ == "__main__":
    main()
