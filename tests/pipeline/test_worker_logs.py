"""A local multi-process run logs like the launcher: every line with its timestamp, and without Beam's two
start-up lines per worker process ("apitools not found ...", "Logging handler created.")."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import DEMO_CORPUS, REPO
from tests.support import beam_services

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: ")


def test_worker_processes_log_with_timestamps_and_without_start_up_noise(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.build_shards", "--input", str(DEMO_CORPUS), "--output", str(tmp_path / "a"),
         "--num-shards", "2", "--vocab-size", "2000", "--direct_running_mode", "multi_processing",
         "--direct_num_workers", "2"],
        cwd=REPO, env=beam_services.checkout_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert "apitools not found" not in proc.stderr and "Logging handler created" not in proc.stderr, proc.stderr
    assert [line for line in lines if not LOG_LINE.match(line)] == []
    worker_lines = [line for line in lines if "pipeline.write.shards: wrote" in line]  # logged by the workers
    assert len(worker_lines) == 2
