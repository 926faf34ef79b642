"""A test hook: an SDK worker process SIGKILLs itself as it starts, or when it first reaches a chosen dedup stage.

    SPANPREP_FAULT=kill:STAGE

in the environment of the SDK worker processes (the FnApiRunner's, which inherit the launcher's environment with
``--direct_running_mode multi_processing``; the worker pool's, which inherit the pool's, ``--environment_type
EXTERNAL``) makes each of them send itself SIGKILL the first time it processes an element of ``STAGE`` (one of
:data:`STAGES`), after one line on its stderr (:func:`reached`); ``kill:start`` (:data:`START`) as it starts, in
:func:`arm`, before its harness has connected to the runner. The kill is a real SIGKILL of the real process, at a
known point of the job, which killing it from outside cannot aim at: ``tests/e2e/test_killed_worker.py`` kills a
worker in each stage of a ``--dedup near`` build this way, on both runners, and Prism's as it starts.

Only an SDK worker process reads the variable: its entry points call :func:`arm` (``pipeline.runners.sdk_worker``
and the harness ``pipeline.runners.worker_pool`` starts); the launcher never does, so a job that runs its steps in
the launcher itself (the in-process FnApiRunner, ``LOOPBACK``) ignores it. Not for users: it exists to test that
a lost worker ends the job in one line (docs/RUNNING.md, "A worker lost mid-job"). Importing it imports no Beam.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "SPANPREP_FAULT"
# The stages of a ``--dedup near`` build (pipeline/dedup/unique_documents.py), in the order the job reaches them:
# the pre-pass's digests and MinHash band keys (the input's second read), the LSH buckets' candidate pairs, the
# exact copies routed, the confirmation pass (the input's third read) sending each set-aside document's shingles to
# its pairs, the pairs confirmed, the label-propagation rounds, the check naming each cluster's kept document, and
# the main pass (the input's first read) splitting kept from removed documents.
STAGES = ("sign", "bands", "copies", "set-aside", "confirm", "labels", "decide", "split")
START = "start"  # not a stage: the worker dies in arm(), before its harness connects to the runner

_armed: str | None = None  # the stage this process dies in, once arm() has read the variable


def parse(value: str) -> str:
    """The stage of ``kill:STAGE`` (or :data:`START`); ValueError naming what was expected otherwise."""
    action, _, stage = value.partition(":")
    if action != "kill" or stage not in (START, *STAGES):
        raise ValueError(f"{ENV}={value!r}: expected kill:STAGE with STAGE one of {', '.join((START, *STAGES))}")
    return stage


def arm() -> None:
    """In an SDK worker process, before its harness runs: read :data:`ENV`; ``kill:start`` kills the process here.
    A value that is not ``kill:STAGE`` ends the worker with one line (exit 2), which the job reports as a lost
    worker."""
    global _armed
    value = os.environ.get(ENV, "")
    if not value:
        return
    try:
        _armed = parse(value)
    except ValueError as e:
        print(f"pipeline.faults: error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    reached(START)


def reached(stage: str) -> None:
    """Called where ``stage`` processes an element: SIGKILL this process if it was armed for ``stage``."""
    if _armed is not None and _armed == stage:
        where = "as it starts" if stage == START else f"in dedup stage {stage}"
        print(f"{ENV}: SIGKILL of SDK worker pid {os.getpid()} {where}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
