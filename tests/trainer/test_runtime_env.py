"""DeepSpeed's environment, decided once before it is imported (trainer/engine/runtime.py): the CPU path said
explicitly when there is no accelerator (no "Setting accelerator to CPU ... unable to detect it" warning), and its
C++ ops built into this environment's cache rather than the user's shared ``~/.cache/torch_extensions``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO
from tests.support.pretrain_runs import PRETRAIN, ds_config, run_env

DS_WARNING = "Setting accelerator to CPU"
PROBE = (
    # the first name looked up in trainer.engine sets them (its __getattr__ imports runtime), as DeepSpeed's users do
    "import json, os, trainer.engine; trainer.engine.env_rank; "
    "print(json.dumps({k: os.environ.get(k) for k in ('DS_ACCELERATOR', 'TORCH_EXTENSIONS_DIR')}))"
)

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: DeepSpeed picks cuda")


def _probe(**overrides: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR")}
    env.update({k: v for k, v in overrides.items() if v is not None})
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


@no_gpu
def test_without_an_accelerator_deepspeed_is_told_cpu_and_builds_into_this_environment():
    # the checkout's .cache when the environment is its .venv (as make has it), else inside the environment
    home = REPO if os.path.dirname(os.path.abspath(sys.prefix)) == str(REPO) else sys.prefix
    assert _probe() == {
        "DS_ACCELERATOR": "cpu",
        "TORCH_EXTENSIONS_DIR": os.path.join(home, ".cache", "torch_extensions"),
    }


def test_what_the_user_set_is_kept():
    assert _probe(DS_ACCELERATOR="cuda", TORCH_EXTENSIONS_DIR="/somewhere/ext") == {
        "DS_ACCELERATOR": "cuda",
        "TORCH_EXTENSIONS_DIR": "/somewhere/ext",
    }


@no_gpu
def test_a_cpu_run_does_not_warn_that_it_found_no_accelerator(demo_artifact, tmp_path):
    env = {k: v for k, v in run_env().items() if k != "DS_ACCELERATOR"}
    cmd = [sys.executable, str(PRETRAIN), "--data", str(demo_artifact), "--preset", "tiny", "--max-steps", "2",
           "--warmup-steps", "1", "--eval-every", "0", "--no-progress", "--num-workers", "0",
           "--deepspeed_config", str(ds_config(tmp_path, 1)), "--output-dir", str(tmp_path / "run")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "run" / "checkpoints").is_dir()
    assert DS_WARNING not in proc.stdout + proc.stderr


def test_a_run_logged_to_a_file_has_no_carriage_returns(demo_artifact, tmp_path):
    """tqdm's bar is for terminals: redrawn with carriage returns, it fills a log with one long line."""
    cmd = [sys.executable, str(PRETRAIN), "--data", str(demo_artifact), "--preset", "tiny", "--max-steps", "3",
           "--warmup-steps", "1", "--eval-every", "0", "--log-every", "1", "--num-workers", "0",
           "--deepspeed_config", str(ds_config(tmp_path, 1)), "--output-dir", str(tmp_path / "run")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=run_env(), capture_output=True, timeout=600)  # bytes: \r as written
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert b"\r" not in proc.stdout + proc.stderr
    steps = [line for line in proc.stdout.splitlines() if line.startswith(b"step ")]
    assert len(steps) == 3, proc.stdout[-3000:]  # the plain periodic lines instead


@no_gpu
def test_the_demos_launcher_is_told_the_cpu_path(tmp_path, monkeypatch):
    """The deepspeed launcher imports DeepSpeed before any of our code: the demo gives its CPU launch the variable."""
    from pipeline import demo

    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    cmd, env = demo._launcher_command(tmp_path / "artifact", tmp_path / "run", 4)
    assert env["DS_ACCELERATOR"] == "cpu" and cmd[cmd.index("--num_gpus") + 1] == "2"
    # the launcher's INFO lines (argv per rank, "Setting CUDA_VISIBLE_DEVICES" on CPU) are not shown
    level = cmd.index("--log_level")
    assert cmd[level + 1] == "warning" and level < cmd.index("trainer/pretrain.py")
