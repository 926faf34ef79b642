"""WriteShards: tokenized documents -> Arrow shard files, one result record per shard.

Documents go to shard ``blake2b(doc_id) % num_shards``; each shard's documents are sorted by
``(doc_id, source path, source offset)``, packed into rows and written as one Arrow IPC file.
Nothing here depends on bundle boundaries, worker count or arrival order, so the bytes of every
shard are a function of the input and the options only.

Scale: documents never pass through the runner's shuffle. Each worker spills its documents, per
shard and sorted, to temporary *run* files (bounded buffer); only run paths are grouped by shard;
each shard is then written by a streaming k-way merge of its runs. Memory per worker is bounded
by the spill buffer and one record batch per run, whatever the corpus size.
"""

from __future__ import annotations

import collections
import functools
import heapq
import logging
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.elements import Row, TokenizedDocument
from pipeline.files import HashingSink, move_into_place, temporary_name
from pipeline.write.packing import NO_SPANS, pack_doc_sentences, pack_full_sentences
from schemas import format as fmt

log = logging.getLogger(__name__)

HISTOGRAM_BIN_WIDTH = fmt.HISTOGRAM_BIN_WIDTH
shard_of = fmt.shard_of


@dataclass(frozen=True)
class ShardSpec:
    output: str  # artifact root
    num_shards: int
    vocab_size: int
    max_row_tokens: int
    pack: str  # doc-sentences | full-sentences
    separator_id: int

    def __post_init__(self):
        if self.pack not in ("doc-sentences", "full-sentences"):
            raise ValueError(f"pack must be doc-sentences or full-sentences, got {self.pack!r}")


def _list_array(offsets: np.ndarray, values: pa.Array, item_type: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), values, type=pa.list_(pa.field("item", item_type, nullable=False))
    )


@functools.lru_cache(maxsize=64)
def _empty_span_column(struct_type: pa.DataType, n_rows: int) -> pa.ListArray:
    """A span column of ``n_rows`` empty lists, built as :func:`rows_to_record_batch` builds any span column
    (Arrow arrays are immutable, so one serves every batch of that many rows)."""
    children = [pa.array(np.empty(0, np.int32), pa.int32()), pa.array(np.empty(0, np.int32), pa.int32())]
    if struct_type.num_fields == 3:
        children.append(pa.array([], pa.string()))
    structs = pa.StructArray.from_arrays(children, fields=list(struct_type))
    return _list_array(np.zeros(n_rows + 1, dtype=np.int64), structs, struct_type)


