"""Bi-sequence inputs for BERT's next sentence prediction (NSP), built at load time from the artifact's rows.

SpanBERT's ablations (Joshi et al. 2020, Tables 6 and 7) and its "Our BERT" baseline train on two half-length
segments with NSP (BERT, Devlin et al. 2019): ``[CLS] A [SEP] B [SEP]``, where B follows A in the corpus or,
half of the time, comes from another document, and the model predicts which. ``DataConfig.segments = 2``
builds such inputs from the one-segment rows of an artifact (``pack`` doc-sentences or full-sentences):

1. Target length: ``max_seq_len - 3`` tokens for A + B; with probability ``short_seq_prob`` (BERT: 0.1) a
   uniform length in ``2..max_seq_len - 3`` instead (BERT's short sequences, which reduce the mismatch with
   short fine-tuning inputs). ``limit = min(row length, target)`` is the pair's length whatever its label.
2. BERT's chunk (``create_instances_from_document``): the row's whole sentences until ``limit`` is reached (at
   least two when the row has two). A = its leading sentences: it ends at a sentence start ``k`` drawn uniformly
   among the chunk's. A row with no sentence start to split at (a "sentence" longer than the target: lists,
   tables, sentences cut by the row budget -- 40% of the Wikipedia sample's rows) uses its word starts instead;
   BERT would make every such pair NotNext, which leaks the label through the length.
3. With probability 0.5, B = the rest of the chunk (label 0, "IsNext"). Otherwise B comes from another
   document (label 1, "NotNext") and gets the *same* length as the rest of the chunk, so that no length says
   which label a pair has: up to three candidate rows are drawn uniformly from the row's shuffle window (the
   rows being read anyway, so no extra I/O; for the unshuffled evaluation split, from the whole split); of
   those from another document, one long enough is preferred; B starts at one of its sentence starts (drawn
   uniformly among those that leave room). When all three share the row's document (a one-document window), B
   is the continuation and the label says so (counted as ``no_other_document`` in ``build_pairs``' stats).
   The unused rest of the row is not put back (BERT puts it back into the document's stream): a row is one
   sample, its masks and pair a function of its sample id, so the rest is seen in other epochs instead.
4. BERT's ``truncate_seq_pair``: while A + B exceeds ``limit``, the longer segment loses a token at its front
   or its back (probability 1/2 each; the number of front cuts is drawn as Binomial(cuts, 1/2)).

On WikiText-2 and the Wikipedia sample a classifier that sees only the lengths (of the pair, A, B or B - A)
gets at most 51% NSP accuracy (tests/trainer/test_nsp_pairs.py; 66% before).

The pair becomes one content row ``A [SEP] B`` with ``[SEP]`` a word of its own, so every masking scheme
works unchanged: [SEP] is never masked, no span or word crosses it, and it is an observed SBO boundary.
Candidate spans (entity/noun_phrase/ngram) inside A or inside the part of B that is kept move with their
tokens. The collator's batch gains ``token_type_ids`` (0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding) and
``next_sentence_label`` [B] (0 = B continues A, 1 = B is from another document, as Hugging Face's
``BertForPreTraining`` expects).

Determinism: a row's choices use 10 uniforms from ``Philox(key=(sample_id, seed << 32 | epoch),
counter=(0, 0, 0, 1))`` -- the masks' key on a counter range the masks never reach -- so pairs are a pure
function of (seed, epoch, sample id) like the masks (the row's stream position, and so its window, is one).
"""

from __future__ import annotations

import numpy as np
import torch

from trainer.masking import Rows

PAIR_DRAWS = 10  # per row: [short?, short length, NotNext?, split, 3 x other row, start in the other row,
#                  front cuts of A, front cuts of B]
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
    if rows.span_offsets is None or rows.span_starts is None or rows.span_ends is None:
        return []
    p, q = int(rows.span_offsets[i]), int(rows.span_offsets[i + 1])
    s, e = rows.span_starts[p:q], rows.span_ends[p:q]
    keep = (s >= lo) & (e <= hi)
    return list(zip((s[keep] + shift).tolist(), (e[keep] + shift).tolist()))


