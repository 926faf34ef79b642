"""Beam services a test starts on loopback (the local job service, a worker pool) and always stops.

Each service runs in its own session (``start_new_session``), so :func:`stop` ends it and every SDK worker it
spawned with one ``killpg``; :func:`running` does that in a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO, free_port

STARTUP_TIMEOUT_S = 60
JOB_SERVICE = ("apache_beam.runners.portability.local_job_service_main", "--port", "the local job service")
# spanprep's worker pool: Beam's, its SDK workers on the pool's own interpreter (pipeline/runners/worker_pool.py)
WORKER_POOL = ("pipeline.worker_pool", "--service_port", "the Beam worker pool")


def tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening:\n{tail(log)}")
        try:
            with socket.create_connection(("localhost", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not accept connections on port {port} within {STARTUP_TIMEOUT_S} s:\n{tail(log)}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the service's own process group (it and the SDK workers it spawned), SIGKILL if it lingers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    else:  # the leader is gone; its workers may not be
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def checkout_env() -> dict[str, str]:
    """The environment with the checkout importable (the worker pool's SDK workers run on its interpreter, whatever
    ``PATH`` holds)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def start(
    service: tuple[str, str, str],
    log: Path,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
) -> tuple[subprocess.Popen, int]:
    """Start ``service`` (:data:`JOB_SERVICE` or :data:`WORKER_POOL`) on a free port; return it and the port."""
    module, port_flag, what = service
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [python, "-m", module, port_flag, str(port)],
            cwd=cwd,
            env=checkout_env() if env is None else env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_port(port, proc, log, what)
    except BaseException:
        stop(proc)
        raise
    return proc, port


@contextlib.contextmanager
def running(service: tuple[str, str, str], log: Path, **kwargs) -> Iterator[str]:
    """``localhost:PORT`` of ``service`` while the block runs; stopped at the end whatever happens."""
    proc, port = start(service, log, **kwargs)
    try:
        yield f"localhost:{port}"
    finally:
        stop(proc)
