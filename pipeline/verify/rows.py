"""``pipeline.verify``'s row-level checks of one shard: every record batch read, validated and held to FORMAT.md.

Each batch is validated in full (``RecordBatch.validate(full=True)``: offsets inside their buffers, valid UTF-8)
before a value of it is used, so a shard damaged after its checksum was computed (or a crafted one with a matching
checksum) gives one line naming the shard and batch, never a traceback or a crash in Arrow's C++ code. The checks
themselves are ``schemas/invariants.py``'s, shared with the trainer's loader.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from schemas import format as fmt
from schemas import invariants as inv
from schemas.artifact import Artifact


class Findings(Protocol):
    """Where problems and counts go (``pipeline.verify.Report``)."""

    def fail(self, message: str) -> None: ...

    def count(self, what: str, n: int = 1) -> None: ...


def _list_parts(batch: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0, values) of a list column: only the values its rows cover (a valid list array may start at a
    non-zero offset)."""
    arr = batch.column(name)
    offsets = arr.offsets.to_numpy()
    if not len(offsets):  # a zero-row array may come without offsets
        return np.zeros(1, np.int32), arr.values.to_numpy(zero_copy_only=False)[:0]
    values = arr.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return offsets - offsets[0], values


def _nulls(array: pa.Array) -> bool:
    """Any null at any depth (the shard schema's fields are all non-nullable; a damaged file may still carry nulls)."""
    if array.null_count:
        return True
    if isinstance(array, pa.ListArray):
        return _nulls(array.values)
    if isinstance(array, pa.StructArray):
        return any(_nulls(array.field(i)) for i in range(array.type.num_fields))
    return False


def _read_batch(reader: Any, b: int, where: str, findings: Findings) -> pa.RecordBatch | None:
    try:
        batch = reader.get_batch(b)
        batch.validate(full=True)
    except fmt.ARROW_READ_ERRORS as e:
        findings.fail(f"{where}: record batch unreadable (damaged after its checksum was computed?): {fmt.one_line(e)}")
        return None
    nulls = [name for name in batch.schema.names if _nulls(batch.column(name))]
    if nulls:
        findings.fail(f"{where}: null values in {', '.join(nulls)} (every column of a shard is non-nullable)")
        return None
    return batch


def _check_spans(batch: pa.RecordBatch, where: str, offsets: np.ndarray, findings: Findings) -> None:
    lengths = np.diff(offsets)
    _, word_start = _list_parts(batch, "word_start")
    for kind, col in fmt.CANDIDATE_KINDS.items():
        arr = batch.column(col)
        span_offsets = arr.offsets.to_numpy()
        first, last = int(span_offsets[0]), int(span_offsets[-1])
        starts = arr.values.field("start").to_numpy()[first:last]
        ends = arr.values.field("end").to_numpy()[first:last]
        if not starts.size:
            continue
        findings.count(f"{kind} spans checked", int(starts.size))
        row_of = np.repeat(np.arange(batch.num_rows), np.diff(span_offsets))
        bad = inv.spans_outside_rows(starts, ends, row_of, lengths)
        if bad.any():
            findings.fail(f"{where}: {int(bad.sum())} {kind} span(s) outside their row")
            continue
        base = offsets[row_of]
        at_end = ends == lengths[row_of]
        ok_start = word_start[base + starts]
        ok_end = at_end | word_start[np.minimum(base + ends, len(word_start) - 1)]
        if not (ok_start & ok_end).all():
            findings.fail(f"{where}: {int((~(ok_start & ok_end)).sum())} {kind} span(s) not on word boundaries")


