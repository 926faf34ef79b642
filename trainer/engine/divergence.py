"""Training that diverged: a loss or weights that are not finite stop the run, and nothing more is saved.

A step's loss is computed before its update, so the loop checks the summed loss every step (``Diverged`` raised on
every rank at once: the sums are the same) and the weights before every save (:func:`weights_finite`, one
collective), so an update that overflowed is never written as the last good checkpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from trainer.engine.checkpoints import latest_tag


class Diverged(Exception):
    """The loss or the weights are not finite: training diverged; nothing more is saved."""


@contextlib.contextmanager
def stops_on(kind: type[Exception], report: Callable[[Exception], None]) -> Iterator[list[Exception]]:
    """Inside: a ``kind`` raised ends the block; ``report(it)`` is called and the yielded list holds it (empty when
    the block ended otherwise)."""
    caught: list[Exception] = []
    try:
        yield caught
    except kind as e:
        caught.append(e)
        report(e)


def weights_finite(module: torch.nn.Module, device: torch.device | str) -> bool:
    """Whether every rank's weights are finite (ZeRO-3: each rank checks its own partition, ``ds_tensor``); one
    all-reduce, so every rank gets the same answer."""
    bad = 0.0
    for p in module.parameters():
        local = getattr(p, "ds_tensor", None)
        local = p.data if local is None else local
        if local.numel() and not bool(torch.isfinite(local).all()):
            bad = 1.0
            break
    flag = torch.tensor([bad], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(flag)
    return flag.item() == 0.0


def divergence_line(what: Exception, ckpt_dir: str) -> str:
    """The one line a diverged run ends with (rank 0, on stderr): nothing was saved, not even on a stop signal, and
    the last checkpoint is the last good one."""
    tag = latest_tag(ckpt_dir)
    last = f"the last checkpoint, {ckpt_dir}/{tag}, is kept" if tag else "no checkpoint was saved"
    return (
        f"pretrain: error: {what} (not finite: training diverged; a lower --lr, or a longer --warmup-steps, may "
        f"help); stopped without saving: {last}"
    )
