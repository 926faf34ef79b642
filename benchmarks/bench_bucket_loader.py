"""Loader throughput (rows/s) from an S3 API server (moto_server on 127.0.0.1) against local disk, same run.

    .venv/bin/python benchmarks/bench_bucket_loader.py [--data ARTIFACT] [--epochs 1] [--workers 0]

The artifact (default: the whole ../shared/data/wikipedia-en-sample, 16 shards, as bench_shard_checksum.py builds it:
large enough that the loader's decoded-block cache does not hold an epoch, so every epoch reads its blocks again)
is uploaded to
a bucket of a moto_server started here (tests/support/object_stores.py's ``start_s3``, loopback only). Timed,
each ``trainer.data.build_train_loader`` end to end (open, shard checks, shuffle, span masking, collation):

* ``local``: the artifact on local disk (baseline; ratios are against it);
* ``s3, no cache``: ranged reads of record batches from the bucket;
* ``s3, cold cache``: ``cache_dir`` empty: every shard downloaded, sha256-checked and read from the copy;
* ``s3, warm cache``: the same ``cache_dir`` again (only the manifest comes from the bucket).

The cold row is timed once; the others alternate in ``--repeat`` rounds (medians, and the median of the rounds'
warm/local ratios). The loader keeps up to ``2 * shuffle_window + 4``
decoded record batches per process: with an artifact smaller than that, only the first epoch reads blocks at all.

moto_server is a Python process on the same cores, so "remote" costs here are CPU, not network latency.
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

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_shard_checksum import WIKIPEDIA  # noqa: E402
from tests.support.object_stores import start_s3  # noqa: E402
from trainer.data import DataConfig, build_train_loader  # noqa: E402
from trainer.masking import MaskingConfig  # noqa: E402


def build_artifact(out: Path) -> Path:
    from pipeline import build_shards

    if not WIKIPEDIA.exists():
        raise SystemExit(f"no --data given and {WIKIPEDIA} is absent")
    build_shards.run(
        [
            "--input",
            str(WIKIPEDIA),
            "--input-format",
            "jsonl",
            "--output",
            str(out),
            "--train-tokenizer",
            "--vocab-size",
            "30000",
            "--num-shards",
            "16",
            "--runner",
            "FnApiRunner",
        ]
    )
    return out


def run_loader(uri: str, args, cache_dir: str | None) -> tuple[int, float]:
    t0 = time.perf_counter()
    cfg = DataConfig(
        artifact=uri,
        seed=0,
        micro_batch_size=args.micro_batch_size,
        num_workers=args.workers,
        eval_shards=1,
        num_epochs=args.epochs,
        cache_dir=cache_dir,
        verify_shards="once",
    )
    loader, _ = build_train_loader(cfg, MaskingConfig(scheme="span"))
    rows = sum(int(b["sample_id"].shape[0]) for b in loader)
    return rows, time.perf_counter() - t0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="artifact (default: build one from WikiText-2 valid + test)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument(
        "--repeat", type=int, default=5, help="rounds of timings (medians); the warm cache is warm from the cold run"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["SPANPREP_CACHE_DIR"] = str(tmp / "verified")  # the sha256 markers start empty too
        data = Path(args.data) if args.data else build_artifact(tmp / "artifact")
        store = start_s3(tmp / "s3")
        try:
            os.environ.update(store.env)
            uri = store.upload_tree(data, "bench")
            print(
                f"# bench_bucket_loader  {datetime.date.today()}  {platform.node()}  python {platform.python_version()}  "
                f"pyarrow {__import__('pyarrow').__version__}  torch {torch.__version__}"
            )
            print(
                f"# artifact {data} -> {uri} (moto_server {store.endpoint}); {args.epochs} epoch(s), "
                f"{args.workers} workers, micro-batch {args.micro_batch_size}"
            )
            print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
            run_loader(str(data), args, None)  # page cache and sha256 markers of the local files
            cache = str(tmp / "cache")
            print("  timing s3, cold cache ...", flush=True)
            cold = run_loader(uri, args, cache)
            # The other rows alternate, round by round (rotating the order), so that changes of the machine's
            # load hit them alike; each row is the median of its rounds, "warm / local" the median of the
            # rounds' ratios.
            rows = (("local", str(data), None), ("s3, no cache", uri, None), ("s3, warm cache", uri, cache))
            times: dict[str, list[float]] = {name: [] for name, _, _ in rows}
            counts = {}
            for r in range(args.repeat):
                print(f"  round {r + 1}/{args.repeat} ...", flush=True)
                for name, uri_, cache_ in rows[r % len(rows) :] + rows[: r % len(rows)]:
                    counts[name], secs = run_loader(uri_, args, cache_)
                    times[name].append(secs)
        finally:
            store.stop()
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        results = {name: (counts[name], med(times[name])) for name, _, _ in rows}
        results["s3, cold cache"] = cold
        base = results["local"][0] / results["local"][1]
        print(f"{'reader':<18}{'rows':>8}{'seconds':>10}{'rows/s':>10}{'vs local':>10}")
        for name in ("local", "s3, no cache", "s3, cold cache", "s3, warm cache"):
            rows_, secs = results[name]
            print(f"{name:<18}{rows_:>8}{secs:>10.2f}{rows_ / secs:>10,.0f}{rows_ / secs / base:>9.3f}x")
        ratios = [lo / wa for lo, wa in zip(times["local"], times["s3, warm cache"])]
        print(
            f"# warm / local per round: {' '.join(f'{x:.3f}' for x in ratios)}; median {med(ratios):.3f}; "
            f"local seconds per round: {' '.join(f'{x:.2f}' for x in times['local'])}"
        )
        print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
