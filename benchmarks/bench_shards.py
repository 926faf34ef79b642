"""Throughput of the shard job against the raw tokenizer, same texts, same machine, same run.

    .venv/bin/python benchmarks/bench_shards.py                 # whole Wikipedia sample, 2 workers
    .venv/bin/python benchmarks/bench_shards.py --docs 1000     # quicker

Input: ../shared/data/wikipedia-en-sample/pages.jsonl.zst (4,576 articles, ~5 M words). The
tokenizer is trained once beforehand (not timed) and passed with --tokenizer. Printed:

- baseline: ``Tokenizer.encode_batch`` over the same texts (Rust, all cores): the practical limit;
- the job: ``python -m pipeline.build_shards`` as a user runs it (a subprocess, FnApiRunner with one
  in-process worker, then with ``--direct_running_mode multi_processing --direct_num_workers N``),
  wall time from start to manifest, so it includes reading, decompression, sentence splitting, packing and writing;
- ratio = job tokens/s / baseline tokens/s, from the medians of ``--rounds`` rounds (each round runs the
  baseline, then each job; the ratio against the fastest baseline run is printed too); and the peak RSS
  of the job's whole process tree at two corpus sizes (half and all), to show memory does not grow with
  the corpus.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
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
SAMPLE = (
    Path(os.environ.get("SPANPREP_SHARED_DATA") or REPO.parent / "shared" / "data")
    / "wikipedia-en-sample"
    / "pages.jsonl.zst"
)
sys.path.insert(0, str(REPO))


def load_texts(n: int | None) -> list[dict]:
    rows = []
    with open(SAMPLE, "rb") as f:
        for line in io.TextIOWrapper(
            zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True), encoding="utf-8"
        ):
            rows.append(json.loads(line))
            if n and len(rows) >= n:
                break
    return rows


def write_corpus(rows: list[dict], directory: Path, files: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // files)
    for i in range(files):
        part = rows[i * per : (i + 1) * per]
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part).encode()
        (directory / f"part-{i:03d}.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(data))


class PeakRss:
    """Polls the summed RSS of a process and all its descendants."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                procs = [self.proc] + self.proc.children(recursive=True)
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak = max(self.peak, total)
            except psutil.Error:
                pass
            time.sleep(0.1)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def run_job(corpus: Path, tokenizer: Path, out: Path, workers: int, extra: list[str]) -> tuple[float, dict, int]:
    cmd = [
        sys.executable,
        "-m",
        "pipeline.build_shards",
        "--input",
        str(corpus / "*.jsonl.zst"),
        "--input-format",
        "jsonl",
        "--output",
        str(out),
        "--tokenizer",
        str(tokenizer),
        "--num-shards",
        "8",
        "--overwrite",
        "--runner",
        "FnApiRunner",
        *extra,
    ]
    if workers > 1:
        cmd += ["--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rss = PeakRss(proc.pid)
    _, err = proc.communicate()
    elapsed = time.perf_counter() - started
    peak = rss.stop()
    if proc.returncode != 0:
        raise SystemExit(f"job failed:\n{err[-3000:]}")
    return elapsed, json.loads((out / "manifest.json").read_text()), peak


def _bpe(texts: list[str]):
    """A RoBERTa-style byte-level BPE trained on ``texts`` (RoBERTa's special tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=28996, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def _unigram(texts: list[str]):
    """What ``tokenizers``' SentencePieceUnigramTokenizer builds (Nmt, NFKC, spaces collapsed; Metaspace), trained on
    ``texts`` with RoBERTa's special token names."""
    from tokenizers import SentencePieceUnigramTokenizer

    sp = SentencePieceUnigramTokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    sp.train_from_iterator(texts, vocab_size=28996, special_tokens=specials, unk_token="<unk>", show_progress=False)
    return sp._tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=None, help="use the first N articles (default: all 4,576)")
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="worker processes of the second run (the first has one in-process worker)",
    )
    ap.add_argument("--files", type=int, default=8, help="split the corpus into this many .jsonl.zst files")
    ap.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds of (baseline, each job); medians are reported (machines are noisy)",
    )
    ap.add_argument("--job-args", default="", help="more options for every job run, e.g. '--encode-cache-mb 8'")
    ap.add_argument(
        "--family",
        default="wordpiece",
        choices=["wordpiece", "byte_level_bpe", "unigram"],
        help="the tokenizer trained for the run: cased WordPiece (sentence path and chunk cache), a RoBERTa-style "
        "byte-level BPE or a SentencePiece-style Unigram (whole-document encoding), all 28,996 entries",
    )
    args = ap.parse_args()
    if not SAMPLE.exists():
        raise SystemExit(f"{SAMPLE} not found: this benchmark needs ../shared/data")

    from pipeline.tokenize import tokenizer

    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = load_texts(args.docs)
    from pipeline.read.clean import clean_text

    # The baseline encodes the texts the job's reader hands on (line ends normalised, C0/C1 controls removed, as
    # FORMAT.md says): the raw text of one article holds a U+009D, 2 tokens more than the job's.
    texts = [clean_text(r["text"])[0] for r in rows]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(
        f"corpus: {len(texts):,} Wikipedia articles, {mb:.1f} MB of text; tokenizer: {args.family}"
        + (f"; job options: {args.job_args}" if args.job_args else "")
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train = {"wordpiece": lambda t: tokenizer.train(t, vocab_size=28996), "byte_level_bpe": _bpe}
        tok = train.get(args.family, _unigram)(texts[:2000])
        spec = tokenizer.make_spec(tok, "trained")
        (tmp / "tokenizer.json").write_text(spec.json)

        def baseline() -> tuple[int, float]:
            t = time.perf_counter()
            encodings = tok.encode_batch(texts, add_special_tokens=False)
            base_tokens = sum(len(e.ids) for e in encodings)
            return base_tokens, time.perf_counter() - t

        half = rows[: len(rows) // 2]
        write_corpus(half, tmp / "half", args.files)
        write_corpus(rows, tmp / "all", args.files)
        modes = [(1, "1 in-process worker"), (args.workers, f"{args.workers} worker processes")]
        extra = args.job_args.split()
        peak_half = {w: run_job(tmp / "half", tmp / "tokenizer.json", tmp / "out-half", w, extra)[2] for w, _ in modes}
        base_times, job_times, peaks = [], {w: [] for w, _ in modes}, {w: 0 for w, _ in modes}
        manifest = None
        for r in range(args.rounds):
            base_tokens, base_s = baseline()
            base_times.append(base_s)
            line = [f"round {r + 1}: baseline {base_s:.2f} s"]
            for workers, label in modes:
                elapsed, manifest, peak = run_job(tmp / "all", tmp / "tokenizer.json", tmp / "out-all", workers, extra)
                assert manifest["counts"]["tokens"] == base_tokens, (
                    manifest["counts"]["tokens"],
                    base_tokens,
                )  # exactly the baseline's texts
                job_times[workers].append(elapsed)
                peaks[workers] = max(peaks[workers], peak)
                line.append(f"{label} {elapsed:.2f} s")
            print(", ".join(line), flush=True)
        tokens = manifest["counts"]["tokens"]
        base_med, base_best = statistics.median(base_times), min(base_times)
        print(
            f"baseline  encode_batch ({os.cpu_count()} threads): {tokens:,} tokens, median {base_med:.2f} s = {tokens / base_med:,.0f} tokens/s "
            f"(fastest {base_best:.2f} s)"
        )
        for workers, label in modes:
            med = statistics.median(job_times[workers])
            print(
                f"job ({label}): median {med:.2f} s = {tokens / med:,.0f} tokens/s, {mb / med:.2f} MB/s of text "
                f"({manifest['counts']['rows']:,} rows, {manifest['counts']['documents_written']:,} documents; fastest {min(job_times[workers]):.2f} s)"
            )
            print(
                f"  peak RSS of the job's process tree: {peak_half[workers] / 2**20:,.0f} MiB on half the corpus, {peaks[workers] / 2**20:,.0f} MiB on all of it"
            )
        for workers, label in modes:
            med = statistics.median(job_times[workers])
            # each round's baseline and jobs run back to back: the median of the rounds' ratios follows a machine
            # whose speed drifts between rounds better than the ratio of the medians
            per_round = statistics.median(b / j for b, j in zip(base_times, job_times[workers]))
            print(
                f"ratio job / encode_batch, {label}: {base_med / med:.2f} (medians; against the fastest baseline run "
                f"{base_best / med:.2f}; median of the rounds' ratios {per_round:.2f})  (issue 34's target >= 0.9)"
            )
        print(f"load average before: {load_before}, after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