def _check_continuations(
    flags: dict[str, np.ndarray],
    offsets: np.ndarray,
    doc_ids: list[str],
    seqs: np.ndarray,
    previous: tuple[str | None, int, int, int],
    limit: int,
    allowed: bool,
    where: str,
    findings: Findings,
    totals: dict[str, Any],
    first_ids: np.ndarray,
    continuing: np.ndarray | None,
) -> tuple[str | None, int, int, int]:
    """Every row of the batch that starts inside a word is a continuation row (``invariants.continuation_problems``);
    ``previous`` describes the row before the batch (doc_id, seq_index, length, word starts after its first token)
    and the same of the batch's last row is returned. Continuation rows are added to ``totals``. ``first_ids``: each
    row's first token id; ``continuing``: per vocabulary id, whether the token can only continue a word (or None)."""
    word_start, sentence_start = flags["word_start"], flags["sentence_start"]
    lengths = np.diff(offsets)
    n = len(lengths)
    if n == 0:
        return previous
    nonempty = lengths > 0
    first_ws = ~inv.rows_starting_inside_a_word(word_start, offsets)
    heads = np.minimum(offsets[:-1], max(len(sentence_start) - 1, 0))
    first_ss = nonempty & sentence_start[heads] if len(sentence_start) else np.zeros(n, dtype=bool)
    cumulative = np.concatenate([[0], np.cumsum(word_start, dtype=np.int64)])
    inner = cumulative[offsets[1:]] - cumulative[offsets[:-1]] - (first_ws & nonempty)
    prev_doc, prev_seq, prev_len, prev_inner = previous
    before_doc = [prev_doc, *doc_ids[:-1]]
    before_seq = np.concatenate([[prev_seq], seqs[:-1]])
    same = np.array([a == b for a, b in zip(before_doc, doc_ids)], dtype=bool) & (seqs == before_seq + 1)
    before_len = np.concatenate([[prev_len], lengths[:-1]])
    before_inner = np.concatenate([[prev_inner], inner[:-1]])
    continues = None
    if continuing is not None and len(continuing):
        continues = nonempty & continuing[np.clip(first_ids, 0, len(continuing) - 1)]
    problems = inv.continuation_problems(first_ws, first_ss, same, before_len, before_inner, limit, allowed, continues)
    for rule, bad in problems.items():
        if bad.any():
            findings.fail(f"{where}: {int(bad.sum())} row(s) {inv.CONTINUATION_RULES[rule]}")
    continuations = int((~first_ws).sum())
    if continuations:
        findings.count("continuation rows checked", continuations)
        totals["continuation_rows"] = totals.get("continuation_rows", 0) + continuations
    return doc_ids[-1], int(seqs[-1]), int(lengths[-1]), int(inner[-1])


