"""Streaming loader throughput (rows/s) against a plain pyarrow read of the same shards, same run.

    .venv/bin/python benchmarks/bench_loader.py [--data ARTIFACT] [--epochs 2] [--workers 0,2]

Baseline ``pyarrow``: open every training shard with ``pyarrow.ipc.open_file``, read every record batch
and turn its ``input_ids`` and ``word_start`` into numpy arrays (the cheapest way to get the tokens out,
no shuffling, no masking, no tensors).
The cost of the loader's check for special ids in rows: every training block decoded by ``BlockReader`` with and
without it (best of 5 alternating passes, CPU time), printed as a ratio.
``loader``: ``trainer.data.build_train_loader`` end to end -- seeded global shuffle, block reads, span
masking with SBO targets, collation into micro-batches of 8 -- with ``num_workers`` 0 (all in this process)
and more. Both read the same training shards (``eval_shards=1`` held out) for ``--epochs`` epochs.
Without ``--data`` the benchmark builds an artifact from ../shared/data/wikitext-2 (valid and test).
``mixture`` (``--mixture-repeats``, 0 workers): ``trainer.data.build_mixture_loaders`` over two sources -- the
artifact under two names, each with its own order and masks, at its natural weight, so a mixture epoch reads every
row twice -- against the one-artifact loader, alternately, best of the repeats; the ratio of rows/s per core is the
cost of mixing (interleaving, one masker and block reader per source, merging the sources' masked rows).
Per-core figures use this process's CPU time (``time.process_time``); with workers only wall time means
anything. torch and BLAS are limited to one thread per process.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow.ipc as ipc  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schemas.artifact import Artifact  # noqa: E402
from trainer.data import DataConfig, Source, build_mixture_loaders, build_train_loader, split_shards  # noqa: E402
from trainer.masking import MaskingConfig  # noqa: E402

WIKITEXT2 = REPO.parent / "shared" / "data" / "wikitext-2"


def build_artifact(out: Path) -> Path:
    from pipeline import build_shards

    inputs = [WIKITEXT2 / "wiki.valid.tokens", WIKITEXT2 / "wiki.test.tokens"]
    if not all(p.exists() for p in inputs):
        raise SystemExit(f"no --data given and {WIKITEXT2} is absent")
    argv = []
    for p in inputs:
        argv += ["--input", str(p)]
    build_shards.run(
        argv
        + [
            "--input-format",
            "wikitext",
            "--train-tokenizer",
            "--vocab-size",
            "8000",
            "--num-shards",
            "8",
            "--output",
            str(out),
            "--runner",
            "FnApiRunner",
        ]
    )
    return out


def plain_read(art: Artifact, shard_paths: list[str]) -> int:
    rows = 0
    for rel in shard_paths:
        with art.fs.open_input_file(art.path(rel)) as f:
            reader = ipc.open_file(f)
            for i in range(reader.num_record_batches):
                rb = reader.get_batch(i)
                ids = rb.column("input_ids")
                ws = rb.column("word_start")
                _ = ids.offsets.to_numpy(), ids.values.to_numpy(), ws.values.to_numpy(zero_copy_only=False)
                rows += rb.num_rows
    return rows


def decode_blocks_ratio(art: Artifact, shard_paths: list[str], repeat: int = 5) -> tuple[float, float]:
    """CPU seconds to decode every training block with ``trainer.data.blocks.BlockReader`` (zstd, validation, row
    invariants) with the special-id check, and without it (no forbidden ids); the best of ``repeat`` alternating
    passes each."""
    import numpy as np

    from schemas import format as fmt
    from trainer.data.blocks import BlockReader

    reader = BlockReader(art, art.vocab_size, fmt.max_row_tokens(int(art.manifest["max_seq_len"])), None, (), 1)
    rpb = int(art.manifest["rows_per_batch"])
    rows = {s["path"]: int(s["rows"]) for s in art.manifest["shards"]}
    blocks = [(rel, b, min(rpb, rows[rel] - b * rpb)) for rel in shard_paths for b in range(-(-rows[rel] // rpb))]
    forbidden = reader.forbidden_ids
    best = {True: float("inf"), False: float("inf")}
    for _ in range(repeat):
        for check in (True, False):
            reader.forbidden_ids = forbidden if check else np.zeros(0, np.int64)
            reader._cache.clear()
            c0 = time.process_time()
            for rel, b, n in blocks:
                reader.block(rel, b, n)
            best[check] = min(best[check], time.process_time() - c0)
    return best[True], best[False]


def timed(fn, repeat: int) -> tuple[float, float, int]:
    c0, w0 = time.process_time(), time.perf_counter()
    n = sum(fn() for _ in range(repeat))
    return time.process_time() - c0, time.perf_counter() - w0, n


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="artifact (default: build one from WikiText-2 valid + test)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", default="0,2", help="comma-separated num_workers values to time")
    p.add_argument("--scheme", default="span")
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--mixture-repeats", type=int, default=3, help="timed runs of the mixture case (0: skip it)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(args.data) if args.data else build_artifact(Path(tmp) / "artifact")
        art = Artifact.open(str(data))
        train_idx, _ = split_shards(art, 1)
        shard_paths = [art.manifest["shards"][i]["path"] for i in train_idx]
        print(
            f"# bench_loader  {datetime.date.today()}  {platform.node()}  {platform.processor() or platform.machine()}  "
            f"python {platform.python_version()}  pyarrow {__import__('pyarrow').__version__}  torch {torch.__version__}"
        )
        plain_read(art, shard_paths)  # warm the page cache for both
        cpu, wall, n = timed(lambda: plain_read(art, shard_paths), args.epochs)
        print(
            f"# artifact {data}: {n // args.epochs} training rows in {len(shard_paths)} shards, {args.epochs} epochs, "
            f"micro-batch {args.micro_batch_size}, scheme {args.scheme}"
        )
        print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        results = {"pyarrow read": (n / cpu, n / wall)}
        for w in (int(x) for x in args.workers.split(",")):
            cfg = DataConfig(
                artifact=str(data),
                seed=0,
                micro_batch_size=args.micro_batch_size,
                num_workers=w,
                eval_shards=1,
                num_epochs=args.epochs,
            )
            loader, ds = build_train_loader(cfg, MaskingConfig(scheme=args.scheme))
            c0, w0 = time.process_time(), time.perf_counter()
            rows = sum(int(b["sample_id"].shape[0]) for b in loader)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            results[f"loader, {w} workers"] = (rows / cpu if w == 0 else float("nan"), rows / wall)
        with_check, without = decode_blocks_ratio(art, shard_paths)
        print(
            f"# block decode (trainer.data.blocks) with / without the special-id check: {with_check:.3f} / "
            f"{without:.3f} CPU s = {with_check / without:.3f}x"
        )
        if args.mixture_repeats:
            mixture_case(data, args, results)
        base_cpu, base_wall = results["pyarrow read"]
        print(f"{'reader':<20}{'rows/s per core':>17}{'rows/s wall':>13}{'wall vs pyarrow':>17}")
        for name, (c, wl) in results.items():
            per_core = f"{c:,.0f}" if c == c else "-"
            print(f"{name:<20}{per_core:>17}{wl:>13,.0f}{wl / base_wall:>16.3f}x")


def mixture_case(data: Path, args: argparse.Namespace, results: dict) -> None:
    """One artifact vs a two-source mixture of it, 0 workers, alternately; best rows/s per core of each."""
    cfg = DataConfig(
        artifact=str(data), seed=0, micro_batch_size=args.micro_batch_size, num_workers=0, eval_shards=1, num_epochs=1
    )
    mask = MaskingConfig(scheme=args.scheme)
    sources = [Source("a", str(data)), Source("b", str(data))]

    def run(mixed: bool) -> tuple[float, float]:
        loader = build_mixture_loaders(sources, cfg, mask)[0] if mixed else build_train_loader(cfg, mask)[0]
        c0, w0 = time.process_time(), time.perf_counter()
        rows = sum(int(b["sample_id"].shape[0]) for b in loader)
        return rows / (time.process_time() - c0), rows / (time.perf_counter() - w0)

    best: dict[bool, tuple[float, float]] = {False: (0.0, 0.0), True: (0.0, 0.0)}
    for _ in range(args.mixture_repeats):
        for mixed in (False, True):
            cpu, wall = run(mixed)
            best[mixed] = (max(best[mixed][0], cpu), max(best[mixed][1], wall))
    results[f"one artifact, best of {args.mixture_repeats}"] = best[False]
    results[f"mixture of 2, best of {args.mixture_repeats}"] = best[True]
    print(
        f"# mixture / one artifact, rows/s per core: {best[True][0] / best[False][0]:.3f} "
        f"(wall {best[True][1] / best[False][1]:.3f}); target >= 0.95"
    )


if __name__ == "__main__":
    main()
