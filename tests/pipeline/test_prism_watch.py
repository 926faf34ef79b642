"""A job on Prism fails within ``PRISM_GRACE_S`` once its SDK worker is lost, even when Prism itself never fails the
job (pipeline/runners/prism_watch.py says when Prism v2.77.0 does not): seen in Prism's log line, or in the process
at the other end of a connection Prism accepted having ended. Real signals, threads, sockets and processes: a
stand-in for Prism (this interpreter under the name ``prism``, with ``--job_port``, accepting connections) and a
worker process connected to it, SIGKILLed."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pipeline.runners import lost_workers, prism_watch, procfs
from tests.conftest import free_port
from tests.support import beam_services


def _prism_says(message: str) -> None:
    def log() -> None:
        logging.getLogger("PrismRunner").warning(message)

    thread = threading.Thread(target=log, name="Thread-7 (log_stdout)")  # as Beam's reader of Prism's output
    thread.start()
    thread.join()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def root_handler(monkeypatch):
    monkeypatch.setattr(prism_watch, "PRISM_GRACE_S", 0.3)
    handler = _Lines()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)
    for f in list(handler.filters):
        handler.removeFilter(f)


def _wait_to_be_interrupted() -> None:
    for _ in range(300):  # the launcher waiting for the job's state, 30 s at most
        time.sleep(0.1)


def test_the_wait_ends_once_prism_said_a_worker_disconnected_and_did_not_fail_the_job(root_handler):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="SDK worker disconnected and Prism did not fail the job"):
        with prism_watch.watch_prism(True, prism_watch.PrismWatch()):
            _prism_says("additional bundle response (error: 'SDK worker disconnected: worker[...]')")
            _wait_to_be_interrupted()
    assert time.monotonic() - started < 20


def test_other_lines_and_a_job_that_ends_in_time_are_left_alone(root_handler):
    with prism_watch.watch_prism(True, prism_watch.PrismWatch()):
        _prism_says("pipeline is running")
        time.sleep(1.0)  # past the grace: nothing was lost, nothing is raised
    with prism_watch.watch_prism(True, prism_watch.PrismWatch()):
        _prism_says("bundle failed: SDK worker disconnected")  # Prism fails the job itself, at once
    time.sleep(1.0)  # the context was left in time: no signal comes later
    assert root_handler.lines == ["pipeline is running", "bundle failed: SDK worker disconnected"]
    assert not root_handler.filters  # a job that did not fail leaves the handlers as they were


_PRISM = """
import socket, sys, time
server = socket.create_server(("127.0.0.1", int(sys.argv[2])))
accepted = []
while True:
    accepted.append(server.accept())
