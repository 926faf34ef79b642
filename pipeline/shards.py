"""WriteShards: tokenized documents -> Arrow shard files, one result record per shard.

Documents go to shard ``blake2b(doc_id) % num_shards``; each shard's documents are sorted by
``(doc_id, source path, source offset)``, packed into rows and written as one Arrow IPC file.
Nothing here depends on bundle boundaries, worker count or arrival order, so the bytes of every
shard are a function of the input and the options only.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from pipeline.files import atomic_write
from pipeline.packing import Row, TokenizedDocument, pack_doc_sentences, pack_full_sentences
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
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=pa.list_(pa.field("item", item_type, nullable=False)))


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
        per_row = [r.spans.get(kind, np.empty((0, 2), np.int32)).reshape(-1, 2) for r in rows]
        counts = np.fromiter((len(p) for p in per_row), dtype=np.int64, count=len(rows))
        span_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=span_offsets[1:])
        flat = np.concatenate(per_row).astype(np.int32) if per_row else np.empty((0, 2), np.int32)
        children = [pa.array(flat[:, 0], pa.int32()), pa.array(flat[:, 1], pa.int32())]
        if struct_type.num_fields == 3:
            children.append(pa.array([lab for r in rows for lab in r.span_labels.get(kind, [])], pa.string()))
        structs = pa.StructArray.from_arrays(children, fields=list(struct_type))
        columns.append(_list_array(span_offsets, structs, struct_type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def write_arrow_file(path: str, schema: pa.Schema, batches) -> tuple[int, str]:
    """Write an Arrow IPC file atomically (temp name, then rename); return (bytes, sha256)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=fmt.SHARD_COMPRESSION)
    with pa.ipc.new_file(sink, schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    atomic_write(path, data)
    return len(data), hashlib.sha256(data).hexdigest()


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: ShardSpec):
        self._spec = spec
        self._rows = Metrics.counter("shards", "rows")
        self._tokens = Metrics.counter("shards", "tokens")

    def setup(self):
        self._schema = fmt.shard_schema(self._spec.vocab_size)

    def process(self, shard_and_docs):
        index, docs = shard_and_docs
        spec = self._spec
        docs = sorted((d for d in docs if d is not None), key=lambda d: d.sort_key)
        rows: list[Row] = []
        sentences_cut = 0
        dropped: dict[str, int] = {kind: 0 for kind in fmt.CANDIDATE_KINDS}
        if spec.pack == "doc-sentences":
            for doc in docs:
                doc_rows, stats = pack_doc_sentences(doc, spec.max_row_tokens)
                rows.extend(doc_rows)
                sentences_cut += stats["sentences_cut"]
                for kind, n in stats["dropped"].items():
                    dropped[kind] += n
        else:
            rows, stats = pack_full_sentences(docs, spec.max_row_tokens, spec.separator_id)
            sentences_cut = stats["sentences_cut"]
            for kind, n in stats["dropped"].items():
                dropped[kind] += n

        batches = [rows_to_record_batch(rows[i : i + fmt.ROWS_PER_BATCH], self._schema) for i in range(0, len(rows), fmt.ROWS_PER_BATCH)]
        relative = fmt.shard_filename(index, spec.num_shards)
        nbytes, sha = write_arrow_file(f"{spec.output}/{relative}", self._schema, batches)

        lengths = np.fromiter((len(r.ids) for r in rows), dtype=np.int64, count=len(rows))
        tokens = int(lengths.sum())
        bins = -(-spec.max_row_tokens // HISTOGRAM_BIN_WIDTH)
        histogram = np.bincount((lengths - 1) // HISTOGRAM_BIN_WIDTH, minlength=bins)[:bins] if len(rows) else np.zeros(bins, np.int64)
        all_ids = np.concatenate([r.ids for r in rows]) if rows else np.empty(0, np.int64)
        unigram = np.bincount(all_ids, minlength=spec.vocab_size).astype(np.int64)
        doc_ids = [d.doc_id for d in docs]
        duplicates = sum(1 for a, b in zip(doc_ids, doc_ids[1:]) if a == b)
        spans = {kind: int(sum(len(r.spans.get(kind, ())) for r in rows)) for kind in fmt.CANDIDATE_KINDS}
        self._rows.inc(len(rows))
        self._tokens.inc(tokens)
        log.info("wrote %s: %d documents, %d rows, %d tokens, %d bytes", relative, len(docs), len(rows), tokens, nbytes)
        yield {
            "index": index,
            "path": relative,
            "rows": len(rows),
            "tokens": tokens,
            "bytes": nbytes,
            "sha256": sha,
            "documents": len(docs),
            "documents_cleaned": sum(1 for d in docs if d.cleaned),
            "duplicate_doc_ids": duplicates,
            "sentences": sum(d.num_sentences for d in docs),
            "sentences_cut": sentences_cut,
            "spans": spans,
            "dropped": dropped,
            "histogram": histogram.tolist(),
            "unigram": unigram,
        }


class WriteShards(beam.PTransform):
    """Key documents by shard, gather each shard, pack its rows and write its Arrow file.

    Every shard index gets a file, even one no document hashed to (an empty shard is a valid
    file with the schema). Output: one result dict per shard (path, rows, tokens, bytes, sha256,
    counts, row-length histogram, unigram counts).
    """

    def __init__(self, spec: ShardSpec):
        super().__init__()
        self._spec = spec

    def expand(self, documents):
        n = self._spec.num_shards
        shard_to_document = documents | "KeyByShard" >> beam.Map(lambda d: (shard_of(d.doc_id, n), d))
        every_shard = documents.pipeline | "EveryShard" >> beam.Create([(i, None) for i in range(n)])
        return (
            (shard_to_document, every_shard)
            | "Flatten" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "PackAndWrite" >> beam.ParDo(_WriteShardFn(self._spec))
        )
