"""Tokenizer training time per MB: ``--train-tokenizer wordpiece|bpe|unigram`` against ``tokenizers``' own trainer.

    .venv/bin/python benchmarks/bench_tokenizer_training.py              # 10 MB of the Wikipedia sample, 2 rounds
    .venv/bin/python benchmarks/bench_tokenizer_training.py --mb 40 --rounds 1

Input: the first ``--mb`` MB (UTF-8 bytes of text) of ../shared/data/wikipedia-en-sample/pages.jsonl.zst, in memory.
Per family, in alternating rounds (the machine is shared; the load average is printed before each run):

- ours: ``pipeline.tokenize.training.train`` (what ``build_shards --train-tokenizer KIND`` calls, given the texts);
- the library's: ``tokenizers``' own trainer on the same texts and vocabulary size: ``WordPieceTrainer`` behind
  BERT's normalizer and pre-tokenizer; ``BpeTrainer`` behind ``ByteLevel`` (the same call ours makes);
  ``SentencePieceUnigramTokenizer.train_from_iterator`` (its ``UnigramTrainer``, not deterministic).

Printed: wall seconds per MB of each (median of the rounds) and CPU seconds per MB (``time.process_time``: every
thread of this process; the Rust trainers use every core, so on a shared machine the CPU figure is the steadier one),
the ratios ours / library, and for each trained tokenizer
the tokens per character it gives on held-out text (WikiText-2 test), so a faster trainer that learns a worse
vocabulary shows.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import zstandard

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SAMPLE = DATA / "wikipedia-en-sample" / "pages.jsonl.zst"
HELD_OUT = DATA / "wikitext-2" / "wiki.test.tokens"
sys.path.insert(0, str(REPO))

from tokenizers import (  # noqa: E402
    SentencePieceUnigramTokenizer,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from pipeline.elements import Document  # noqa: E402
from pipeline.read.records import ReaderOptions, read_file  # noqa: E402
from pipeline.tokenize import training  # noqa: E402
from schemas.format import SPECIAL_TOKENS  # noqa: E402


def texts_of(mb: float) -> list[str]:
    out, size = [], 0
    with open(SAMPLE, "rb") as f:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        for line in reader:
            text = json.loads(line)["text"]
            out.append(text)
            size += len(text.encode("utf-8"))
            if size >= mb * 1e6:
                break
    return out


def library(kind: str, texts: list[str], vocab_size: int) -> Tokenizer:
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk"]))
        tok.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=None)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS.values()), show_progress=False
        )
        tok.train_from_iterator(texts, trainer)
        return tok
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=2,
            special_tokens=training.SPECIALS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer)
        return tok
    sp = SentencePieceUnigramTokenizer()
    sp.train_from_iterator(
        texts, vocab_size=vocab_size, special_tokens=training.SPECIALS, unk_token="<unk>", show_progress=False
    )
    return sp._tokenizer


def tokens_per_char(tok: Tokenizer, held_out: list[str]) -> float:
    tokens = sum(len(e.ids) for e in tok.encode_batch(held_out, add_special_tokens=False))
    return tokens / sum(len(t) for t in held_out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=28996)
    parser.add_argument("--families", default=",".join(training.FAMILIES))
    args = parser.parse_args()
    texts = texts_of(args.mb)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    held_out = [
        d.text for d in read_file(str(HELD_OUT), ReaderOptions(input_format="wikitext")) if isinstance(d, Document)
    ]
    print(f"{len(texts):,} documents, {mb:.1f} MB; vocabulary {args.vocab_size:,}; cores {os.cpu_count()}")
    for kind in args.families.split(","):
        times: dict[str, list[float]] = {"ours": [], "library": []}
        cpu: dict[str, list[float]] = {"ours": [], "library": []}
        quality: dict[str, float] = {}
        for r in range(args.rounds):
            for who in ("ours", "library") if r % 2 == 0 else ("library", "ours"):
                load = os.getloadavg()[0]
                started, cpu_started = time.perf_counter(), time.process_time()
                if who == "ours":
                    tok = training.train(kind, texts, args.vocab_size, lowercase=False)
                else:
                    tok = library(kind, texts, args.vocab_size)
                seconds = time.perf_counter() - started
                cpu_seconds = time.process_time() - cpu_started
                times[who].append(seconds)
                cpu[who].append(cpu_seconds)
                quality[who] = tokens_per_char(tok, held_out)
                print(
                    f"  {kind:9s} {who:7s} round {r + 1}: {seconds:6.1f} s ({seconds / mb:.2f} s/MB), CPU {cpu_seconds:.1f} s, "
                    f"vocabulary {tok.get_vocab_size():,}, load {load:.1f}",
                    flush=True,
                )
        ours, lib = statistics.median(times["ours"]), statistics.median(times["library"])
        ours_cpu, lib_cpu = statistics.median(cpu["ours"]), statistics.median(cpu["library"])
        print(
            f"{kind}: ours {ours / mb:.2f} s/MB, library {lib / mb:.2f} s/MB, ours / library {ours / lib:.2f}; "
            f"CPU ours {ours_cpu / mb:.2f} s/MB, library {lib_cpu / mb:.2f} s/MB, ours / library {ours_cpu / lib_cpu:.2f}; "
            f"held-out tokens per character: ours {quality['ours']:.4f}, library {quality['library']:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
