"""WriteRemoved: documents left out as duplicates or contaminated -> ``removed/<reason>.jsonl``, sorted by source
position, one file per reason and one result per file for the manifest (as ``dead_letter/``).

The records of one reason are serialised and sorted by several workers (issue 42), the file staying the bytes of
one sort:

1. Each record falls in a *part*: the input files (as ``--input`` matched them, with their sizes, known before the
   job starts) are taken in path order in packs of about ``cell_bytes`` (32 MiB): a file that large is a pack
   alone and its part is the ``cell_bytes`` range of the file its byte offset is in; smaller files share one part
   per pack (:class:`Packs`). Parts in order are ranges of the sort key (source path, byte offset, line, doc_id):
   every record of one part sorts before every record of the next, and records of equal keys share a part.
2. Each part is grouped on its own (one GroupByKey key per part, so the runner hands parts to different workers),
   serialised and sorted through the bounded external sort (``write_reason_file``: memory held to ``buffer_bytes``,
   the job's ``--spill-buffer-mb``) into ``_tmp/removed/<reason>/part-*.jsonl`` beside the artifact.
3. One step per reason copies its parts in order into ``removed/<reason>.jsonl`` and hashes it: a streamed copy, no
   parsing and no sorting. The parts stay in ``_tmp/`` (a retried copy reads them again) until the manifest step
   deletes ``_tmp/``.

So the file's bytes are those of ``sorted(records)`` whatever the parts: they depend neither on the runner, the
number of workers or the order records arrive in, nor on ``cell_bytes``. The parts are fixed ranges of the input,
not planned from counts of the records: planning needs the counts before any record can be keyed, so the records
wait, materialised, for a side input (measured: a third more CPU for the write than one writer;
benchmarks/RESULTS.md, "removed/ in parts"). Small files are packed because every part is an object written,
renamed, read and deleted on a bucket: with a part per file, a build of 240 files of 2 documents made about 2,300
requests to a local S3 server (moto) where one writer per reason made 120 and packed parts make 136. Why parts and
not part files in the artifact: the format, its manifest entry (one ``{path, records, bytes, sha256}`` per reason) and
every reader (verify, report, ``pipeline.contamination``, other tools reading JSON lines) stay as they were; the
price is one sequential copy of each file (23 MB for 18,304 duplicates of a 200 MB input) and the parts on disk
until the manifest. ``dead_letter/`` files keep one writer per reason: dead letters are bad input, few on any corpus
worth building.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.elements import RemovedDocument
from pipeline.files import HashingSink, atomic_create
from pipeline.write.dead_letters import DEFAULT_BUFFER_BYTES, WRITE_BLOCK, write_reason_file
from pipeline.write.shards import TMP_DIR
from schemas import format as fmt

CELL_BYTES = 32 << 20  # a part: the records whose source starts in one such range of the input

Cell = tuple[str, str, int]  # (first path of its pack of files, source path or "", byte offset // cell_bytes or 0)


def _sort_key(r: RemovedDocument):
    return (r.source.path, r.source.byte_offset, r.source.line, r.doc_id)


class Packs:
    """The input files (``(path, size)``, as ``--input`` matched them) in packs of about ``cell_bytes``: a file of
    at least ``cell_bytes`` is a pack alone, smaller files in path order share one until it holds that many bytes.
    Only the packs' first paths are kept (about input bytes / ``cell_bytes`` of them), so a job of a million small
    files does not carry their names. ``files`` None (not listed): every file is a pack alone."""

    def __init__(self, files: list[tuple[str, int]] | None, cell_bytes: int = CELL_BYTES):
        self.cell_bytes = cell_bytes
        self.starts: list[str] | None = None
        self.alone: list[bool] = []
        if files is None:
            return
        starts: list[str] = []
        held = cell_bytes  # bytes in the open pack: none is open
        for path, size in sorted(files):
            if size >= cell_bytes or held >= cell_bytes:
                starts.append(path)
                self.alone.append(True)
                held = size
            else:
                self.alone[-1] = False
                held += size
        self.starts = starts

    def cell_of(self, r: RemovedDocument) -> Cell:
        """The cell (part) of a record: non-decreasing in its sort key (the pack's first path is, in the path; alone,
        the path and offset range; in a pack of several files one cell), so cells in order are ranges of the key."""
        path, offset = r.source.path, r.source.byte_offset
        if self.starts is None:
            return (path, path, offset // self.cell_bytes)
        i = bisect.bisect_right(self.starts, path) - 1
        if i < 0 or not self.alone[i]:  # a path before the first file's (not listed) shares the first cell
            return (self.starts[i] if i >= 0 else "", "", 0)
        return (self.starts[i], path, offset // self.cell_bytes)


def part_path(reason: str, cell: Cell) -> str:
    """Where the part of ``cell`` is written, relative to the artifact (under ``_tmp/``, which the manifest step
    deletes): named by the sha256 of its paths and its range, so a retried writer writes the same file."""
    start, path, index = cell
    name = hashlib.sha256(f"{start}\0{path}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{TMP_DIR}/{fmt.REMOVED_DIR}/{reason}/part-{name}-{index:010d}.jsonl"


def _write_reason(output: str, reason_and_records, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> dict:
    """All of a reason's records (read once, lazily, never held whole) as one file by one writer."""
    reason, records = reason_and_records
    return write_reason_file(output, f"{fmt.REMOVED_DIR}/{reason}.jsonl", reason, records, _sort_key, buffer_bytes)


