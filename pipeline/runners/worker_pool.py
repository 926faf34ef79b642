"""A Beam worker pool for ``--environment_type EXTERNAL`` whose SDK workers run on this interpreter.

    .venv/bin/python -m pipeline.worker_pool --service_port 50000

Beam's own pool (``apache_beam.runners.worker.worker_pool_main``) starts each SDK worker as ``python -c ...``: the
first ``python`` on ``PATH``. Outside an activated venv that is another interpreter, usually one without Beam, and
the job then waits for ever at "Requesting worker at localhost:50000" while the worker's
``ModuleNotFoundError: apache_beam`` goes to the pool's log (with no ``python`` on ``PATH``, a multi-page
traceback). This pool is Beam's, except that its workers are started with ``sys.executable``, the interpreter that
runs the pool and has imported Beam. Started by an interpreter without Beam, it says so in one line (exit 2).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time

from schemas import commands

try:
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker import worker_pool_main
except ModuleNotFoundError as e:  # run by a python without the project's packages
    print(
        f"pipeline.worker_pool: error: {sys.executable} cannot import {e.name} (run it with the project's venv: "
        ".venv/bin/python -m pipeline.worker_pool --service_port PORT)",
        file=sys.stderr,
    )
    raise SystemExit(2) from None

log = logging.getLogger("pipeline.worker_pool")


def sdk_worker_command(request: beam_fn_api_pb2.StartWorkerRequest, state_cache_size: int, buffer_ms: int) -> list:
    """The command of Beam's pool for one SDK worker, with this interpreter in place of ``python``."""
    harness = (
        "from pipeline.runners.sdk_worker import install_logging, shorten_state_sampling; install_logging(); "  # before Beam
        "from pipeline import faults; faults.arm(); "  # the test hook SPANPREP_FAULT, in SDK workers only
        "from apache_beam.runners.worker.sdk_worker import SdkHarness; shorten_state_sampling(); "
        f"SdkHarness({request.control_endpoint.url!r}, worker_id={request.worker_id!r}, "
        f"state_cache_size={int(state_cache_size)}, data_buffer_time_limit_ms={int(buffer_ms)}).run()"
    )
    return [sys.executable, "-c", harness]


class WorkerPool(worker_pool_main.BeamFnExternalWorkerPoolServicer):
    """Beam's worker pool servicer in process mode, its SDK workers started by :func:`sdk_worker_command`."""

    def StartWorker(self, start_worker_request, unused_context):  # the gRPC method's name
        if not self._use_process or self._container_executable:
            return super().StartWorker(start_worker_request, unused_context)
        command = sdk_worker_command(start_worker_request, self._state_cache_size, self._data_buffer_time_limit_ms)
        try:
            process = subprocess.Popen(command, close_fds=True)
        except OSError as e:
            return beam_fn_api_pb2.StartWorkerResponse(error=f"cannot start {sys.executable}: {e}")
        log.info("SDK worker %s started (%s, pid %d)", start_worker_request.worker_id, sys.executable, process.pid)
        self._worker_processes[start_worker_request.worker_id] = process
        return beam_fn_api_pb2.StartWorkerResponse()


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog=commands.module("pipeline.worker_pool"),
        description="Beam's worker pool for --environment_type EXTERNAL, its SDK workers on this interpreter.",
    )
    parser.add_argument("--service_port", type=int, required=True, help="port the pool listens on (0: any free one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    address, server = WorkerPool.start(use_process=True, port=args.service_port)
    log.info("worker pool at %s; SDK workers run on %s", address, sys.executable)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main()