def _bounds(ss: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Sentence boundaries of ``[lo, hi)`` as row-local positions: its sentence starts after ``lo``, then ``hi``."""
    return np.concatenate([np.flatnonzero(ss[lo + 1 : hi]) + lo + 1, [hi]]).astype(np.int64)


def _binomial_half(u: float, n: int) -> int:
    """The inverse CDF of Binomial(n, 1/2) at ``u``: how many of ``n`` fair front/back coin flips say front."""
    p = cdf = 0.5**n
    k = 0
    while cdf < u and k < n:
        k += 1
        p *= (n - k + 1) / k
        cdf += p
    return k


def truncate_pair(la: int, lb: int, budget: int, u_a: float, u_b: float) -> tuple[int, int, int, int]:
    """BERT's ``truncate_seq_pair``: while A + B exceeds ``budget``, drop one token of the longer (B on a tie),
    from its front or its back with probability 1/2 each. Returns (A front cut, A back cut, B front, B back)."""
    ra = rb = 0
    while (la - ra) + (lb - rb) > budget:
        if la - ra > lb - rb:
            ra += 1
        else:
            rb += 1
    fa, fb = _binomial_half(u_a, ra), _binomial_half(u_b, rb)
    return fa, ra - fa, fb, rb - fb


def build_pairs(
    rows: Rows,
    others: Rows,
    draws: np.ndarray,
    *,
    max_seq_len: int,
    short_seq_prob: float,
    sep_id: int,
    stats: dict[str, int] | None = None,
) -> tuple[Rows, np.ndarray, np.ndarray]:
    """``A [SEP] B`` rows for ``rows`` (module docstring).

    ``rows`` and ``others`` need ``sentence_start`` and ``doc_id``; ``others`` holds ``OTHER_CANDIDATES`` rows
    per row of ``rows`` (row ``i``'s candidates are ``others`` rows ``OTHER_CANDIDATES * i + c``). Returns
    (pair rows, length of A per row, NSP label per row: 0 IsNext, 1 NotNext). ``stats`` (optional) counts
    ``pairs``, ``not_next``, ``no_other_document`` (NotNext drawn, no candidate from another document: IsNext),
    ``one_sentence`` (no sentence start to split at: split at a word start) and ``b_short`` (the other row ended before B
    reached its length).
    """
    if rows.sentence_start is None or rows.doc_id is None or others.sentence_start is None or others.doc_id is None:
        raise ValueError("two segments need the rows' sentence_start and doc_id")
    R = rows.num_rows
    full = max_seq_len - 3  # [CLS] A [SEP] B [SEP]
    if full < 2:
        raise ValueError(f"two segments need max_seq_len >= 5; got {max_seq_len}")
    count = stats if stats is not None else {}
    for key in ("pairs", "not_next", "no_other_document", "one_sentence", "b_short"):
        count.setdefault(key, 0)
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
        limit = min(n, target)  # the pair's length, whatever its label
        row_ids, row_ws, row_ss = rows.input_ids[lo:hi], rows.word_start[lo:hi], rows.sentence_start[lo:hi]
        # BERT's chunk: whole sentences until ``limit`` is reached; at least two when the row has two.
        bounds = _bounds(row_ss, 0, n)
        c = int(np.searchsorted(bounds, limit))  # bounds[c] is the chunk's end
        chunk_end = int(bounds[max(c, 1)]) if len(bounds) > 1 else n
        splits = bounds[bounds < chunk_end]
        count["pairs"] += 1
        if len(splits) == 0:  # no sentence start before ``limit`` + one sentence: the row's word starts stand in
            count["one_sentence"] += 1
            chunk_end = limit
            splits = np.flatnonzero(row_ws[1:limit]) + 1
            if len(splits) == 0:
                splits = np.array([max(1, limit // 2)])
        k = a_end = _pick(u[3], splits)
        not_next = u[2] < NOT_NEXT_PROB
        src = None  # (Rows, row, B's start, B's end) for B
        if not_next:
            # B gets the length the continuation would have had (the rest of the chunk), so that lengths
            # before and after truncation say nothing of the label.
            want = max(chunk_end - a_end, 1)
            fits = []  # candidates from another document: those long enough for B first, then the others
            for c in range(OTHER_CANDIDATES):
                j = OTHER_CANDIDATES * i + c
                olo, ohi = int(others.offsets[j]), int(others.offsets[j + 1])
                if ohi > olo and others.doc_id[j] != rows.doc_id[i]:
                    fits.append((ohi - olo < want, c, j))
            if fits:
                _, _, j = min(fits)
                olo, ohi = int(others.offsets[j]), int(others.offsets[j + 1])
                on = ohi - olo
                starts = np.concatenate([[0], np.flatnonzero(others.sentence_start[olo + 1 : ohi]) + 1])
                room = starts[on - starts >= want]  # starts from which B is not cut by the row's end
                if len(room) == 0:  # the other row is too short: B is all of it and A gives up the rest
                    room, count["b_short"] = starts[:1], count["b_short"] + 1
                    later = splits[splits >= limit - on]
                    a_end = _pick(u[3], later) if len(later) else chunk_end
                s = _pick(u[7], room)
                e = min(on, s + want)
                src = (others, j, s, e)
                label[i] = 1
                count["not_next"] += 1
            if src is None:
                count["no_other_document"] += 1
        if src is None:
            src = (rows, i, k, chunk_end)  # IsNext: the rest of the chunk
        b_rows, j, b0, b1 = src
        fa, ba, fb, bb = truncate_pair(a_end, b1 - b0, max(limit, 2), u[8], u[9])
        a0, a1, b0, b1 = fa, a_end - ba, b0 + fb, b1 - bb
        blo = int(b_rows.offsets[j])
        b_ids, b_ws = b_rows.input_ids[blo + b0 : blo + b1], b_rows.word_start[blo + b0 : blo + b1]
        row_spans = _spans(rows, i, a0, a1, -a0) + _spans(b_rows, j, b0, b1, (a1 - a0) + 1 - b0)
        a_ws = row_ws[a0:a1].copy()
        if len(a_ws):
            a_ws[0] = True
        b_ws = b_ws.copy()
        if len(b_ws):
            b_ws[0] = True
        ids.append(np.concatenate([row_ids[a0:a1], sep, b_ids]))
        ws.append(np.concatenate([a_ws, true, b_ws]))
        spans.append(row_spans)
        a_len[i] = a1 - a0
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
