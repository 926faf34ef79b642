"""How many shards: ``--num-shards N`` as given, or shards of about ``--shard-size-mb`` MB (default
:data:`DEFAULT_SHARD_MB` when neither is given) chosen from tokens counted before the job starts.

A document's shard is ``blake2b(doc_id) % num_shards`` (schemas/FORMAT.md), so the count must be known before the
first document is written. The launcher counts on a sample before the job:

1. it reads up to :data:`SAMPLE_FILES` input files spread over their sorted list, each from its start up to an
   equal share of :data:`READ_BYTES` of document text (a smaller file to its end);
2. it encodes documents spread evenly over what it read, about :data:`SAMPLE_BYTES` of text in all, with the
   artifact's tokenizer for text, and writes their tokens into memory as shard rows (the format's columns and
   compression; rows of ``max_row_tokens`` cut from each document);
3. it scales tokens and shard bytes per byte of encoded text by the text per raw byte of what it read (raw: the
   offset reached in an uncompressed file; in a ``.gz``/``.zst`` the decompressed offset over how much the file's
   first :data:`PREFIX_BYTES` expand; a file read to its end counts its size) and by the bytes of every matched file.

The count is the estimated shard bytes over the size asked, rounded, at least 1. The same input and options give
the same count whatever the worker count or runner. The estimate is as good as the sample: a corpus whose later
documents differ from the ones read (a file over the share, sorted by something that changes its text) gets shards
off by that difference (the Wikipedia sample read to 16 MB of its 39 MB: 0.307 tokens per byte against 0.346 over
all of it).
"""

from __future__ import annotations

import functools
import io
import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from tokenizers import Encoding, Tokenizer

from pipeline.elements import Document, Row
from pipeline.read.ranges import read_file
from pipeline.read.records import ReaderOptions
from pipeline.read.streams import CorruptInputError, TruncatedInputError, compression_of, decompressed_chunks
from pipeline.write.shards import rows_to_record_batch
from schemas import format as fmt
from schemas.tokenizers.rust_calls import guarded

log = logging.getLogger(__name__)

DEFAULT_SHARD_MB = 256  # "shards of 100-500 MB on big corpora"; a corpus under ~1.5 times this is one shard
SAMPLE_FILES = 8  # files read, spread over the sorted list of input files
READ_BYTES = 64_000_000  # UTF-8 bytes of document text read in all (an equal share from the start of each), at most
SAMPLE_BYTES = 2_000_000  # of which about this many in all are encoded: documents spread over what was read
PREFIX_BYTES = 8_000_000  # of a compressed file, decompressed to measure its expansion


@dataclass(frozen=True)
class Estimate:
    tokens: int  # in the whole input
    shard_bytes: int  # of all shards together

    def num_shards(self, shard_mb: float) -> int:
        return max(1, round(self.shard_bytes / (shard_mb * 1e6)))


def _encodings(tok: Tokenizer, texts: list[str]) -> list[Encoding]:
    """The texts' encodings under ``tok`` (no special tokens added); a text it fails on is left out (the job
    dead-letters it)."""
    try:
        return guarded(lambda: tok.encode_batch(texts, add_special_tokens=False), ValueError)
    except ValueError:
        out = []
        for text in texts:
            try:
                out.append(guarded(functools.partial(tok.encode, text, add_special_tokens=False), ValueError))
            except ValueError:
                pass
        return out


