"""The worker pool of ``--environment_type EXTERNAL`` (``pipeline.worker_pool``) runs its SDK workers on its own
interpreter whatever ``PATH`` holds, and refuses in one line to start on an interpreter without Beam.

Beam's own pool starts each worker as the first ``python`` on ``PATH``; with one that lacks Beam (here: this venv's
interpreter with ``-S``, so without site-packages) the job waited for ever at "Requesting worker".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import verify
from tests.conftest import DEMO_CORPUS, REPO
from tests.support import beam_services

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 300  # the job takes ~20 s; before the fix it never ended


def _python_without_beam(directory: Path) -> Path:
    """A ``python`` on which ``import apache_beam`` fails: this interpreter without its site-packages."""
    directory.mkdir()
    python = directory / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    result = subprocess.run([str(python), "-c", "import apache_beam"], capture_output=True, text=True)
    assert "No module named 'apache_beam'" in result.stderr
    return directory


def test_sdk_workers_run_on_the_pools_interpreter_whatever_path_holds(tmp_path):
    env = beam_services.checkout_env()
    env["PATH"] = str(_python_without_beam(tmp_path / "bin"))  # the only python on PATH lacks Beam
    output = tmp_path / "artifact"
    with (
        beam_services.running(beam_services.JOB_SERVICE, tmp_path / "job_service.log") as endpoint,
        beam_services.running(beam_services.WORKER_POOL, tmp_path / "worker_pool.log", env=env) as pool,
    ):
        result = subprocess.run(
            [sys.executable, "-m", "pipeline.build_shards", "--input", str(DEMO_CORPUS), "--output", str(output),
             "--num-shards", "2", "--runner", "PortableRunner", "--job_endpoint", endpoint,
             "--environment_type", "EXTERNAL", "--environment_config", pool],
            cwd=REPO, env=beam_services.checkout_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = verify.verify(str(output))
    assert report.ok, report.problems


def test_a_pool_started_without_beam_says_so_in_one_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-S", "-m", "pipeline.worker_pool", "--service_port", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("pipeline.worker_pool: error: ") and "cannot import apache_beam" in lines[0]
