"""Fine-tuning step time: Span Fine-tuning's head (``span-ft``) against BERT's linear layer on [CLS] (``cls``).

    .venv/bin/python benchmarks/bench_finetune.py [--preset base] [--seq-len 128] [--batch-size 8] [--repeats 5]

Span Fine-tuning (Bao et al. 2021) claims 3% extra parameters and "little extra overhead". One training step =
forward, loss, backward and an AdamW update, train mode (dropout 0.1), fp32 on CPU. Both models get the *same*
batch: the first ``--batch-size`` RTE train pairs (../shared/data/finetune; synthetic sentences without it),
tokenized with a WordPiece trained on them, cut to ``--seq-len`` tokens, segmented by an n-gram dictionary built
from WikiText-2 (``--ngram-dictionary DIR`` to use another; random segmentation without WikiText-2), r = 16 spans
of at most l = 64 tokens (``--extra-span-len N`` adds a row with l = N). The encoder is the same (same seed, same weights) for every model; the optional
``span-ft (no segmentation)`` row is the paper's BERT + CNN ablation.

Timed in the same process, interleaved (A B C A B C ...) so the noise of a shared machine hits every model
alike: the median over ``--repeats`` rounds, in wall time and in CPU time of this process, after a warm-up step.
The ratio printed is span-ft / cls step time: 1.0 means no overhead.

``--qa`` times QA feature building instead (issue 21, item 9): ``trainer.finetuning.squad.qa_features`` against
the algorithm it replaced (``tests/support/qa_reference.py``), one question on one passage of about N tokens
(XQuAD English paragraphs joined; a WordPiece trained on them), 384-token inputs, stride 128, interleaved,
median CPU seconds; the old algorithm only up to ``--qa-old-max`` tokens (it took 96 s at 7,000).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline import build_ngram_dictionary  # noqa: E402
from pipeline.tokenize import tokenizer as tokenization  # noqa: E402
from schemas.segmenter import Segmenter  # noqa: E402
from trainer.config import ModelConfig  # noqa: E402
from trainer.finetuning.encoding import ModelTokenizer  # noqa: E402
from trainer.finetuning.features import collate, glue_feature  # noqa: E402
from trainer.finetuning.glue import Example, read_tsv  # noqa: E402
from trainer.finetuning.heads import FineTuneModel  # noqa: E402
from trainer.finetuning.squad import QAExample, qa_features  # noqa: E402
from trainer.finetuning.tasks import get_task  # noqa: E402
from trainer.model import SpanBert  # noqa: E402

SHARED = Path(os.environ.get("SPANPREP_SHARED_DATA") or REPO.parent / "shared" / "data")
RTE_TRAIN = SHARED / "finetune" / "glue_rte" / "train.tsv"
WIKITEXT2_VALID = SHARED / "wikitext-2" / "wiki.valid.tokens"
XQUAD = SHARED / "finetune" / "squad_format_xquad_en" / "xquad.en.json"


def examples(n: int) -> tuple[list[Example], str]:
    if RTE_TRAIN.exists():
        return read_tsv(get_task("rte"), str(RTE_TRAIN), "train")[0][: max(n, 200)], "RTE train"
    text = "The new rights are nice enough, say the people of the city, according to the report of the week."
    return [Example(f"s{i}", f"{text} {i}", f"They are not enough {i}.", i % 2) for i in range(200)], "synthetic"


def segmenter(path: str, tmp: str):
    if path:
        return Segmenter.from_dictionary(path), path
    if WIKITEXT2_VALID.exists():
        out = os.path.join(tmp, "dict")
        build_ngram_dictionary.run(["--input", str(WIKITEXT2_VALID), "--output", out])
        return Segmenter.from_dictionary(out), "WikiText-2 valid, n <= 5, count >= 11"
    return None, "random segmentation (no WikiText-2)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="base")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--ngram-dictionary", default="")
    p.add_argument("--ablation", action="store_true", help="also time the BERT + CNN ablation (no segmentation)")
    p.add_argument(
        "--extra-span-len", type=int, default=0, help="also time span-ft with l = N tokens per span (default l = 64)"
    )
    p.add_argument("--qa", action="store_true", help="time QA feature building against the old algorithm instead")
    p.add_argument("--qa-tokens", default="1000,2000,3500,7000", help="--qa: passage lengths in tokens")
    p.add_argument("--qa-old-max", type=int, default=3500, help="--qa: time the old algorithm up to this length")
    args = p.parse_args(argv)
    if args.qa:
        return bench_qa([int(n) for n in args.qa_tokens.split(",")], args.qa_old_max, args.repeats)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    torch.set_flush_denormal(True)  # as the trainer does on CPU (trainer.engine.init_distributed)

    exs, source = examples(args.batch_size)
    tok = ModelTokenizer.of(tokenization.train((t for ex in exs for t in (ex.text_a, ex.text_b)), vocab_size=8000))
    task = get_task("rte")
    with tempfile.TemporaryDirectory() as tmp:
        seg, seg_source = segmenter(args.ngram_dictionary, tmp)
    segmentation = "ngram" if seg is not None else "random"
    batch_examples = exs[: args.batch_size]
    cfg = ModelConfig.preset(args.preset, vocab_size=28996)
    models: dict[str, tuple[FineTuneModel, dict]] = {}
    variants = [("cls", "cls", segmentation, 64), ("span-ft", "span-ft", segmentation, 64)]
    if args.extra_span_len:
        variants.append((f"span-ft (l = {args.extra_span_len})", "span-ft", segmentation, args.extra_span_len))
    if args.ablation:
        variants.append(("span-ft (no segmentation)", "span-ft", "none", 64))
    for name, head, segm, span_len in variants:
        feats = [
            glue_feature(
                task, head, tok, ex, max_seq_len=args.seq_len, segmentation=segm, segmenter=seg, max_span_len=span_len
            )
            for ex in batch_examples
        ]
        torch.manual_seed(0)  # the same encoder weights for every model
        model = FineTuneModel(SpanBert(cfg), head, num_labels=2, segmentation=segm).train()
        models[name] = (model, collate(feats, pad_id=cfg.pad_token_id))
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=2e-5) for name, (m, _) in models.items()}

    def step(name: str) -> tuple[float, float]:
        model, batch = models[name]
        w, c = time.perf_counter(), time.process_time()
        loss = model(**batch)["loss"]
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)
        return time.perf_counter() - w, time.process_time() - c

    for name in models:  # warm-up
        step(name)
    wall: dict[str, list[float]] = {n: [] for n in models}
    cpu: dict[str, list[float]] = {n: [] for n in models}
    for _ in range(args.repeats):
        for name in models:
            w, c = step(name)
            wall[name].append(w)
            cpu[name].append(c)

    tokens = int(models["cls"][1]["attention_mask"].sum())
    spans = [
        glue_feature(task, "span-ft", tok, ex, max_seq_len=args.seq_len, segmentation=segmentation, segmenter=seg)
        for ex in batch_examples
    ]
    print(
        f"# {datetime.date.today()}  {platform.processor() or platform.machine()}  torch {torch.__version__}  "
        f"threads {torch.get_num_threads()}  load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"# preset {args.preset}, batch {args.batch_size} x <= {args.seq_len} ({tokens} real tokens) from {source}; "
        f"segments: {seg_source}; mean {sum(f['num_spans'] for f in spans) / len(spans):.1f} spans per input, r = 16"
    )
    base_wall, base_cpu = statistics.median(wall["cls"]), statistics.median(cpu["cls"])
    encoder_params = sum(p.numel() for p in models["cls"][0].encoder.parameters())
    print(
        f"{'model':<28}{'head params':>14}{'% of encoder':>14}{'wall s':>10}{'cpu s':>10}{'wall/cls':>10}{'cpu/cls':>10}"
    )
    for name, (model, _) in models.items():
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:<28}{model.head_parameters():>14,}{100 * model.head_parameters() / encoder_params:>13.2f}%"
            f"{w:>10.3f}{c:>10.3f}{w / base_wall:>10.3f}{c / base_cpu:>10.3f}"
        )
    return 0


def bench_qa(lengths: list[int], old_max: int, repeats: int) -> int:
    import json

    from tests.support.qa_reference import old_qa_features

    doc = json.loads(XQUAD.read_text(encoding="utf-8"))
    paragraphs = [p["context"] for a in doc["data"] for p in a["paragraphs"]]
    tok = tokenization.train(paragraphs, vocab_size=8000)
    opts = dict(max_seq_len=384, doc_stride=128, max_query_len=64, training=False)
    print(f"# {datetime.date.today()}  {platform.processor() or platform.machine()}  load {os.getloadavg()[0]:.2f}")
    print(f"{'tokens':>8}{'windows':>9}{'new cpu s':>11}{'old cpu s':>11}{'old/new':>9}")
    for n in lengths:
        text, i = "", 0
        while len(tok.encode(text, add_special_tokens=False).ids) < n:
            text, i = (text + " " + paragraphs[i % len(paragraphs)]).strip(), i + 1
        ids = tok.encode(text, add_special_tokens=False).ids
        text = text[: tok.encode(text, add_special_tokens=False).offsets[n - 1][1]]  # exactly n tokens
        ex = [QAExample("q", "Which team won the game in the end?", text, [])]
        funcs = {"new": qa_features} | ({"old": old_qa_features} if n <= old_max else {})
        tokenizers = {"new": ModelTokenizer.of(tok), "old": tok}  # the old code looked [CLS]/[SEP] up by name
        times: dict[str, list[float]] = {k: [] for k in funcs}
        out = {}
        for _ in range(repeats if n <= old_max else max(repeats, 3)):
            for name, f in funcs.items():
                c = time.process_time()
                out[name] = f(ex, tokenizers[name], **opts)
                times[name].append(time.process_time() - c)
        assert "old" not in out or out["old"] == out["new"], "the features differ"
        new = statistics.median(times["new"])
        old = statistics.median(times["old"]) if "old" in times else float("nan")
        print(f"{len(ids[:n]):>8}{len(out['new']):>9}{new:>11.3f}{old:>11.3f}{old / new:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