def _shard_bytes(encodings: list[Encoding], vocab_size: int, max_row_tokens: int) -> int:
    """Bytes of a shard file holding the encodings as rows (word starts from the encodings' words)."""
    schema = fmt.shard_schema(vocab_size)
    rows = []
    for n, e in enumerate(encodings):
        ids = np.asarray(e.ids, dtype=np.int64)
        words = np.asarray([-1 if w is None else w for w in e.word_ids], dtype=np.int64)
        word_start = np.ones(len(ids), dtype=bool)
        word_start[1:] = words[1:] != words[:-1]
        for i in range(0, len(ids), max_row_tokens):
            cut = slice(i, i + max_row_tokens)
            sentence_start = np.zeros(len(ids[cut]), dtype=bool)
            sentence_start[0] = True
            rows.append(Row(f"sample:{n:08d}", i // max_row_tokens, ids[cut], word_start[cut], sentence_start, {}, {}))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression=fmt.SHARD_COMPRESSION)) as w:
        for i in range(0, len(rows), fmt.ROWS_PER_BATCH):
            w.write_batch(rows_to_record_batch(rows[i : i + fmt.ROWS_PER_BATCH], schema))
    return sink.getvalue().size


def _spread(items: list, n: int) -> list:
    """``n`` of ``items`` evenly spread, the first one included (all of them when there are no more)."""
    if len(items) <= n:
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


def _read_sample(path: str, size: int, ropts: ReaderOptions, share: int) -> tuple[list[str], int, int]:
    """The documents of ``path`` up to ``share`` bytes of text, the text bytes read and the raw bytes read for
    them (the file's size when it was read to its end)."""
    texts: list[str] = []
    text_bytes = 0
    for rec in read_file(path, ropts):
        if not isinstance(rec, Document):
            continue
        if text_bytes >= share:
            raw = rec.source.byte_offset  # in the decompressed stream for a compressed file
            if compression_of(path) != "none":
                raw = round(raw / _expansion(path, size))
            return texts, text_bytes, min(size, max(1, raw))
        texts.append(rec.text)
        text_bytes += len(rec.text.encode("utf-8"))
    return texts, text_bytes, size


def _expansion(path: str, size: int) -> float:
    """Decompressed bytes per byte of a compressed file, measured on its first :data:`PREFIX_BYTES` (1.0 when
    they do not decompress: the job dead-letters what it cannot read)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        prefix = f.read(min(size, PREFIX_BYTES))
    out = 0
    try:
        for chunk in decompressed_chunks(io.BytesIO(prefix).read, compression_of(path)):
            out += len(chunk)
    except TruncatedInputError:
        pass  # the prefix ends inside a member or frame: what it gave counts
    except CorruptInputError:
        return 1.0
    return out / len(prefix) if prefix and out else 1.0


def estimate(
    files: list[tuple[str, int]], ropts: ReaderOptions, tok: Tokenizer, vocab_size: int, max_row_tokens: int
) -> Estimate:
    """The input's tokens and shard bytes, estimated from the first documents of some files (module docstring)."""
    sampled = _spread(files, SAMPLE_FILES)
    encodings: list[Encoding] = []
    text_read = raw_read = text_encoded = 0
    for path, size in sampled:
        texts, text_bytes, raw = _read_sample(path, size, ropts, READ_BYTES // len(sampled))
        text_read += text_bytes
        raw_read += raw
        share = max(1, round(len(texts) * SAMPLE_BYTES / len(sampled) / max(1, text_bytes)))
        chosen = _spread(texts, share)
        text_encoded += sum(len(t.encode("utf-8")) for t in chosen)
        encodings += _encodings(tok, chosen)
    tokens = sum(len(e.ids) for e in encodings)
    if raw_read == 0 or text_encoded == 0 or tokens == 0:
        return Estimate(0, 0)
    scale = sum(size for _, size in files) * text_read / raw_read / text_encoded  # input text bytes / encoded ones
    return Estimate(round(tokens * scale), round(_shard_bytes(encodings, vocab_size, max_row_tokens) * scale))


def choose(
    num_shards: int | None,
    shard_size_mb: float | None,
    files: list[tuple[str, int]],
    ropts: ReaderOptions,
    tok: Tokenizer,
    vocab_size: int,
    max_row_tokens: int,
) -> int:
    """``num_shards`` when given, else the count for shards of about ``shard_size_mb`` (default
    :data:`DEFAULT_SHARD_MB`) MB."""
    if num_shards is not None:
        return num_shards
    mb = shard_size_mb if shard_size_mb is not None else DEFAULT_SHARD_MB
    guess = estimate(files, ropts, tok, vocab_size, max_row_tokens)
    n = guess.num_shards(mb)
    log.info(
        "about %s tokens, %.1f MB of shards (counted on the input's first documents) -> %d shard(s) of about %s MB%s",
        f"{guess.tokens:,}",
        guess.shard_bytes / 1e6,
        n,
        f"{guess.shard_bytes / n / 1e6:,.1f}",
        "" if shard_size_mb is not None else f" (no --num-shards or --shard-size-mb: {DEFAULT_SHARD_MB} MB)",
    )
    return n
