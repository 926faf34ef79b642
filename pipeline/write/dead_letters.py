"""WriteDeadLetters: rejected records -> ``dead_letter/<reason>.jsonl``, sorted by source position.

Scale: a reason's records all reach one call (a GroupByKey on the reason), and on a web or book corpus the removed
duplicates (``removed/duplicate.jsonl``, whose parts :func:`write_reason_file` writes too: ``removed.py``) can be a
third of the documents.
So a file is written by an external merge sort: its lines are held up to the job's spill buffer
(``--spill-buffer-mb``, as ``WriteShards`` holds documents), each full buffer is sorted and spilled to a run file in a
local temporary directory, and the runs are merged (k-way, streaming, at most ``MAX_FAN_IN`` at once) into the file.
The writer's memory is bounded by the buffer and a read buffer per open run, whatever the number of records, on a
runner that streams a group's values (Dataflow, Flink, Spark; the local FnApiRunner hands over the group as a list
it already holds); the bytes are those of one in-memory sort. The local disk holds about the file's size in runs while it is written.
"""

from __future__ import annotations

import heapq
import json
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.elements import DeadLetter
from pipeline.files import HashingSink, atomic_create
from schemas import format as fmt

DEFAULT_BUFFER_BYTES = 256 << 20  # as WriteShards: the job passes --spill-buffer-mb
LINE_OVERHEAD = 256  # bytes a buffered line costs beyond its own: its key, sequence number and the objects around them
WRITE_BLOCK = 1 << 20  # lines are written to the file in blocks of about this many bytes
_RUN_READ_BUFFER = 1 << 16  # per run while merging
MAX_FAN_IN = 32  # runs open at once: more are first merged into bigger runs (bounded memory and file descriptors)

_ORDER = itemgetter(0, 1)  # (sort key, arrival): stable, and no two entries ever compare equal


def _spill(entries: list, directory: str, index: int) -> str:
    """``entries`` sorted into the run file ``run-<index>`` in ``directory``, one pickled entry after another."""
    entries.sort(key=_ORDER)
    path = os.path.join(directory, f"run-{index:06d}")
    with open(path, "wb") as f:
        for entry in entries:
            pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _read_run(path: str) -> Iterator[tuple]:
    with open(path, "rb", buffering=_RUN_READ_BUFFER) as f:
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


def _merge_runs(runs: list[str], directory: str, index: int) -> str:
    """``runs`` merged into the run file ``run-<index>``, and deleted."""
    path = os.path.join(directory, f"run-{index:06d}")
    with open(path, "wb") as f:
        for entry in heapq.merge(*(_read_run(r) for r in runs), key=_ORDER):
            pickle.dump(entry, f, protocol=pickle.HIGHEST_PROTOCOL)
    for run in runs:
        os.remove(run)
    return path


class SortedLines:
    """The JSON lines of ``records`` (consumed once, lazily), in ``key`` order, ties in arrival order: the bytes of
    ``sorted(records, key=key)`` written one a line. At most about ``buffer_bytes`` of lines are held: a full buffer
    is sorted and spilled to a run file in ``directory``, and the runs and the last buffer are merged as read.
    ``runs`` and ``peak_buffered`` (the most lines held at once) say how it went."""

    def __init__(self, records: Iterable, key: Callable[[Any], Any], buffer_bytes: int, directory: str):
        self._records, self._key = records, key
        self._buffer_bytes = max(1, buffer_bytes)
        self._directory = directory
        self.runs = 0
        self.peak_buffered = 0

    def __iter__(self) -> Iterator[bytes]:
        runs: list[str] = []
        buffer: list[tuple] = []
        held = 0
        for arrival, record in enumerate(self._records):
            line = (json.dumps(record.as_dict(), ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
            buffer.append((self._key(record), arrival, line))
            held += len(line) + LINE_OVERHEAD
            self.peak_buffered = max(self.peak_buffered, len(buffer))
            if held >= self._buffer_bytes:
                runs.append(_spill(buffer, self._directory, len(runs)))
                buffer, held = [], 0
        self.runs = made = len(runs)
        while len(runs) > MAX_FAN_IN:  # an entry's arrival is in its order, so which runs merge first is immaterial
            runs = [*runs[MAX_FAN_IN:], _merge_runs(runs[:MAX_FAN_IN], self._directory, made)]
            made += 1
        buffer.sort(key=_ORDER)
        for _key, _arrival, line in heapq.merge(*(_read_run(r) for r in runs), buffer, key=_ORDER):
            yield line
        for run in runs:
            os.remove(run)


def write_reason_file(
    output: str,
    relative: str,
    reason: str,
    records: Iterable,
    key: Callable[[Any], Any],
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
) -> dict:
    """``records`` sorted by ``key`` (ties in their order), one JSON object a line, at ``output/relative``: streamed
    into the file under a temporary name and renamed (readers never see a partial file), through a bounded external
    sort (:class:`SortedLines`). The file's entry for the manifest (path, reason, records, bytes, sha256). Dead
    letters and removed documents alike."""
    count = 0
    with tempfile.TemporaryDirectory(prefix="spanprep-sort-") as directory, atomic_create(f"{output}/{relative}") as f:
        sink = HashingSink(f)
        block: list[bytes] = []
        size = 0
        for line in SortedLines(records, key, buffer_bytes, directory):
            count += 1
            block.append(line)
            size += len(line)
            if size >= WRITE_BLOCK:
                sink.write(b"".join(block))
                block, size = [], 0
        if block:
            sink.write(b"".join(block))
    return {"path": relative, "reason": reason, "records": count, **sink.record()}


def _sort_key(d: DeadLetter):
    return (d.source.path, d.source.byte_offset, d.source.line, d.reason, d.doc_id or "", d.detail)


class _WriteReasonFn(beam.DoFn):
    def __init__(self, output: str, buffer_bytes: int):
        self._output = output
        self._buffer_bytes = buffer_bytes
        self._records = Metrics.counter("dead_letter", "records")

    def process(self, reason_and_letters):
        reason, letters = reason_and_letters
        relative = f"{fmt.DEAD_LETTER_DIR}/{reason}.jsonl"
        result = write_reason_file(self._output, relative, reason, letters, _sort_key, self._buffer_bytes)
        self._records.inc(result["records"])
        yield result


class WriteDeadLetters(beam.PTransform):
    """Group dead letters by reason and write one sorted JSONL file per reason (bounded memory: ``buffer_bytes``);
    one result per file."""

    def __init__(self, output: str, buffer_bytes: int = DEFAULT_BUFFER_BYTES):
        super().__init__()
        self._output = output
        self._buffer_bytes = buffer_bytes

    def expand(self, dead_letters):
        return (
            dead_letters
            | "KeyByReason" >> beam.Map(lambda d: (d.reason, d))
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReason" >> beam.ParDo(_WriteReasonFn(self._output, self._buffer_bytes))
        )
