"""A job on Prism whose SDK worker process dies fails within :data:`PRISM_GRACE_S` seconds, in one line, whatever
Prism does: :func:`watch_prism`, which ``pipeline.runners.jobs.run_pipeline`` runs a Prism job inside.

Prism v2.77.0 fails such a job itself only when the worker held a bundle that had not yet answered. When the
worker's control stream ends (``worker.(*W).Control``), Prism answers each *active* instruction "SDK worker
disconnected" and marks the worker stopped; its data stream just ends. Seen in SIGKILLs while shards were written
(about 1 run in 4 under load; goroutine dumps in docs/RUNNING.md, "A worker lost mid-job"):

- the only active bundle had already answered and waited for the rest of its data (Prism logs "additional bundle
  response (... SDK worker disconnected ...)"; the other active instruction was a progress request), or none was
  active (then Prism logs nothing at all above debug): no bundle fails, and ``stage.Execute`` waits for the data or
  the answer for ever (its progress loop, ``stage.go:206``); the job logs "pipeline is running" every minute;
- the next bundle given to the stopped worker (``worker.(*B).ProcessOn``) selects between the worker's closed
  ``StoppedChan`` and a send on its closed request channel, and Go picks either at random: the send panics ("send
  on closed channel", the job's failure, with a Go stack trace), the other waits for ever as above.

No process keeps the dead worker's connections open (its sockets close with it; Prism shows no connection from it
any more): the cause is in Prism. So the launcher watches the worker itself, through three things:

- a line of Prism's log saying an SDK worker disconnected (read by Beam's ``log_stdout`` thread);
- the processes connected to Prism: Prism (the launcher's child ``prism ... --job_port N``) serves its SDK workers
  on the port of its job service; the processes at the other end of the connections it accepted, other than the
  launcher and Prism itself, are its workers (found once per new connection, in ``/proc``: Linux), and one that has
  ended (killed, out of memory; a zombie counts) is a lost worker, whether or not Prism noticed;
- on an ``EXTERNAL`` job, the worker pool's child processes (:class:`_PoolChildren`): the process listening on the
  port of ``--environment_config`` on this machine (found in ``/proc``; it need not be the launcher's descendant),
  and its children started after the watch did for this job's Prism. One that ends is a lost worker too, even when it
  never connected to Prism (killed as it started: Prism v2.77.0 fails the job only after 60 s, "didn't get control
  connection", and the pool cannot tell Prism, which panics on a ``StartWorker`` error) or was killed before a poll
  of the connections had found it. A pool on another machine, or one no process here listens for, is not watched.
  A job that ends normally stops its worker as it ends: the grace covers that (the job leaves the watch first).

Any of them starts the grace; when it is over and the job still runs, the launcher's main thread, waiting for the job's
state, is interrupted as ``lost_workers.stop_the_job`` does it and raises the lost worker's line
(``jobs.run_pipeline`` reports it as ``WorkerLost``). A job that fails once a loss was seen (Prism's panic) is a
lost worker too (:meth:`PrismWatch.explains`). Once a Prism job has failed, what Prism's server still prints and
the errors of Beam's threads reading its closed streams are dropped, so the job's one line is the last; a Go stack
trace in a line of Prism's is cut off where it starts (:func:`without_go_stack`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import threading
from collections.abc import Iterator

from pipeline.runners import lost_workers, procfs

# How long Prism may take to fail a job once its worker is seen lost before the launcher fails it.
PRISM_GRACE_S = 10.0
_GAVE_UP = "did not fail the job"
POLL_S = 0.5  # how often the processes connected to Prism and the pool's children are looked at
_GO_STACK = re.compile(r",?\s*(?:stackTrace:|\n?goroutine \d+ \[)")
_LOCAL_HOSTS = ("localhost", "::1", "[::1]", "0.0.0.0", "[::]", "")  # and 127.*: a worker pool on this machine


def without_go_stack(text: str) -> str:
    """``text`` up to where a Go stack trace starts ("stackTrace:", "goroutine N ["), marked as left out."""
    found = _GO_STACK.search(text)
    return text if found is None else text[: found.start()].rstrip(" ,\n") + " (Go stack trace left out)"


def _prism_process() -> int | None:
    """The launcher's Prism process: a descendant running ``prism ... --job_port N``."""
    for pid in lost_workers.descendants(os.getpid()):
        argv = procfs.read(f"/proc/{pid}/cmdline").split("\0")
        if os.path.basename(argv[0]).startswith("prism") and "--job_port" in argv:
            return pid
    return None


def pool_address(environment_type: str | None, environment_config: str | None) -> str | None:
    """``HOST:PORT`` of an ``EXTERNAL`` environment's worker pool (``--environment_config``, or its JSON's ``url``);
    None for another environment or a config that names none."""
    if (environment_type or "").upper() != "EXTERNAL" or not environment_config:
        return None
    if environment_config.lstrip().startswith("{"):
        try:
            return str(json.loads(environment_config)["url"])
        except (ValueError, KeyError, TypeError):
            return None
    return environment_config.strip()


