"""Checkpoint directories: tags, the newest one, optimizer-state sizes, and the elastic resume of a checkpoint
written by another number of ranks (DeepSpeed's universal checkpoint conversion).

Layout (``RUN_DIR/checkpoints``): ``latest`` (DeepSpeed's pointer to the newest tag), ``global_stepN/`` (DeepSpeed's
model/optimizer files + ``spanprep_trainer.json`` + ``tokenizer.json``), and during an elastic resume
``global_stepN_universal/`` (removed once a newer checkpoint exists).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import torch

from trainer.config import ConfigError, RunConfig
from trainer.engine.checkpoint_files import load_tensors

CHECKPOINTS = "checkpoints"
TAG_PREFIX = "global_step"
# A resume that changes the number of ranks loads a universal checkpoint (see ``elastic_resume_plan``).
UNIVERSAL_SUFFIX = "_universal"
UNIVERSAL_MARKER = "spanprep_universal.json"  # written after a complete conversion; its absence means redo it
CONVERSION_TIMEOUT_HOURS = 6  # how long the other ranks wait for rank 0's conversion


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINTS)


def latest_tag(ckpt_dir: str) -> str | None:
    return latest_tag_file(ckpt_dir, "latest")


def latest_tag_file(ckpt_dir: str, name: str) -> str | None:
    path = os.path.join(ckpt_dir, name)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return f.read().strip() or None


def checkpoint_tags(ckpt_dir: str) -> list[tuple[int, str]]:
    """(step, tag) of the checkpoints in ``ckpt_dir``, oldest first."""
    out = []
    for path in glob.glob(os.path.join(ckpt_dir, TAG_PREFIX + "*")):
        m = re.fullmatch(re.escape(TAG_PREFIX) + r"(\d+)", os.path.basename(path))
        if m and os.path.isdir(path):
            out.append((int(m.group(1)), os.path.basename(path)))
    return sorted(out)


def optimizer_state_bytes(ckpt_dir: str, tag: str) -> list[int]:
    """Bytes of optimizer tensors (fp32 master partition, Adam moments) in each rank's ZeRO file, by rank."""
    files = sorted(
        glob.glob(os.path.join(ckpt_dir, tag, "*zero_pp_rank_*_optim_states.pt")),
        key=lambda p: int(re.findall(r"zero_pp_rank_(\d+)_", os.path.basename(p))[0]),
    )

    def tensor_bytes(obj: Any) -> int:
        if torch.is_tensor(obj):
            return obj.numel() * obj.element_size()
        if isinstance(obj, dict):
            return sum(tensor_bytes(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return sum(tensor_bytes(v) for v in obj)
        return 0

    return [tensor_bytes(load_tensors(f)["optimizer_state_dict"]) for f in files]


@dataclass
class ElasticResume:
    """A resume whose checkpoint was written by another number of ranks (decided in :func:`prepare`)."""

    tag: str  # the checkpoint, e.g. global_step5000
    saved_world_size: int
    world_size: int
    universal: bool  # convert to a universal checkpoint (partitioned optimizer state); False: ZeRO-0 fp32/fp16
    saved_global_batch: int | None  # None for checkpoints written before the trainer recorded it


def universal_dir(ckpt_dir: str, tag: str) -> str:
    """Where the universal form of checkpoint ``tag`` goes: next to it, ``<tag>_universal``."""
    return os.path.join(ckpt_dir, tag + UNIVERSAL_SUFFIX)


def convert_to_universal(ckpt_dir: str, tag: str) -> tuple[str, bool]:
    """Convert ``ckpt_dir/tag`` with DeepSpeed's ``ds_to_universal`` into ``ckpt_dir/<tag>_universal``.

    Runs the converter's command-line entry point in a child process (its worker pool forks, and its memory,
    about one checkpoint's worth, is returned when it ends). A complete earlier conversion of the same tag is
    reused: the trainer's (marked by a file it writes at the end) or one made by hand with the same command
    (the converter's last act is to point ``latest_universal`` at it); an incomplete one is redone.
    Returns (the universal tag, whether it converted).
    """
    src, dst = os.path.join(ckpt_dir, tag), universal_dir(ckpt_dir, tag)
    marker = os.path.join(dst, UNIVERSAL_MARKER)
    if os.path.isfile(marker):
        return os.path.basename(dst), False
    if latest_tag_file(ckpt_dir, "latest_universal") == os.path.basename(dst) and os.path.isfile(
        os.path.join(dst, "zero", "optimizer_state.pt")
    ):
        return os.path.basename(dst), False
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    workers = max(1, min(4, os.cpu_count() or 1))
    cmd = [
        sys.executable,
        "-m",
        "deepspeed.checkpoint.ds_to_universal",
        "--input_folder",
        src,
        "--output_folder",
        dst,
        "--num_extract_workers",
        str(workers),
        "--num_merge_workers",
        str(max(1, workers // 2)),
        "--inject_missing_state",
    ]  # checkpoints written before the trainer recorded universal_checkpoint_info
    log_path = os.path.join(dst, "ds_to_universal.log")
    with open(log_path, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-15:])
        raise RuntimeError(
            f"DeepSpeed's ds_to_universal could not convert {src} (exit {proc.returncode}; "
            f"full output in {log_path}):\n{tail}"
        )
    with open(marker, "w") as f:
        json.dump({"source": tag, "deepspeed_command": cmd}, f, indent=1)
    return os.path.basename(dst), True


def remove_universal_checkpoints(ckpt_dir: str) -> None:
    """Delete the universal checkpoints (``<tag>_universal``): once a newer checkpoint exists, nothing resumes from them."""
    for path in glob.glob(os.path.join(ckpt_dir, TAG_PREFIX + "*" + UNIVERSAL_SUFFIX)):
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(ckpt_dir, "latest_universal"))  # the converter's pointer; the trainer names tags itself


def repair_universal_load(optimizer, groups: list[dict]) -> None:
    """Undo two things DeepSpeed 0.19.8's ZeRO-3 universal loader gets wrong (ZeRO-1/2's does neither).

    * It gives every parameter group the hyperparameters of the first: biases and LayerNorm weights would get
      weight decay. Each group gets back its own, as built from this run's options (the lr follows in
      ``Trainer._apply_schedule``).
    * It stores one and the same ``step`` tensor in the Adam state of every group, and ``torch.optim.AdamW``
      increments it in place once per group, so the bias correction would count steps twice. Each state gets
      its own copy.
    """
    for group, own in zip(optimizer.param_groups, groups):
        group.update(own)
    base = getattr(optimizer, "optimizer", optimizer)  # the torch optimizer inside ZeRO's wrapper
    seen: set[int] = set()
    for state in base.state.values():
        step = state.get("step")
        if torch.is_tensor(step):
            if id(step) in seen:
                state["step"] = step.clone()
            seen.add(id(state["step"]))


def elastic_resume_plan(
    run: RunConfig, ds: dict, where: str, tag: str, meta: dict, saved_world: int, world_size: int
) -> ElasticResume:
    """How to resume a checkpoint written by ``saved_world`` ranks with ``world_size`` ranks, or a clear refusal.

    ZeRO 1/2/3 (and bf16 without ZeRO, whose optimizer DeepSpeed also partitions) keep each rank's slice of the
    optimizer state in its own file: DeepSpeed's universal checkpoint (``ds_to_universal``, then
    ``"checkpoint": {"load_universal": true}``) regroups it per parameter so that any number of ranks can load
    it. Without ZeRO in fp32/fp16 the optimizer state is not partitioned and loads at any world size as is.
    """
    zero = ds.get("zero_optimization", {})
    stage = zero.get("stage", 0)
    if not run.elastic_resume:
        raise ConfigError(
            f"cannot resume {where} (saved by {saved_world} ranks) with {world_size} ranks: "
            f"--no-elastic-resume is set; resume with {saved_world} ranks, or drop the option"
        )
    saved_stage = meta.get("zero_stage")
    if saved_stage is not None and saved_stage != stage:
        raise ConfigError(
            f"cannot resume {where} (ZeRO stage {saved_stage}, {saved_world} ranks) with ZeRO stage "
            f"{stage} and {world_size} ranks: change the number of ranks or the stage, not both at once"
        )
    for key in ("offload_optimizer", "offload_param"):
        if str(zero.get(key, {}).get("device", "none")).lower() == "nvme":
            raise ConfigError(
                f"cannot resume {where} (saved by {saved_world} ranks) with {world_size} ranks: "
                f"zero_optimization.{key} is on NVMe, and DeepSpeed's universal checkpoints do not "
                f"carry NVMe-swapped optimizer state; resume with {saved_world} ranks"
            )
    universal = stage > 0 or bool(ds.get("bf16", {}).get("enabled"))
    if universal:
        ds.setdefault("checkpoint", {})["load_universal"] = True
    return ElasticResume(
        tag=tag,
        saved_world_size=saved_world,
        world_size=world_size,
        universal=universal,
        saved_global_batch=meta.get("global_batch_size"),
    )
