"""Printed commands run as printed: a hint names this process's interpreter as the user can type it, so it works
from a shell where no venv is activated (no ``python`` with the project's packages on ``PATH``)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import DEMO_CORPUS, REPO

VENV = Path(sys.executable).parent.parent  # the venv this suite runs in (its bin/python, unresolved)


def _shell_env() -> dict[str, str]:
    """A shell without an activated venv: no python of the project on PATH, the checkout importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = "/usr/bin:/bin"
    env["PYTHONPATH"] = str(REPO)
    return env


def test_build_shards_prints_a_verify_command_that_runs_as_printed(tmp_path):
    (tmp_path / "venv").symlink_to(VENV, target_is_directory=True)  # the venv inside the working directory
    python = Path("venv") / "bin" / Path(sys.executable).name
    output = tmp_path / "artifact"
    built = subprocess.run(
        [str(python), "-m", "pipeline.build_shards", "--input", str(DEMO_CORPUS), "--output", str(output),
         "--num-shards", "1", "--vocab-size", "2000"],
        cwd=tmp_path, env=_shell_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (hint,) = [line for line in built.stdout.splitlines() if line.strip().startswith("check it:")]
    command = hint.split("check it:", 1)[1].strip()
    assert command == f"{python} -m pipeline.verify {output}"
    checked = subprocess.run(
        shlex.split(command), cwd=tmp_path, env=_shell_env(), capture_output=True, text=True, timeout=600
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "Traceback" not in checked.stderr


def test_the_interpreter_is_absolute_outside_the_working_directory(tmp_path, monkeypatch):
    from schemas import commands

    monkeypatch.chdir(tmp_path)
    assert commands.python() == shlex.quote(os.path.abspath(sys.executable))
    assert commands.module("pipeline.verify") == f"{shlex.quote(os.path.abspath(sys.executable))} -m pipeline.verify"
