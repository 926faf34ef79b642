"""Held-out evaluation (one loader, or each source of a mixture and their pool) and a mixture's per-source counts.

``eval_sums`` runs ``--eval-batches`` micro-batches of one evaluation loader on every rank and sums the statistics
over the ranks; ``eval_metrics`` turns sums into ``mlm_loss``, ``mlm_acc``, ... A mixture is evaluated on every
source's held-out shards (``eval/NAME/...``) and on their pool (``eval/...``: the sums of all sources).

``SourceCounts``: samples and tokens (real tokens, padding excluded) each source of a mixture gave to training,
summed over the ranks at every step (in the step's one all-reduce), written to the monitor
(``train/NAME/samples``, ``train/NAME/tokens``, running totals since the start of the run) and to the checkpoint
(``source_counts``), and restored on resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

EVAL_KEYS = (
    "batches",
    "targets",
    "mlm_loss_sum",
    "mlm_correct",
    "sbo_loss_sum",
    "sbo_correct",
    "pairs",
    "nsp_loss_sum",
    "nsp_correct",
)
MODEL_INPUTS = (
    "input_ids",
    "attention_mask",
    "labels",
    "span_left",
    "span_right",
    "span_position",
    "token_type_ids",
    "next_sentence_label",
)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    non_blocking = device.type != "cpu"
    return {k: v.to(device, non_blocking=non_blocking) for k, v in batch.items()}


@torch.no_grad()
def eval_sums(engine: Any, loader: Any, eval_batches: int, device: torch.device) -> dict[str, float]:
    """Sums of the evaluation statistics over ``eval_batches`` micro-batches per rank, all-reduced over the ranks."""
    sums = dict.fromkeys(EVAL_KEYS, 0.0)
    it = iter(loader)
    for _ in range(eval_batches):
        batch = next(it, None)
        # ZeRO-3 gathers parameters collectively: all ranks run the same number of forwards.
        have = torch.tensor([0.0 if batch is None else 1.0], device=device)
        torch.distributed.all_reduce(have, op=torch.distributed.ReduceOp.MIN)
        if have.item() == 0 or batch is None:
            break
        inputs = to_device({k: batch[k] for k in MODEL_INPUTS if k in batch}, device)
        out = engine(**inputs)
        n = float(out["num_targets"].item())
        sums["batches"] += 1
        sums["targets"] += n
        sums["mlm_loss_sum"] += out["mlm_loss"].item() * n
        sums["mlm_correct"] += float(out["mlm_correct"].item())
        if "sbo_loss" in out:
            sums["sbo_loss_sum"] += out["sbo_loss"].item() * n
            sums["sbo_correct"] += float(out["sbo_correct"].item())
        if "nsp_loss" in out:
            pairs = float(out["num_pairs"].item())
            sums["pairs"] += pairs
            sums["nsp_loss_sum"] += out["nsp_loss"].item() * pairs
            sums["nsp_correct"] += float(out["nsp_correct"].item())
    t = torch.tensor([sums[k] for k in EVAL_KEYS], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return dict(zip(EVAL_KEYS, t.tolist()))


def eval_metrics(sums: Mapping[str, float], use_sbo: bool, nsp: bool) -> dict[str, float]:
    """``mlm_loss``, ``mlm_acc`` (and ``sbo_*``, ``nsp_*``) from :func:`eval_sums`; empty without targets."""
    n = sums["targets"]
    if not n:
        return {}
    result = {"mlm_loss": sums["mlm_loss_sum"] / n, "mlm_acc": sums["mlm_correct"] / n}
    if use_sbo:
        result.update(sbo_loss=sums["sbo_loss_sum"] / n, sbo_acc=sums["sbo_correct"] / n)
    if nsp and sums["pairs"]:
        result.update(nsp_loss=sums["nsp_loss_sum"] / sums["pairs"], nsp_acc=sums["nsp_correct"] / sums["pairs"])
    return result


class SourceCounts:
    """Samples and tokens each source of a mixture gave to training (module docstring); no-op for one artifact."""

    def __init__(self, names: list[str]):
        self.names = list(names)
        self.samples = dict.fromkeys(self.names, 0)
        self.tokens = dict.fromkeys(self.names, 0)

    def add_batch(self, batch: Mapping[str, torch.Tensor], host: dict[str, float]) -> None:
        """Count one micro-batch of this rank into the step's ``host`` statistics (all-reduced by the loop)."""
        if not self.names:
            return
        src = batch["source"].long()
        tokens = batch["attention_mask"].sum(1).long() - 2  # [CLS] and the last [SEP] are not the source's
        rows = torch.bincount(src, minlength=len(self.names)).tolist()
        toks = torch.bincount(src, weights=tokens.double(), minlength=len(self.names)).tolist()
        for k, name in enumerate(self.names):
            host[f"samples/{name}"] = host.get(f"samples/{name}", 0.0) + rows[k]
            host[f"tokens/{name}"] = host.get(f"tokens/{name}", 0.0) + toks[k]

    def zero(self, host: dict[str, float]) -> None:
        for name in self.names:
            host[f"samples/{name}"] = host[f"tokens/{name}"] = 0.0

    def absorb(self, totals: Mapping[str, float]) -> None:
        """Add a step's all-reduced totals to the running counts."""
        for name in self.names:
            self.samples[name] += int(totals[f"samples/{name}"])
            self.tokens[name] += int(totals[f"tokens/{name}"])

    def events(self, step: int) -> list[tuple[str, float, int]]:
        return [
            (f"train/{name}/{what}", float(counts[name]), step)
            for name in self.names
            for what, counts in (("samples", self.samples), ("tokens", self.tokens))
        ]

    def state(self) -> dict[str, dict[str, int]]:
        return {name: {"samples": self.samples[name], "tokens": self.tokens[name]} for name in self.names}

    def load(self, state: Mapping[str, Mapping[str, int]] | None) -> None:
        for name in self.names:
            saved = (state or {}).get(name) or {}
            self.samples[name], self.tokens[name] = int(saved.get("samples", 0)), int(saved.get("tokens", 0))
