"""Stopping cleanly: SIGTERM/SIGINT ask the loop to save and exit; DataLoader workers leave stopping to their rank."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

STARTUP = "during start-up, before the first step (no checkpoint written)"


def exit_on_sigterm(program: str, when: str = STARTUP) -> None:
    """Until the loop's :class:`StopRequested` takes over: SIGTERM ends this process with exit status 143 and one line
    ``<program>: stopped by SIGTERM <when>``. It raises ``SystemExit``, so ``finally`` blocks (the run lock's release)
    run; Python's default ends the process without unwinding and without a word. Only for rank 0: a Python handler
    runs when the main thread is back in Python, so a rank blocked in a C call would outlive the signal; rank 0
    needs it anyway, for its run lock."""
    pid = os.getpid()

    def stop(signum: int, frame: object) -> None:
        if os.getpid() != pid:  # a forked child that has not set its own handler yet
            return
        print(f"{program}: stopped by {signal.Signals(signum).name} {when}", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


class StopRequested:
    """SIGTERM/SIGINT set a flag; the loop saves a checkpoint at the end of the step and exits 0."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    def __enter__(self) -> StopRequested:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self._pid:  # a forked child (DataLoader worker) before its worker_init_fn ran
            return
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def requested(self) -> bool:
        return self.signum is not None


def ignore_stop_signals_in_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: workers ignore SIGTERM/SIGINT and leave stopping to their rank.

    PyTorch's workers die on a SIGTERM that does not come from their parent (its C handler re-raises it), and
    the rank's SIGCHLD handler then raises at an arbitrary point, e.g. inside a collective. Schedulers and the
    ``deepspeed`` launcher signal whole process trees, so the workers must survive until their rank has saved
    and exited (a worker also exits when its parent is gone).
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _ChainedWorkerInit:
    def __init__(self, previous):
        self.previous = previous

    def __call__(self, worker_id: int) -> None:
        ignore_stop_signals_in_worker(worker_id)
        if self.previous is not None:
            self.previous(worker_id)


def protect_workers(loader) -> None:
    """Make ``loader``'s workers ignore stop signals (see :func:`ignore_stop_signals_in_worker`)."""
    if loader is not None and not isinstance(loader.worker_init_fn, _ChainedWorkerInit):
        loader.worker_init_fn = _ChainedWorkerInit(loader.worker_init_fn)
