"""Per-core throughput of the two Beam jobs, turned into worker-hours and wall time for big corpora; the trainer's
GPU time for SpanBERT-large from model FLOPs. The numbers behind docs/RUNNING.md, "Scale estimates".

    .venv/bin/python benchmarks/scale_estimates.py            # ~5 min on 2 cores
    .venv/bin/python benchmarks/scale_estimates.py --quick    # smaller inputs, ~2 min

Measured here, each job as a user runs it (``python -m pipeline.<job>``, a subprocess, one worker: the
in-process FnApiRunner), on real text from ../shared/data:

- build_shards (no candidates): the Wikipedia sample (jsonl.zst), with a tokenizer trained beforehand;
- build_shards --mask-candidates entities,noun_phrases (spaCy): the first articles of the same sample;
- build_ngram_dictionary: the Wikipedia sample converted to WikiText's line format (distinct text);
- tokenizer training (what ``--train-tokenizer`` does in the launching process).

Each job runs on two input sizes and the rate is the *marginal* one, (work2 - work1) / (CPU2 - CPU1), in CPU
seconds of the job's process (user + sys), so interpreter start-up and per-job fixed costs cancel and other
load on the machine matters less than it does for wall time. Baseline in the same run: the raw tokenizer's
``encode`` in this process, one thread (ratio = job / baseline).

The trainer part is arithmetic, not a measurement: ``SpanBert.flops_per_sequence`` (the model's own FLOP count,
the one its MFU monitor uses) for BERT-large at 512 tokens, at a stated model FLOPs utilisation of an A100.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
WIKIPEDIA = SHARED / "wikipedia-en-sample" / "pages.jsonl.zst"
sys.path.insert(0, str(REPO))

CORPORA = {"WikiText-103 train (540 MB)": 540e6, "English Wikipedia (20 GB)": 20e9, "160 GB corpus": 160e9}
WORKER_VCPUS = 4  # e.g. Dataflow n2-standard-4 / n1-standard-4; Beam's Python SDK runs one worker process per vCPU
A100_BF16_TFLOPS = 312.0
SPANBERT_STEPS, SPANBERT_BATCH, SPANBERT_SEQ = 2_400_000, 256, 512


def load_pages(n: int | None) -> list[dict]:
    from benchmarks.bench_shards import load_texts  # the same reader as the shard benchmark

    return load_texts(n)


def write_jsonl_zst(rows: list[dict], path: Path) -> int:
    import zstandard

    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
    return sum(len(r["text"].encode()) for r in rows)


_WORD = re.compile(r"\w+|[^\w\s]")


def write_wikitext(rows: list[dict], path: Path) -> int:
    """WikiText's line format: ' = Title = ', one paragraph per line, tokens separated by spaces."""
    with open(path, "w", encoding="utf-8") as out:
        for page in rows:
            out.write(f" \n = {' '.join(_WORD.findall(page['title']))} = \n \n")
            for paragraph in page["text"].split("\n\n"):
                tokens = _WORD.findall(paragraph)
                if tokens:
                    out.write(" " + " ".join(tokens) + " \n")
    return path.stat().st_size