def check_shard_rows(
    art: Artifact,
    index: int,
    forbidden: np.ndarray,
    findings: Findings,
    totals: dict[str, Any],
    unigram: np.ndarray,
    continuing: np.ndarray | None = None,
) -> bool:
    """Check every row of shard ``index`` of the manifest; add its rows, tokens, documents, row lengths and token
    counts to ``totals`` and ``unigram``. ``forbidden``: the special ids no row may hold
    (``invariants.forbidden_special_ids``); ``continuing``: per token id, whether it can only continue a word
    (``schemas.tokenizers.families.word_continuing_ids``). False when the shard could not be read to its end (then the totals
    miss its rest)."""
    m = art.manifest
    entry = m["shards"][index]
    relative = entry["path"]
    limit = m["max_row_tokens"]
    num_shards = len(m["shards"])
    vocab = art.vocab_size
    try:
        reader = art.open_shard(relative)
    except fmt.FormatError as e:
        findings.fail(str(e))
        return False
    try:
        fmt.check_stamped_major(reader.schema, m["format_version"], art.display(relative))
    except fmt.FormatError as e:
        findings.fail(str(e))
    rows = tokens = 0
    allowed = fmt.continuation_rows_allowed(m["format_version"])
    previous: tuple[str | None, int, int, int] = (None, -1, 0, 0)  # the row before: doc_id, seq_index, length, inner
    prev_doc: str | None = None
    prev_seq = -1
    doc_sentences = m["pack"] == "doc-sentences"
    histogram = totals["histogram"]
    for b in range(reader.num_record_batches):
        where = f"{relative} batch {b}"
        batch = _read_batch(reader, b, where, findings)
        if batch is None:
            return False
        last = b == reader.num_record_batches - 1
        if (
            batch.num_rows > fmt.ROWS_PER_BATCH
            or batch.num_rows == 0
            or (not last and batch.num_rows != fmt.ROWS_PER_BATCH)
        ):
            findings.fail(
                f"{where}: {batch.num_rows} rows; every batch but a shard's last must hold exactly {fmt.ROWS_PER_BATCH}"
            )
        offsets, ids = _list_parts(batch, "input_ids")
        lengths = np.diff(offsets)
        first_ids = ids[np.minimum(offsets[:-1], len(ids) - 1)].astype(np.int64) if len(ids) else offsets[:-1] * 0
        rows += batch.num_rows
        tokens += int(lengths.sum())
        findings.count("rows checked", batch.num_rows)
        bad_length = inv.empty_rows(lengths) | inv.rows_too_long(lengths, limit)
        if bad_length.any():
            findings.fail(f"{where}: row lengths outside 1..{limit}: {sorted(set(lengths[bad_length].tolist()))[:5]}")
        outside = inv.token_id_outside_vocab(ids, vocab)
        if outside is not None:
            findings.fail(f"{where}: token id {outside} outside the vocabulary (0..{vocab - 1})")
            ids = ids[(ids >= 0) & (ids < vocab)]
        smuggled = inv.special_ids_in_rows(ids, forbidden)
        findings.count("tokens checked for special ids", int(ids.size))
        if smuggled.any():
            found = sorted(set(ids[smuggled].tolist()))
            findings.fail(
                f"{where}: {int(smuggled.sum())} special token id(s) {found} inside rows (rows hold text only; FORMAT.md)"
            )
        unigram += np.bincount(ids.astype(np.int64), minlength=vocab)[:vocab]
        flags: dict[str, np.ndarray] = {}
        for col in ("word_start", "sentence_start"):
            o2, values = _list_parts(batch, col)
            if not inv.flags_align(offsets, o2):
                findings.fail(f"{where}: {col} lengths differ from input_ids lengths")
                continue
            flags[col] = values
        doc_ids = batch.column("doc_id").to_pylist()
        if totals.get("watched"):  # the doc ids the removed records name (verify_removed.row_problems)
            totals["watched_in_rows"].update(totals["watched"].intersection(doc_ids))
        seqs = batch.column("seq_index").to_numpy()
        if len(flags) == 2:
            _check_spans(batch, where, offsets, findings)
            previous = _check_continuations(
                flags, offsets, doc_ids, seqs, previous, limit, allowed, where, findings, totals, first_ids, continuing
            )
        for doc_id, seq in zip(doc_ids, seqs.tolist()):
            if fmt.shard_of(doc_id, num_shards) != index:
                findings.fail(f"{where}: document {doc_id!r} does not belong in shard {index}")
                return False
            if prev_doc is not None and doc_id < prev_doc:
                findings.fail(f"{where}: rows not sorted by doc_id ({prev_doc!r} before {doc_id!r})")
                return False
            if doc_sentences:
                if doc_id != prev_doc or seq == 0:
                    if seq != 0:
                        findings.fail(f"{where}: document {doc_id!r} starts at seq_index {seq}, not 0")
                        return False
                    totals["documents"] += 1
                elif seq != prev_seq + 1:
                    findings.fail(f"{where}: document {doc_id!r}: seq_index {seq} follows {prev_seq}")
                    return False
            prev_doc, prev_seq = doc_id, seq
        if len(histogram):
            hist_idx = (lengths[lengths > 0] - 1) // fmt.HISTOGRAM_BIN_WIDTH
            np.add.at(histogram, np.minimum(hist_idx, len(histogram) - 1), 1)
    if rows != entry["rows"]:
        findings.fail(f"{relative}: {rows:,} rows, manifest says {entry['rows']:,}")
    if tokens != entry["tokens"]:
        findings.fail(f"{relative}: {tokens:,} tokens, manifest says {entry['tokens']:,}")
    totals["rows"] += rows
    totals["tokens"] += tokens
    return True
