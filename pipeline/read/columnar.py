"""Parquet files and the Arrow files of a ``datasets`` directory -> documents and dead letters, a row group at a time.

Both formats hold documents as rows of a table, stored in groups of rows: a Parquet file's row groups (found in
its footer) and an Arrow IPC stream's record batches (the files ``datasets.Dataset.save_to_disk`` writes, found by
walking the stream's messages). A group is the unit a reader decodes, so a big file is split over its groups the
way a JSONL file is split over its lines (``pipeline/read/ranges.py``): a byte range owns the groups that START
inside it. A group's first row number comes from the file itself (the footer's row counts of the groups before it;
an Arrow stream is walked from its start anyway), so a row is named the same whether its file was read whole or in
ranges.

A row is one record, numbered from 1 in its file: ``Source(path, row, byte offset of its group)``, and its id
falls back to ``<file name>:<row>`` (as a JSONL line's to ``<file name>:<line>``). ``--text-field`` and
``--id-field`` name a column or, by a dotted path (``meta.body``), a field inside a struct column; only those
columns are read from a Parquet file. Text columns may be ``string``, ``large_string`` or dictionary-encoded.

What cannot be used is a dead letter naming the file and group, counted as every dead letter is
(``documents_read == documents + dead letters``): a null (or, in Parquet, not UTF-8) text is one per row; a
group whose text column is missing or not a string column is one per group (its detail says how many rows it
stands for), and so is a Parquet row group that cannot be decoded or an Arrow batch that fails Arrow's full
validation (offsets, UTF-8). An Arrow stream cannot be entered past a message that cannot be read: one
``corrupt_input`` dead letter stands for the rest of the file. A file of which nothing can
be read (not Parquet or Arrow, a damaged footer) is a :class:`ColumnarError`: the launcher checks every input
first (:func:`check_files`) and stops with one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline import progress
from pipeline.elements import (
    CORRUPT_INPUT,
    DOCUMENT_TOO_LONG,
    INVALID_UTF8,
    MISSING_TEXT,
    NON_STRING_TEXT,
    DeadLetter,
    InputSummary,
    Record,
    Source,
    preview,
)
from pipeline.read.records import ReaderOptions, finish_text
from pipeline.read.streams import HashingReader

_READ_ERRORS = (pa.ArrowException, OSError, ValueError, EOFError)


class ColumnarError(ValueError):
    """Nothing of an input can be read (not Parquet or an Arrow stream, a damaged footer), or a directory is not
    one ``save_to_disk`` wrote: one line naming it."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@dataclass(frozen=True)
class Group:
    """A group of rows: number ``index`` (from 0) in its file, starting at byte ``offset``, ``nbytes`` long; its
    first row is row ``first_row`` (from 1) of the file, whatever order the groups' bytes lie in."""

    index: int
    offset: int
    nbytes: int
    rows: int
    first_row: int


class _Parquet:
    kind = "row group"

    def __init__(self, f: pa.NativeFile, path: str):
        try:
            self._file = pq.ParquetFile(f, page_checksum_verification=True)
            self.schema = self._file.schema_arrow
            meta = self._file.metadata
            self._groups = []
            first_row = 1
            for i in range(meta.num_row_groups):
                rg = meta.row_group(i)
                chunks = [rg.column(c) for c in range(rg.num_columns)]
                starts = [c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in chunks]
                nbytes = sum(c.total_compressed_size for c in chunks)
                self._groups.append(Group(i, min(starts, default=0), nbytes, rg.num_rows, first_row))
                first_row += rg.num_rows
        except _READ_ERRORS as e:
            raise ColumnarError(f"{path}: not a readable Parquet file ({_first_line(e)})") from None

    def groups(self, columns: list[str], start: int, end: int | None) -> Iterator[tuple[Group, pa.Table | Exception]]:
        for g in self._groups:
            if g.offset < start or (end is not None and g.offset >= end):
                continue
            try:
                table = self._file.read_row_group(g.index, columns=columns)
            except _READ_ERRORS as e:
                yield g, e
                continue
            yield g, table

    def rows(self, start: int, end: int) -> int:
        return sum(g.rows for g in self._groups if start <= g.offset < end)


