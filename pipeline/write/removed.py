"""WriteRemoved: documents left out as duplicates or contaminated -> ``removed/<reason>.jsonl``, sorted by source
position, one file per reason and one result per file for the manifest (as ``dead_letter/``).

The records of one reason are written by several workers (issue 42), the file staying the bytes of one sort:

1. Each record falls in a *cell*: its source file and the ``cell_bytes`` (16 MiB) range of that file its byte offset
   is in. The cells are counted, and consecutive cells (in (path, range) order) are gathered into *parts* of at
   least ``part_records`` (4,096) records (:func:`plan_parts`; the last part of a reason holds the rest). A part is
   a range of the sort key (source path, byte offset, line, doc_id): every record of one part sorts before every
   record of the next, and records of equal keys share a cell.
2. Each part is grouped on its own (one GroupByKey key per part, so the runner hands parts to different workers),
   serialised and sorted through the bounded external sort (``write_reason_file``: memory held to ``buffer_bytes``,
   the job's ``--spill-buffer-mb``) into ``_tmp/removed/<reason>/part-NNNNNN.jsonl`` beside the artifact.
3. One step per reason concatenates its parts in order into ``removed/<reason>.jsonl`` and hashes it: a streamed
   copy, no parsing and no sorting. The parts stay in ``_tmp/`` (a retried concatenation reads them again) until
   the manifest step deletes ``_tmp/``.

So the file's bytes are those of ``sorted(records)`` whatever the cells and parts: neither depends on the runner,
the number of workers or the order records arrive in (the cells and their counts are a function of the records;
even another ``part_records`` gives the same bytes). Why parts and not part files in the artifact: the format,
its manifest entry (one ``{path, records, bytes, sha256}`` per reason) and every reader (verify, report,
``pipeline.contamination``, pyarrow/``datasets``' JSON readers) stay as they were; the price is one sequential
copy of each file (23 MB for 18,318 duplicates of a 200 MB input) and the parts on disk until the manifest.
``dead_letter/`` files keep one writer per reason: dead letters are bad input, few on any corpus worth building.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.elements import RemovedDocument
from pipeline.files import HashingSink, atomic_create
from pipeline.write.dead_letters import DEFAULT_BUFFER_BYTES, WRITE_BLOCK, write_reason_file
from pipeline.write.shards import TMP_DIR
from schemas import format as fmt

CELL_BYTES = 16 << 20  # a cell: the records whose source starts in one such range of one input file
PART_RECORDS = 4096  # consecutive cells are gathered into parts of at least this many records

Cell = tuple[str, int]  # (source path, byte offset // cell_bytes)


def _sort_key(r: RemovedDocument):
    return (r.source.path, r.source.byte_offset, r.source.line, r.doc_id)


def cell_of(r: RemovedDocument, cell_bytes: int = CELL_BYTES) -> Cell:
    """The cell of a record: a function of a prefix of its sort key, so cells in order are ranges of the key."""
    return (r.source.path, r.source.byte_offset // cell_bytes)


def plan_parts(counts: Iterable[tuple[tuple[str, Cell], int]], part_records: int = PART_RECORDS) -> dict:
    """``counts``: ((reason, cell), records) in any order. Per reason, the first cell of each part, in order: cells
    sorted and gathered from the first until a part holds at least ``part_records`` records."""
    cells: dict[str, list[tuple[Cell, int]]] = defaultdict(list)
    for (reason, cell), n in counts:
        cells[reason].append((cell, n))
    plan: dict[str, list[Cell]] = {}
    for reason, counted in sorted(cells.items()):
        starts: list[Cell] = []
        held = part_records
        for cell, n in sorted(counted):
            if held >= part_records:
                starts.append(cell)
                held = 0
            held += n
        plan[reason] = starts
    return plan


def part_of(plan: dict, reason: str, cell: Cell) -> int:
    """The index of the part of ``plan`` (:func:`plan_parts`) that ``cell`` of ``reason`` belongs to."""
    return bisect.bisect_right(plan[reason], cell) - 1


def part_path(reason: str, index: int) -> str:
    """Where part ``index`` of ``reason`` is written, relative to the artifact (under ``_tmp/``, which the manifest
    step deletes)."""
    return f"{TMP_DIR}/{fmt.REMOVED_DIR}/{reason}/part-{index:06d}.jsonl"


def _write_reason(output: str, reason_and_records, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> dict:
    """All of a reason's records (read once, lazily, never held whole) as one file by one writer."""
    reason, records = reason_and_records
    return write_reason_file(output, f"{fmt.REMOVED_DIR}/{reason}.jsonl", reason, records, _sort_key, buffer_bytes)


