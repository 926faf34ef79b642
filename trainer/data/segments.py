"""Bi-sequence inputs for BERT's next sentence prediction (NSP), built at load time from the artifact's rows.

SpanBERT's ablations (Joshi et al. 2020, Tables 6 and 7) and its "Our BERT" baseline train on two half-length
segments with NSP (BERT, Devlin et al. 2019): ``[CLS] A [SEP] B [SEP]``, where B follows A in the corpus or,
half of the time, comes from another document, and the model predicts which. ``DataConfig.segments = 2``
builds such inputs from the one-segment rows of an artifact (``pack`` doc-sentences or full-sentences):

1. Target length: ``max_seq_len - 3`` tokens for A + B; with probability ``short_seq_prob`` (BERT: 0.1) a
   uniform length in ``2..max_seq_len - 3`` instead (BERT's short sequences, which reduce the mismatch with
   short fine-tuning inputs). ``limit = min(row length, target)``.
2. A = the row's leading sentences: it ends at a sentence start ``k`` drawn uniformly among the row's
   ``sentence_start`` positions in ``1..limit - 1`` (a row of one sentence: among its word starts; a row
   of one word: in the middle).
3. With probability 0.5, B = the continuation ``row[k:limit]`` (label 0, "IsNext"). Otherwise B comes
   from another document (label 1, "NotNext"): up to three candidate rows are drawn uniformly from the row's
   shuffle window (the rows being read anyway, so no extra I/O; for the unshuffled evaluation split, from the
   whole split); the first whose ``doc_id`` differs is used, from one of its sentence starts (drawn
   uniformly), for ``target - k`` tokens. When all three share the row's document (a one-document window),
   B is the continuation and the label says so.

The pair becomes one content row ``A [SEP] B`` with ``[SEP]`` a word of its own, so every masking scheme
works unchanged: [SEP] is never masked, no span or word crosses it, and it is an observed SBO boundary.
Candidate spans (entity/noun_phrase/ngram) inside A or inside the part of B that is kept move with their
tokens. The collator's batch gains ``token_type_ids`` (0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding) and
``next_sentence_label`` [B] (0 = B continues A, 1 = B is from another document, as Hugging Face's
``BertForPreTraining`` expects).

Determinism: a row's choices use 8 uniforms from ``Philox(key=(sample_id, seed << 32 | epoch),
counter=(0, 0, 0, 1))`` -- the masks' key on a counter range the masks never reach -- so pairs are a pure
function of (seed, epoch, sample id) like the masks (the row's stream position, and so its window, is one).
"""

from __future__ import annotations

import numpy as np
import torch

from trainer.masking import Rows

PAIR_DRAWS = 8  # per row: [short?, short length, NotNext?, split, 3 x other row, start in the other row]
OTHER_CANDIDATES = 3
NOT_NEXT_PROB = 0.5  # BERT: half of the pairs are NotNext
_COUNTER = [0, 0, 0, 1]  # Philox counter of the pair stream (masks use counter 0 upwards)


def pair_draws(seed: int, epoch: int, sample_ids: np.ndarray) -> np.ndarray:
    """``[R, PAIR_DRAWS]`` uniforms of each row's pair choices (module docstring)."""
    key1 = (int(seed) << 32) | int(epoch)
    out = np.empty((len(sample_ids), PAIR_DRAWS))
    for i, sid in enumerate(np.asarray(sample_ids, dtype=np.int64).tolist()):
        out[i] = np.random.Generator(np.random.Philox(key=[sid, key1], counter=_COUNTER)).random(PAIR_DRAWS)
    return out