"""
_WORKER = "import socket, sys, time; c = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); time.sleep(600)"


@pytest.fixture
def prism_and_worker(tmp_path):
    """A stand-in for Prism (a child of this process named ``prism``, run with ``--job_port``) and a worker process
    connected to it; both ended at the end."""
    os.symlink(sys.executable, tmp_path / "prism")
    port = free_port()
    prism = subprocess.Popen([str(tmp_path / "prism"), "-c", _PRISM, "--job_port", str(port)])
    worker = None
    try:
        for _ in range(100):
            try:
                worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(port)], stderr=subprocess.PIPE)
                worker.wait(timeout=0.5)  # refused: Prism does not listen yet
                worker = None
                time.sleep(0.1)
            except subprocess.TimeoutExpired:
                break  # connected and waiting
        assert worker is not None, "the worker never connected"
        yield prism, worker
    finally:
        for p in (prism, worker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_a_worker_process_connected_to_prism_that_dies_ends_the_wait_without_any_line_of_prisms(
    root_handler, prism_and_worker
):
    _, worker = prism_and_worker
    watch = prism_watch.PrismWatch()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"the SDK worker process {worker.pid} connected to Prism ended and Prism"):
        with prism_watch.watch_prism(True, watch):
            while worker.pid not in watch.workers.workers and time.monotonic() - started < 20:
                time.sleep(0.1)  # the watch has found it (the launcher's own connection would not count)
            assert worker.pid in watch.workers.workers and os.getpid() not in watch.workers.workers
            os.kill(worker.pid, signal.SIGKILL)  # not reaped: a zombie, as in the worker pool
            _wait_to_be_interrupted()
    assert time.monotonic() - started < 25
    assert worker.poll() == -signal.SIGKILL


def test_a_living_worker_is_no_loss_and_a_failure_without_one_is_not_explained(root_handler, prism_and_worker):
    _, worker = prism_and_worker
    watch = prism_watch.PrismWatch()
    with prism_watch.watch_prism(True, watch):
        time.sleep(1.5)  # three polls, past the grace
    assert worker.pid in watch.workers.workers and not watch.lost
    assert watch.explains(RuntimeError("Pipeline job-001 failed in state FAILED: a step raised")) is None


def test_prisms_panic_after_a_lost_worker_is_the_lost_worker_in_one_line():
    watch = prism_watch.PrismWatch()
    watch.lost.append("Prism: SDK worker disconnected")
    panic = (
        "Pipeline job-001 failed in state FAILED: panic in stage.Execute bundle processing goroutine: send on closed"
        " channel, stage: &{ID:stage-166 transforms:[ref_AppliedPTransform_WriteRemoved-KeyByReason_383]},stackTrace:"
        "\ngoroutine 154 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e"
    )
    assert watch.explains(RuntimeError(panic)) == (
        "Prism: SDK worker disconnected; then Pipeline job-001 failed in state FAILED: panic in stage.Execute bundle"
        " processing goroutine: send on closed channel"
    )
    assert prism_watch.without_go_stack("Bundle Failed. (\nerror:\npanic: x\ngoroutine 154 [running]:\nmain()\n)") == (
        "Bundle Failed. (\nerror:\npanic: x (Go stack trace left out)"
    )


def _raise_in_a_thread(error: BaseException) -> None:
    def run() -> None:
        raise error

    thread = threading.Thread(target=run, name="wait_until_finish_read")
    thread.start()
    thread.join()


def test_once_the_job_failed_no_line_of_prisms_comes_after_and_stream_errors_are_dropped(root_handler):
    import grpc

    previous_hook = threading.excepthook
    reported: list[str] = []
    threading.excepthook = lambda args: reported.append(repr(args.exc_value))
    try:
        with pytest.raises(RuntimeError, match="the job failed"):
            with prism_watch.watch_prism(True, prism_watch.PrismWatch()):
                _prism_says("job failed (error: panic: x\ngoroutine 7 [running]:\nmain()\n)")
                raise RuntimeError("the job failed")
        _prism_says("Bundle Failed.")  # after the failure: dropped
        logging.getLogger("pipeline.build_shards").warning("the launcher's own line")  # kept
        _raise_in_a_thread(grpc.RpcError("Stream removed (Socket closed)"))  # Beam's reader of the closed stream
        _raise_in_a_thread(ValueError("another thread's own error"))  # still reported
    finally:
        threading.excepthook = previous_hook
    assert root_handler.lines == ["job failed (error: panic: x (Go stack trace left out)", "the launcher's own line"]
    assert reported == ['ValueError("another thread\'s own error")']
    with prism_watch.watch_prism(True, prism_watch.PrismWatch()):  # the next job in the same process
        _prism_says("pipeline is running")
    assert root_handler.lines[-1] == "pipeline is running" and not root_handler.filters


def test_a_line_of_prisms_being_filtered_as_the_job_fails_still_meets_the_gate(root_handler):
    """Beam's log_stdout thread goes through the handler's filter list (``logging.Filterer.filter``) while the job
    fails in the main thread. The watch used to ``removeFilter`` its own filter in that list as the job ended: a thread
    past it then stepped over the gate, and a line of Prism's came after the job's line (the CI run of 2026-11-29, and
    1 run in ~7 of the Prism kill while reading under load). Here that thread's walk is replayed step by step."""
    walk = None
    with pytest.raises(RuntimeError, match="the job failed"):
        with prism_watch.watch_prism(True, prism_watch.PrismWatch()):
            walk = iter(root_handler.filters)  # the list the logging thread goes through, as Filterer.filter does
            first = next(walk)  # the thread is in the filter before the gate...
            assert not isinstance(first, prism_watch._Gate)
            raise RuntimeError("the job failed")  # ...when the job fails
    rest = list(walk)
    assert [type(f) for f in rest] == [prism_watch._Gate]  # the thread still meets the gate, which drops the line
    line = logging.LogRecord("PrismRunner", logging.WARNING, "", 0, "Bundle Failed.", None, None)
    line.threadName = "Thread-7 (log_stdout)"
    assert not rest[0].filter(line) and root_handler.lines == []


def test_a_sender_still_being_started_as_the_job_ends_is_not_joined(monkeypatch):
    """``threading.enumerate`` lists a thread whose ``start`` has not returned yet (in Python's ``_limbo``); joining
    it raised "cannot join thread before it is started" in place of the job's error."""
    starting = threading.Thread(target=lambda: None, name="prism_gives_up")  # created, not started
    monkeypatch.setattr(threading, "enumerate", lambda: [threading.main_thread(), starting])
    interrupt = lost_workers.Interrupt()
    interrupt.end("prism_gives_up")
    assert interrupt.done.is_set()


@pytest.fixture
def worker_pool(tmp_path):
    """The project's worker pool in a process of its own (as a user starts it, not below this one): its process and
    ``localhost:PORT``; stopped at the end with the SDK workers it started."""
    proc, port = beam_services.start(beam_services.WORKER_POOL, tmp_path / "pool.log")
    try:
        yield proc, f"localhost:{port}"
    finally:
        beam_services.stop(proc)


