"""Masking on the fly: BERT, whole-word, SpanBERT span and candidate-span masking.

Everything here runs in DataLoader workers on numpy arrays and is vectorised over a *chunk* of rows
(the loader masks a few hundred rows at a time); the only per-row Python work is creating the row's
random generator. The batches are made by :mod:`trainer.masking.collate`.

Public interface
----------------
``MaskingConfig``  typed keyword-only config (``scheme``, ``mask_ratio``, ``geometric_p``, ...).
``Rows``           a chunk of artifact rows as flat ragged numpy arrays (see its docstring).
``Masker``         ``Masker(cfg, vocab_size=, special_token_ids=, unigram_counts=, max_seq_len=)`` or
                   ``Masker.from_artifact(cfg, artifact, max_seq_len=)``;
                   ``masker.mask(rows, sample_ids, epoch) -> Masked`` (flat per-token results + the units);
                   ``masker.collate(masked, start, stop) -> batch dict`` for rows ``start:stop`` of a chunk;
                   ``masker(rows, sample_ids, epoch) -> batch dict`` for a whole chunk.

Rules (SpanBERT, Joshi et al. 2020, and BERT; see ../shared/DESIGN.md)
------------------------------------------------------------------------
* Budget: ``round(mask_ratio * c)`` tokens of a row with ``c`` maskable tokens (at least 1 when c > 0).
  Maskable = every content token except [PAD]/[CLS]/[SEP]/[MASK] (full-sentences rows hold [SEP] between
  documents; a unit containing one is never chosen). [CLS]/[SEP] added by the collator are never targets.
* Words come from the ``word_start`` column only (never from ``##``).
* ``subword``: tokens in random order, the first ``budget`` are masked (BERT).
* ``whole_word``: words in random order, each taken if it still fits in the budget, else skipped (BERT's
  whole-word masking rule), until the list ends.
* ``span``: repeat: draw a length ``L`` in words from Geo(geometric_p) truncated to ``1..max_span_words``
  (renormalised, which is what gives SpanBERT's mean of 3.8 words for p=0.2, L<=10), clip ``L`` to the
  row's word count, draw the start uniformly among the word starts where ``L`` words fit; if the span
  overlaps an earlier span, redraw the start for the same length (up to ``start_retries`` times, so the
  length distribution is not biased towards short spans), then move on to a new length. A span that fits
  in the remaining budget is taken. A span larger than the remaining budget is cut after its last word that
  keeps the budget, taken, and ends the row (the budget is filled up to less than a word, never exceeded);
  when even its first word does not fit, the row ends if it already has targets, else it draws on.
* No row with a budget stays without targets: a row where no whole unit fits (every word alone is longer
  than the budget) gets the first ``budget`` tokens of one random word (``trainer.masking.sbo_targets.fill_empty_rows``).
* ``entity`` / ``noun_phrase`` / ``ngram``: ``round(candidate_share * budget)`` tokens from the row's
  candidate spans (``entity_spans`` / ``noun_phrase_spans`` / ``ngram_spans``; entities with a numeric label
  in ``excluded_entity_labels`` are ignored, as SpanBERT used non-numerical entities), in random order, each
  taken if it fits (a candidate overlapping an earlier one in (start, end) order is ignored); the rest of
  the budget (everything, when the row has no candidates) goes to random whole words not inside a chosen
  candidate, with the ``whole_word`` rule.
* Each unit is replaced as a whole (decided per unit, not per token): with ``mask_prob`` every token
  becomes [MASK], with ``random_prob`` every token becomes a random token drawn from the artifact's unigram
  distribution (special tokens excluded), with ``keep_prob`` it stays unchanged. All its tokens are targets.

Determinism: row ``i``'s masks use only ``numpy.random.Generator(Philox(key=(sample_id, seed << 32 | epoch)))``
— a pure function of (seed, epoch, sample id), independent of batch composition, rank and worker count,
and different at every epoch. Each row's uniforms come in a fixed layout: first one per token (the random
replacement token at that position, by inverse CDF of the unigram distribution), then
``span``: blocks of 48 candidates x (length, ``start_retries`` starts, unused, action), as many blocks as the
row needs; other schemes: [priority per candidate span | action per candidate span | priority per unit |
action per unit] (units = tokens for ``subword``, words otherwise; random order = ascending priority);
then, only for a row no whole unit fitted in, two more (``fill_empty_rows``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from schemas.format import max_row_tokens
from trainer.masking.collate import Collator
from trainer.masking.config import CANDIDATE_COLUMNS, SEED_LIMIT, MaskingConfig
from trainer.masking.greedy import greedy_fit, order_by_priority
from trainer.masking.rows import ACTION_KEEP, ACTION_MASK, ACTION_RANDOM, IGNORE_INDEX, Masked, Rows
from trainer.masking.sbo_targets import fill_empty_rows, run_bounds


class Masker:
    """Masks chunks of rows (see the module docstring) and collates them into batches (``trainer.masking.collate``)."""

    def __init__(
        self,
        cfg: MaskingConfig,
        *,
        vocab_size: int,
        special_token_ids: Mapping[str, int],
        unigram_counts: np.ndarray,
        max_seq_len: int = 512,
        candidates_per_block: int = 48,
    ):
        if not isinstance(cfg, MaskingConfig):
            raise TypeError(f"cfg must be a MaskingConfig, got {type(cfg).__name__}")
        missing = [k for k in ("pad", "cls", "sep", "mask") if k not in special_token_ids]
        if missing:
            raise ValueError(f"special_token_ids lacks {', '.join(missing)} (has {dict(special_token_ids)})")
        if max_seq_len < 3:
            raise ValueError(f"max_seq_len must be at least 3 ([CLS] token [SEP]); got {max_seq_len}")
        self.cfg = cfg
        self.vocab_size = int(vocab_size)
        self.special = {k: int(v) for k, v in special_token_ids.items()}
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = (self.special[k] for k in ("pad", "cls", "sep", "mask"))
        # Never targets: padding, [CLS], [SEP], [MASK] (UNK is an ordinary token to BERT).
        self.forbidden_ids = np.array(sorted({self.pad_id, self.cls_id, self.sep_id, self.mask_id}), dtype=np.int64)
        self._forbidden_lut = np.zeros(max(self.vocab_size, int(self.forbidden_ids.max()) + 1), dtype=bool)
        self._forbidden_lut[self.forbidden_ids] = True
        self.max_seq_len = int(max_seq_len)
        self.collator = Collator(
            pad_id=self.pad_id, cls_id=self.cls_id, sep_id=self.sep_id, max_seq_len=self.max_seq_len
        )
        self.M = int(candidates_per_block)
        counts = np.asarray(unigram_counts, dtype=np.float64).copy()
        if counts.shape != (self.vocab_size,):
            raise ValueError(f"unigram_counts has shape {counts.shape}, expected ({self.vocab_size},)")
        counts[[v for v in self.special.values() if 0 <= v < self.vocab_size]] = 0.0
        if counts.sum() <= 0:  # degenerate artifact: uniform over non-special ids
            counts[:] = 1.0
            counts[[v for v in self.special.values() if 0 <= v < self.vocab_size]] = 0.0
        cdf = np.cumsum(counts)
        self._unigram_cdf = cdf / cdf[-1]
        self._len_cdf = np.cumsum(cfg.span_length_pmf())
        self._len_cdf[-1] = 1.0

    @classmethod
    def from_artifact(cls, cfg: MaskingConfig, artifact, *, max_seq_len: int = 512, unigram_counts=None) -> Masker:
        """A masker for ``schemas.artifact.Artifact`` ``artifact`` (its tokenizer's ids and unigram counts;
        ``unigram_counts``: the artifact's, already read, e.g. from a cached copy)."""
        return cls(
            cfg,
            vocab_size=artifact.vocab_size,
            special_token_ids=artifact.special_token_ids,
            unigram_counts=artifact.unigram_counts() if unigram_counts is None else unigram_counts,
            max_seq_len=max_seq_len,
        )

    # -- randomness --------------------------------------------------------------------------
    def generator(self, sample_id: int, epoch: int) -> np.random.Generator:
        """The row's generator: Philox keyed by (sample id, seed << 32 | epoch)."""
        if not 0 <= epoch < SEED_LIMIT:
            raise ValueError(f"epoch must be in [0, 2**32); got {epoch}")
        return np.random.Generator(np.random.Philox(key=[int(sample_id), (self.cfg.seed << 32) | int(epoch)]))

    def sample_unigram(self, u: np.ndarray) -> np.ndarray:
        """Token ids for uniforms ``u`` by the unigram distribution without special tokens."""
        return np.minimum(np.searchsorted(self._unigram_cdf, u, side="right"), self.vocab_size - 1)

    # -- masking -----------------------------------------------------------------------------
    def mask(self, rows: Rows, sample_ids: np.ndarray, epoch: int) -> Masked:
        cfg = self.cfg
        R = rows.num_rows
        sample_ids = np.asarray(sample_ids, dtype=np.int64)
        if sample_ids.shape != (R,):
            raise ValueError(f"sample_ids has shape {sample_ids.shape}, expected ({R},)")
        offsets = np.asarray(rows.offsets, dtype=np.int64)
        ids = np.asarray(rows.input_ids).astype(np.int64, copy=False)
        n = np.diff(offsets)
        max_row = max_row_tokens(self.max_seq_len)
        if (n > max_row).any():
            i = int(np.argmax(n > max_row))
            raise ValueError(
                f"row of sample {int(sample_ids[i])} has {int(n[i])} tokens; max_seq_len {self.max_seq_len} allows {max_row}"
            )
        total = int(offsets[-1])
        tok_row = np.repeat(np.arange(R), n)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self._forbidden_lut)):
            raise ValueError(f"token ids must be in [0, {self.vocab_size}); got {int(ids.min())}..{int(ids.max())}")
        forbidden = self._forbidden_lut[ids]
        maskable = n - np.bincount(tok_row[forbidden], minlength=R)
        budget = np.floor(cfg.mask_ratio * maskable + 0.5).astype(np.int64)
        budget = np.where(maskable > 0, np.maximum(budget, 1), 0)

        # Words: word_start with element 0 of every row forced true.
        ws = np.asarray(rows.word_start, dtype=bool).copy()
        if ws.shape != ids.shape:
            raise ValueError(f"word_start has {ws.shape[0]} elements, input_ids {ids.shape[0]}")
        ws[offsets[:-1][n > 0]] = True
        wpos = np.flatnonzero(ws)  # flat token index of each word start
        wrow = tok_row[wpos]
        nw = np.bincount(wrow, minlength=R)
        woff = np.concatenate([[0], np.cumsum(nw)]).astype(np.int64)
        wend = np.empty_like(wpos)
        wend[:-1] = wpos[1:]
        if len(wpos):
            wend[-1] = total
        last = woff[1:][nw > 0] - 1
        wend[last] = offsets[1:][nw > 0]
        fcum = np.concatenate([[0], np.cumsum(forbidden)])
        word_bad = (fcum[wend] - fcum[wpos]) > 0

        # Each row's draws: [one uniform per token (replacement)] + the scheme's block.
        gens = [self.generator(int(s), epoch) for s in sample_ids]
        u_repl = np.concatenate([g.random(int(k)) for g, k in zip(gens, n)]) if R else np.zeros(0)

        if cfg.scheme == "span":
            units = self._span_units(gens, R, offsets, n, budget, wpos, wend, woff, nw, word_bad)
        else:
            units = self._greedy_units(
                gens, rows, R, offsets, n, budget, ids, forbidden, tok_row, wpos, wend, woff, nw, word_bad
            )
        u_row, u_start, u_end, u_words, u_act_u, u_cand = units
        # Rows no whole unit fitted in (every word longer than the budget) get part of a word.
        f_row, f_s, f_e, f_w, f_a = fill_empty_rows(
            gens, budget, np.bincount(u_row, minlength=R) > 0, offsets, wpos, wend, woff, word_bad
        )
        if len(f_row):
            u_row, u_start, u_end, u_words, u_act_u, u_cand = (
                np.concatenate([a, b])
                for a, b in (
                    (u_row, f_row),
                    (u_start, f_s),
                    (u_end, f_e),
                    (u_words, f_w),
                    (u_act_u, f_a),
                    (u_cand, np.zeros(len(f_row), bool)),
                )
            )

        order = np.argsort((u_row << 20) | u_start, kind="stable")  # by row, then start (starts < 2**20)
        u_row, u_start, u_end, u_words, u_act_u, u_cand = (
            a[order] for a in (u_row, u_start, u_end, u_words, u_act_u, u_cand)
        )
        action = np.where(
            u_act_u < cfg.mask_prob,
            ACTION_MASK,
            np.where(u_act_u < cfg.mask_prob + cfg.random_prob, ACTION_RANDOM, ACTION_KEEP),
        )

        # Expand units to tokens.
        ulen = u_end - u_start
        tok_unit = np.repeat(np.arange(len(ulen)), ulen)
        within = np.arange(int(ulen.sum())) - np.repeat(np.cumsum(ulen) - ulen, ulen)
        flat = offsets[u_row][tok_unit] + u_start[tok_unit] + within
        out_ids = ids.copy()
        labels = np.full(total, IGNORE_INDEX, dtype=np.int64)
        left = np.zeros(total, dtype=np.int64)
        right = np.zeros(total, dtype=np.int64)
        pos = np.zeros(total, dtype=np.int64)
        labels[flat] = ids[flat]
        # SBO boundaries around the maximal masked run (trainer.masking.sbo_targets): always observed tokens.
        run_s, run_e = run_bounds(u_row, u_start, u_end)
        left[flat] = run_s[tok_unit]  # final position of x_{s-1} = (s - 1) + 1
        right[flat] = run_e[tok_unit] + 1  # final position of x_{e+1} = e + 1 (e exclusive in content)
        pos[flat] = np.minimum(u_start[tok_unit] + within - run_s[tok_unit], cfg.max_span_positions - 1)
        act_tok = action[tok_unit]
        m = act_tok == ACTION_MASK
        out_ids[flat[m]] = self.mask_id
        r = act_tok == ACTION_RANDOM
        out_ids[flat[r]] = self.sample_unigram(u_repl[flat[r]])
        return Masked(
            offsets=offsets,
            original_ids=ids,
            input_ids=out_ids,
            labels=labels,
            span_left=left,
            span_right=right,
            span_position=pos,
            sample_ids=sample_ids,
            maskable=maskable,
            unit_row=u_row,
            unit_start=u_start,
            unit_end=u_end,
            unit_words=u_words,
            unit_action=action,
            unit_candidate=u_cand,
            word_start=ws,
        )

    def _span_units(self, gens, R, offsets, n, budget, wpos, wend, woff, nw, word_bad):
        """SpanBERT span selection, one span per active row per round (see the module docstring)."""
        cfg = self.cfg
        M, S, Lmax = self.M, cfg.start_retries, cfg.max_span_words
        D = 3 + S  # draws per candidate: length, S starts, accept, action
        blocks = [np.stack([g.random(M * D).reshape(M, D) for g in gens]) if R else np.zeros((0, M, D))]
        draws = blocks[0]
        Wmax = int(nw.max()) if R else 0
        occ = np.ones((R, Wmax + Lmax), dtype=bool)  # padding past a row's words counts as occupied
        wi = np.arange(Wmax)
        occ[:, :Wmax] = ~(wi[None, :] < nw[:, None])
        if len(wpos):
            occ[np.repeat(np.arange(R), nw)[word_bad], (np.arange(len(wpos)) - np.repeat(woff[:-1], nw))[word_bad]] = (
                True
            )
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
            L = 1 + np.searchsorted(self._len_cdf, d[:, 0], side="right")
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

    def _greedy_units(self, gens, rows, R, offsets, n, budget, ids, forbidden, tok_row, wpos, wend, woff, nw, word_bad):
        """subword / whole_word / candidate schemes: random order + BERT's fit-or-skip rule."""
        cfg = self.cfg
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
            cand_words = self._count_words(cand_row, cand_s, cand_e, offsets, wpos)
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

    @staticmethod
    def _count_words(row, s, e, offsets, wpos):
        """Word starts inside each unit [s, e) (= its complete words when units are on word boundaries)."""
        if len(row) == 0:
            return np.zeros(0, np.int64)
        g0, g1 = offsets[row] + s, offsets[row] + e
        return (np.searchsorted(wpos, g1, side="left") - np.searchsorted(wpos, g0, side="left")).astype(np.int64)

    # -- collation (trainer.masking.collate) -------------------------------------------------
    def collate(self, masked: Masked, start: int = 0, stop: int | None = None) -> dict[str, torch.Tensor]:
        """The batch dict (``trainer.masking.collate``) for rows ``start:stop`` of a masked chunk."""
        return self.collator.collate(masked, start, stop)

    def collate_chunk(self, masked: Masked, micro_batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Consecutive batches of ``micro_batch_size`` rows of a masked chunk sharing one storage (``Collator``)."""
        return self.collator.collate_chunk(masked, micro_batch_size)

    def __call__(self, rows: Rows, sample_ids: np.ndarray, epoch: int) -> dict[str, torch.Tensor]:
        return self.collate(self.mask(rows, sample_ids, epoch))
