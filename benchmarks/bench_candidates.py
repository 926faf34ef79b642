"""Candidates stage: words/s of the shard job with entities,noun_phrases against raw spaCy nlp.pipe.

    .venv/bin/python benchmarks/bench_candidates.py [--docs 150] [--workers 1]

Same texts (the first N articles of ../shared/data/wikipedia-en-sample/pages.jsonl.zst), same machine,
same run. Baseline: ``nlp.pipe`` with the components the job enables for entities + noun phrases
(tok2vec, tagger, attribute_ruler, parser, ner; lemmatizer off), batch size 32, in this process,
collecting the same spans. The job: ``python -m pipeline.build_shards --mask-candidates
entities,noun_phrases`` as a user runs it (subprocess; with --workers 1 the in-process FnApiRunner,
like the baseline's single process), wall time to the manifest, so reading, tokenizing, packing and
writing are included. Ratio = job words/s / baseline words/s (target >= 0.85).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_shards import SAMPLE, load_texts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=150)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    if not SAMPLE.exists():
        raise SystemExit(f"{SAMPLE} not found: this benchmark needs ../shared/data")
    from pipeline.candidates import spacy_spans
    from pipeline.tokenize import tokenizer

    rows = load_texts(args.docs)
    texts = [r["text"] for r in rows]
    words = sum(len(t.split()) for t in texts)
    model = spacy_spans.default_spacy_model()
    print(f"corpus: {len(texts)} Wikipedia articles, {words:,} words; spaCy model {model}")

    nlp = spacy_spans.load_spacy(model, ["entities", "noun_phrases"], "spacy")
    print(f"baseline components: {nlp.pipe_names}")
    t = time.perf_counter()
    found = 0
    for doc in nlp.pipe(texts, batch_size=32):
        found += len([e for e in doc.ents if e.label_ not in spacy_spans.NUMERIC_ENTITY_LABELS]) + len(
            list(doc.noun_chunks)
        )
    base_s = time.perf_counter() - t
    base_rate = words / base_s
    print(f"baseline nlp.pipe: {base_s:.1f} s = {base_rate:,.0f} words/s ({found:,} spans)")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        tok = tokenizer.train(texts, vocab_size=28996)
        (tmp / "tokenizer.json").write_text(tokenizer.make_spec(tok, "trained").json)
        cmd = [
            sys.executable,
            "-m",
            "pipeline.build_shards",
            "--input",
            str(tmp / "in.jsonl"),
            "--output",
            str(tmp / "out"),
            "--tokenizer",
            str(tmp / "tokenizer.json"),
            "--num-shards",
            "4",
            "--mask-candidates",
            "entities,noun_phrases",
            "--spacy-model",
            model,
        ]
        if args.workers > 1:
            cmd += ["--direct_running_mode", "multi_processing", "--direct_num_workers", str(args.workers)]
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        job_s = time.perf_counter() - t
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        m = json.loads((tmp / "out" / "manifest.json").read_text())
    spans = m["candidates"]["spans"]
    rate = words / job_s
    print(
        f"job ({args.workers} worker{'s' if args.workers > 1 else ''}): {job_s:.1f} s = {rate:,.0f} words/s "
        f"({spans['entities']:,} entity + {spans['noun_phrases']:,} noun-phrase spans stored)"
    )
    print(f"ratio job / nlp.pipe: {rate / base_rate:.2f}  (target >= 0.85)")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
