"""Masking on the fly: BERT, whole-word, SpanBERT span and candidate-span masking.

Everything here runs in DataLoader workers on numpy arrays and is vectorised over a *chunk* of rows
(the loader masks a few hundred rows at a time); the only per-row Python work is creating the row's
random generator. The batches are made by :mod:`trainer.masking.collate`. This module holds the rules (below), the
budget, the words and each row's generator; the units come from ``trainer.masking.units`` (``subword``,
``whole_word`` and the candidate schemes) or ``trainer.masking.spans`` (``span``), the 80/10/10 and the per-token
results from ``trainer.masking.replacement``.

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
from trainer.masking.config import SEED_LIMIT, MaskingConfig
from trainer.masking.replacement import replace_units, unit_actions
from trainer.masking.rows import Masked, Rows
from trainer.masking.sbo_targets import fill_empty_rows
from trainer.masking.spans import span_units
from trainer.masking.units import greedy_units


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
            units = span_units(cfg, self._len_cdf, self.M, gens, R, offsets, n, budget, wpos, wend, woff, nw, word_bad)
        else:
            units = greedy_units(
                cfg, gens, rows, R, offsets, n, budget, ids, forbidden, tok_row, wpos, wend, woff, nw, word_bad
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
        action = unit_actions(cfg, u_act_u)
        out_ids, labels, left, right, pos = replace_units(
            cfg,
            u_row,
            u_start,
            u_end,
            action,
            offsets=offsets,
            ids=ids,
            u_repl=u_repl,
            mask_id=self.mask_id,
            sample_unigram=self.sample_unigram,
        )
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

    # -- collation (trainer.masking.collate) -------------------------------------------------
    def collate(self, masked: Masked, start: int = 0, stop: int | None = None) -> dict[str, torch.Tensor]:
        """The batch dict (``trainer.masking.collate``) for rows ``start:stop`` of a masked chunk."""
        return self.collator.collate(masked, start, stop)

    def collate_chunk(self, masked: Masked, micro_batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Consecutive batches of ``micro_batch_size`` rows of a masked chunk sharing one storage (``Collator``)."""
        return self.collator.collate_chunk(masked, micro_batch_size)

    def __call__(self, rows: Rows, sample_ids: np.ndarray, epoch: int) -> dict[str, torch.Tensor]:
        return self.collate(self.mask(rows, sample_ids, epoch))
