"""How tokenized documents are packed into rows. Pure numpy, no Beam.

A :class:`~pipeline.elements.TokenizedDocument` holds one document's whole token sequence with its word
and sentence starts and candidate spans (token ranges in document coordinates). The packers cut token
sequences into :class:`~pipeline.elements.Row` s of at most ``limit`` tokens (``schemas.format.max_row_tokens``:
``max_seq_len`` less the ``SPECIAL_POSITIONS`` of [CLS] and [SEP]):

- :func:`pack_doc_sentences` (DOC-SENTENCES): whole sentences of one document while they fit;
  a sentence longer than ``limit`` starts a new row and is cut at word boundaries.
- :func:`pack_full_sentences` (FULL-SENTENCES): the documents of a shard form one stream with a
  separator token between documents, packed with the same rule.
"""

from __future__ import annotations

import numpy as np

from pipeline.elements import Row, TokenizedDocument

# The spans of a row or document without any of a kind (read-only: one array serves them all).
NO_SPANS = np.empty((0, 2), np.int32)
NO_SPANS.flags.writeable = False


def _cut_long(start: int, end: int, word_start: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into pieces of at most ``limit`` tokens, at word starts where possible.

    A word longer than ``limit`` starts a piece (the piece before it ends at its start, its last word start in
    reach) and is cut into pieces of exactly ``limit`` tokens; the piece holding its rest goes on with the words
    after it. The pieces after the first that start inside the word are continuation rows (``word_start[0]`` false;
    FORMAT.md, format 2.0). With ``--long-words dead-letter`` such a document never gets here (``word_too_long``)."""
    pieces = []
    pos = start
    while end - pos > limit:
        window = word_start[pos + 1 : pos + limit + 1]
        starts = np.flatnonzero(window)
        cut = pos + 1 + int(starts[-1]) if starts.size else pos + limit  # a word longer than a row
        pieces.append((pos, cut))
        pos = cut
    pieces.append((pos, end))
    return pieces


def pack_ranges(
    sentence_starts: np.ndarray, n_tokens: int, word_start: np.ndarray, limit: int
) -> tuple[list[tuple[int, int]], int]:
    """Greedy DOC-SENTENCES packing of one token sequence.

    ``sentence_starts``: sorted token indices where sentences begin. Returns the row ranges
    ``[start, end)`` covering ``[0, n_tokens)`` exactly, and how many sentences had to be cut.

    The rule, sentence by sentence: a sentence longer than ``limit`` closes the open row and is cut
    (:func:`_cut_long`), its last piece opening the next row; a sentence that does not fit in the open
    row closes it and opens the next; else it joins the open row. Computed a row at a time: the run of
    short sentences that joins the open row ends at the last sentence end within ``row start + limit``
    (a binary search over the sentence ends), or before the next long sentence.
    """
    if n_tokens == 0:
        return [], 0
    bounds = np.asarray(sentence_starts, dtype=np.int64)
    if bounds.size == 0 or bounds[0] != 0:
        bounds = np.concatenate(([0], bounds))
    ends = np.append(bounds[1:], n_tokens)
    long_at = np.flatnonzero(ends - bounds > limit).tolist()  # the sentences that must be cut
    starts_list, ends_list = bounds.tolist(), ends.tolist()
    n = len(starts_list)
    rows: list[tuple[int, int]] = []
    cut = 0
    row_start = row_end = 0
    i = 0  # the next sentence
    k = 0  # the next long sentence: long_at[k] >= i
    while i < n:
        next_long = long_at[k] if k < len(long_at) else n
        if i < next_long:
            j = min(int(np.searchsorted(ends, row_start + limit, side="right")), next_long)
            if j > i:  # sentences i .. j-1 join the open row
                row_end = ends_list[j - 1]
                i = j
                continue
            rows.append((row_start, row_end))  # sentence i does not fit: it opens the next row
            row_start, row_end = starts_list[i], ends_list[i]
            i += 1
            continue
        cut += 1  # sentence i is long
        if row_end > row_start:
            rows.append((row_start, row_end))
        pieces = _cut_long(starts_list[i], ends_list[i], word_start, limit)
        rows.extend(pieces[:-1])
        row_start, row_end = pieces[-1]
        i += 1
        k += 1
    if row_end > row_start:
        rows.append((row_start, row_end))
    return rows, cut


def _spans_in_rows(spans: np.ndarray, rows: list[tuple[int, int]]) -> tuple[list[np.ndarray], int]:
    """Assign each span to the row containing it; spans crossing a row boundary are dropped.

    Returns per-row index arrays into ``spans`` and the number dropped.
    """
    if spans.size == 0:
        return [np.empty(0, dtype=np.int64) for _ in rows], 0
    row_starts = np.array([r[0] for r in rows], dtype=np.int64)
    row_ends = np.array([r[1] for r in rows], dtype=np.int64)
    which = np.searchsorted(row_starts, spans[:, 0], side="right") - 1
    inside = (which >= 0) & (spans[:, 1] <= row_ends[np.clip(which, 0, None)])
    dropped = int((~inside).sum())
    idx = np.flatnonzero(inside)
    per_row = [idx[which[idx] == r] for r in range(len(rows))]
    return per_row, dropped


def pack_doc_sentences(doc: TokenizedDocument, limit: int) -> tuple[list[Row], dict]:
    """Rows of one document, and statistics: ``sentences_cut`` and ``dropped`` spans per kind."""
    n = len(doc.ids)
    ranges, cut = pack_ranges(np.flatnonzero(doc.sentence_start), n, doc.word_start, limit)
    return _rows_from_ranges([doc], np.array([0, n]), ranges, doc_sequence=True), {
        "sentences_cut": cut,
        **_dropped(doc, ranges),
        **long_word_counts(doc.word_start, ranges),
    }


def long_word_counts(word_start: np.ndarray, ranges: list[tuple[int, int]]) -> dict[str, int]:
    """``continuation_rows``: rows that start inside a word; ``long_words``: the words longer than a row, each the
    start of a run of continuation rows."""
    if not ranges:
        return {"continuation_rows": 0, "long_words": 0}
    inside = ~word_start[np.fromiter((s for s, _ in ranges), dtype=np.int64, count=len(ranges))]
    return {"continuation_rows": int(inside.sum()), "long_words": int(inside[0] + (inside[1:] & ~inside[:-1]).sum())}


def _dropped(doc: TokenizedDocument, ranges) -> dict:
    return {
        "dropped": {kind: _spans_in_rows(spans, ranges)[1] if len(spans) else 0 for kind, spans in doc.spans.items()}
    }


def _rows_from_ranges(
    docs: list[TokenizedDocument], doc_offsets: np.ndarray, ranges, doc_sequence: bool, stream=None
) -> list[Row]:
    rows = []
    if doc_sequence:
        (doc,) = docs
        ids, ws, ss = doc.ids, doc.word_start, doc.sentence_start
        # kinds without spans in this document (None): the same empty array and label list in every row
        span_rows = {
            kind: _spans_in_rows(spans, ranges)[0] if len(spans) else None for kind, spans in doc.spans.items()
        }
        for i, (s, e) in enumerate(ranges):
            spans: dict[str, np.ndarray] = {}
            labels: dict[str, list[str]] = {}
            for kind, per_row in span_rows.items():
                if per_row is None:
                    spans[kind] = NO_SPANS
                    if kind in doc.span_labels:
                        labels[kind] = []
                    continue
                sel = per_row[i]
                spans[kind] = (doc.spans[kind][sel] - s).astype(np.int32)
                if kind in doc.span_labels:
                    labels[kind] = [doc.span_labels[kind][j] for j in sel.tolist()]
            rows.append(Row(doc.doc_id, i, ids[s:e], ws[s:e], ss[s:e], spans, labels))
        return rows
    ids, ws, ss, spans_all, labels_all = stream
    span_rows_all = {kind: _spans_in_rows(sp, ranges)[0] for kind, sp in spans_all.items()}
    for i, (s, e) in enumerate(ranges):
        d = int(np.searchsorted(doc_offsets, s, side="right") - 1)
        spans = {}
        labels = {}
        for kind, per_row_all in span_rows_all.items():
            sel = per_row_all[i]
            spans[kind] = (spans_all[kind][sel] - s).astype(np.int32)
            if kind in labels_all:
                labels[kind] = [labels_all[kind][j] for j in sel.tolist()]
        rows.append(Row(docs[min(d, len(docs) - 1)].doc_id, i, ids[s:e], ws[s:e], ss[s:e], spans, labels))
    return rows


def pack_full_sentences(docs: list[TokenizedDocument], limit: int, separator_id: int) -> tuple[list[Row], dict]:
    """FULL-SENTENCES packing of a shard's documents (already in shard order).

    The separator is its own one-token sentence between consecutive documents; a row never starts
    or ends with it (it is dropped there, since [CLS]/[SEP] already mark the row's edges).
    """
    if not docs:
        return [], {"sentences_cut": 0, "dropped": {}, "continuation_rows": 0, "long_words": 0}
    dtype = docs[0].ids.dtype
    sep = np.array([separator_id], dtype=dtype)
    parts_ids, parts_ws, parts_ss, offsets = [], [], [], []
    pos = 0
    for i, d in enumerate(docs):
        if i:
            parts_ids.append(sep)
            parts_ws.append(np.ones(1, dtype=bool))
            parts_ss.append(np.ones(1, dtype=bool))
            pos += 1
        offsets.append(pos)  # a document starts after its separator
        parts_ids.append(d.ids)
        parts_ws.append(d.word_start)
        ss = d.sentence_start.copy()
        if len(ss):
            ss[0] = True
        parts_ss.append(ss)
        pos += len(d.ids)
    ids = np.concatenate(parts_ids)
    ws = np.concatenate(parts_ws)
    ss = np.concatenate(parts_ss)
    is_sep = np.zeros(len(ids), dtype=bool)
    for off in offsets[1:]:
        is_sep[off - 1] = True
    ranges, cut = pack_ranges(np.flatnonzero(ss), len(ids), ws, limit)
    trimmed = []
    for s, e in ranges:
        if is_sep[s]:
            s += 1
        if e > s and is_sep[e - 1]:
            e -= 1
        if e > s:
            trimmed.append((s, e))
    kinds = sorted({k for d in docs for k in d.spans})
    spans_all, labels_all = {}, {}
    for kind in kinds:
        arrays = [d.spans.get(kind, np.empty((0, 2), np.int32)).astype(np.int64) + off for d, off in zip(docs, offsets)]
        spans_all[kind] = np.concatenate(arrays) if arrays else np.empty((0, 2), np.int64)
        if any(kind in d.span_labels for d in docs):
            labels_all[kind] = [lab for d in docs for lab in d.span_labels.get(kind, [])]
    rows = _rows_from_ranges(
        docs, np.array(offsets), trimmed, doc_sequence=False, stream=(ids, ws, ss, spans_all, labels_all)
    )
    dropped = {kind: _spans_in_rows(sp, trimmed)[1] for kind, sp in spans_all.items()}
    return rows, {"sentences_cut": cut, "dropped": dropped, **long_word_counts(ws, trimmed)}
