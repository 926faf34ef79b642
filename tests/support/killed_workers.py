"""Kill a real SDK worker process of a running job at a chosen phase, and report how the job ended.

Used by ``tests/e2e/test_killed_worker.py`` (the FnApiRunner's worker processes) and ``tests/e2e/test_prism.py``
(Prism's worker, started by the project's worker pool). The phases are read off what the job shows while it runs:

- ``starting``: the worker processes have just been started (before they have imported Beam and registered with
  the runner; the FnApiRunner then waited for ever, see ``pipeline/runners/lost_workers.py``);
- ``reading``: every worker has connected to the runner (a TCP connection established) and no input file has been
  read to its end yet;
- ``dedup``: the input has been read once (its ``read FILE: N records`` line): with ``--dedup near`` the job is in
  its dedup stages (no test kills here any more: :func:`run_killing_itself` reaches each stage exactly);
- ``writing``: shards are being spilled to sorted runs (``OUTPUT/_tmp`` exists).

Each stage of a ``--dedup near`` build is reached from inside instead: :func:`run_killing_itself` runs the job with
the test hook ``SPANPREP_FAULT=kill:STAGE`` (``pipeline/faults.py``) in the SDK workers' environment, and a worker
SIGKILLs itself when it first processes an element of that stage.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from pipeline import faults
from tests.conftest import DEMO_CORPUS, REPO

PHASES = ("starting", "reading", "writing")  # the tests' (each dedup stage: run_killing_itself)


def corpus(path: Path, copies: int, near: bool = False, documents: int | None = None) -> Path:
    """The demo corpus (its first ``documents``) ``copies`` times, with distinct ids: exact copies of each other,
    or with ``near`` every third copy a near copy (one word added: every stage of ``--dedup near`` has work)."""
    lines = DEMO_CORPUS.read_text(encoding="utf-8").splitlines()[:documents]
    with path.open("w", encoding="utf-8") as f:
        for c in range(copies):
            for line in lines:
                record = json.loads(line)
                record["id"] = f"{record['id']}-{c}"
                if near and c % 3 == 2:
                    record["text"] += f" Copy{c}."
                f.write(json.dumps(record) + "\n")
    return path


def sdk_workers(root: psutil.Process) -> list[psutil.Process]:
    """The Python SDK worker processes below ``root`` (``pipeline.sdk_worker``), not Beam's ``/bin/sh -c`` wrappers."""
    found = []
    for p in root.children(recursive=True):
        try:
            command, name = " ".join(p.cmdline()), p.name()
        except psutil.Error:  # it ended meanwhile
            continue
        if ("pipeline.sdk_worker" in command or "pipeline.runners.sdk_worker" in command) and name != "sh":
            found.append(p)
    return found


def _connected(p: psutil.Process) -> bool:
    """Has the worker connected to its runner (its control and data streams)?"""
    try:
        return any(c.status == psutil.CONN_ESTABLISHED for c in p.net_connections("tcp"))
    except psutil.Error:
        return False


def _in_phase(phase: str, log: str, output: Path, worker_logs: str) -> bool:
    read_once = "pipeline.read.documents: read " in log + worker_logs
    if phase in ("starting", "reading"):
        return not read_once
    if phase == "dedup":
        return read_once and not (output / "_tmp").is_dir() and "wrote shards/" not in log + worker_logs
    return (output / "_tmp").is_dir()


@dataclass
class Ending:
    status: int
    seconds_after_kill: float
    last_line: str
    stderr: str


def _end_if_running(job: subprocess.Popen) -> None:
    if job.poll() is None:
        job.kill()
        job.wait()


def _ending(job: subprocess.Popen, killed_at: float | None, stderr_path: Path, no_kill: str) -> Ending:
    """Wait (120 s at most) for ``job``, whose worker died at ``killed_at`` (``time.monotonic()``; ``no_kill`` says
    why none did), and say how it ended: its status, the seconds from the kill, its last line and its stderr."""
    text = stderr_path.read_text(errors="replace")
    assert killed_at is not None, f"{no_kill}:\n{text[-3000:]}"
    status = job.wait(timeout=120)
    seconds = time.monotonic() - killed_at
    text = stderr_path.read_text(errors="replace")
    return Ending(status, seconds, text.strip().splitlines()[-1], text)


