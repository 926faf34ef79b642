"""Which checkpoint ``--resume`` continues from: the one ``latest`` names when it is complete, else the newest
complete one (saying why), else a one-line refusal. Also writes ``latest`` atomically.

DeepSpeed writes ``latest`` with a plain ``open(..., "w")`` on rank 0 without waiting for the other ranks: a kill or
a full filesystem between the open and the write leaves it empty, and it can name a tag whose other ranks' files
are not all written. The trainer therefore saves with ``save_latest=False`` and points ``latest`` at a tag itself
(:func:`write_latest`: temporary file, fsync, rename) once every rank has written its files.

A checkpoint tag ``global_stepN`` is *complete* when every file its writers write for it is there and readable:

* the trainer's ``spanprep_trainer.json`` (valid JSON) and ``tokenizer.json`` (not empty);
* DeepSpeed's model state: ``mp_rank_00_model_states.pt``, or with ZeRO-3 one
  ``zero_pp_rank_R_mp_rank_00_model_states.pt`` per rank ``R`` of the saving run;
* DeepSpeed's optimizer state with ZeRO 1-3 (and bf16): one ``[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt``
  per rank;
* every ``.pt`` file is a torch archive (a zip file) whose central directory reads, so a file cut short (a kill
  or a full disk while writing) is not.

The number of ranks and the ZeRO stage come from ``spanprep_trainer.json``; checkpoints written before it recorded
them need one model state file. Reading every byte of a multi-GB file to check it is left to DeepSpeed's loader.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass

from trainer.config import CHECKPOINT_META_FILE, CHECKPOINT_TOKENIZER_FILE, ConfigError
from trainer.engine.checkpoints import checkpoint_tags

_OPTIM = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt")


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint to resume (``tag`` None: the run directory holds no checkpoint) and, when it is not the one
    ``latest`` names, why (``note``, one line for the log)."""

    tag: str | None
    note: str | None = None


def _torch_archive_problem(path: str) -> str | None:
    """Why ``path`` is not a readable torch archive, or None."""
    try:
        with zipfile.ZipFile(path) as z:
            if not z.namelist():
                return f"{path} is an empty archive"
    except FileNotFoundError:
        return f"{path} is missing"
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return f"{path} is truncated or damaged (not a complete torch archive: {e})"
    return None


def incomplete_reason(ckpt_dir: str, tag: str) -> str | None:
    """Why checkpoint ``tag`` of ``ckpt_dir`` is not complete (module docstring; the first problem found), or None."""
    where = os.path.join(ckpt_dir, tag)
    if not os.path.isdir(where):
        return f"{where} does not exist"
    meta_path = os.path.join(where, CHECKPOINT_META_FILE)
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        return f"{meta_path} is missing"
    except (OSError, ValueError) as e:
        return f"{meta_path} is unreadable ({e})"
    tok = os.path.join(where, CHECKPOINT_TOKENIZER_FILE)
    if not os.path.isfile(tok) or os.path.getsize(tok) == 0:
        return f"{tok} is missing or empty"
    world, stage = int(meta.get("world_size") or 1), meta.get("zero_stage")
    if stage == 3:
        needed = [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(world)]
    elif stage is None and os.path.isfile(os.path.join(where, "zero_pp_rank_0_mp_rank_00_model_states.pt")):
        needed = ["zero_pp_rank_0_mp_rank_00_model_states.pt"]  # a ZeRO-3 checkpoint that did not record its stage
    else:
        needed = ["mp_rank_00_model_states.pt"]
    optim = {int(m.group(1)): name for name in os.listdir(where) if (m := _OPTIM.fullmatch(name))}
    if stage is None:  # written before the stage was recorded: the optimizer files there are, readable
        needed += sorted(optim.values())
    elif stage > 0 or optim:  # ZeRO 1-3, or bf16 (its optimizer partitions the state too): one file per rank
        prefix = next(iter(optim.values()), "zero_pp_rank_0").split("zero_pp_rank_")[0]
        needed += [optim.get(r, f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt") for r in range(world)]
    for name in needed:
        problem = _torch_archive_problem(os.path.join(where, name))
        if problem:
            return problem
    return None


def _read_latest(path: str) -> str | None:
    """The tag ``latest`` names (stripped), None when it is empty; bytes that are not UTF-8 are kept visible."""
    with open(path, "rb") as f:
        return f.read(4096).decode("utf-8", errors="replace").strip() or None


def find_resume_point(ckpt_dir: str) -> ResumePoint:
    """The checkpoint ``--resume`` continues from (module docstring). Raises :class:`ConfigError` (one line) when
    the directory holds checkpoints (a ``latest`` file or a ``global_stepN`` directory) but none is complete."""
    tags = [tag for _, tag in checkpoint_tags(ckpt_dir)]
    latest_path = os.path.join(ckpt_dir, "latest")
    has_latest = os.path.isfile(latest_path)
    if not tags and not has_latest:
        return ResumePoint(None)
    named = _read_latest(latest_path) if has_latest else None
    if named is not None and not re.fullmatch(r"[\w.-]+", named):
        why = f"{latest_path} does not name a checkpoint ({named[:40]!r})"
    elif named is not None:
        problem = incomplete_reason(ckpt_dir, named)
        if problem is None:
            return ResumePoint(named)
        why = f"{latest_path} names {named}, which is incomplete: {problem}"
    else:
        why = f"{latest_path} is empty" if has_latest else f"{latest_path} is missing"
    skipped: list[str] = []
    for tag in reversed(tags):
        if tag == named:
            continue
        problem = incomplete_reason(ckpt_dir, tag)
        if problem is None:
            note = f"resume: {why}; resuming from {tag} instead, the newest complete checkpoint"
            if skipped:
                note += f" (also incomplete: {'; '.join(skipped)})"
            return ResumePoint(tag, note)
        skipped.append(problem)
    problems = [why, *skipped]
    raise ConfigError(
        f"cannot resume from {ckpt_dir}: it holds no complete checkpoint ({'; '.join(problems)}); restore the damaged "
        f"files from a copy, or start a new run in another --output-dir (or move {ckpt_dir} away)"
    )


def write_latest(ckpt_dir: str, tag: str) -> None:
    """Point ``ckpt_dir/latest`` at ``tag`` atomically: a reader sees the old pointer or the new one, never an
    empty or half-written file (temporary file, fsync, rename, fsync of the directory)."""
    path = os.path.join(ckpt_dir, "latest")
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(tag)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
