"""What checking a shard's sha256 costs, against the loader's own read of the same shard, same run.

    .venv/bin/python benchmarks/bench_shard_checksum.py [--data ARTIFACT] [--repeats 3]

Baseline ``read``: what the trainer's loader does with a shard over an epoch, in one process: open it
(``Artifact.open_shard``) and read, validate and decode every record batch (``trainer.data.BlockReader.block``,
span candidates included). ``sha256``: ``schemas.integrity.file_sha256`` of the same file (what
``--verify-shards always`` adds per shard and process, and ``once`` per shard and node). Both run on warm page
cache (each measurement is the best of ``--repeats``), so the ratio is CPU cost; a cold read from disk or a bucket
adds the same transfer to both. Without ``--data`` the benchmark builds an artifact of the Wikipedia sample
(../shared/data/wikipedia-en-sample, 4,576 articles, no span candidates) in a temporary directory.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schemas import integrity  # noqa: E402
from schemas.artifact import Artifact  # noqa: E402
from trainer.data import BlockReader  # noqa: E402

WIKIPEDIA = REPO.parent / "shared" / "data" / "wikipedia-en-sample" / "pages.jsonl.zst"


def build_wikipedia(out: Path) -> Path:
    from pipeline import build_shards

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
            "8",
            "--runner",
            "FnApiRunner",
        ]
    )
    return out


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def read_shard(art: Artifact, rel: str) -> None:
    reader = BlockReader(art, art.vocab_size, int(art.manifest["max_row_tokens"]), "ngram_spans", (), capacity=1)
    rpb, rows = int(art.manifest["rows_per_batch"]), int(art.shard_entry(rel)["rows"])
    for b in range(art.open_shard(rel).num_record_batches):
        reader.block(rel, b, min(rpb, rows - b * rpb))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="artifact (default: build one of the Wikipedia sample)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or str(build_wikipedia(Path(tmp) / "wiki"))
        art = Artifact.open(data)
        total_bytes = total_read = total_hash = 0.0
        print(f"{'shard':<34} {'MB':>6} {'read s':>8} {'sha256 s':>9} {'sha256/read':>12}")
        for entry in art.manifest["shards"]:
            rel = entry["path"]
            t_read = best(lambda rel=rel: read_shard(art, rel), args.repeats)
            t_hash = best(lambda rel=rel: integrity.file_sha256(art.fs, art.path(rel)), args.repeats)
            mb = entry["bytes"] / 1e6
            total_bytes, total_read, total_hash = total_bytes + mb, total_read + t_read, total_hash + t_hash
            print(f"{rel:<34} {mb:6.2f} {t_read:8.3f} {t_hash:9.4f} {t_hash / t_read:12.3f}")
        print(f"{'all':<34} {total_bytes:6.2f} {total_read:8.3f} {total_hash:9.4f} {total_hash / total_read:12.3f}")
        print(
            f"sha256: {total_bytes / total_hash:,.0f} MB/s; loader read: {total_bytes / total_read:,.1f} MB/s of shard "
            f"file; sha256 costs {100 * total_hash / total_read:.1f}% of the loader's read time"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
