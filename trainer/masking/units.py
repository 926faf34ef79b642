"""The units of the schemes other than ``span``: tokens (``subword``), words (``whole_word``), candidate spans and
then words (``entity``, ``noun_phrase``, ``ngram``), taken in random order if they fit (BERT's rule,
``trainer.masking.greedy``).

The rules are in ``trainer.masking.masker``'s docstring, with the layout of each row's draws after its token block:
[priority per candidate span | action per candidate span | priority per unit | action per unit].
"""

from __future__ import annotations

import numpy as np

from trainer.masking.config import CANDIDATE_COLUMNS, MaskingConfig
from trainer.masking.greedy import greedy_fit, order_by_priority
from trainer.masking.rows import Rows


def greedy_units(
    cfg: MaskingConfig, gens, rows: Rows, R, offsets, n, budget, ids, forbidden, tok_row, wpos, wend, woff, nw, word_bad
):
    """subword / whole_word / candidate schemes: random order + BERT's fit-or-skip rule (the rules:
    ``trainer.masking.masker``'s docstring). Returns the units (row, start, end, complete words, action uniform, from
    a candidate span)."""
    scheme = cfg.scheme
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    cand_row = cand_s = cand_e = empty_i
    cand_act = empty_f
    if scheme in CANDIDATE_COLUMNS:
        if rows.span_offsets is None:
            raise ValueError(f"scheme {scheme!r} needs the rows' {CANDIDATE_COLUMNS[scheme]} (Rows.span_*)")
        so = np.asarray(rows.span_offsets, dtype=np.int64)
        cs = np.asarray(rows.span_starts, dtype=np.int64)
        ce = np.asarray(rows.span_ends, dtype=np.int64)
        crow = np.repeat(np.arange(R), np.diff(so))
        nc = np.diff(so)
    else:
        nc = np.zeros(R, np.int64)
    # Draw layout after the token block: [candidate priorities nc | candidate actions nc |
    # unit priorities | unit actions], units = tokens (subword) or words (other schemes).
    unit_n = n if scheme == "subword" else nw
    blocks = [g.random(int(2 * a + 2 * b)) for g, a, b in zip(gens, nc, unit_n)]
    if R:
        draws = np.concatenate(blocks)
        base = np.concatenate([[0], np.cumsum(2 * nc + 2 * unit_n)])[:-1]
    else:
        draws, base = empty_f, empty_i

    budget_left = budget.copy()
    covered = None
    if scheme in CANDIDATE_COLUMNS and len(cs):
        within = np.arange(len(cs)) - np.repeat(so[:-1], nc)
        prio = draws[np.repeat(base, nc) + within]
        act = draws[np.repeat(base + nc, nc) + within]
        n_row = n[crow]
        ok = (cs >= 0) & (ce > cs) & (ce <= n_row)
        gs, ge = offsets[crow] + np.clip(cs, 0, n_row), offsets[crow] + np.clip(ce, 0, n_row)
        fcum = np.concatenate([[0], np.cumsum(forbidden)])
        ok &= (fcum[ge] - fcum[gs]) == 0
        # ignore candidates overlapping an earlier one (in (start, end) order) of the same row
        order = np.argsort(
            (crow << 40) | (np.clip(cs, 0, (1 << 20) - 1) << 20) | np.clip(ce, 0, (1 << 20) - 1), kind="stable"
        )
        big = np.int64(1 << 20)
        key_e = crow[order] * big + ce[order]
        prev_max = np.maximum.accumulate(key_e)
        prev = np.concatenate([[-1], prev_max[:-1]])
        overl = np.zeros(len(cs), bool)
        overl[order] = (crow[order] * big + cs[order]) < prev
        ok &= ~overl
        o2 = order_by_priority(crow, prio, ok, R)
        cbudget = np.minimum(np.floor(cfg.candidate_share * budget + 0.5).astype(np.int64), budget)
        take = greedy_fit(crow[o2], (ce - cs)[o2], cbudget, R)
        sel = o2[take]
        cand_row, cand_s, cand_e, cand_act = crow[sel], cs[sel], ce[sel], act[sel]
        budget_left = budget - np.bincount(cand_row, weights=cand_e - cand_s, minlength=R).astype(np.int64)
        cov = np.zeros(len(ids) + 1, np.int64)
        np.add.at(cov, offsets[cand_row] + cand_s, 1)
        np.add.at(cov, offsets[cand_row] + cand_e, -1)
        covered = np.cumsum(cov)[:-1] > 0
    if scheme in CANDIDATE_COLUMNS:
        cand_words = count_words(cand_row, cand_s, cand_e, offsets, wpos)
    else:
        cand_words = empty_i

    if scheme == "subword":
        u_row = tok_row
        u_s = np.arange(len(ids)) - offsets[tok_row]
        u_e = u_s + 1
        ok = ~forbidden
        within = u_s
    else:
        u_row = tok_row[wpos]
        u_s = wpos - offsets[u_row]
        u_e = wend - offsets[u_row]
        ok = ~word_bad
        if covered is not None:
            ccum = np.concatenate([[0], np.cumsum(covered)])
            ok &= (ccum[wend] - ccum[wpos]) == 0
        within = np.arange(len(wpos)) - woff[u_row]
    ubase = base[u_row] + 2 * nc[u_row]
    u_prio = draws[ubase + within] if len(u_row) else empty_f
    u_act = draws[ubase + unit_n[u_row] + within] if len(u_row) else empty_f
    o = order_by_priority(u_row, u_prio, ok, R)
    take = greedy_fit(u_row[o], (u_e - u_s)[o], budget_left, R)
    sel = o[take]
    if scheme == "subword":  # 1 when the token starts a word, else 0 (not a complete word)
        is_start = np.zeros(len(ids), np.int64)
        is_start[wpos] = 1
        u_words = is_start[offsets[u_row[sel]] + u_s[sel]]
    else:
        u_words = np.ones(len(sel), np.int64)
    return (
        np.concatenate([cand_row, u_row[sel]]),
        np.concatenate([cand_s, u_s[sel]]),
        np.concatenate([cand_e, u_e[sel]]),
        np.concatenate([cand_words, u_words]),
        np.concatenate([cand_act, u_act[sel]]),
        np.concatenate([np.ones(len(cand_row), bool), np.zeros(int(take.sum()), bool)]),
    )


def count_words(row, s, e, offsets, wpos):
    """Word starts inside each unit [s, e) (= its complete words when units are on word boundaries)."""
    if len(row) == 0:
        return np.zeros(0, np.int64)
    g0, g1 = offsets[row] + s, offsets[row] + e
    return (np.searchsorted(wpos, g1, side="left") - np.searchsorted(wpos, g0, side="left")).astype(np.int64)
