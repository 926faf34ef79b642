"""Byte ranges of one big uncompressed file, read in parallel with exactly the records of a whole-file read.

A file is the unit of work unless it is uncompressed and larger than ``split_bytes``: a gzip or zstd
stream cannot be entered in the middle, a plain file can (``seek``, on local disk and through Beam's
FileSystems on gs:// and s3:// alike). Such a file is planned as N equal byte ranges, and a range owns
the records that START inside it: JSONL lines, text paragraphs, WikiText articles. Its reader starts at
its first owned record and reads past the range's end until its last owned record ends, so every record
is read by exactly one range, whole.

What a record is called must not depend on the split: JSONL ids fall back to ``<file>:<line>``, text and
WikiText documents are ``<file>:<ordinal>``, dead letters name the line and byte offset. Each range is
therefore scanned first (:func:`scan_range`: its newlines and, for text and WikiText, how many documents
start in it, for either state at its start, with :class:`~pipeline.read.records.DocumentStarts`, the rule
the readers use), and the scans of a file in order give every range its first line number, first ordinal
and starting state (:func:`plan_reads`, prefix sums). :func:`read_range` then reads with those, through
the same :func:`~pipeline.read.records.parse_lines` as a whole-file read. The file's sha256 is one more
task (:func:`hash_file`); :func:`combine_summaries` adds the parts up into the file's
:class:`InputSummary`, equal to a whole-file read's.

Parquet and ``hf_dataset`` files (``pipeline.read.columnar``) split the same way over their row groups: a range
owns the groups that start in it, its scan counts their rows (the plan's "newlines"), its read decodes them and
numbers their rows from the file's metadata (a group's first row: the rows of the groups before it).

Plain functions, no Beam pipeline; ``pipeline.read.documents.ReadDocuments`` runs them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline import progress
from pipeline.elements import InputSummary, Record
from pipeline.read import columnar, records
from pipeline.read.record_checks import UTF8_BOM, skip_bom
from pipeline.read.records import COLUMNAR_FORMATS, DocumentStarts, ReaderOptions, decoded, parse_lines
from pipeline.read.streams import CHUNK_BYTES, HashingReader, compression_of, iter_lines

DEFAULT_SPLIT_BYTES = 4 << 20
_LOOKAHEAD_BYTES = 64 << 10  # read this much at a time to find where the next line starts


@dataclass(frozen=True)
class WholeFile:
    """Read the file start to end (compressed, small, or splitting is off): :func:`read_file`."""

    path: str


@dataclass(frozen=True)
class FileHash:
    """Hash a split file once: its byte count and sha256 for the InputSummary."""

    path: str


@dataclass(frozen=True)
class Range:
    """Planned byte range ``[start, end)`` of a file, number ``index`` of ``count``."""

    path: str
    index: int
    count: int
    start: int
    end: int


@dataclass(frozen=True)
class RangeScan:
    """What a range holds, between the line starts at or after its planned bounds, ``[start, end)``.

    ``starts[s]`` documents start in it and ``open_after[s]`` says whether one is open at its end,
    when ``s`` (0 or 1) says whether one was open at its start (text and WikiText; JSONL: 0 and identity).
    """

    index: int
    count: int
    start: int
    end: int
    newlines: int
    starts: tuple[int, int] = (0, 0)
    open_after: tuple[bool, bool] = (False, True)


@dataclass(frozen=True)
class RangeRead:
    """Read the records that start in ``[start, end)``: line numbers from ``first_line``, documents
    numbered after ``first_ordinal``; ``open``: a document begun before ``start`` is still open."""

    path: str
    index: int
    start: int
    end: int
    first_line: int
    first_ordinal: int
    open: bool


def plan_file(
    path: str, size: int | None, split_bytes: int, input_format: str = ""
) -> list[WholeFile | FileHash | Range]:
    """One whole-file read, or (uncompressed and larger than ``split_bytes`` > 0) a hash and N equal ranges.
    An ``hf_dataset`` Arrow file in a bucket is read whole: its batches are found only by walking the stream from
    its start, which each range would download again."""
    if split_bytes <= 0 or size is None or size <= split_bytes or compression_of(path) != "none":
        return [WholeFile(path)]
    if input_format == "hf_dataset" and "://" in path:
        return [WholeFile(path)]
    n = -(-size // split_bytes)
    bounds = [size * i // n for i in range(n + 1)]
    return [FileHash(path), *(Range(path, i, n, bounds[i], bounds[i + 1]) for i in range(n))]


def _open(path: str) -> BinaryIO:
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _chunks(f: BinaryIO, start: int, stop: int | None = None, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Raw bytes from ``start`` to ``stop`` (or the end of the file), ``size`` at a time."""
    f.seek(start)
    pos = start
    while stop is None or pos < stop:
        chunk = f.read(size if stop is None else min(size, stop - pos))
        if not chunk:
            return
        pos += len(chunk)
        yield chunk


