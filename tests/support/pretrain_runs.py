"""Running ``trainer/pretrain.py`` from the tests: the environment, the shipped CPU DeepSpeed configs with a small micro
batch, a checked subprocess run, the CSV monitor's values and a run directory resumed from one checkpoint. Used by
tests/e2e/test_pretrain.py, tests/e2e/test_elastic_resume.py and tests/trainer/test_nsp.py."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRETRAIN = REPO / "trainer" / "pretrain.py"
DEEPSPEED = Path(sys.executable).parent / "deepspeed"
MICRO_BATCH = 4
TIMEOUT = 600


def run_env() -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a rank that aborts (SIGABRT) prints every thread's Python stack into the failure
    return env


def ds_config(tmp: Path, stage: int) -> Path:
    """The shipped CPU config of ``stage`` with a small micro batch."""
    cfg = json.loads((REPO / "trainer" / "configs" / f"zero{stage}_cpu.json").read_text())
    cfg["train_micro_batch_size_per_gpu"] = MICRO_BATCH
    path = tmp / f"zero{stage}_cpu_mb{MICRO_BATCH}.json"
    path.write_text(json.dumps(cfg))
    return path


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=TIMEOUT, **kw)
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    )
    return proc


def metric(run_dir: Path, name: str) -> dict[int, float]:
    """step -> value from the DeepSpeed CSV monitor (a resumed run appends, repeating the header)."""
    out = {}
    with open(run_dir / "monitor" / f"{name}.csv") as f:
        for row in csv.reader(f):
            if row and row[0] != "step":
                out[int(row[0])] = float(row[1])
    return out


def resume_from(source: Path, tag: str, dest: Path) -> None:
    """A new run directory holding only checkpoint ``tag`` of ``source`` (as if the run had stopped there)."""
    (dest / "checkpoints").mkdir(parents=True)
    shutil.copytree(source / "checkpoints" / tag, dest / "checkpoints" / tag)
    (dest / "checkpoints" / "latest").write_text(tag)
