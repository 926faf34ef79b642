"""The test hook ``SPANPREP_FAULT=kill:STAGE`` (pipeline/faults.py): a process that armed it SIGKILLs itself at the
stage (``kill:start``: as it arms it), after one line; a process that did not arm it (the launcher) ignores it; a bad
value is one line, exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from pipeline import faults
from tests.conftest import REPO

_WORKER = "from pipeline import faults; {arm}faults.reached('sign'); faults.reached('labels'); print('survived')"


def _run(value: str, arm: bool) -> subprocess.CompletedProcess:
    code = _WORKER.format(arm="faults.arm(); " if arm else "")
    env = {**os.environ, "PYTHONPATH": str(REPO), faults.ENV: value}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)


def test_an_armed_worker_kills_itself_at_its_stage_and_only_there():
    done = _run("kill:labels", arm=True)
    assert done.returncode == -signal.SIGKILL and "survived" not in done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("SPANPREP_FAULT: SIGKILL of SDK worker pid ") and line.endswith(" in dedup stage labels")


def test_a_worker_armed_to_die_as_it_starts_dies_in_arm():
    done = _run("kill:start", arm=True)
    assert done.returncode == -signal.SIGKILL and "survived" not in done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("SPANPREP_FAULT: SIGKILL of SDK worker pid ") and line.endswith(" as it starts")


def test_a_process_that_did_not_arm_it_ignores_it():
    done = _run("kill:sign", arm=False)
    assert done.returncode == 0 and done.stdout == "survived\n" and not done.stderr


def test_a_bad_value_ends_the_worker_in_one_line():
    done = _run("kill:nowhere", arm=True)
    assert done.returncode == 2 and "survived" not in done.stdout
    assert done.stderr.strip().splitlines() == [
        f"pipeline.faults: error: SPANPREP_FAULT='kill:nowhere': expected kill:STAGE with STAGE one of start, "
        f"{', '.join(faults.STAGES)}"
    ]


@pytest.mark.parametrize("stage", faults.STAGES)
def test_every_stage_is_a_value(stage):
    assert faults.parse(f"kill:{stage}") == stage