class _ArrowStream:
    """An Arrow IPC stream file, walked message by message (a stream has no index of its batches)."""

    kind = "record batch"

    def __init__(self, f: pa.NativeFile, path: str):
        self._path = path
        self._source = f
        try:
            self._reader = pa.ipc.MessageReader.open_stream(self._source)
            self.schema = pa.ipc.read_schema(self._reader.read_next_message())
        except (*_READ_ERRORS, StopIteration) as e:
            raise ColumnarError(f"{path}: not a readable Arrow stream file ({_first_line(e)})") from None
        dictionaries = [field.name for field in self.schema if pa.types.is_dictionary(field.type)]
        if dictionaries:
            raise ColumnarError(
                f"{path}: dictionary-encoded column(s) {', '.join(dictionaries)} in an Arrow stream file are not read "
                "(datasets does not write them): give Parquet instead"
            )

    def groups(self, columns: list[str], start: int, end: int | None) -> Iterator[tuple[Group, pa.Table | Exception]]:
        """The batches that start in ``[start, end)``. A batch whose data fails Arrow's full validation (offsets,
        UTF-8) is given as its error, and the walk goes on; a message that cannot be read ends it (nothing after it
        can be found), given as a group of unknown rows (-1) if it lies in the range."""
        index, first_row = 0, 1
        while True:
            offset = self._source.tell()
            if end is not None and offset >= end:
                return
            try:
                message = self._reader.read_next_message()
                if message.type != "record batch":
                    raise ValueError(f"unexpected {message.type} message")
                batch = pa.ipc.read_record_batch(message, self.schema)
            except StopIteration:
                return
            except _READ_ERRORS as e:
                if offset >= start:
                    yield Group(index, offset, 0, -1, first_row), e
                return
            if offset >= start:
                group = Group(index, offset, self._source.tell() - offset, batch.num_rows, first_row)
                try:
                    batch.validate(full=True)  # a damaged body must not reach to_pylist
                except _READ_ERRORS as e:
                    yield group, e
                else:
                    yield group, pa.Table.from_batches([batch])
            index += 1
            first_row += batch.num_rows

    def rows(self, start: int, end: int) -> int:
        return sum(max(g.rows, 0) for g, _ in self.groups([], start, end))


def _open(path: str) -> BinaryIO:
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _open_table_file(path: str) -> pa.NativeFile:
    """A local file memory-mapped (an Arrow stream's batches before a range are walked past without a copy), any
    other through Beam's FileSystems (gs://, s3://, ...)."""
    if "://" not in path:
        return pa.memory_map(path, "r")
    return pa.PythonFile(_open(path), mode="r")


def _columnar(f: pa.NativeFile, path: str, input_format: str) -> _Parquet | _ArrowStream:
    return _Parquet(f, path) if input_format == "parquet" else _ArrowStream(f, path)


def check_files(paths: list[str], input_format: str) -> None:
    """Raise :class:`ColumnarError` for the first of ``paths`` of which nothing can be read (its footer or schema)."""
    for path in paths:
        try:
            with _open_table_file(path) as f:
                _columnar(f, path, input_format)
        except OSError as e:
            raise ColumnarError(f"{path}: cannot read it ({_first_line(e)})") from None


