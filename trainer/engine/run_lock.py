"""The run lock: one ``trainer/pretrain.py`` run at a time per run directory (``RUN_DIR/_run.lock``).

Like the pipeline's build lock (schemas/FORMAT.md, "Build lock"): rank 0 (the launcher's first process) creates
``RUN_DIR/_run.lock`` *exclusively* (``O_CREAT|O_EXCL``) before the run writes anything, holding the run's id,
host, pid, the process's start time and the command line, and removes it when the process ends, whatever the
way (success, error, signal that Python sees). The other ranks neither take nor check it: a second run's rank 0
stops with one line, and its launcher ends its other ranks. Two runs into one ``--output-dir`` would otherwise
overwrite each other's checkpoints and interleave their monitor CSVs.

A lock outlives its run only when the process was killed outright (SIGKILL, out of memory, a lost node). It is
never taken over automatically (a run on another host of a shared filesystem cannot be seen from here): the
message names the holder, says when its process is gone from this host, and how to clear it (docs/TRAINING.md).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

from trainer.config import ConfigError

LOCK_FILE = "_run.lock"


class RunLockError(ConfigError):
    """Another run holds the run directory's lock (a user error: exit 2)."""


def _process_start(pid: int) -> str | None:
    """When process ``pid`` of this host started (Linux: its start time in clock ticks after boot, from
    ``/proc/PID/stat``; elsewhere ``"alive"``), None when there is no such process. A pid reused by a later process
    has another start time."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]  # field 22; the name in parentheses may hold spaces
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return None
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # exists, owned by another user
        pass
    return "alive"


def _holder_is_gone(holder: dict[str, Any]) -> bool:
    """True when the holder ran on this host and its process no longer exists (a pid reused since has another
    start time)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    started = _process_start(holder["pid"])
    return started is None or started != holder.get("process_start", started)


def read_holder(path: str) -> dict[str, Any]:
    """The lock's holder as recorded (``{}`` when the file is gone or unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            holder = json.load(f)
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}


@dataclass
class RunLock:
    """A held run lock; :meth:`release` removes it (only while it is still this run's)."""

    path: str
    holder: dict[str, Any]
    created_dir: str | None = None  # the run directory, when taking the lock created it
    released: bool = field(default=False)

    def release(self) -> None:
        if self.released or os.getpid() != self.holder["pid"]:  # a forked child (DataLoader worker) does not own it
            return
        self.released = True
        if read_holder(self.path).get("run_id") == self.holder["run_id"]:
            os.remove(self.path)
        if self.created_dir is not None:  # a run that stopped before writing anything leaves no directory
            try:
                os.rmdir(self.created_dir)
            except OSError:  # not empty (or gone): the run wrote something
                pass


def acquire(run_dir: str) -> RunLock:
    """Take ``run_dir``'s lock, creating ``run_dir`` when needed; :class:`RunLockError` (one line) when another
    run holds it."""
    created = None if os.path.isdir(run_dir) else os.path.abspath(run_dir)
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--output-dir {run_dir}: cannot create it ({e.strerror})") from None
    path = os.path.join(run_dir, LOCK_FILE)
    pid = os.getpid()
    holder = {
        "run_id": uuid.uuid4().hex,
        "host": socket.gethostname(),
        "pid": pid,
        "process_start": _process_start(pid),
        "started_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "command": " ".join(sys.argv)[:2000],
    }
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        other = read_holder(path)
        who = (
            f"host {other.get('host', '?')}, pid {other.get('pid', '?')}, started {other.get('started_at', '?')}"
            if other
            else "an unreadable holder"
        )
        stale = (
            "its process no longer exists on this host, so the lock is stale: delete the file and start again"
            if other and _holder_is_gone(other)
            else "if that run is no longer running anywhere (killed outright), delete the file and start again"
        )
        raise RunLockError(f"{path}: another run is using {run_dir} ({who}); {stale}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot create the run lock ({e.strerror})") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(holder, f, indent=1)
    return RunLock(path, holder, created)
