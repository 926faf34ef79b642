"""The SDK worker process of a local multi-process run (``--direct_running_mode multi_processing``): Beam's
``apache_beam.runners.worker.sdk_worker_main``, with the jobs' log format and without two start-up lines.

Beam's worker process logs "apitools not found, and bigquery client libraries are not available ..." while Beam is
imported (its GCP extras are absent: not our users' concern) through ``logging.warning``, which gives the root logger
a handler in ``logging.BASIC_FORMAT`` as a side effect; every later line of the worker then had no timestamp
(``INFO:pipeline.read.documents:reading ...``). Then it logs "Logging handler created." before it knows its log
level. Here the root logger gets a handler in the jobs' format (:data:`LOG_FORMAT`) that drops those two lines
*before* Beam is imported, then Beam's worker runs as it would. ``pipeline.runners.jobs`` starts the FnApiRunner's worker
processes with this module, and ``pipeline.worker_pool`` its workers with :func:`install_logging`. Importing it does
not import Beam. The worker runs without pandas, as the launcher does (:func:`without_pandas`, ``pipeline.runners.jobs``), and
ends without the interpreter's teardown once its harness returns (``schemas.quick_exit``). It arms the test hook
``SPANPREP_FAULT`` (``pipeline/faults.py``), as the worker pool's harness does.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import typing

from pipeline import faults

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # every job's lines, launcher and workers
QUIET = ("apitools not found", "Logging handler created.")
# Exceptions a step raises for a bad input, which the launcher reports in one line (pipeline.runners.jobs.run_pipeline): a
# worker does not log their tracebacks. By name, as Beam's worker logs them (its text of the traceback), and because
# importing them here would import Beam.
ONE_LINE_ERRORS = ("pipeline.dedup.eval_sets.EvalFileError", "pipeline.output.OutputError")


def shows_one_line_error(record: logging.LogRecord) -> bool:
    """Is ``record`` a log of one of :data:`ONE_LINE_ERRORS` (raised, or its traceback in the message)?"""
    if record.exc_info and record.exc_info[1] is not None:
        kind = type(record.exc_info[1])
        if f"{kind.__module__}.{kind.__qualname__}" in ONE_LINE_ERRORS:
            return True
    message = record.getMessage()
    return "Traceback" in message and any(f"{name}: " in message for name in ONE_LINE_ERRORS)


class _QuietStderr:
    """A worker's ``sys.stderr`` without the tracebacks of :data:`ONE_LINE_ERRORS` that Beam's worker prints (with
    ``print``, beside its log of them) when a bundle fails."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        if "Traceback (most recent call last)" in text and any(f"{name}: " in text for name in ONE_LINE_ERRORS):
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class QuietStartup(logging.Filter):
    """Drops Beam's two start-up lines (see the module docstring) and the tracebacks of one-line errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith(QUIET) or shows_one_line_error(record))


def install_logging() -> None:
    """The root logger's handler in :data:`LOG_FORMAT` on stderr, quiet about Beam's start-up; call it before Beam is
    imported (then Beam's import adds no ``BASIC_FORMAT`` handler of its own)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(QuietStartup())
    logging.getLogger().addHandler(handler)


class _NoPandas:
    """An import finder that refuses pandas (a finder, not ``sys.modules["pandas"] = None``: Cython's imports,
    pyarrow's among them, take a None found there for the module)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas":
            raise ModuleNotFoundError(
                "spanprep's job runs without pandas (pipeline.runners.jobs.without_pandas)", name="pandas"
            )
        return None


@contextlib.contextmanager
def without_pandas():
    """Inside the block ``import pandas`` raises ImportError, as on an install without pandas (unless pandas is
    imported already). ``pipeline.runners.jobs`` says why the jobs want that."""
    hide = "pandas" not in sys.modules
    if hide:
        sys.meta_path.insert(0, _NoPandas)
    try:
        yield
    finally:
        if hide:
            sys.meta_path.remove(_NoPandas)


# Beam's state sampler (per bundle: a thread that times each step) sleeps up to its period between samples, and a
# bundle ends only once that thread has woken up and stopped: up to 200 ms per bundle at Beam's default, 0.2 s of a
# whole-sample build's 7 s (11 bundles, measured 0.20-0.22 s of waits; 0.02 s at 20 ms). The steps' times it reports
# are unchanged, only sampled more often.
STATE_SAMPLING_MS = 20


def shorten_state_sampling() -> None:
    """Make :data:`STATE_SAMPLING_MS` the period of the state samplers Beam's bundles create from now on in this
    process (Beam's ``StateSampler`` takes it as a default argument; the bundle processor passes none)."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    code, defaults = init.__code__, init.__defaults__
    if defaults and code.co_varnames[code.co_argcount - 1] == "sampling_period_ms":
        init.__defaults__ = (*defaults[:-1], STATE_SAMPLING_MS)


def main() -> None:
    install_logging()
    faults.arm()  # the test hook SPANPREP_FAULT: read in SDK worker processes only
    sys.stderr = typing.cast(typing.TextIO, _QuietStderr(sys.stderr))  # print() of a bundle's failure goes here
    with without_pandas():  # as the launcher runs the job: Beam's import took 0.3 s more for pandas in each worker
        from apache_beam.runners.worker import sdk_worker_main

        shorten_state_sampling()
        sdk_worker_main.main(sys.argv)
    # The harness has returned: every bundle finished, every DoFn torn down. A normal exit would now tear down the
    # interpreter (0.3-0.5 s per worker here, Beam's 2,000 modules) while the FnApiRunner waits for its workers one
    # after another: 0.6-1.0 s went between a 2-worker build's manifest and the launcher's exit, 0.13-0.15 s with this.
    from schemas.quick_exit import quick_exit

    quick_exit(0)


if __name__ == "__main__":
    main()