def hf_dataset_files(directory: str) -> list[str]:
    """The Arrow files of a directory ``datasets.Dataset.save_to_disk`` wrote (local, gs://, s3://), in the order its
    ``state.json`` lists them; :class:`ColumnarError` for a ``DatasetDict`` directory (naming its splits) or any
    other directory."""
    root = directory.rstrip("/")
    try:
        splits_file = FileSystems.join(root, "dataset_dict.json")
        if FileSystems.exists(splits_file):
            with _open(splits_file) as f:
                splits = json.loads(f.read()).get("splits") or []
            raise ColumnarError(
                f"--input {directory}: a DatasetDict directory with the splits {', '.join(map(str, splits))}; "
                f"give one split's directory, e.g. --input {FileSystems.join(root, str(splits[0] if splits else 'train'))}"
            )
        state_file = FileSystems.join(root, "state.json")
        if not FileSystems.exists(state_file):
            raise ColumnarError(
                f"--input {directory}: no state.json: not a directory written by datasets' Dataset.save_to_disk"
            )
        with _open(state_file) as f:
            state = json.loads(f.read())
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, ColumnarError):
            raise
        raise ColumnarError(f"--input {directory}: cannot read its state.json ({_first_line(e)})") from None
    if not names or not all(isinstance(n, str) and n and "/" not in n for n in names):
        raise ColumnarError(f"--input {directory}: its state.json lists no Arrow files")
    return [FileSystems.join(root, name) for name in names]


def _field_path(schema: pa.Schema, name: str) -> list[str] | None:
    """The column ``name``, or the struct fields a dotted ``name`` walks down to; None when there is none."""
    if name in schema.names:
        return [name]
    parts = name.split(".")
    if parts[0] not in schema.names:
        return None
    type_ = schema.field(parts[0]).type
    for part in parts[1:]:
        if not pa.types.is_struct(type_) or type_.get_field_index(part) < 0:
            return None
        type_ = type_.field(part).type
    return parts


def _column(table: pa.Table, path: list[str]) -> pa.Array:
    array: Any = table.column(path[0]).combine_chunks()
    for part in path[1:]:
        array = pc.struct_field(array, [array.type.get_field_index(part)])  # a null struct gives a null field
    return array


def _is_text(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        return _is_text(type_.value_type)
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_)