def run_job(args: list[str]) -> tuple[float, float]:
    """Run ``python -m <args>``; return (wall seconds, CPU seconds of the process and its children)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, err = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"{' '.join(args[:2])} failed:\n{err[-3000:]}")
    return wall, _cpu_of_last_child()


_last_children_cpu = 0.0


def _cpu_of_last_child() -> float:
    import resource

    global _last_children_cpu
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru.ru_utime + ru.ru_stime
    delta, _last_children_cpu = total - _last_children_cpu, total
    return delta


def marginal(small: tuple[float, float], large: tuple[float, float]) -> float:
    """(work_large - work_small) / (cpu_large - cpu_small)."""
    return (large[0] - small[0]) / max(1e-9, large[1] - small[1])


def fmt_hours(h: float) -> str:
    return f"{h * 60:.0f} min" if h < 1 else f"{h:.1f} h" if h < 48 else f"{h / 24:.1f} d"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs")
    ap.add_argument("--workers", type=int, default=50, help="Dataflow workers assumed for the wall-time column")
    args = ap.parse_args()
    if not WIKIPEDIA.exists():
        raise SystemExit(f"{WIKIPEDIA} not found: this benchmark needs ../shared/data")
    from pipeline.tokenize import tokenizer

    _cpu_of_last_child()
    n_all = 1500 if args.quick else 4576
    pages = load_pages(n_all)
    sizes = {"small": pages[: len(pages) // 2], "large": pages}
    cand_sizes = {"small": pages[:40], "large": pages[: 80 if args.quick else 160]}
    results: dict[str, dict] = {}
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} vCPUs, Python {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f} at start (shared machine: other jobs compete for the cores)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        texts = [p["text"] for p in pages]
        started = time.perf_counter()
        tok = tokenizer.train(texts[: len(texts) // 4], vocab_size=28996)
        t_small = time.perf_counter() - started
        started = time.perf_counter()
        tok = tokenizer.train(texts, vocab_size=28996)
        t_large = time.perf_counter() - started
        mb_q, mb_all = (
            sum(len(t.encode()) for t in texts[: len(texts) // 4]) / 1e6,
            sum(len(t.encode()) for t in texts) / 1e6,
        )
        train_rate = (mb_all - mb_q) / max(1e-9, t_large - t_small)
        print(f"tokenizer training (in process, Rust trainer, all cores): {train_rate:.2f} MB/s wall (marginal)")
        spec = tokenizer.make_spec(tok, "trained")
        (tmp / "tokenizer.json").write_text(spec.json)

        # baseline: the raw tokenizer, one thread, this process
        sample = texts[:1000]
        started = time.process_time()
        base_tokens = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in sample)
        base_cpu = time.process_time() - started
        base_rate = base_tokens / base_cpu
        print(f"baseline Tokenizer.encode, one thread: {base_rate:,.0f} tokens per CPU-second")

        # build_shards without candidates
        runs = {}
        for name, rows in sizes.items():
            d = tmp / f"wiki-{name}"
            d.mkdir()
            nbytes = write_jsonl_zst(rows, d / "part-000.jsonl.zst")
            out = tmp / f"art-{name}"
            wall, cpu = run_job(
                [
                    "pipeline.build_shards",
                    "--input",
                    str(d / "*.jsonl.zst"),
                    "--output",
                    str(out),
                    "--tokenizer",
                    str(tmp / "tokenizer.json"),
                    "--num-shards",
                    "4",
                ]
            )
            m = json.loads((out / "manifest.json").read_text())
            runs[name] = dict(
                mb=nbytes / 1e6,
                tokens=m["counts"]["tokens"],
                cpu=cpu,
                wall=wall,
                shard_bytes=sum(s["bytes"] for s in m["shards"]),
            )
        s, big = runs["small"], runs["large"]
        tok_rate = marginal((s["tokens"], s["cpu"]), (big["tokens"], big["cpu"]))
        mb_rate = marginal((s["mb"], s["cpu"]), (big["mb"], big["cpu"]))
        results["build_shards"] = dict(
            mb_per_cpu_s=mb_rate,
            tokens_per_mb=big["tokens"] / big["mb"],
            shard_bytes_per_token=big["shard_bytes"] / big["tokens"],
        )
        print(
            f"build_shards: {big['mb']:.1f} MB -> {big['tokens']:,} tokens in {big['wall']:.1f} s wall, {big['cpu']:.1f} CPU-s; "
            f"marginal {tok_rate:,.0f} tokens/CPU-s = {mb_rate:.2f} MB/CPU-s (ratio to raw encode {tok_rate / base_rate:.2f}); "
            f"{big['tokens'] / big['mb']:,.0f} tokens per MB of text; shards {big['shard_bytes'] / big['tokens']:.2f} bytes/token"
        )

        # build_shards with spaCy candidates
        runs = {}
        for name, rows in cand_sizes.items():
            d = tmp / f"cand-{name}"
            d.mkdir()
            nbytes = write_jsonl_zst(rows, d / "part-000.jsonl.zst")
            out = tmp / f"cart-{name}"
            wall, cpu = run_job(
                [
                    "pipeline.build_shards",
                    "--input",
                    str(d / "*.jsonl.zst"),
                    "--output",
                    str(out),
                    "--tokenizer",
                    str(tmp / "tokenizer.json"),
                    "--num-shards",
                    "4",
                    "--mask-candidates",
                    "entities,noun_phrases",
                ]
            )
            m = json.loads((out / "manifest.json").read_text())
            runs[name] = dict(mb=nbytes / 1e6, tokens=m["counts"]["tokens"], cpu=cpu, wall=wall)
        s, big = runs["small"], runs["large"]
        mb_rate = marginal((s["mb"], s["cpu"]), (big["mb"], big["cpu"]))
        results["build_shards_candidates"] = dict(mb_per_cpu_s=mb_rate)
        print(
            f"build_shards --mask-candidates entities,noun_phrases: {big['mb']:.2f} MB in {big['wall']:.1f} s wall, {big['cpu']:.1f} CPU-s; "
            f"marginal {mb_rate * 1e3:.0f} KB/CPU-s"
        )

        # n-gram dictionary
        runs = {}
        for name, rows in sizes.items():
            path = tmp / f"wiki-{name}.tokens"
            nbytes = write_wikitext(rows, path)
            out = tmp / f"dict-{name}"
            wall, cpu = run_job(["pipeline.build_ngram_dictionary", "--input", str(path), "--output", str(out)])
            m = json.loads((out / "manifest.json").read_text())
            runs[name] = dict(mb=nbytes / 1e6, cpu=cpu, wall=wall, entries=m["total_entries"])
        s, big = runs["small"], runs["large"]
        mb_rate = marginal((s["mb"], s["cpu"]), (big["mb"], big["cpu"]))
        results["build_ngram_dictionary"] = dict(mb_per_cpu_s=mb_rate)
        print(
            f"build_ngram_dictionary (n=2..5, min count 11, apriori): {big['mb']:.1f} MB in {big['wall']:.1f} s wall, "
            f"{big['cpu']:.1f} CPU-s, {big['entries']:,} entries; marginal {mb_rate:.2f} MB/CPU-s"
        )

    print(
        f"\nEstimates: vCPU-hours = size / rate; wall = vCPU-hours / ({args.workers} workers x {WORKER_VCPUS} vCPUs), "
        f"job start-up and the last shards not included; a worker vCPU assumed as fast as one here."
    )
    print(f"{'corpus':32} {'job':34} {'vCPU-hours':>11} {'wall':>9}")
    for corpus, size in CORPORA.items():
        for job, label in (
            ("build_shards", "build_shards"),
            ("build_shards_candidates", "build_shards + entities,noun_phrases"),
            ("build_ngram_dictionary", "build_ngram_dictionary"),
        ):
            hours = size / 1e6 / results[job]["mb_per_cpu_s"] / 3600
            print(f"{corpus:32} {label:34} {hours:11.1f} {fmt_hours(hours / (args.workers * WORKER_VCPUS)):>9}")
    print(
        f"tokenizer training on a 1 GB sample in the launching process: about {fmt_hours(1e3 / train_rate / 3600)} "
        f"at {train_rate:.2f} MB/s ({os.cpu_count()} vCPUs)"
    )
    t_per_mb = results["build_shards"]["tokens_per_mb"]
    b_per_t = results["build_shards"]["shard_bytes_per_token"]
    for corpus, size in CORPORA.items():
        tokens = size / 1e6 * t_per_mb
        shard_gb = tokens * b_per_t / 1e9
        print(
            f"{corpus:32} ~{tokens / 1e9:.2f} B tokens, ~{shard_gb:.1f} GB of shards: --num-shards {max(1, round(shard_gb / 0.25))} for 250 MB shards"
        )

    trainer_estimate()


def trainer_estimate() -> None:
    import torch

    from schemas.format import max_row_tokens
    from trainer.config import ModelConfig
    from trainer.model import SpanBert

    cfg = ModelConfig.preset("large", vocab_size=28996)
    with torch.device("meta"):
        model = SpanBert(cfg)
    params = sum(p.numel() for p in model.parameters())
    targets = 0.15 * max_row_tokens(SPANBERT_SEQ)
    per_seq = model.flops_per_sequence(SPANBERT_SEQ, targets)
    total = per_seq * SPANBERT_BATCH * SPANBERT_STEPS
    tokens = SPANBERT_BATCH * SPANBERT_SEQ * SPANBERT_STEPS
    print(
        f"\nTrainer (estimate, not a measurement): SpanBERT-large, {params / 1e6:.0f} M parameters, {SPANBERT_STEPS / 1e6:.1f} M steps "
        f"x {SPANBERT_BATCH} x {SPANBERT_SEQ} tokens = {tokens / 1e9:.0f} B tokens"
    )
    print(
        f"  model FLOPs per sequence (fwd+bwd, {targets:.0f} MLM/SBO targets): {per_seq:.3e} "
        f"(6 x params x tokens alone: {6 * params * SPANBERT_SEQ:.3e}); whole run {total:.3e} FLOPs"
    )
    for mfu in (0.40, 0.45, 0.50):
        flops = A100_BF16_TFLOPS * 1e12 * mfu
        gpu_days = total / flops / 86400
        print(
            f"  A100 bf16 at {mfu:.0%} MFU: {flops * SPANBERT_SEQ / per_seq:,.0f} tokens/s per GPU; {gpu_days:.0f} GPU-days = "
            + ", ".join(f"{gpu_days / n:.1f} days on {n}" for n in (8, 32, 64))
        )
    print(
        "  cross-check: 32 V100 for 15 days (SpanBERT's reported set-up, as recalled) = "
        f"{total / (32 * 15 * 86400) / 1e12:.1f} TFLOP/s per V100"
    )


if __name__ == "__main__":
    main()