def line_start(f: BinaryIO, pos: int) -> int:
    """The first byte at or after ``pos`` that starts a line (0, or just after a newline); the file size if none."""
    if pos <= 0:
        return 0
    at = pos - 1
    for chunk in _chunks(f, at, size=_LOOKAHEAD_BYTES):
        newline = chunk.find(b"\n")
        if newline >= 0:
            return at + newline + 1
        at += len(chunk)
    return at


def _lines(chunks: Iterator[bytes], start: int, first_line: int, opts: ReaderOptions, bom: list[bool]):
    """``iter_lines`` of chunks read from the line start ``start``; a byte order mark is skipped at
    the start of the file only, as a whole-file read does (``bom[0]`` says whether there was one)."""
    if start == 0:
        chunks = skip_bom(chunks, bom)
        first = next(chunks, b"")  # skip_bom has decided by now
        chunks = itertools.chain([first], chunks)
    return iter_lines(chunks, opts.max_record_bytes, len(UTF8_BOM) if bom[0] else start, first_line)


def read_file(path: str, opts: ReaderOptions) -> Iterator[Record | InputSummary]:
    """Every record of one file read whole, then its :class:`InputSummary` (``records`` or ``columnar``)."""
    if opts.input_format in COLUMNAR_FORMATS:
        return columnar.read_file(path, opts)
    return records.read_file(path, opts)


def scan_range(r: Range, opts: ReaderOptions) -> RangeScan:
    """The line-aligned bounds of ``r``, its newlines and (text, WikiText) its document starts. Parquet and Arrow
    files: ``r`` as planned, and the rows of the groups that start in it as its "newlines"."""
    if opts.input_format in COLUMNAR_FORMATS:
        return RangeScan(r.index, r.count, r.start, r.end, columnar.count_rows(r.path, opts, r.start, r.end))
    with _open(r.path) as f:
        start, end = line_start(f, r.start), line_start(f, r.end)
        newlines = 0
        if opts.input_format == "jsonl":  # every line is a record of its own: only line numbers matter
            for chunk in _chunks(f, start, end):
                newlines += chunk.count(b"\n")
            return RangeScan(r.index, r.count, start, end, newlines)
        counted: list[int] = [0]

        def counting(chunks):
            for chunk in chunks:
                counted[0] += chunk.count(b"\n")
                yield chunk

        closed, opened = DocumentStarts(opts.input_format, False), DocumentStarts(opts.input_format, True)
        starts = [0, 0]
        for _, _, line, _ in _lines(counting(_chunks(f, start, end)), start, 1, opts, [False]):
            kind = closed.kind(decoded(line))
            starts[0] += closed.advance(kind)
            starts[1] += opened.advance(kind)
        return RangeScan(r.index, r.count, start, end, counted[0], (starts[0], starts[1]), (closed.open, opened.open))


