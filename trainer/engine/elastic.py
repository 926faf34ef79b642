"""Elastic resume: a ZeRO checkpoint saved by another number of ranks becomes a universal checkpoint first."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable

import torch

from trainer.engine.checkpoints import (
    CONVERSION_TIMEOUT_HOURS,
    ElasticResume,
    convert_to_universal,
    universal_dir,
)


def universal_checkpoint(
    ckpt_dir: str, tag: str, elastic: ElasticResume | None, stage: int, is_main: bool, say: Callable[[str], None]
) -> str:
    """Rank 0 converts ``tag`` to a universal checkpoint while the other ranks wait; all learn the outcome.
    Returns the tag to load (the universal checkpoint's directory name)."""
    if elastic is None:
        raise RuntimeError(f"{tag}: a universal checkpoint is made only for an elastic resume")
    src, dst = os.path.join(ckpt_dir, tag), universal_dir(ckpt_dir, tag)
    say(
        f"elastic resume: {src} was saved by {elastic.saved_world_size} ranks, this run has {elastic.world_size}; "
        f"ZeRO stage {stage} partitions the "
        f"optimizer state by rank, so rank 0 converts the checkpoint with DeepSpeed's ds_to_universal "
        f"into {dst} (the other ranks wait) and every rank loads its new partition from there"
    )
    error = ""
    if is_main:
        start = time.perf_counter()
        try:
            _, converted = convert_to_universal(ckpt_dir, tag)
            say(
                f"elastic resume: {'converted' if converted else 'reusing the complete conversion'} "
                f"{dst}" + (f" in {time.perf_counter() - start:.1f} s" if converted else "")
            )
        except Exception as exc:  # reported on every rank below
            error = str(exc)
    # A collective rather than a barrier: the other ranks must learn that rank 0 failed. On a group of its own
    # (gloo, CPU tensors) with a long timeout: converting a large checkpoint can outlast DEEPSPEED_TIMEOUT.
    wait = torch.distributed.new_group(backend="gloo", timeout=datetime.timedelta(hours=CONVERSION_TIMEOUT_HOURS))
    failed = torch.tensor([1.0 if error else 0.0])
    torch.distributed.all_reduce(failed, group=wait)
    torch.distributed.destroy_process_group(wait)
    if failed.item():
        raise RuntimeError(error or f"rank 0 could not convert {src} to a universal checkpoint (see its error)")
    return os.path.basename(dst)