def _start_worker(pool: subprocess.Popen, address: str, worker_id: str, control_port: int) -> int:
    """Ask the pool (its gRPC ``StartWorker``, as Prism does) for an SDK worker whose control endpoint is
    ``localhost:control_port``, where nothing listens (the worker waits for it); the new child's pid."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

    before = procfs.children(pool.pid)
    with grpc.insecure_channel(address) as channel:
        response = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel).StartWorker(
            beam_fn_api_pb2.StartWorkerRequest(
                worker_id=worker_id,
                control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{control_port}"),
            ),
            timeout=60,
        )
    assert not response.error, response.error
    (child,) = procfs.children(pool.pid) - before
    return child


def _kill(pid: int) -> None:
    """SIGKILL ``pid`` (a child of the pool) and wait until it is a zombie: the pool reaps it only when told to stop
    it."""
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if (procfs.stat(pid) or ("Z",))[0] == "Z":
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs 10 s after SIGKILL")


def test_the_worker_pools_children_started_for_this_job_are_its_workers(worker_pool):
    """Real pool, real children: a child that was there before the watch started, or that serves another Prism, is
    not this job's worker; one started for this job's Prism that ends is a lost worker; so is one that had already
    ended when the watch first saw it (killed as it started: no command line to read)."""
    pool, address = worker_pool
    prism_port = free_port()  # where this job's Prism would serve its workers, and another job's Prism
    other_port = next(port for port in iter(free_port, None) if port != prism_port)
    earlier = _start_worker(pool, address, "earlier", prism_port)
    watch = prism_watch._PoolChildren(address)
    watch.start()
    assert watch.pool == {pool.pid} and {pid for pid, _ in watch.before} == {earlier}
    other = _start_worker(pool, address, "other", other_port)
    ours = _start_worker(pool, address, "ours", prism_port)
    assert watch.poll({prism_port}) is None  # all of them run
    assert list(watch.workers) == [ours] and {pid for pid, _ in watch.others} == {other}
    _kill(earlier)
    _kill(other)
    assert watch.poll({prism_port}) is None
    _kill(ours)
    assert watch.poll({prism_port}) == f"the SDK worker process {ours} started by the worker pool at {address} ended"

    watch = prism_watch._PoolChildren(address)  # the next job: the ended children are there before it
    watch.start()
    assert {pid for pid, _ in watch.before} == {earlier, other, ours}
    quick = _start_worker(pool, address, "quick", prism_port)
    _kill(quick)  # a zombie when first seen
    assert watch.poll(set()) is None and not watch.workers  # Prism is not known yet: nothing is this job's
    assert watch.poll({prism_port}) == f"the SDK worker process {quick} started by the worker pool at {address} ended"


_FORKING_POOL = """
import os, socket, sys, time
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
control_endpoint = sys.stdin.readline().strip()
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:  # a worker between fork and exec: the pool's own command line, until told to run its program
    os.read(read_end, 1)
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", control_endpoint])
print(child, flush=True)
sys.stdin.readline()
os.write(write_end, b"x")
time.sleep(60)
"""


def test_a_child_not_yet_running_its_own_program_is_decided_once_it_runs_it():
    """A poll can find the pool's new child between its fork and its exec, still showing the pool's command line
    (which names no Prism port): it is not set aside as another job's worker, and is this job's once it runs."""
    prism_port = free_port()
    pool = subprocess.Popen(
        [sys.executable, "-c", _FORKING_POOL],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert pool.stdin is not None and pool.stdout is not None
    child = None
    try:
        address = f"localhost:{int(pool.stdout.readline())}"
        watch = prism_watch._PoolChildren(address)
        watch.start()
        assert watch.pool == {pool.pid} and not watch.before
        pool.stdin.write(f"localhost:{prism_port}\n")  # fork a worker for it
        pool.stdin.flush()
        child = int(pool.stdout.readline())
        assert watch.poll({prism_port}) is None
        assert not watch.workers and not watch.others  # not decided yet
        pool.stdin.write("exec\n")  # and let it run its program
        pool.stdin.flush()
        for _ in range(200):
            if f"localhost:{prism_port}" in procfs.command(child):
                break
            time.sleep(0.05)
        assert watch.poll({prism_port}) is None and list(watch.workers) == [child] and not watch.others
        _kill(child)
        assert (
            watch.poll({prism_port}) == f"the SDK worker process {child} started by the worker pool at {address} ended"
        )
    finally:
        for pid in (child, pool.pid):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        pool.wait()


def test_a_worker_pool_not_on_this_machine_or_not_found_is_not_watched():
    for address in ("pool.example.com:50000", f"localhost:{free_port()}", None):  # elsewhere; nothing listens here
        watch = prism_watch._PoolChildren(address)
        watch.start()
        assert not watch.pool and watch.poll({50000}) is None
    assert prism_watch.pool_address("EXTERNAL", "localhost:50000") == "localhost:50000"
    assert prism_watch.pool_address("external", '{"url": "127.0.0.1:50001"}') == "127.0.0.1:50001"
    assert prism_watch.pool_address("LOOPBACK", "localhost:50000") is None
    assert prism_watch.pool_address("EXTERNAL", '{"no url": 1}') is None