def _write_part(output: str, part_and_records, buffer_bytes: int) -> dict:
    (reason, index), records = part_and_records  # the grouped records: read once, lazily, never held whole
    result = write_reason_file(output, part_path(reason, index), reason, records, _sort_key, buffer_bytes)
    return {**result, "part": index}


def concatenate_parts(output: str, reason: str, parts: Iterable[dict]) -> dict:
    """The parts of ``reason`` (results of their writers, any order) copied in order into
    ``removed/<reason>.jsonl``, under a temporary name and renamed; the file's entry for the manifest."""
    ordered = sorted(parts, key=lambda p: p["part"])
    if [p["part"] for p in ordered] != list(range(len(ordered))):  # a part lost or written twice: never a gap
        raise RuntimeError(f"{reason}: parts {[p['part'] for p in ordered]} are not 0..{len(ordered) - 1}")
    relative = f"{fmt.REMOVED_DIR}/{reason}.jsonl"
    with atomic_create(f"{output}/{relative}") as f:
        sink = HashingSink(f)
        for p in ordered:
            with FileSystems.open(f"{output}/{p['path']}", compression_type=CompressionTypes.UNCOMPRESSED) as part:
                while block := part.read(WRITE_BLOCK):
                    sink.write(block)
    return {"path": relative, "reason": reason, "records": sum(p["records"] for p in ordered), **sink.record()}


class _PlanParts(beam.CombineFn):
    """(reason, cell) keys -> :func:`plan_parts` of their counts (counted where they are, then merged: one step)."""

    def __init__(self, part_records: int):
        self._part_records = part_records

    def create_accumulator(self) -> Counter:
        return Counter()

    def add_input(self, counts: Counter, key) -> Counter:
        counts[key] += 1
        return counts

    def merge_accumulators(self, accumulators) -> Counter:
        merged: Counter = Counter()
        for counts in accumulators:
            merged.update(counts)
        return merged

    def extract_output(self, counts: Counter) -> dict:
        return plan_parts(counts.items(), self._part_records)


class WriteRemoved(beam.PTransform):
    """Write one sorted JSONL file per reason, its records serialised and sorted in parts by several workers
    (bounded memory per part: ``buffer_bytes``, the job's ``--spill-buffer-mb``) and the parts concatenated in
    order (the module's docstring); one result per file."""

    def __init__(
        self,
        output: str,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        cell_bytes: int = CELL_BYTES,
        part_records: int = PART_RECORDS,
    ):
        super().__init__()
        self._output = output
        self._buffer_bytes = buffer_bytes
        self._cell_bytes = cell_bytes
        self._part_records = part_records

    def expand(self, removed):
        output, buffer_bytes, cell_bytes = self._output, self._buffer_bytes, self._cell_bytes
        keyed = removed | "KeyByCell" >> beam.Map(lambda r: ((r.reason, cell_of(r, cell_bytes)), r))
        plan = keyed | "Cells" >> beam.Keys() | "PlanParts" >> beam.CombineGlobally(_PlanParts(self._part_records))
        return (
            keyed
            | "KeyByPart"
            >> beam.Map(lambda kv, plan: ((kv[0][0], part_of(plan, *kv[0])), kv[1]), beam.pvalue.AsSingleton(plan))
            | "GroupByPart" >> beam.GroupByKey()
            | "WritePart" >> beam.Map(lambda group: _write_part(output, group, buffer_bytes))
            | "KeyByReason" >> beam.Map(lambda part: (part["reason"], part))
            | "GroupByReason" >> beam.GroupByKey()
            | "Concatenate" >> beam.MapTuple(lambda reason, parts: concatenate_parts(output, reason, parts))
        )