def rows_to_record_batch(rows: list[Row], schema: pa.Schema) -> pa.RecordBatch:
    """Columnar conversion of up to a batch of rows (numpy concatenation, no per-token Python)."""
    ids_type = schema.field("input_ids").type.value_type
    lengths = np.fromiter((len(r.ids) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    np_ids_type = np.uint16 if ids_type == pa.uint16() else np.int32
    ids = pa.array(np.concatenate([r.ids for r in rows]).astype(np_ids_type, copy=False), ids_type)
    ws = pa.array(np.concatenate([r.word_start for r in rows]), pa.bool_())
    ss = pa.array(np.concatenate([r.sentence_start for r in rows]), pa.bool_())
    columns = [
        pa.array([r.doc_id for r in rows], pa.string()),
        pa.array(np.array([r.seq_index for r in rows], dtype=np.int32), pa.int32()),
        _list_array(offsets, ids, ids_type),
        _list_array(offsets, ws, pa.bool_()),
        _list_array(offsets, ss, pa.bool_()),
    ]
    for kind, column in fmt.CANDIDATE_KINDS.items():
        struct_type = schema.field(column).type.value_type
        per_row = [r.spans.get(kind, NO_SPANS).reshape(-1, 2) for r in rows]
        counts = np.fromiter((len(p) for p in per_row), dtype=np.int64, count=len(rows))
        if not counts.any():
            columns.append(_empty_span_column(struct_type, len(rows)))  # the common case: no spans of this kind
            continue
        span_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=span_offsets[1:])
        flat = np.concatenate(per_row).astype(np.int32)
        children = [pa.array(flat[:, 0], pa.int32()), pa.array(flat[:, 1], pa.int32())]
        if struct_type.num_fields == 3:
            children.append(pa.array([lab for r in rows for lab in r.span_labels.get(kind, [])], pa.string()))
        structs = pa.StructArray.from_arrays(children, fields=list(struct_type))
        columns.append(_list_array(span_offsets, structs, struct_type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class ArrowFileWriter:
    """Stream record batches into an Arrow IPC file written under a temporary name.

    ``close()`` renames it into place and returns ``(bytes, sha256)``: readers never see a
    partial file, and memory holds one record batch at a time whatever the file size.

    With ``background=True`` the batches are compressed and written on a thread of their own (pyarrow
    releases the GIL while it compresses) while the caller builds the next ones; at most
    ``BACKGROUND_DEPTH`` batches wait, and a failed write is raised by the next ``write`` or by ``close``.
    """

    BACKGROUND_DEPTH = 2

    def __init__(
        self,
        path: str,
        schema: pa.Schema,
        compression: str | None = fmt.SHARD_COMPRESSION,
        file_format: bool = True,
        background: bool = False,
    ):
        self._path = path
        self._tmp = temporary_name(path)
        self._raw = FileSystems.create(self._tmp)
        self._sink = HashingSink(self._raw)
        options = pa.ipc.IpcWriteOptions(compression=compression)
        out = pa.PythonFile(self._sink, mode="w")
        self._writer = (
            pa.ipc.new_file(out, schema, options=options)
            if file_format
            else pa.ipc.new_stream(out, schema, options=options)
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arrow-write") if background else None
        self._pending: collections.deque = collections.deque()

    def write(self, batch: pa.RecordBatch) -> None:
        if self._thread is None:
            self._writer.write_batch(batch)
            return
        while len(self._pending) >= self.BACKGROUND_DEPTH:
            self._pending.popleft().result()
        self._pending.append(self._thread.submit(self._writer.write_batch, batch))

    def close(self) -> tuple[int, str]:
        if self._thread is not None:
            try:
                while self._pending:
                    self._pending.popleft().result()
            finally:
                self._thread.shutdown(wait=True, cancel_futures=True)
        self._writer.close()
        self._raw.close()
        move_into_place(self._tmp, self._path)  # a retried bundle: the content is identical
        return self._sink.bytes, self._sink.sha256


def write_arrow_file(path: str, schema: pa.Schema, batches) -> tuple[int, str]:
    """Write an Arrow IPC file atomically; return (bytes, sha256)."""
    writer = ArrowFileWriter(path, schema)
    for batch in batches:
        writer.write(batch)
    return writer.close()


# -- sorted runs: one bundle's documents of one shard, sorted, in a temporary Arrow stream ------

TMP_DIR = "_tmp"
RUNS_DIR = f"{TMP_DIR}/runs"
RUN_BATCH_DOCS = 32
_META_COLUMNS = 5  # doc_id, source_path, source_line, source_offset, cleaned


def run_schema(vocab_size: int) -> pa.Schema:
    shard = fmt.shard_schema(vocab_size)
    fields = [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("source_line", pa.int64(), nullable=False),
        pa.field("source_offset", pa.int64(), nullable=False),
        pa.field("cleaned", pa.bool_(), nullable=False),
    ]
    fields += [
        shard.field(name) for name in ("input_ids", "word_start", "sentence_start", *fmt.CANDIDATE_KINDS.values())
    ]
    return pa.schema(fields)


def _row_view(run: pa.Schema) -> pa.Schema:
    """The shard columns of a run schema, so documents can be converted like rows."""
    return pa.schema(
        [pa.field("doc_id", pa.string(), nullable=False), pa.field("seq_index", pa.int32(), nullable=False)]
        + [run.field(i) for i in range(_META_COLUMNS, len(run))]
    )


def docs_to_record_batch(docs: list[TokenizedDocument], schema: pa.Schema) -> pa.RecordBatch:
    as_rows = [Row(d.doc_id, 0, d.ids, d.word_start, d.sentence_start, d.spans, d.span_labels) for d in docs]
    columns = rows_to_record_batch(as_rows, _row_view(schema)).columns[2:]
    meta = [
        pa.array([d.doc_id for d in docs], pa.string()),
        pa.array([d.source_path for d in docs], pa.string()),
        pa.array([d.source_line for d in docs], pa.int64()),
        pa.array([d.source_offset for d in docs], pa.int64()),
        pa.array([d.cleaned for d in docs], pa.bool_()),
    ]
    return pa.RecordBatch.from_arrays(meta + list(columns), schema=schema)


def record_batch_to_docs(batch: pa.RecordBatch) -> list[TokenizedDocument]:
    doc_ids = batch.column("doc_id").to_pylist()
    paths = batch.column("source_path").to_pylist()
    lines = batch.column("source_line").to_pylist()
    sources = batch.column("source_offset").to_pylist()
    cleaned = batch.column("cleaned").to_pylist()
    ids_col = batch.column("input_ids")
    offsets = ids_col.offsets.to_numpy()
    ids = ids_col.values.to_numpy()
    ws = batch.column("word_start").values.to_numpy(zero_copy_only=False)
    ss = batch.column("sentence_start").values.to_numpy(zero_copy_only=False)
    spans = {}
    for kind, column in fmt.CANDIDATE_KINDS.items():
        col = batch.column(column)
        values = col.values
        pairs = np.stack([values.field("start").to_numpy(), values.field("end").to_numpy()], axis=1).reshape(-1, 2)
        labels = values.field("label").to_pylist() if values.type.num_fields == 3 else None
        spans[kind] = (col.offsets.to_numpy(), pairs, labels)
    docs = []
    for i, doc_id in enumerate(doc_ids):
        a, b = offsets[i], offsets[i + 1]
        doc_spans, doc_labels = {}, {}
        for kind, (so, pairs, labels) in spans.items():
            doc_spans[kind] = pairs[so[i] : so[i + 1]]
            if labels is not None:
                doc_labels[kind] = labels[so[i] : so[i + 1]]
        docs.append(
            TokenizedDocument(
                doc_id, paths[i], lines[i], sources[i], ids[a:b], ws[a:b], ss[a:b], cleaned[i], doc_spans, doc_labels
            )
        )
    return docs


def iter_run(path: str) -> Iterator[TokenizedDocument]:
    """Documents of one run file, in order, one record batch in memory at a time."""
    with FileSystems.open(path) as f:
        for batch in pa.ipc.open_stream(pa.PythonFile(f, mode="r")):
            yield from record_batch_to_docs(batch)


class _SpillRunsFn(beam.DoFn):
    """Buffers documents per shard; when the buffer is full and at the end of each bundle, writes
    each shard's buffered documents, sorted, to a run file and emits ``(shard, run path)``."""

    def __init__(self, spec: ShardSpec, buffer_bytes: int):
        self._spec = spec
        self._buffer_bytes = buffer_bytes
        self._runs = Metrics.counter("shards", "runs")

    def setup(self):
        self._schema = run_schema(self._spec.vocab_size)

    def start_bundle(self):
        self._buffers: dict[int, list[TokenizedDocument]] = {}
        self._buffered = 0

    def process(self, doc: TokenizedDocument):
        shard = fmt.shard_of(doc.doc_id, self._spec.num_shards)
        self._buffers.setdefault(shard, []).append(doc)
        self._buffered += doc.ids.nbytes + 2 * len(doc.ids) + 256
        if self._buffered >= self._buffer_bytes:
            yield from self._flush()

    def finish_bundle(self):
        for shard_and_path in self._flush():
            yield WindowedValue(shard_and_path, MIN_TIMESTAMP, (GlobalWindow(),))

    def _flush(self):
        buffers, self._buffers, self._buffered = self._buffers, {}, 0
        for shard in sorted(buffers):
            docs = sorted(buffers[shard], key=lambda d: d.sort_key)
            path = f"{self._spec.output}/{RUNS_DIR}/{uuid.uuid4().hex}-shard-{shard:05d}.arrows"
            writer = ArrowFileWriter(path, self._schema, compression=None, file_format=False)
            for i in range(0, len(docs), RUN_BATCH_DOCS):
                writer.write(docs_to_record_batch(docs[i : i + RUN_BATCH_DOCS], self._schema))
            writer.close()
            self._runs.inc()
            yield shard, path


class _ShardStats:
    """Counts, histogram and unigram counts of one shard, accumulated as rows are written."""

    def __init__(self, spec: ShardSpec):
        self.spec = spec
        self.documents = self.rows = self.tokens = self.cleaned = self.duplicates = 0
        self.sentences = self.sentences_cut = self.continuation_rows = self.long_words = 0
        self.last_doc_id: str | None = None
        self.bins = -(-spec.max_row_tokens // HISTOGRAM_BIN_WIDTH)
        self.histogram = np.zeros(self.bins, np.int64)
        self.unigram = np.zeros(spec.vocab_size, np.int64)
        self.spans = dict.fromkeys(fmt.CANDIDATE_KINDS, 0)
        self.dropped = dict.fromkeys(fmt.CANDIDATE_KINDS, 0)

    def add_doc(self, doc: TokenizedDocument) -> None:
        self.documents += 1
        self.cleaned += int(doc.cleaned)
        self.duplicates += int(doc.doc_id == self.last_doc_id)
        self.last_doc_id = doc.doc_id
        self.sentences += doc.num_sentences

    def add_info(self, info: dict) -> None:
        self.sentences_cut += info["sentences_cut"]
        self.continuation_rows += info["continuation_rows"]
        self.long_words += info["long_words"]
        for kind, n in info["dropped"].items():
            self.dropped[kind] += n

    def add_rows(self, rows: list[Row]) -> None:
        if not rows:
            return
        lengths = np.fromiter((len(r.ids) for r in rows), dtype=np.int64, count=len(rows))
        self.rows += len(rows)
        self.tokens += int(lengths.sum())
        self.histogram += np.bincount((lengths - 1) // HISTOGRAM_BIN_WIDTH, minlength=self.bins)[: self.bins]
        ids = np.concatenate([r.ids for r in rows]).astype(np.int64)
        self.unigram += np.bincount(ids, minlength=self.spec.vocab_size)[: self.spec.vocab_size]
        for r in rows:
            for kind, sp in r.spans.items():
                self.spans[kind] += len(sp)

    def result(self) -> dict:
        present = np.flatnonzero(self.unigram)  # sparse: the manifest step holds one result per shard
        return {
            "rows": self.rows,
            "tokens": self.tokens,
            "documents": self.documents,
            "documents_cleaned": self.cleaned,
            "duplicate_doc_ids": self.duplicates,
            "sentences": self.sentences,
            "sentences_cut": self.sentences_cut,
            "continuation_rows": self.continuation_rows,
            "long_words": self.long_words,
            "spans": self.spans,
            "dropped": self.dropped,
            "histogram": self.histogram.tolist(),
            "unigram_ids": present.astype(np.int32),
            "unigram_counts": self.unigram[present],
        }


class _MergeAndWriteFn(beam.DoFn):
    """Merges a shard's sorted runs (k-way, streaming), packs rows and writes the shard file."""

    def __init__(self, spec: ShardSpec):
        self._spec = spec
        self._rows = Metrics.counter("shards", "rows")
        self._tokens = Metrics.counter("shards", "tokens")

    def setup(self):
        self._schema = fmt.shard_schema(self._spec.vocab_size)

    def process(self, shard_and_runs):
        index, runs = shard_and_runs
        spec = self._spec
        runs = sorted(r for r in runs if r is not None)
        docs = heapq.merge(*(iter_run(r) for r in runs), key=lambda d: d.sort_key)
        relative = fmt.shard_filename(index, spec.num_shards)
        writer = ArrowFileWriter(f"{spec.output}/{relative}", self._schema, background=True)
        stats = _ShardStats(spec)
        pending: list[Row] = []

        def write(rows: list[Row]) -> None:
            stats.add_rows(rows)  # per record batch: numpy over many rows at once
            writer.write(rows_to_record_batch(rows, self._schema))

        def emit(rows: list[Row]) -> None:
            pending.extend(rows)
            while len(pending) >= fmt.ROWS_PER_BATCH:
                write(pending[: fmt.ROWS_PER_BATCH])
                del pending[: fmt.ROWS_PER_BATCH]

        if spec.pack == "doc-sentences":
            for doc in docs:
                stats.add_doc(doc)
                rows, info = pack_doc_sentences(doc, spec.max_row_tokens)
                stats.add_info(info)
                emit(rows)
        else:  # FULL-SENTENCES packs a shard as one stream, so its documents are held in memory
            all_docs = list(docs)
            for doc in all_docs:
                stats.add_doc(doc)
            rows, info = pack_full_sentences(all_docs, spec.max_row_tokens, spec.separator_id)
            stats.add_info(info)
            emit(rows)
        if pending:
            write(pending)
        nbytes, sha = writer.close()
        self._rows.inc(stats.rows)
        self._tokens.inc(stats.tokens)
        log.info(
            "wrote %s: %d documents, %d rows, %d tokens, %d bytes",
            relative,
            stats.documents,
            stats.rows,
            stats.tokens,
            nbytes,
        )
        yield {"index": index, "path": relative, "bytes": nbytes, "sha256": sha, **stats.result()}


class WriteShards(beam.PTransform):
    """Spill each bundle's documents as sorted runs per shard, gather each shard's runs, merge
    them in order, pack rows and write one Arrow file per shard.

    Every shard index gets a file, even one no document hashed to (an empty shard is a valid
    file with the schema). Output: one result dict per shard (path, rows, tokens, bytes, sha256,
    counts, row-length histogram, unigram counts). Run files live under ``_tmp/`` in the output
    and are deleted by WriteManifest.
    """

    def __init__(self, spec: ShardSpec, buffer_bytes: int = 256 << 20):
        super().__init__()
        self._spec = spec
        self._buffer_bytes = buffer_bytes

    def expand(self, documents):
        n = self._spec.num_shards
        shard_to_run = documents | "SpillSortedRuns" >> beam.ParDo(_SpillRunsFn(self._spec, self._buffer_bytes))
        every_shard = documents.pipeline | "EveryShard" >> beam.Create([(i, None) for i in range(n)])
        return (
            (shard_to_run, every_shard)
            | "Flatten" >> beam.Flatten()
            | "GroupRunsByShard" >> beam.GroupByKey()
            | "MergePackWrite" >> beam.ParDo(_MergeAndWriteFn(self._spec))
        )