def plan_reads(path: str, scans: Iterable[RangeScan | WholeFile]) -> list[WholeFile | RangeRead]:
    """A file's scans, in any order -> one :class:`RangeRead` per range, with the line number, ordinal
    and state its first line has in the whole file (a :class:`WholeFile` passes through)."""
    given = list(scans)
    if len(given) == 1 and isinstance(given[0], WholeFile):
        return [given[0]]
    if any(isinstance(s, WholeFile) for s in given):
        raise RuntimeError(f"{path}: a whole-file read among the scanned ranges of one file")
    ordered = sorted((s for s in given if isinstance(s, RangeScan)), key=lambda s: s.index)
    if [s.index for s in ordered] != list(range(ordered[0].count)) or any(
        a.end != b.start for a, b in zip(ordered, ordered[1:])
    ):
        raise RuntimeError(
            f"{path}: the scanned ranges do not tile the file: {[(s.index, s.start, s.end) for s in ordered]}"
        )
    reads: list[WholeFile | RangeRead] = []
    line, ordinal, is_open = 1, 0, False
    for s in ordered:
        reads.append(RangeRead(path, s.index, s.start, s.end, line, ordinal, is_open))
        line += s.newlines
        ordinal += s.starts[is_open]
        is_open = s.open_after[is_open]
    return reads


def _owned(lines, opts: ReaderOptions, is_open: bool, end: int):
    """The lines of the records that start before ``end``, from the first record that starts at all."""
    if opts.input_format == "jsonl":
        for item in lines:
            if item[1] >= end:
                return
            yield item
        return
    starts = DocumentStarts(opts.input_format, is_open)
    owning = False
    for item in lines:
        begins = starts.step(decoded(item[2]))
        if item[1] >= end and (begins or not owning):
            return
        owning = owning or begins
        if owning:
            yield item


def read_range(r: RangeRead, opts: ReaderOptions) -> Iterator[Record | InputSummary]:
    """The records that start in ``r``, then a part of the file's :class:`InputSummary` (records read,
    and whether a byte order mark started the file; :func:`hash_file` gives bytes and sha256)."""
    if opts.input_format in COLUMNAR_FORMATS:
        yield from columnar.read_part(r.path, opts, r.start, r.end)  # rows numbered from the file's own metadata
        return
    summary = InputSummary(r.path)
    bom = [False]
    with _open(r.path) as f:
        stop = r.end if opts.input_format == "jsonl" else None  # text and WikiText documents run on past the end
        counted = progress.counted_chunks(_chunks(f, r.start, stop), limit=r.end - r.start)  # each byte once
        lines = _lines(counted, r.start, r.first_line, opts, bom)
        for rec in parse_lines(_owned(lines, opts, r.open, r.end), r.path, opts, r.first_ordinal):
            summary.documents_read += 1
            yield rec
    summary.byte_order_mark = bom[0]
    yield summary


def hash_file(path: str) -> InputSummary:
    """The part of a split file's :class:`InputSummary` that needs the whole file: bytes and sha256."""
    with _open(path) as f:
        raw = HashingReader(f)
        raw.drain()
    return InputSummary(path, bytes=raw.bytes, sha256=raw.sha256.hexdigest())


def combine_summaries(path: str, parts: Iterable[InputSummary]) -> InputSummary:
    """The :class:`InputSummary` of a file from its parts: one whole-file summary, or one
    :func:`hash_file` result and one part per range."""
    parts = list(parts)
    hashed = [p for p in parts if p.sha256]
    if len(hashed) != 1:
        raise RuntimeError(f"{path}: {len(hashed)} hashed summary parts among {len(parts)}, expected exactly one")
    return InputSummary(
        path,
        bytes=hashed[0].bytes,
        sha256=hashed[0].sha256,
        documents_read=sum(p.documents_read for p in parts),
        truncated=any(p.truncated for p in parts),
        byte_order_mark=any(p.byte_order_mark for p in parts),
    )
