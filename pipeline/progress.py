"""Progress of a job's reading: Beam counters on every runner, and a line every ``--progress-seconds`` locally.

Workers call :func:`add` as they read (documents or lines, and raw input bytes); :func:`counted_file` and
:func:`counted_chunks` do it for a file object or a stream of raw chunks. Every call adds to this process's
tally of its *phase*: a job that reads its input more than once names each extra read (``build_shards --dedup``'s
pre-pass is ``"dedup pre-pass"``; :func:`counting_as` wraps the read, ``MAIN`` is the read that feeds the job's
output), so that no document or byte is counted twice in one figure. At most once a second (and at :func:`flush`,
which the reading DoFns call in ``finish_bundle``) the tally goes to

- Beam counters ``progress:documents`` and ``progress:bytes`` (the Dataflow, Flink and Spark UIs show them while
  the job runs, per step: a pre-pass's are its reading step's; the launcher logs the input's total size at the
  start);
- when the launcher runs the workers on this machine (``FnApiRunner``, in-process or
  ``--direct_running_mode multi_processing``), a small file per worker process in the directory that
  :func:`reporting` creates and names in the ``SPANPREP_PROGRESS_DIR`` environment variable (worker processes
  inherit it). The launcher's reporter thread sums those files and logs, every ``--progress-seconds``, the
  documents and bytes read, of the input's total bytes, the throughput and an ETA, for the main read and then for
  each other phase begun (``12 documents, 0.1 of 0.3 MB read (40.0%) ...; dedup pre-pass: 69 documents, 0.3 of 0.3
  MB read (100.0%) ...``); on a terminal it draws a tqdm bar of the phase read last instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO, TypeVar, cast

from apache_beam.metrics import Metrics
from apache_beam.metrics.execution import MetricsEnvironment
from apache_beam.options.pipeline_options import PipelineOptions

ENV = "SPANPREP_PROGRESS_DIR"
NAMESPACE = "progress"
FLUSH_EVERY_S = 1.0
DEFAULT_SECONDS = 30.0
MAIN = ""  # the phase of the read that feeds the job's output; other phases are named by what they read for

log = logging.getLogger("pipeline.progress")


class ProgressOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--progress-seconds",
            "--progress_seconds",
            dest="progress_seconds",
            type=float,
            default=DEFAULT_SECONDS,
            help="local runs: a progress line (documents and bytes read, throughput, ETA) this often; 0: none",
        )
        parser.add_argument(
            "--log-level",
            "--log_level",
            dest="log_level",
            default=None,
            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
            help="this job's log level (default INFO) and its Beam workers' (default WARNING: their INFO is start-up "
            "chatter)",
        )


# ------------------------------------------------------------------------------------------------
# Worker side: this process's tally


class _Tally:
    def __init__(self) -> None:
        self.directory: str | None = None
        # phase -> [documents, bytes, wall time of its first count]: flushed, and not yet in the Beam counters
        self.counts: dict[str, list] = {}
        self.pending: dict[str, list] = {}
        self.flushed_at = 0.0
        self.lock = threading.Lock()


_tally = _Tally()
# .phase: what this thread's reading counts as (MAIN unless counting_as says); .for_beam: [documents, bytes] this
# thread's bundle counted and has not yet put in the Beam counters. Only a bundle's counts go there, and only its
# own: a count made outside one (a launcher reading input itself, an earlier test in the process) is this process's
# alone, and a bundle that failed before it flushed leaves nothing to the next (:func:`start_bundle`): a runner that
# retries a failed bundle counts its input once.
_current = threading.local()
_documents_counter = Metrics.counter(NAMESPACE, "documents")
_bytes_counter = Metrics.counter(NAMESPACE, "bytes")

T = TypeVar("T")


def add(documents: int = 0, nbytes: int = 0, phase: str | None = None) -> None:
    """Count ``documents`` read and ``nbytes`` raw input bytes read (inside a DoFn: the counters are the step's), in
    ``phase`` (default: the phase this thread reads in, see :func:`counting_as`)."""
    tally = _tally
    if phase is None:
        phase = getattr(_current, "phase", MAIN)
    with tally.lock:
        counts = tally.pending.get(phase)
        if counts is None:
            counts = tally.pending[phase] = [0, 0, time.time()]
        counts[0] += documents
        counts[1] += nbytes
    if MetricsEnvironment.current_container() is not None:
        for_beam = getattr(_current, "for_beam", None)
        if for_beam is None:
            for_beam = _current.for_beam = [0, 0]
        for_beam[0] += documents
        for_beam[1] += nbytes
    if time.monotonic() - tally.flushed_at >= FLUSH_EVERY_S:
        flush()


def start_bundle() -> None:
    """A step that counts calls this as its bundle starts: what this thread counted for an earlier bundle that never
    flushed (it failed) is not this bundle's."""
    _current.for_beam = None


def counting_as(phase: str, items: Iterable[T]) -> Iterator[T]:
    """``items``; what is counted in this thread while each item is produced (a reader's bytes) counts in ``phase``.
    Only the producing is: the code that takes each item runs in the caller's phase."""
    it = iter(items)
    while True:
        previous = getattr(_current, "phase", MAIN)
        _current.phase = phase
        try:
            item = next(it)
        except StopIteration:
            return
        finally:
            _current.phase = previous
        yield item


def reset() -> None:
    """Forget this process's counts (a launcher that read input itself before its job, e.g. to train a tokenizer)."""
    with _tally.lock:
        _tally.counts, _tally.pending = {}, {}
    _current.for_beam = None


def bytes_read_here() -> int:
    """Raw input bytes this process has counted since its last :func:`reset` (flushed or not, every phase)."""
    with _tally.lock:
        return sum(c[1] for c in _tally.counts.values()) + sum(c[1] for c in _tally.pending.values())


def flush() -> None:
    """Hand this process's counts to the Beam counters and, on a local run, to its progress file."""
    tally = _tally
    with tally.lock:
        pending, tally.pending = tally.pending, {}
        documents = nbytes = 0
        for_beam = getattr(_current, "for_beam", None)
        if for_beam and MetricsEnvironment.current_container() is not None:  # (outside a bundle: they wait for it)
            documents, nbytes = for_beam
            _current.for_beam = None
        directory = os.environ.get(ENV)
        if directory != tally.directory:  # a new run in this process: start again
            tally.directory, tally.counts = directory, {}
        for phase, (docs, size, first) in pending.items():
            counts = tally.counts.setdefault(phase, [0, 0, first])
            counts[0] += docs
            counts[1] += size
        tally.flushed_at = time.monotonic()
        snapshot = json.dumps(tally.counts)
    if documents:
        _documents_counter.inc(documents)
    if nbytes:
        _bytes_counter.inc(nbytes)
    if directory and os.path.isdir(directory):
        path = os.path.join(directory, str(os.getpid()))
        with contextlib.suppress(OSError):
            with open(path + ".tmp", "w") as f:
                f.write(snapshot + "\n")
            os.replace(path + ".tmp", path)


class _CountedFile:
    """A binary file whose reads are counted as input bytes, once each (other attributes are the file's).

    What is counted is the furthest position read. A seek back (the reader checks a compressed file in a first
    pass, then seeks to its start to decompress it) takes back what lies after the new position, which the
    next pass counts again: the count follows the pass that reads the records and ends at the file's size.
    """

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._pos = 0
        self._counted = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._pos += len(data)
        if self._pos > self._counted:
            add(0, self._pos - self._counted)
            self._counted = self._pos
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        result = self._f.seek(offset, whence)
        self._pos = self._f.tell()
        if self._pos < self._counted:
            add(0, self._pos - self._counted)
            self._counted = self._pos
        return result

    def __getattr__(self, name: str):
        return getattr(self._f, name)


def counted_file(f: BinaryIO) -> BinaryIO:
    """``f``, with every byte read from it counted by :func:`add`."""
    return cast(BinaryIO, _CountedFile(f))


def counted_chunks(chunks: Iterable[bytes], limit: int | None = None) -> Iterator[bytes]:
    """``chunks`` (raw input), each counted by :func:`add`; no more than ``limit`` bytes in all when given (a byte
    range of a file whose last document runs on past it: the next range counts those bytes)."""
    for chunk in chunks:
        counted = len(chunk) if limit is None else max(0, min(len(chunk), limit))
        if limit is not None:
            limit -= counted
        add(0, counted)
        yield chunk


# ------------------------------------------------------------------------------------------------
# Launcher side


def _read_totals(directory: str) -> dict[str, tuple[int, int, float]]:
    """phase -> (documents, bytes, wall time of its first count) over every worker's file."""
    totals: dict[str, tuple[int, int, float]] = {}
    for name in os.listdir(directory):
        if name.endswith(".tmp"):
            continue
        with contextlib.suppress(OSError, ValueError, TypeError):
            with open(os.path.join(directory, name)) as f:
                counts = {phase: (int(d), int(b), float(t)) for phase, (d, b, t) in json.load(f).items()}
            for phase, (d, b, t) in counts.items():
                seen = totals.get(phase, (0, 0, t))
                totals[phase] = (seen[0] + d, seen[1] + b, min(seen[2], t))
    return totals


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def describe(documents: int, nbytes: int, total_bytes: int | None, elapsed: float, unit: str = "documents") -> str:
    """One progress line: ``12,345 documents, 120.5 of 1,160.0 MB read (10.4%) in 1m00s, 2.0 MB/s, ETA 8m40s``."""
    rate = nbytes / elapsed if elapsed > 0 else 0.0
    text = f"{documents:,} {unit}, {nbytes / 1e6:,.1f}"
    if total_bytes:
        shown = min(nbytes, total_bytes)
        text += f" of {total_bytes / 1e6:,.1f} MB read ({100 * shown / total_bytes:.1f}%)"
    else:
        text += " MB read"
    text += f" in {_duration(elapsed)}, {rate / 1e6:.1f} MB/s"
    if total_bytes and rate > 0:
        text += f", ETA {_duration(max(0, total_bytes - nbytes) / rate)}" if nbytes < total_bytes else ", input read"
    return text


def describe_phases(
    phases: dict[str, tuple[int, int, float]], total_bytes: int | None, started: float, now: float, unit: str
) -> str:
    """The progress line of a job's reads: the main read's figures, then each other phase's (``label: ...``). The
    phase begun first is timed from the job's start (``started``, wall time), each later one from its first count,
    so that its rate and ETA are its own."""
    if not phases:
        return describe(0, 0, total_bytes, now - started, unit)
    first = min(t for _, _, t in phases.values())
    parts = []
    for phase in sorted(phases, key=lambda name: (name != MAIN, phases[name][2], name)):
        documents, nbytes, begun = phases[phase]
        text = describe(documents, nbytes, total_bytes, now - (started if begun == first else begun), unit)
        parts.append(f"{phase}: {text}" if phase != MAIN else text)
    return "; ".join(parts)


class _Reporter(threading.Thread):
    def __init__(self, directory: str, total_bytes: int | None, every_s: float, unit: str, bar: bool) -> None:
        super().__init__(name="spanprep-progress", daemon=True)
        self.directory, self.total_bytes, self.every_s, self.unit = directory, total_bytes, every_s, unit
        self.started = time.time()  # wall time: the workers' first counts are theirs
        self.shown = MAIN  # the phase the bar shows
        self.stopped = threading.Event()
        self.bar = None
        if bar:
            from tqdm import tqdm

            size = shutil.get_terminal_size()  # 80 x 24 when the terminal reports none (tqdm would then draw nothing)
            self.bar = tqdm(
                total=total_bytes or None,
                unit="B",
                unit_scale=True,
                desc="read",
                file=sys.stderr,
                ncols=size.columns,
                nrows=size.lines,
            )

    def run(self) -> None:
        interval = min(self.every_s, 1.0) if self.bar is not None else self.every_s
        while not self.stopped.wait(interval):
            phases = _read_totals(self.directory)
            if self.bar is None:
                log.info(
                    "progress: %s", describe_phases(phases, self.total_bytes, self.started, time.time(), self.unit)
                )
                continue
            latest = max(phases, key=lambda name: phases[name][2], default=MAIN)  # the phase read last
            if latest != self.shown:
                self.shown = latest
                self.bar.reset(total=self.total_bytes or None)
                self.bar.set_description(latest or "read", refresh=False)
            documents, nbytes, _ = phases.get(latest, (0, 0, 0.0))
            self.bar.n = min(nbytes, self.total_bytes or nbytes)
            self.bar.set_postfix_str(f"{documents:,} {self.unit}", refresh=True)

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def reporting(
    options: PipelineOptions, total_bytes: int | None, local: bool, unit: str = "documents"
) -> Iterator[None]:
    """While the block runs a job on local workers (``local``), report its reading every ``--progress-seconds``."""
    every_s = options.view_as(ProgressOptions).progress_seconds
    if not local or not every_s or every_s <= 0:
        yield
        return
    directory = tempfile.mkdtemp(prefix="spanprep-progress-")
    reset()
    previous = os.environ.get(ENV)
    os.environ[ENV] = directory
    reporter = _Reporter(directory, total_bytes, every_s, unit, bar=sys.stderr.isatty())
    reporter.start()
    try:
        yield
    finally:
        reporter.stop()
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
        shutil.rmtree(directory, ignore_errors=True)
