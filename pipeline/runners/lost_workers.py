"""A local worker process that dies stops the job (the FnApiRunner's worker processes, ``--direct_running_mode
multi_processing``): :func:`stop_the_job`, which ``pipeline.runners.jobs.run_pipeline`` runs the pipeline inside. Linux only
for the part that ends the other workers (it reads ``/proc``); elsewhere the job still stops when the lost worker held
no bundle the others wait for. :class:`Interrupt` (a thread interrupting the main thread's wait) also serves
``pipeline.runners.prism_watch``, which does the same for a job on Prism."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

from pipeline import output

_WORKER_EXITED = "Worker subprocess exited with return code"
# How often the main thread is signalled until it has raised the lost worker's error (see stop_the_job).
_RESIGNAL_S = 1.0


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, theirs, ...), from Linux's ``/proc/PID/task/TID/children``; none
    where that is not there."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def end_local_workers() -> list[int]:
    """SIGKILL this process's local SDK worker processes (``pipeline.sdk_worker``, and Beam's ``/bin/sh -c`` wrappers
    that started them); return their pids. See :func:`stop_the_job`."""
    ended = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
            if b"pipeline.sdk_worker" in command or b"sdk_worker_main" in command:
                os.kill(pid, signal.SIGKILL)
                ended.append(pid)
        except (OSError, ProcessLookupError):
            continue  # it ended meanwhile
    return ended


# The launcher's threads that read a local worker's gRPC streams (control, data); when the worker process dies they
# raise grpc.RpcError, before the thread that started the worker sees its exit.
_STREAM_READERS = ("beam_control_read", "read_grpc_client_inputs")


def _broken_stream(thread_name: str, error: BaseException | None) -> bool:
    """Is ``error`` gRPC's (``grpc.RpcError`` and its subclasses, by module: grpc has no type information here)
    raised in one of :data:`_STREAM_READERS`?"""
    return thread_name in _STREAM_READERS and type(error).__module__.split(".")[0] == "grpc"


class Interrupt:
    """Interrupts the main thread's wait: SIGUSR1 sent to the main thread itself, again every second until its
    handler has run (:func:`stop_the_job` says why), never after the job has left the context."""

    def __init__(self) -> None:
        self.main = threading.main_thread().ident or 0
        self.told = threading.Event()  # the main thread's handler has run
        self.done = threading.Event()  # the job has left the context

    def send(self) -> None:
        while not (self.told.is_set() or self.done.is_set()):
            signal.pthread_kill(self.main, signal.SIGUSR1)
            self.told.wait(_RESIGNAL_S)

    def first(self) -> bool:
        """In the handler: is this the signal to raise on (the first, while the job runs)?"""
        if self.told.is_set() or self.done.is_set():
            return False
        self.told.set()
        return True

    def end(self, thread_name: str) -> None:
        """No more signals: stop and join the sending thread (before the handler is restored). One being started
        as this runs (``threading.enumerate`` lists it before it can be joined: "cannot join thread before it is
        started", which replaced a Prism job's error in 2 runs of 20) is not joined: it sees :attr:`done` and ends
        without sending."""
        self.done.set()
        self.told.set()
        for thread in threading.enumerate():
            if thread.name == thread_name:
                with contextlib.suppress(RuntimeError):
                    thread.join()


@contextlib.contextmanager
def stop_the_job(active: bool) -> Iterator[None]:
    """Inside, on the local runner's worker processes: a worker process that dies stops the job. Beam's local runner
    sees it only in the thread that started the process (``run_worker``, which raises "Worker subprocess exited with
    return code N" and ends); when the worker held a bundle, the runner's main thread then waits for that bundle for
    ever. So that thread's error is caught here (``threading.excepthook``) and handed to the main thread as a signal
    (SIGUSR1, which interrupts its wait) whose handler raises it there: the job fails with ``pipeline.runners.jobs.WorkerLost``.
    The signal is sent to the main thread itself (``pthread_kill``), and again every second until its handler has run:
    sent to the process (``os.kill``), Linux may hand it to another thread, whose C handler only flags it, and the
    main thread, asleep in a lock's wait that nothing else ends, never runs the Python handler (a kill as the workers
    started hung 2 runs in 11 under load, the main thread waiting for its bundle's futures, the workers' threads gone;
    none in 10 since).

    The main thread then closes the runner's other workers (``WorkerHandlerManager.close_all``), and each close joins
    that worker's ``run_worker`` thread, which waits for the worker process to exit. A surviving worker in the middle
    of a bundle never does: its harness ends only once its bundles have, and the bundle waits for data or state from
    the runner that no longer comes. That join waited for ever (a ``--dedup near`` build with 2 worker processes,
    one SIGKILLed: no output for over 300 s). So the first lost worker also ends the job's other worker processes
    (:func:`end_local_workers`): the job is failing and no bundle of theirs can be used; their threads' errors are
    the same one, not reported again. Nor are the tracebacks Beam's threads and loggers print once the workers are
    gone (their gRPC streams break: "Failed to read inputs in the data plane", "Error closing worker_handler"): they
    say the same thing at length, and the job's one line is what the user reads. The threads that read a worker's
    gRPC streams see a dead worker first (:func:`_broken_stream`): their tracebacks are dropped too."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_hook = threading.excepthook
    lost: list[str] = []

    def hook(args) -> None:
        if lost or _broken_stream(args.thread.name if args.thread else "", args.exc_value):
            return  # a consequence of the lost worker
        if args.thread is not None and args.thread.name == "run_worker" and _WORKER_EXITED in str(args.exc_value):
            lost.append(output.redact_url(str(args.exc_value)).splitlines()[0][:300])
            end_local_workers()
            threading.Thread(target=interrupt.send, name="lost_worker_signal", daemon=True).start()
            return
        previous_hook(args)

    def quiet_after_loss(record: logging.LogRecord) -> bool:
        if record.name == "apache_beam.runners.worker.data_plane" and record.exc_info:
            return not _broken_stream("read_grpc_client_inputs", record.exc_info[1])
        return not (lost and record.name.startswith("apache_beam"))

    interrupt = Interrupt()

    def stop(signum, frame) -> None:
        if not interrupt.first():
            return
        end_local_workers()  # any started since the first was lost
        raise RuntimeError(
            lost[0] if lost else _WORKER_EXITED
        )  # pipeline.runners.jobs.run_pipeline reports it as WorkerLost

    previous_handler = signal.signal(signal.SIGUSR1, stop)
    threading.excepthook = hook
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(quiet_after_loss)
    try:
        yield
    finally:
        interrupt.end("lost_worker_signal")  # no more signals after this: the handler is restored below
        for handler in handlers:
            handler.removeFilter(quiet_after_loss)
        threading.excepthook = previous_hook
        signal.signal(signal.SIGUSR1, previous_handler)
