"""Benchmark: what the progress counting (pipeline/progress.py) costs the readers, in one process, same input.

    python benchmarks/bench_progress.py [--corpus PATH] [--repeat 3]

Times the n-gram job's line reader (``ReadLines``, which counts every line in a step of its own) against what it was
before (Beam's ``ReadAllFromText`` alone), and the shard job's document reader (``ReadDocuments``, which counts every
document and every raw chunk) against itself with the counting replaced by no-ops and the file wrappers by the
identity; on the local FnApiRunner, alternating the two, and prints CPU seconds and the ratio (counting / not). Default input: WikiText-2's valid split (../shared); give a bigger file for steadier numbers.
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import apache_beam as beam  # noqa: E402

from pipeline import progress  # noqa: E402
from pipeline.ngrams.lines import ReadLines  # noqa: E402
from pipeline.read.documents import ReadDocuments  # noqa: E402
from pipeline.read.records import ReaderOptions  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def read_lines(path: str, counting: bool) -> None:
    with beam.Pipeline(runner="FnApiRunner") as p:
        paths = p | beam.Create([path])
        if counting:
            lines = paths | ReadLines(split_bytes=1 << 20)
        else:
            lines = paths | beam.io.ReadAllFromText(desired_bundle_size=1 << 20, coder=beam.coders.BytesCoder())
        _ = lines | beam.combiners.Count.Globally()


def read_documents(path: str, counting: bool) -> None:
    names = ("add", "flush", "counted_file", "counted_chunks")
    saved = {name: getattr(progress, name) for name in names}
    if not counting:  # the readers look these up in the module at every call
        no_ops = (lambda *a, **k: None, lambda: None, lambda f: f, lambda chunks: chunks)
        for name, stand_in in zip(names, no_ops, strict=True):
            setattr(progress, name, stand_in)
    try:
        _read_documents(path)
    finally:
        for name, original in saved.items():
            setattr(progress, name, original)


def _read_documents(path: str) -> None:
    with beam.Pipeline(runner="FnApiRunner") as p:
        read = p | ReadDocuments([path], ReaderOptions(input_format="wikitext"), split_bytes=1 << 20)
        _ = read["documents"] | beam.combiners.Count.Globally()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "data" / "wikitext-2" / "wiki.valid.tokens"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not Path(args.corpus).is_file():
        sys.exit(f"bench_progress: no such file: {args.corpus}")
    for name, job in (("ReadLines", read_lines), ("ReadDocuments", read_documents)):
        times: dict[str, list[float]] = {"counting": [], "no-op": []}
        job(args.corpus, True)  # warm-up
        for _ in range(args.repeat):
            for mode in ("counting", "no-op"):
                start = _cpu()
                job(args.corpus, mode == "counting")
                times[mode].append(_cpu() - start)
        best = {mode: min(t) for mode, t in times.items()}
        print(
            f"{name}: counting {best['counting']:.2f} s CPU, no-op {best['no-op']:.2f} s CPU, "
            f"ratio {best['counting'] / best['no-op']:.3f} (best of {args.repeat})"
        )


if __name__ == "__main__":
    main()
