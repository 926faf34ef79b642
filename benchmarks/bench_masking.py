"""Masking collator throughput: sequences per second per core at 512 tokens, per scheme, against baselines.

    .venv/bin/python benchmarks/bench_masking.py [--data ARTIFACT] [--seconds 3] [--chunk-rows 256]

What is timed is what a DataLoader worker does (trainer/data/): mask a chunk of rows (``Masker.mask``) and
collate it into micro-batches of 8 (``Masker.collate``), producing the full batch dict with SBO targets.
Rows are the artifact's rows of at least 500 tokens, so every sequence is [CLS] + ~510 tokens + [SEP] = 512.
Without ``--data`` the benchmark builds an artifact from ../shared/data/wikitext-2/wiki.valid.tokens.

Baselines, timed in the same run on the same rows:
* ``naive``: a per-token Python loop doing BERT masking (15% of tokens, 80/10/10 per token, uniform random
  tokens) and building the padded tensors from lists -- what a straightforward collator does;
* ``hf``: Hugging Face ``DataCollatorForLanguageModeling`` (torch-vectorised per-token BERT masking, no SBO
  targets), when ``transformers`` is installed.

Throughput is reported per CPU second of this process (``time.process_time``) -- "per core" on a shared,
noisy machine -- and per wall second. One thread: OMP/MKL/OpenBLAS and torch are limited to 1 thread.
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

import numpy as np  # noqa: E402
import pyarrow.ipc as ipc  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schemas.artifact import Artifact  # noqa: E402
from trainer.data import MAX_CHUNK_ROWS  # noqa: E402
from trainer.masking import CANDIDATE_COLUMNS, SCHEMES, Masker, MaskingConfig, Rows  # noqa: E402

WIKITEXT2 = REPO.parent / "shared" / "data" / "wikitext-2" / "wiki.valid.tokens"
MICRO_BATCH = 8


def build_artifact(out: Path) -> Path:
    from pipeline import build_shards

    if not WIKITEXT2.exists():
        raise SystemExit(f"no --data given and {WIKITEXT2} is absent")
    build_shards.run(
        [
            "--input",
            str(WIKITEXT2),
            "--input-format",
            "wikitext",
            "--train-tokenizer",
            "--vocab-size",
            "8000",
            "--num-shards",
            "4",
            "--output",
            str(out),
            "--runner",
            "FnApiRunner",
        ]
    )
    return out


def load_rows(art: Artifact, min_len: int) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, list]]:
    ids, ws, spans = [], [], {c: [] for c in CANDIDATE_COLUMNS.values()}
    for rel in art.shard_paths:
        t = ipc.open_file(art.path(rel)).read_all()
        for i, (a, w) in enumerate(zip(t.column("input_ids").to_pylist(), t.column("word_start").to_pylist())):
            if len(a) >= min_len:
                ids.append(np.asarray(a, np.int64))
                ws.append(np.asarray(w, bool))
                for c in spans:
                    spans[c].append([(s["start"], s["end"]) for s in t.column(c)[i].as_py()])
    return ids, ws, spans


def synthetic_candidates(ws: list[np.ndarray]) -> list[list[tuple[int, int]]]:
    """Two-word candidate spans at every third word (for artifacts built without candidates)."""
    out = []
    for w in ws:
        starts = np.r_[np.flatnonzero(w), len(w)]
        out.append([(int(starts[k]), int(starts[k + 2])) for k in range(0, len(starts) - 2, 3)])
    return out


def timed(fn, seconds: float) -> tuple[float, float, int]:
    """Run fn() (returns sequences done) until ``seconds`` of wall time; (cpu s, wall s, sequences)."""
    fn()  # warm-up
    c0, w0, n = time.process_time(), time.perf_counter(), 0
    while time.perf_counter() - w0 < seconds:
        n += fn()
    return time.process_time() - c0, time.perf_counter() - w0, n


def naive_bert(rows_ids: list[np.ndarray], vocab: int, special: dict, max_len: int, rng) -> int:
    """Per-token Python BERT masking + list-built tensors, in micro-batches of MICRO_BATCH."""
    done = 0
    for b in range(0, len(rows_ids), MICRO_BATCH):
        batch_ids, batch_labels = [], []
        for row in rows_ids[b : b + MICRO_BATCH]:
            ids = [special["cls"]] + row.tolist() + [special["sep"]]
            labels = [-100] * len(ids)
            for i in range(1, len(ids) - 1):
                if rng.random() < 0.15:
                    labels[i] = ids[i]
                    r = rng.random()
                    if r < 0.8:
                        ids[i] = special["mask"]
                    elif r < 0.9:
                        ids[i] = rng.randrange(5, vocab)
            batch_ids.append(ids)
            batch_labels.append(labels)
        T = max(len(x) for x in batch_ids)
        T = -(-T // 8) * 8
        input_ids = torch.tensor([x + [special["pad"]] * (T - len(x)) for x in batch_ids])
        labels = torch.tensor([x + [-100] * (T - len(x)) for x in batch_labels])
        attention = (input_ids != special["pad"]).long()
        done += len(batch_ids)
        del labels, attention
    return done


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="artifact (default: build one from WikiText-2 valid)")
    p.add_argument("--seconds", type=float, default=3.0, help="wall seconds per measurement")
    p.add_argument(
        "--chunk-rows", type=int, default=MAX_CHUNK_ROWS, help="rows masked per call (default: the loader's chunk)"
    )
    p.add_argument("--schemes", default=",".join(SCHEMES))
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(args.data) if args.data else build_artifact(Path(tmp) / "artifact")
        art = Artifact.open(str(data))
        ids, ws, spans = load_rows(art, 500)
        if not ids:
            raise SystemExit(f"{data}: no rows of >= 500 tokens")
        reps = -(-args.chunk_rows // len(ids))
        chunk_ids, chunk_ws = (ids * reps)[: args.chunk_rows], (ws * reps)[: args.chunk_rows]
        mean_len = np.mean([len(x) + 2 for x in chunk_ids])
        print(
            f"# bench_masking  {datetime.date.today()}  {platform.node()}  {platform.processor() or platform.machine()}  "
            f"python {platform.python_version()}  numpy {np.__version__}  torch {torch.__version__}"
        )
        print(
            f"# artifact {data}: {len(ids)} rows >= 500 tokens (mean sequence {mean_len:.1f} positions); chunks of {len(chunk_ids)} rows, micro-batches of {MICRO_BATCH}"
        )

        results = {}
        import random

        print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        rng = random.Random(0)
        special = art.special_token_ids
        cpu, wall, n = timed(lambda: naive_bert(chunk_ids, art.vocab_size, special, 512, rng), args.seconds)
        results["naive"] = (n / cpu, n / wall)
        try:
            from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

            tok = PreTrainedTokenizerFast(
                tokenizer_object=None,
                tokenizer_file=str(Path(art.path(art.manifest["tokenizer"]["file"]))),
                pad_token="[PAD]",
                mask_token="[MASK]",
                cls_token="[CLS]",
                sep_token="[SEP]",
                unk_token="[UNK]",
            )
            coll = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, pad_to_multiple_of=8, return_tensors="pt")
            feats = [{"input_ids": [special["cls"]] + x.tolist() + [special["sep"]]} for x in chunk_ids]

            def hf() -> int:
                for b in range(0, len(feats), MICRO_BATCH):
                    coll(feats[b : b + MICRO_BATCH])
                return len(feats)

            cpu, wall, n = timed(hf, args.seconds)
            results["hf"] = (n / cpu, n / wall)
        except ImportError:
            pass

        for scheme in args.schemes.split(","):
            cfg = MaskingConfig(scheme=scheme, seed=0)
            masker = Masker.from_artifact(cfg, art)
            col = cfg.candidate_column
            cand = None
            note = ""
            if col is not None:
                cand = (spans[col] * reps)[: args.chunk_rows]
                if not any(cand):
                    cand = synthetic_candidates(chunk_ws)
                    note = " (synthetic candidates: the artifact has none)"
            rows = Rows.from_lists(chunk_ids, chunk_ws, cand)
            epoch = [0]

            def run(masker=masker, rows=rows, epoch=epoch) -> int:
                epoch[0] += 1
                m = masker.mask(rows, np.arange(rows.num_rows), epoch[0])
                for b in range(0, rows.num_rows, MICRO_BATCH):
                    masker.collate(m, b, min(b + MICRO_BATCH, rows.num_rows))
                return rows.num_rows

            cpu, wall, n = timed(run, args.seconds)
            results[scheme] = (n / cpu, n / wall, note)

        base = results["naive"][0]
        print(f"{'collator':<14}{'seq/s per core':>16}{'seq/s wall':>12}{'vs naive':>10}{'vs hf':>8}")
        for name, r in results.items():
            vs_hf = f"{r[0] / results['hf'][0]:.2f}x" if "hf" in results else "-"
            print(f"{name:<14}{r[0]:>16,.0f}{r[1]:>12,.0f}{r[0] / base:>9.1f}x{vs_hf:>8}{r[2] if len(r) > 2 else ''}")


if __name__ == "__main__":
    main()