def _local_port(address: str | None) -> int | None:
    """The port of ``address`` when it names this machine (a loopback address, or this host's name)."""
    host, _, port = (address or "").rpartition(":")
    if not port.isdigit() or not (host in _LOCAL_HOSTS or host.startswith("127.") or host == socket.gethostname()):
        return None
    return int(port)


class _PoolChildren:
    """The child processes of the worker pool at ``address`` (``--environment_config`` of an ``EXTERNAL`` job) that
    were started after :meth:`start` for this job's Prism, and which of them has ended. A child is this job's SDK
    worker when its command line names the port Prism serves its workers on (the control endpoint the pool was
    given: another job's worker from the same pool names its own Prism's), or when it had ended when first seen (a
    zombie shows no command line); one that still shows the pool's own command line (forked, not yet running the
    worker's program) is looked at again at the next poll. No watch when the pool is on another machine (its address
    is not this machine's) or no process here listens on its port."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self.pool: set[int] = set()  # the processes listening on the pool's port
        self.commands: set[str] = set()  # their command lines
        self.before: set[tuple[int, str]] = set()  # (pid, start) of the children there when the watch started
        self.others: set[tuple[int, str]] = set()  # children another Prism asked for
        self.workers: dict[int, str] = {}  # pid -> start of this job's SDK workers

    def start(self) -> None:
        """Find the pool's process and note the children it has before the job starts."""
        port = _local_port(self.address)
        self.pool = procfs.listeners(port) if port is not None else set()
        self.commands = {procfs.command(pid) for pid in self.pool}
        self.before = {(pid, start) for pid, _, start in self._children()}

    def _children(self) -> list[tuple[int, str, str]]:
        """(pid, state, start) of every child of the pool's processes."""
        found = []
        for pool in self.pool:
            for pid in procfs.children(pool):
                state = procfs.stat(pid)
                if state is not None:  # not reaped meanwhile
                    found.append((pid, *state))
        return found

    def poll(self, prism_ports: set[int]) -> str | None:
        """Note the pool's new children that serve Prism at ``prism_ports`` (none while Prism is not known); the
        line of one that has ended, if one has."""
        for pid, state, start in self._children() if prism_ports else []:
            if (pid, start) in self.before or (pid, start) in self.others or pid in self.workers:
                continue
            command = procfs.command(pid) if state != "Z" else ""
            if command in self.commands:
                continue  # forked, not yet running the worker's program (its command line is the pool's)
            if command and not any(re.search(rf":{port}(?!\d)", command) for port in prism_ports):
                self.others.add((pid, start))
            else:
                self.workers[pid] = start
        for pid, start in self.workers.items():
            if procfs.started(pid) != start:
                return f"the SDK worker process {pid} started by the worker pool at {self.address} ended"
        return None


class _Workers:
    """The processes connected to Prism's worker endpoint and the worker pool's children serving Prism, and which of
    them has ended."""

    def __init__(self, pool: str | None = None) -> None:
        self.prism: int | None = None
        self.ports: set[int] = set()  # the ports Prism listens on (its job service's, where it serves its workers)
        self.seen: set[tuple[int, int]] = set()  # the connections (peer's port, Prism's port) already looked up
        self.workers: dict[int, str] = {}  # pid -> when it started
        self.pool = _PoolChildren(pool)

    def _peers(self) -> set[tuple[int, int]]:
        """(the peer's port, Prism's port) of every connection accepted on Prism's worker endpoint (by port: an
        IPv4 peer of an IPv6 socket has another address in each table)."""
        if self.prism is None:
            self.prism = _prism_process()
            if self.prism is None:
                return set()
        held, table = procfs.sockets(self.prism), procfs.tcp_table(self.prism)
        listening = {
            procfs.port(local) for local, _, state, inode in table if state == procfs.LISTENING and inode in held
        }
        self.ports |= listening
        return {
            (procfs.port(remote), procfs.port(local))
            for local, remote, state, inode in table
            if state == procfs.ESTABLISHED and inode in held and procfs.port(local) in listening
        }

    def _owners(self, peers: set[tuple[int, int]]) -> None:
        """Note the processes holding the sockets at the other end of ``peers`` (other than this one)."""
        assert self.prism is not None
        inodes = {
            inode
            for local, remote, state, inode in procfs.tcp_table(self.prism)
            if state == procfs.ESTABLISHED and (procfs.port(local), procfs.port(remote)) in peers
        }
        for pid in procfs.processes():
            if pid not in (os.getpid(), self.prism) and procfs.sockets(pid) & inodes:
                started = procfs.started(pid)
                if started is not None:
                    self.workers.setdefault(pid, started)

    def poll(self) -> str | None:
        """Look up new connections' processes and the pool's new children; the line of a worker that has ended, if
        one has."""
        new = self._peers() - self.seen
        if new:
            self.seen |= new
            self._owners(new)
        for pid, started in self.workers.items():
            if procfs.started(pid) != started:
                return f"the SDK worker process {pid} connected to Prism ended"
        return self.pool.poll(self.ports)


