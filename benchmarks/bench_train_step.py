"""Training step time: our SpanBERT (MLM + SBO) against Hugging Face ``BertForMaskedLM`` of the same size.

    .venv/bin/python benchmarks/bench_train_step.py [--preset base] [--seq-len 128] [--batch-size 8] [--repeats 5]

One training step = forward, loss, backward and an AdamW update, in train mode (dropout on), fp32 on CPU
(bf16 autocast on a GPU). All models see the *same* batch: rows of ``max_row_tokens(seq_len)`` random token ids (or the
rows of ``--data ARTIFACT``), masked by the real collator (``trainer.masking``, span scheme, 15%), so the
labels, attention mask and SBO targets are exactly what training feeds.

Timed in the same process, interleaved (A B C A B C ...) so that the noise of a shared machine hits every
model alike; the result is the median over ``--repeats`` rounds of ``--steps`` steps, after warm-up steps, in
wall time and in CPU time of this process (steadier when other jobs share the cores); the best round's wall
time is printed too (the least disturbed one).

* ``ours (MLM+SBO)``: ``trainer.model.SpanBert``, objective ``mlm+sbo`` -- the model we train;
* ``ours (MLM only)``: the same with ``--objective mlm`` (the BERT-1seq baseline);
* ``HF BertForMaskedLM``: ``transformers`` with its default (SDPA) attention, the same sizes, vocabulary and
  dropout, given ``labels`` the standard way (it projects every position onto the vocabulary).

The ratio printed is ours / HF step time: below 1 means ours is faster. Target: ours with SBO no slower (<= 1).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schemas.format import max_row_tokens  # noqa: E402
from trainer.config import ModelConfig  # noqa: E402
from trainer.masking import Masker, MaskingConfig, Rows  # noqa: E402
from trainer.model import SpanBert  # noqa: E402

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
INPUTS = ("input_ids", "attention_mask", "labels", "span_left", "span_right", "span_position")


def make_batch(args, vocab_size: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    n = max_row_tokens(args.seq_len)
    if args.data:
        from schemas.artifact import Artifact

        art = Artifact.open(args.data)
        ids, ws = [], []
        for rel in art.shard_paths:
            t = art.open_shard(rel).read_all()
            for r, w in zip(t.column("input_ids").to_pylist(), t.column("word_start").to_pylist()):
                if len(r) >= n:
                    ids.append(np.asarray(r[:n]))
                    ws.append(np.asarray(w[:n]))
                if len(ids) == args.batch_size:
                    break
            if len(ids) == args.batch_size:
                break
        if len(ids) < args.batch_size:
            raise SystemExit(f"{args.data}: fewer than {args.batch_size} rows of >= {n} tokens")
        special, counts = art.special_token_ids, art.unigram_counts()
    else:
        ids = [rng.integers(5, vocab_size, size=n) for _ in range(args.batch_size)]
        ws = [np.concatenate([[True], rng.random(n - 1) < 0.75]) for _ in range(args.batch_size)]
        special, counts = SPECIAL, np.ones(vocab_size)
    masker = Masker(
        MaskingConfig(scheme="span", seed=0),
        vocab_size=vocab_size,
        special_token_ids=special,
        unigram_counts=counts,
        max_seq_len=args.seq_len,
    )
    return masker(Rows.from_lists(ids, ws), np.arange(len(ids)), epoch=0)


class Contender:
    def __init__(self, name: str, model: torch.nn.Module, step_fn):
        self.name, self.model, self.step_fn = name, model, step_fn
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-8, weight_decay=0.01)
        self.times: list[float] = []  # wall seconds per step
        self.cpu_times: list[float] = []  # CPU seconds of this process per step (all threads)

    def step(self, device: torch.device) -> float:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = self.step_fn()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return float(loss.detach())


def build(args, device: torch.device) -> tuple[list[Contender], dict]:
    cfg = ModelConfig.preset(args.preset, vocab_size=args.vocab_size, max_position_embeddings=max(512, args.seq_len))
    batch = {k: v.to(device) for k, v in make_batch(args, cfg.vocab_size).items()}
    inputs = {k: batch[k] for k in INPUTS}
    contenders = []
    for objective, name in (("mlm+sbo", "ours (MLM+SBO)"), ("mlm", "ours (MLM only)")):
        torch.manual_seed(0)
        model = SpanBert(ModelConfig(**{**cfg.__dict__, "objective": objective})).to(device).train()
        contenders.append(Contender(name, model, lambda m=model: m(**inputs)["loss"]))
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: no Hugging Face baseline (pip install 'spanprep[hf]')")
        return contenders, batch
    hf_cfg = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size, hidden_act="gelu",
        hidden_dropout_prob=cfg.hidden_dropout, attention_probs_dropout_prob=cfg.attention_dropout,
        max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.layer_norm_eps, pad_token_id=cfg.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(hf_cfg).to(device).train()
    hf_inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
    contenders.append(
        Contender(f"HF BertForMaskedLM ({hf.config._attn_implementation})", hf, lambda: hf(**hf_inputs).loss)
    )
    return contenders, batch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="base", choices=["tiny", "base", "large"])
    p.add_argument("--vocab-size", type=int, default=28996, help="default: SpanBERT's cased WordPiece vocabulary")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--data", default=None, help="take the rows from this artifact (its vocabulary size wins)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    p.add_argument("--steps", type=int, default=2, help="timed steps per model per round")
    p.add_argument("--repeats", type=int, default=7, help="rounds; the median (and the best) is reported")
    args = p.parse_args(argv)
    if args.data:
        from schemas.artifact import Artifact

        args.vocab_size = Artifact.open(args.data).vocab_size

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_flush_denormal(True)
    contenders, batch = build(args, device)
    targets = int((batch["labels"] != -100).sum())
    print(
        f"{platform.node()} | {platform.processor() or platform.machine()} | {os.cpu_count()} cores | torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads) | {device} | "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(
        f"preset {args.preset}, vocab {args.vocab_size}, batch {args.batch_size} x {batch['input_ids'].shape[1]} tokens, "
        f"{targets} MLM targets ({100 * targets / batch['attention_mask'].sum().item():.1f}%), "
        f"{args.warmup} warm-up + {args.repeats} x {args.steps} timed steps per model, interleaved"
    )
    for c in contenders:
        for _ in range(args.warmup):
            c.step(device)
    for _ in range(args.repeats):
        for c in contenders:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                c.step(device)
            c.times.append((time.perf_counter() - t0) / args.steps)
            c.cpu_times.append((time.process_time() - c0) / args.steps)
    base = contenders[-1] if contenders[-1].name.startswith("HF") else None
    med = statistics.median
    print(
        f"{'model':<34} {'params':>12} {'wall/step':>10} {'min':>8} {'max':>8} {'vs HF':>6} {'CPU/step':>10} {'vs HF':>6}"
    )
    for c in contenders:
        params = sum(q.numel() for q in {id(q): q for q in c.model.parameters()}.values())
        wall_ratio = f"{med(c.times) / med(base.times):.3f}" if base is not None else "-"
        cpu_ratio = f"{med(c.cpu_times) / med(base.cpu_times):.3f}" if base is not None else "-"
        print(
            f"{c.name:<34} {params:>12,} {med(c.times) * 1000:>7.0f} ms {min(c.times) * 1000:>5.0f} ms "
            f"{max(c.times) * 1000:>5.0f} ms {wall_ratio:>6} {med(c.cpu_times) * 1000:>7.0f} ms {cpu_ratio:>6}"
        )
    if base is not None:
        ours = contenders[0]
        r = med(ours.times) / med(base.times)
        rc = med(ours.cpu_times) / med(base.cpu_times)
        rmin = min(ours.times) / min(base.times)
        verdict = "target met: no slower" if rc <= 1.0 else "SLOWER than HF"
        print(
            f"ratio ours (MLM+SBO) / HF BertForMaskedLM: median wall {r:.3f}, median CPU time {rc:.3f}, "
            f"best-of-rounds wall {rmin:.3f}  ({verdict}, by CPU time)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