def run_and_kill(
    argv: list[str], output: Path, phase: str, stderr_path: Path, workers_of: psutil.Process | None = None,
    worker_log: Path | None = None, min_workers: int = 1, timeout_s: float = 240,
) -> Ending:  # fmt: skip
    """Run ``argv`` (a job writing ``output``), SIGKILL one SDK worker below ``workers_of`` (default: the job
    itself) once the job is in ``phase`` and its ``min_workers`` workers have started, and wait for the job to end."""
    seen = worker_log.stat().st_size if worker_log else 0  # a pool's log holds earlier jobs' lines too
    earlier = {w.pid for w in sdk_workers(workers_of)} if workers_of else set()  # and may still run their workers
    with stderr_path.open("wb") as stderr:
        job = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr)
    killed_at = None
    connected_at: dict[int, float] = {}  # pid -> when the worker was first seen connected
    try:
        deadline = time.monotonic() + timeout_s
        while killed_at is None and job.poll() is None and time.monotonic() < deadline:
            root = workers_of or psutil.Process(job.pid)
            workers = sorted((w for w in sdk_workers(root) if w.pid not in earlier), key=lambda w: w.pid)
            log = stderr_path.read_text(errors="replace")
            pool_log = worker_log.read_bytes()[seen:].decode(errors="replace") if worker_log else ""
            # every worker has connected to the runner, but for "starting"; the first one started is killed,
            # whether it holds a bundle or not
            # (for 0.5 s: a worker killed once its TCP connection was open but before its control stream had
            # started is, to Prism, a worker that never came: Prism's own 60 s wait, as when killed starting)
            now = time.monotonic()
            for w in workers:
                if _connected(w):
                    connected_at.setdefault(w.pid, now)
            started = len(workers) >= min_workers and all(now - connected_at.get(w.pid, now) >= 0.5 for w in workers)
            if phase == "starting":
                started = len(workers) >= min_workers
            if started and _in_phase(phase, log, output, pool_log):
                workers[0].kill()
                killed_at = time.monotonic()
            time.sleep(0.05)
        return _ending(job, killed_at, stderr_path, f"no SDK worker to kill {phase} before the job ended")
    finally:
        _end_if_running(job)


def run_killing_itself(
    argv: list[str], stage: str, stderr_path: Path, fault_log: Path | None = None, timeout_s: float = 240
) -> Ending:
    """Run ``argv`` with ``SPANPREP_FAULT=kill:STAGE`` (the SDK workers of its FnApiRunner inherit it; a worker
    pool's must have been started with it) and wait for it to end; the kill's time is when the worker's line
    (``SPANPREP_FAULT: SIGKILL of SDK worker pid N in dedup stage STAGE``, or ``... as it starts``) shows in
    ``fault_log`` (default: the job's stderr, where the FnApiRunner's workers write)."""
    fault_log = fault_log or stderr_path
    seen = fault_log.stat().st_size if fault_log.exists() else 0
    line = f"{faults.ENV}: SIGKILL of SDK worker pid ".encode()
    env = {**os.environ, faults.ENV: f"kill:{stage}"}
    with stderr_path.open("wb") as stderr:
        job = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    killed_at = None
    try:
        deadline = time.monotonic() + timeout_s
        while job.poll() is None and time.monotonic() < deadline:
            if killed_at is None and line in fault_log.read_bytes()[seen:]:
                killed_at = time.monotonic()
            time.sleep(0.05)
        if killed_at is None and line in fault_log.read_bytes()[seen:]:
            killed_at = time.monotonic()  # it ended within the last poll
        where = "its start" if stage == faults.START else f"dedup stage {stage}"
        return _ending(job, killed_at, stderr_path, f"no SDK worker reached {where} before the job ended")
    finally:
        _end_if_running(job)
