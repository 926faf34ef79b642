"""The SpanBERT span sampler (scheme ``span``): span lengths in words from the truncated geometric distribution,
starts uniform among the word starts where a span fits, redrawn on overlap, spans cut to the budget.

The rule is in ``trainer.masking.masker``'s docstring (``span``), with the layout of each row's draws: blocks of
``M`` candidates x (length, ``start_retries`` starts, unused, action). Vectorised over the rows of a chunk: each
round draws one candidate span for every row still short of its budget.
"""

from __future__ import annotations

import numpy as np

from trainer.masking.config import MaskingConfig


def span_units(
    cfg: MaskingConfig, len_cdf: np.ndarray, M: int, gens, R, offsets, n, budget, wpos, wend, woff, nw, word_bad
):
    """SpanBERT span selection, one span per active row per round (the rule: ``trainer.masking.masker``'s docstring,
    ``span``). ``len_cdf``: the cumulative span-length distribution in words; ``M``: candidates per block of draws.
    Returns the units (row, start, end, words, action uniform, from a candidate span) as ``units.greedy_units``."""
    S, Lmax = cfg.start_retries, cfg.max_span_words
    D = 3 + S  # draws per candidate: length, S starts, accept, action
    blocks = [np.stack([g.random(M * D).reshape(M, D) for g in gens]) if R else np.zeros((0, M, D))]
    draws = blocks[0]
    Wmax = int(nw.max()) if R else 0
    occ = np.ones((R, Wmax + Lmax), dtype=bool)  # padding past a row's words counts as occupied
    wi = np.arange(Wmax)
    occ[:, :Wmax] = ~(wi[None, :] < nw[:, None])
    if len(wpos):
        occ[np.repeat(np.arange(R), nw)[word_bad], (np.arange(len(wpos)) - np.repeat(woff[:-1], nw))[word_bad]] = True
    rem = budget.copy()
    active = (rem > 0) & (nw > 0)
    ptr = np.zeros(R, dtype=np.int64)
    max_candidates = 16 * M
    out_row, out_s, out_e, out_w, out_a = [], [], [], [], []
    kk = np.arange(Lmax)
    while active.any():
        rows = np.flatnonzero(active)
        c = ptr[rows]
        if (c >= draws.shape[1]).any():
            blocks.append(np.stack([g.random(M * D).reshape(M, D) for g in gens]))
            draws = np.concatenate(blocks, axis=1)
        d = draws[rows, c]  # [r, D]
        nwr = nw[rows]
        L = 1 + np.searchsorted(len_cdf, d[:, 0], side="right")
        L = np.minimum(np.minimum(L, Lmax), nwr)
        starts = np.floor(d[:, 1 : 1 + S] * (nwr - L + 1)[:, None]).astype(np.int64)  # [r, S]
        starts = np.minimum(starts, (nwr - L)[:, None])
        inside = kk[None, None, :] < L[:, None, None]
        hit = occ[rows[:, None, None], starts[:, :, None] + kk[None, None, :]] & inside
        free = ~hit.any(-1)  # [r, S]
        has_free = free.any(1)
        first = np.argmax(free, axis=1)
        s = starts[np.arange(len(rows)), first]
        gw = woff[rows] + s  # global word index of the first word
        tok_s = wpos[np.minimum(gw, len(wpos) - 1)] - offsets[rows]
        tok_e = wend[np.minimum(gw + L - 1, len(wpos) - 1)] - offsets[rows]
        t = tok_e - tok_s
        r_rem = rem[rows]
        over = has_free & (t > r_rem)
        if over.any():  # cut an overshooting span after its last word that keeps the budget
            o_idx = np.flatnonzero(over)
            ends = wend[np.minimum(gw[o_idx, None] + kk[None, :], len(wpos) - 1)] - offsets[rows[o_idx], None]
            fits = ((ends - tok_s[o_idx, None]) <= r_rem[o_idx, None]) & (kk[None, :] < L[o_idx, None])
            L_cut = fits.sum(1)
            L[o_idx] = np.maximum(L_cut, 1)
            tok_e[o_idx] = np.where(L_cut > 0, ends[np.arange(len(o_idx)), np.maximum(L_cut - 1, 0)], tok_e[o_idx])
            t = tok_e - tok_s
            # no word of it fits: the row ends if it has targets, else it keeps drawing
            over[o_idx] = (L_cut > 0) | (r_rem[o_idx] < budget[rows[o_idx]])
        accept = has_free & (t <= r_rem)
        acc_rows = rows[accept]
        if len(acc_rows):
            a_idx = np.flatnonzero(accept)
            mark = kk[None, :] < L[a_idx, None]
            rr = np.broadcast_to(acc_rows[:, None], mark.shape)[mark]
            cc = (s[a_idx, None] + kk[None, :])[mark]
            occ[rr, cc] = True
            rem[acc_rows] -= t[a_idx]
            out_row.append(acc_rows)
            out_s.append(tok_s[a_idx])
            out_e.append(tok_e[a_idx])
            out_w.append(L[a_idx])
            out_a.append(d[a_idx, 2 + S])
        ptr[rows] += 1
        stop = np.zeros(R, dtype=bool)
        stop[rows[over]] = True
        active &= (rem > 0) & ~stop & (ptr < max_candidates)
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    u_row = cat(out_row, np.int64)
    return (
        u_row,
        cat(out_s, np.int64),
        cat(out_e, np.int64),
        cat(out_w, np.int64),
        cat(out_a, np.float64),
        np.zeros(len(u_row), bool),
    )