def _values(array: pa.Array) -> list:
    """The array's values; a string that is not UTF-8 (Parquet does not check) as its bytes."""
    try:
        return array.to_pylist()
    except UnicodeDecodeError:
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        raw = array.cast(pa.large_binary()).to_pylist()
        out: list = []
        for value in raw:
            try:
                out.append(None if value is None else value.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(value)
        return out


def _utf8_error(raw: bytes) -> str:
    """Where ``raw``, a value :func:`_values` gave as bytes (only one that is not UTF-8 is), stops being UTF-8."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"invalid UTF-8 at byte {e.start}"
    return "invalid UTF-8"


class _Rows:
    """Turns the groups of one file into records."""

    def __init__(self, path: str, opts: ReaderOptions, schema: pa.Schema, kind: str):
        self.path, self.opts, self.kind = path, opts, kind
        self.name = os.path.basename(path.rstrip("/"))
        self.text_path = _field_path(schema, opts.text_field)
        id_path = _field_path(schema, opts.id_field)
        self.id_path = id_path  # may be the text's column, as a JSONL line's --id-field may name its text
        self.columns = list(dict.fromkeys(".".join(p) for p in (self.text_path, self.id_path) if p is not None))
        self.schema_names = schema.names

    def where(self, g: Group, first_row: int) -> str:
        rows = f"rows {first_row:,}-{first_row + g.rows - 1:,}" if g.rows > 0 else f"from row {first_row:,}"
        return f"{self.kind} {g.index} ({rows}, at byte {g.offset:,})"

    def records(self, g: Group, table: pa.Table | Exception, first_row: int) -> Iterator[Record]:
        src = Source(self.path, first_row, g.offset)
        where = self.where(g, first_row)
        lost = "the rest of the file is lost" if g.rows < 0 else f"its {g.rows:,} row(s) are lost"
        if isinstance(table, Exception):
            yield DeadLetter(CORRUPT_INPUT, f"{where} cannot be read ({_first_line(table)}); {lost}", src, None, "")
            return
        field = self.opts.text_field
        if self.text_path is None:
            columns = ", ".join(self.schema_names[:10])
            yield DeadLetter(MISSING_TEXT, f"{where}: no column {field!r} (columns: {columns}); {lost}", src, None, "")
            return
        texts = _column(table, self.text_path)
        if not _is_text(texts.type):
            detail = f"{where}: column {field!r} is {texts.type}, not a string column; {lost}"
            yield DeadLetter(NON_STRING_TEXT, detail, src, None, "")
            return
        ids: list = [None] * len(texts)
        if self.id_path is not None:
            id_column = _column(table, self.id_path)
            kind = id_column.type.value_type if pa.types.is_dictionary(id_column.type) else id_column.type
            if _is_text(kind) or pa.types.is_integer(kind):
                ids = _values(id_column)
        limit = self.opts.max_record_bytes
        for k, (text, value) in enumerate(zip(_values(texts), ids, strict=True)):
            row = first_row + k
            src = Source(self.path, row, g.offset)
            doc_id = str(value) if isinstance(value, (str, int)) and str(value) else f"{self.name}:{row}"
            if isinstance(value, bytes):  # an id that is not UTF-8: JSONL's line would be an invalid_utf8 too
                detail = f"{where}, row {row:,}: {_utf8_error(value)} of {self.opts.id_field!r}"
                yield DeadLetter(INVALID_UTF8, detail, src, doc_id, preview(value))
            elif text is None:
                yield DeadLetter(NON_STRING_TEXT, f"{where}, row {row:,}: {field!r} is null", src, doc_id, "")
            elif isinstance(text, bytes):
                try:
                    text.decode("utf-8")
                except UnicodeDecodeError as e:
                    detail = f"{where}, row {row:,}: invalid UTF-8 at byte {e.start} of {field!r}: {e.reason}"
                    yield DeadLetter(INVALID_UTF8, detail, src, doc_id, preview(text))
            elif len(text) > limit // 4 and (size := len(text.encode("utf-8"))) > limit:
                detail = f"{where}, row {row:,}: text of {size:,} bytes exceeds --max-record-bytes={limit:,}"
                yield DeadLetter(DOCUMENT_TOO_LONG, detail, src, doc_id, preview(text))
            else:
                yield finish_text(doc_id, text, src, may_hold_surrogates=False)


def read_part(
    path: str, opts: ReaderOptions, start: int = 0, end: int | None = None
) -> Iterator[Record | InputSummary]:
    """The records of the groups that start in ``[start, end)`` (the whole file by default), rows numbered in the
    whole file, then a part of the file's :class:`InputSummary` (records read, truncated). The bytes of each
    group count as read (progress). A file of which nothing can be read is one ``corrupt_input`` dead letter, given
    by the part that starts the file."""
    summary = InputSummary(path)
    with _open_table_file(path) as f:
        try:
            table_file = _columnar(f, path, opts.input_format)
        except ColumnarError as e:
            if start == 0:
                summary.documents_read, summary.truncated = 1, True
                yield DeadLetter(CORRUPT_INPUT, f"{e}; nothing of it is read", Source(path, 1, 0), None, "")
            yield summary
            return
        rows = _Rows(path, opts, table_file.schema, table_file.kind)
        for group, table in table_file.groups(rows.columns, start, end):
            progress.add(0, group.nbytes)
            for rec in rows.records(group, table, group.first_row):
                summary.documents_read += 1
                yield rec
            summary.truncated = summary.truncated or (isinstance(table, Exception) and group.rows < 0)
    yield summary


def count_rows(path: str, opts: ReaderOptions, start: int, end: int) -> int:
    """The rows of the groups that start in ``[start, end)`` (0 when nothing of the file can be read)."""
    with _open_table_file(path) as f:
        try:
            return _columnar(f, path, opts.input_format).rows(start, end)
        except ColumnarError:
            return 0


def read_file(path: str, opts: ReaderOptions) -> Iterator[Record | InputSummary]:
    """Every record of the file, then its whole :class:`InputSummary` (hashed in a pass of its own: only the
    needed columns are read)."""
    summary = InputSummary(path)
    for item in read_part(path, opts):
        if isinstance(item, InputSummary):
            summary = item
        else:
            yield item
    with _open(path) as f:
        raw = HashingReader(f)
        raw.drain()
    summary.bytes, summary.sha256 = raw.bytes, raw.sha256.hexdigest()
    yield summary