class _Gate(logging.Filter):
    """On a root handler during a Prism job: Prism's lines (Beam's ``log_stdout`` thread) are written under one lock,
    and none once :meth:`close` has run (the job failed), so none can come after the job's line. Cuts Go stack
    traces off every line (:func:`without_go_stack`)."""

    def __init__(self, handler: logging.Handler, lock: threading.Lock, closed: threading.Event) -> None:
        super().__init__()
        self.handler, self.lock, self.closed = handler, lock, closed

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "goroutine " in message or "stackTrace:" in message:
            record.msg, record.args = without_go_stack(message), None
        if "(log_stdout)" not in (record.threadName or ""):
            return True
        with self.lock:
            if not self.closed.is_set():
                self.handler.acquire()
                try:
                    self.handler.emit(record)
                finally:
                    self.handler.release()
        return False


class PrismWatch:
    """What :func:`watch_prism` saw: :attr:`lost` holds the line of a lost worker, once one was seen."""

    def __init__(self, pool: str | None = None) -> None:
        self.lost: list[str] = []
        self.workers = _Workers(pool)  # pool: HOST:PORT of an EXTERNAL job's worker pool (pool_address)

    def explains(self, error: BaseException) -> str | None:
        """The line for the job's failure ``error`` when a lost worker caused it: the watch's own (Prism did not
        fail the job), or Prism's failure once a worker was seen lost (looked for once more here: Prism's failure
        may come first); None otherwise."""
        text = str(error)
        if _GAVE_UP in text:
            return text.splitlines()[0]
        if not self.lost:
            with contextlib.suppress(OSError):
                found = self.workers.poll()
                if found:
                    self.lost.append(found)
        if not self.lost or "SDK worker disconnected" in text:
            return None  # not lost, or Prism's own line says it (jobs._LOST_WORKER)
        prisms = without_go_stack(text).splitlines()[0].split(", stage: &{")[0]
        return f"{self.lost[0]}; then {prisms}"[:400]


def _set_filters(handler: logging.Handler, filters: list) -> None:
    """Give ``handler`` a new list of filters. Never ``addFilter``/``removeFilter`` while Prism's lines may come:
    those change the list a logging thread may be going through (``Filterer.filter``), and a filter removed before
    the gate made that thread step over the gate, so a Prism line came after the job's line (1 run in ~7 under load)."""
    handler.filters = filters


def _quiet_stream_errors(previous):
    """A ``threading.excepthook`` that drops gRPC's errors (Beam's threads reading the failed job's closed streams,
    e.g. ``wait_until_finish_read``: "Stream removed (Socket closed)") and passes on the rest."""

    def hook(args) -> None:
        if type(args.exc_value).__module__.split(".")[0] != "grpc":
            previous(args)

    return hook


@contextlib.contextmanager
def watch_prism(active: bool, watch: PrismWatch) -> Iterator[PrismWatch]:
    """Inside, on Prism: a lost SDK worker fails the job within :data:`PRISM_GRACE_S` (the module docstring says
    how it is seen); if the job fails, Prism's later lines and Beam's stream errors are dropped for good."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield watch
        return
    interrupt = lost_workers.Interrupt()

    def lose(line: str) -> None:
        if not watch.lost:
            watch.lost.append(line)
            threading.Thread(target=give_up, name="prism_gives_up", daemon=True).start()

    def give_up() -> None:
        if not interrupt.done.wait(PRISM_GRACE_S):
            interrupt.send()

    def look() -> None:
        while not interrupt.done.wait(POLL_S) and not watch.lost:
            try:
                found = watch.workers.poll()
            except (OSError, ValueError):  # a process or socket gone as it was read: look again
                continue
            if found:
                lose(found)

    def heard(record: logging.LogRecord) -> bool:
        if "(log_stdout)" in (record.threadName or "") and "SDK worker disconnected" in record.getMessage():
            lose("Prism: SDK worker disconnected")
        return True

    def stop(signum, frame) -> None:
        if interrupt.first():
            raise RuntimeError(f"{watch.lost[0]} and Prism {_GAVE_UP} within {PRISM_GRACE_S:.0f} s")

    with contextlib.suppress(OSError, ValueError):  # the pool's children before the job: not its workers
        watch.workers.pool.start()
    previous_handler = signal.signal(signal.SIGUSR1, stop)
    lock, closed = threading.Lock(), threading.Event()
    handlers = list(logging.getLogger().handlers)
    gates = [_Gate(handler, lock, closed) for handler in handlers]
    for handler, gate in zip(handlers, gates, strict=True):  # an earlier failed job's gates go (a test's: it is over)
        _set_filters(handler, [f for f in handler.filters if not isinstance(f, _Gate)] + [heard, gate])
    threading.Thread(target=look, name="prism_workers", daemon=True).start()
    failed = False
    try:
        yield watch
    except BaseException:
        failed = True
        with lock:
            closed.set()  # no line of Prism's after this one: the job's line comes last
        threading.excepthook = _quiet_stream_errors(threading.excepthook)
        raise
    finally:
        interrupt.end("prism_gives_up")
        interrupt.end("prism_workers")
        for handler, gate in zip(handlers, gates, strict=True):
            _set_filters(handler, [f for f in handler.filters if f is not heard and (failed or f is not gate)])
        signal.signal(signal.SIGUSR1, previous_handler)
