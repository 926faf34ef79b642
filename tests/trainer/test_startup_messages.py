"""Start-up failures of the trainer's entry points end in one line naming the option, before the slow work:
``--eval-shards`` (not ``DataConfig.eval_shards``), a missing ``--ngram-dictionary`` before the checkpoint loads.
SIGTERM during start-up: tests/e2e/test_run_dir_safety.py."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO
from tests.support.pretrain_runs import PRETRAIN, ds_config, run_env

FINETUNE = REPO / "trainer" / "finetune.py"


def _last_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stderr.strip().splitlines()[-1]


def test_too_many_eval_shards_names_the_option(demo_artifact, tmp_path):
    cmd = [sys.executable, str(PRETRAIN), "--data", str(demo_artifact), "--preset", "tiny", "--max-steps", "2",
           "--eval-shards", "4", "--deepspeed_config", str(ds_config(tmp_path, 1)), "--output-dir", str(tmp_path / "r")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    line = _last_line(proc)
    assert line.startswith("pretrain: error: --eval-shards 4: ") and "has 4 shard(s)" in line
    assert "DataConfig" not in line and "lower --eval-shards" in line


def test_a_missing_ngram_dictionary_is_refused_before_the_checkpoint_loads(tmp_path):
    # --init names no checkpoint at all: the dictionary must be the first thing refused
    cmd = [sys.executable, str(FINETUNE), "--init", str(tmp_path / "no-checkpoint"), "--task", "rte",
           "--head", "span-ft", "--ngram-dictionary", str(tmp_path / "no-dictionary"),
           "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    line = _last_line(proc)
    assert line.startswith(f"finetune: error: --ngram-dictionary {tmp_path / 'no-dictionary'}: not a complete n-gram")