def _write_part(output: str, part_and_records, buffer_bytes: int) -> dict:
    (reason, cell), records = part_and_records  # the grouped records: read once, lazily, never held whole
    result = write_reason_file(output, part_path(reason, cell), reason, records, _sort_key, buffer_bytes)
    return {**result, "cell": cell}


def concatenate_parts(output: str, reason: str, parts: Iterable[dict]) -> dict:
    """The parts of ``reason`` (results of their writers, any order) copied in cell order into
    ``removed/<reason>.jsonl``, under a temporary name and renamed; the file's entry for the manifest."""
    ordered = sorted(parts, key=lambda p: tuple(p["cell"]))
    cells = [tuple(p["cell"]) for p in ordered]
    if len(set(cells)) != len(cells):  # one group per cell: a part written twice would repeat its records
        raise RuntimeError(f"{reason}: a part was reported twice ({len(cells)} parts, {len(set(cells))} cells)")
    relative = f"{fmt.REMOVED_DIR}/{reason}.jsonl"
    with atomic_create(f"{output}/{relative}") as f:
        sink = HashingSink(f)
        for p in ordered:
            with FileSystems.open(f"{output}/{p['path']}", compression_type=CompressionTypes.UNCOMPRESSED) as part:
                while block := part.read(WRITE_BLOCK):
                    sink.write(block)
    return {"path": relative, "reason": reason, "records": sum(p["records"] for p in ordered), **sink.record()}


class WriteRemoved(beam.PTransform):
    """Write one sorted JSONL file per reason, its records serialised and sorted in parts by several workers
    (bounded memory per part: ``buffer_bytes``, the job's ``--spill-buffer-mb``) and the parts concatenated in
    order (the module's docstring); one result per file."""

    def __init__(
        self,
        output: str,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        cell_bytes: int = CELL_BYTES,
        files: list[tuple[str, int]] | None = None,
    ):
        super().__init__()
        self._output = output
        self._buffer_bytes = buffer_bytes
        self._packs = Packs(files, cell_bytes)

    def expand(self, removed):
        output, buffer_bytes, packs = self._output, self._buffer_bytes, self._packs
        return (
            removed
            | "KeyByPart" >> beam.Map(lambda r: ((r.reason, packs.cell_of(r)), r))
            | "GroupByPart" >> beam.GroupByKey()
            | "WritePart" >> beam.Map(lambda group: _write_part(output, group, buffer_bytes))
            | "KeyByReason" >> beam.Map(lambda part: (part["reason"], part))
            | "GroupByReason" >> beam.GroupByKey()
            | "Concatenate" >> beam.MapTuple(lambda reason, parts: concatenate_parts(output, reason, parts))
        )