def other_positions(draws: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``[R, OTHER_CANDIDATES]`` stream positions of the candidate rows for B, uniform in ``[lo, hi)``."""
    size = (hi - lo)[:, None]
    pick = np.minimum(np.floor(draws[:, 4 : 4 + OTHER_CANDIDATES] * size).astype(np.int64), size - 1)
    return lo[:, None] + pick


def _pick(u: float, values: np.ndarray) -> int:
    return int(values[min(int(u * len(values)), len(values) - 1)])


def _spans(rows: Rows, i: int, lo: int, hi: int, shift: int) -> list[tuple[int, int]]:
    """Candidate spans of row ``i`` inside ``[lo, hi)``, moved by ``shift``."""
    if rows.span_offsets is None:
        return []
    p, q = int(rows.span_offsets[i]), int(rows.span_offsets[i + 1])
    s, e = rows.span_starts[p:q], rows.span_ends[p:q]
    keep = (s >= lo) & (e <= hi)
    return list(zip((s[keep] + shift).tolist(), (e[keep] + shift).tolist()))


def build_pairs(
    rows: Rows, others: Rows, draws: np.ndarray, *, max_seq_len: int, short_seq_prob: float, sep_id: int
) -> tuple[Rows, np.ndarray, np.ndarray]:
    """``A [SEP] B`` rows for ``rows`` (module docstring).

    ``rows`` and ``others`` need ``sentence_start`` and ``doc_id``; ``others`` holds ``OTHER_CANDIDATES`` rows
    per row of ``rows`` (row ``i``'s candidates are ``others`` rows ``OTHER_CANDIDATES * i + c``). Returns
    (pair rows, length of A per row, NSP label per row: 0 IsNext, 1 NotNext).
    """
    if rows.sentence_start is None or rows.doc_id is None or others.sentence_start is None or others.doc_id is None:
        raise ValueError("two segments need the rows' sentence_start and doc_id")
    R = rows.num_rows
    full = max_seq_len - 3  # [CLS] A [SEP] B [SEP]
    if full < 2:
        raise ValueError(f"two segments need max_seq_len >= 5; got {max_seq_len}")
    sep = np.array([sep_id], dtype=np.int64)
    true = np.ones(1, dtype=bool)
    ids, ws, spans = [], [], []
    a_len = np.zeros(R, np.int64)
    label = np.zeros(R, np.int64)
    for i in range(R):
        u = draws[i]
        lo, hi = int(rows.offsets[i]), int(rows.offsets[i + 1])
        n = hi - lo
        target = full if u[0] >= short_seq_prob else 2 + min(int(u[1] * (full - 1)), full - 2)
        limit = min(n, target)
        row_ids, row_ws, row_ss = rows.input_ids[lo:hi], rows.word_start[lo:hi], rows.sentence_start[lo:hi]
        cands = np.flatnonzero(row_ss[1:limit]) + 1
        if len(cands) == 0:
            cands = np.flatnonzero(row_ws[1:limit]) + 1
        if len(cands) == 0:
            cands = np.array([max(1, limit // 2) if limit >= 2 else limit])
        k = _pick(u[3], cands)
        b_ids = b_ws = None
        row_spans = _spans(rows, i, 0, k, 0)
        if u[2] < NOT_NEXT_PROB:
            for c in range(OTHER_CANDIDATES):
                j = OTHER_CANDIDATES * i + c
                olo, ohi = int(others.offsets[j]), int(others.offsets[j + 1])
                if ohi > olo and others.doc_id[j] != rows.doc_id[i]:
                    starts = np.flatnonzero(others.sentence_start[olo:ohi])
                    s = _pick(u[7], starts) if len(starts) else 0
                    e = min(ohi - olo, s + max(target - k, 1))
                    b_ids, b_ws = others.input_ids[olo + s : olo + e], others.word_start[olo + s : olo + e]
                    row_spans += _spans(others, j, s, e, k + 1 - s)
                    label[i] = 1
                    break
        if b_ids is None:  # IsNext (drawn, or no candidate from another document)
            b_ids, b_ws = row_ids[k:limit], row_ws[k:limit]
            row_spans += _spans(rows, i, k, limit, 1)
        a_ws = row_ws[:k].copy()
        if len(a_ws):
            a_ws[0] = True
        b_ws = b_ws.copy()
        if len(b_ws):
            b_ws[0] = True
        ids.append(np.concatenate([row_ids[:k], sep, b_ids]))
        ws.append(np.concatenate([a_ws, true, b_ws]))
        spans.append(row_spans)
        a_len[i] = k
    pairs = Rows.from_lists(ids, ws, spans if rows.span_offsets is not None else None)
    return pairs, a_len, label


def add_pair_fields(batches: list[dict[str, torch.Tensor]], a_len: np.ndarray, label: np.ndarray) -> None:
    """Add ``token_type_ids`` [B, T] and ``next_sentence_label`` [B] to consecutive collated batches."""
    first = 0
    for batch in batches:
        B, T = batch["input_ids"].shape
        a = torch.from_numpy(a_len[first : first + B].copy())
        pos = torch.arange(T)[None, :]
        batch["token_type_ids"] = ((pos > (a[:, None] + 1)) & batch["attention_mask"].bool()).long()
        batch["next_sentence_label"] = torch.from_numpy(label[first : first + B].copy())
        first += B
