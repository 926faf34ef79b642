"""Masking on the fly: BERT, whole-word, SpanBERT span and candidate-span masking, plus the collator.

Everything here runs in DataLoader workers on numpy arrays and is vectorised over a *chunk* of rows
(the loader masks a few hundred rows at a time); the only per-row Python work is creating the row's
random generator.

Public interface
----------------
``MaskingConfig``  typed keyword-only config (``scheme``, ``mask_ratio``, ``geometric_p``, ...).
``Rows``           a chunk of artifact rows as flat ragged numpy arrays (see its docstring).
``Masker``         ``Masker(cfg, vocab_size=, special_token_ids=, unigram_counts=, max_seq_len=)`` or
                   ``Masker.from_artifact(cfg, artifact, max_seq_len=)``;
                   ``masker.mask(rows, sample_ids, epoch) -> Masked`` (flat per-token results + the units);
                   ``masker.collate(masked, start, stop) -> batch dict`` for rows ``start:stop`` of a chunk;
                   ``masker(rows, sample_ids, epoch) -> batch dict`` for a whole chunk.

The batch dict (what the model consumes; ``B`` rows, ``T`` positions)::

    input_ids       LongTensor [B, T]  [CLS] masked row [SEP], then [PAD]; T = longest row + 2 rounded up to
                                       a multiple of 8, at most max_seq_len
    attention_mask  LongTensor [B, T]  1 on real tokens ([CLS], row, [SEP]), 0 on padding
    labels          LongTensor [B, T]  the original token id at every MLM target, -100 elsewhere
    span_left       LongTensor [B, T]  SBO: position of x_{s-1} (the token before the target's unit), 0 elsewhere
    span_right      LongTensor [B, T]  SBO: position of x_{e+1} (the token after the target's unit), 0 elsewhere
    span_position   LongTensor [B, T]  SBO: 0-based place of the target in its unit, clipped to
                                       max_span_positions - 1 (default 32 -> 0..31), 0 elsewhere
    sample_id       LongTensor [B]     global sample ids (row index over all shards in manifest order)

Positions index the final sequence, so ``[CLS]`` (position 0) and ``[SEP]`` (position n+1) are the
boundaries of units at the edges of the row: ``1 <= span_left + 1 <= target <= span_right - 1 <= n``.
A *unit* is what is masked as a whole: a span (``span``), a word (``whole_word``, the random-word part of
the candidate schemes), a candidate span (``entity``, ``noun_phrase``, ``ngram``) or a token (``subword``).
SBO targets are relative to the *maximal masked run* holding the unit (units that touch form one run), so
``span_left``/``span_right`` are never targets themselves (``trainer.sbo_targets``).

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
  than the budget) gets the first ``budget`` tokens of one random word (``trainer.sbo_targets.fill_empty_rows``).
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

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch

from trainer.sbo_targets import fill_empty_rows, run_bounds

SCHEMES = ("subword", "whole_word", "span", "entity", "noun_phrase", "ngram")
# scheme -> the shard column with its candidate spans
CANDIDATE_COLUMNS = {"entity": "entity_spans", "noun_phrase": "noun_phrase_spans", "ngram": "ngram_spans"}
# spaCy labels of numerical entities (SpanBERT masked non-numerical named entities only).
NUMERIC_ENTITY_LABELS = ("DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL")
IGNORE_INDEX = -100
PAD_TO_MULTIPLE = 8
SPECIAL_TOKEN_NAMES = ("pad", "unk", "cls", "sep", "mask")

# Unit actions (per unit, not per token).
ACTION_MASK, ACTION_RANDOM, ACTION_KEEP = 0, 1, 2

_SEED_LIMIT = 1 << 32  # seed and epoch share one 64-bit Philox key word


@dataclass(frozen=True, kw_only=True)
class MaskingConfig:
    """How rows are masked. Defaults are SpanBERT's."""

    scheme: str = "span"  # one of SCHEMES
    mask_ratio: float = 0.15  # budget: share of maskable tokens that become MLM targets
    geometric_p: float = 0.2  # span scheme: span length in words ~ Geo(p) ...
    max_span_words: int = 10  # ... truncated to 1..max_span_words (mean 3.8 words for 0.2 / 10)
    mask_prob: float = 0.8  # per unit: replace every token with [MASK]
    random_prob: float = 0.1  # per unit: replace every token with a unigram-sampled token
    keep_prob: float = 0.1  # per unit: keep the tokens (still targets)
    candidate_share: float = 0.5  # entity/noun_phrase/ngram: share of the budget from candidate spans
    excluded_entity_labels: tuple[str, ...] = NUMERIC_ENTITY_LABELS  # entity scheme ignores these labels
    max_span_positions: int = 32  # SBO position embeddings; span_position is clipped to this - 1
    start_retries: int = 8  # span scheme: start redraws for one length before drawing a new length
    seed: int = 0  # masks are a function of (seed, epoch, sample id); 0 <= seed < 2**32

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"MaskingConfig: {msg}")

        if self.scheme not in SCHEMES:
            bad(f"scheme must be one of {', '.join(SCHEMES)}; got {self.scheme!r}")
        for name in ("mask_ratio", "geometric_p", "mask_prob", "random_prob", "keep_prob", "candidate_share"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                bad(f"{name} must be a number; got {v!r}")
        if not 0.0 < self.mask_ratio < 1.0:
            bad(f"mask_ratio must be in (0, 1); got {self.mask_ratio}")
        if not 0.0 < self.geometric_p <= 1.0:
            bad(f"geometric_p must be in (0, 1]; got {self.geometric_p}")
        for name in ("mask_prob", "random_prob", "keep_prob", "candidate_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                bad(f"{name} must be in [0, 1]; got {getattr(self, name)}")
        total = self.mask_prob + self.random_prob + self.keep_prob
        if abs(total - 1.0) > 1e-9:
            bad(f"mask_prob + random_prob + keep_prob must be 1; got {self.mask_prob} + {self.random_prob} + {self.keep_prob} = {total}")
        for name, lo in (("max_span_words", 1), ("max_span_positions", 1), ("start_retries", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                bad(f"{name} must be an integer >= {lo}; got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < _SEED_LIMIT:
            bad(f"seed must be an integer in [0, 2**32); got {self.seed!r}")
        if isinstance(self.excluded_entity_labels, str) or not all(isinstance(x, str) for x in self.excluded_entity_labels):
            bad(f"excluded_entity_labels must be a tuple of strings; got {self.excluded_entity_labels!r}")
        object.__setattr__(self, "excluded_entity_labels", tuple(self.excluded_entity_labels))

    @property
    def candidate_column(self) -> str | None:
        """The shard column this scheme reads candidate spans from (None for subword/whole_word/span)."""
        return CANDIDATE_COLUMNS.get(self.scheme)

    def span_length_pmf(self) -> np.ndarray:
        """P(L = 1..max_span_words) of the span scheme's truncated geometric length distribution."""
        k = np.arange(1, self.max_span_words + 1)
        p = self.geometric_p * (1.0 - self.geometric_p) ** (k - 1)
        return p / p.sum()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MaskingConfig":
        from trainer.config import config_from_dict

        return config_from_dict(cls, d)


@dataclass
class Rows:
    """A chunk of ``R`` rows as flat ragged arrays (row ``i`` is ``input_ids[offsets[i]:offsets[i+1]]``).

    ``input_ids``: integer array, the rows' content tokens (no [CLS]/[SEP]), concatenated.
    ``offsets``: int64 ``[R + 1]``. ``word_start``: bool, same length as ``input_ids``.
    ``span_starts``/``span_ends``/``span_offsets``: the candidate spans of the scheme's column, row-local
    token ranges ``[start, end)``; row ``i`` has spans ``span_offsets[i]:span_offsets[i+1]``. ``None`` when
    the scheme needs none.
    """

    input_ids: np.ndarray
    offsets: np.ndarray
    word_start: np.ndarray
    span_starts: np.ndarray | None = None
    span_ends: np.ndarray | None = None
    span_offsets: np.ndarray | None = None
    sentence_start: np.ndarray | None = None  # bool per token; only for two segments (trainer.segments)
    doc_id: np.ndarray | None = None  # per row; only for two segments

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, input_ids, word_start, spans=None) -> "Rows":
        """Build from per-row sequences (tests, small tools). ``spans``: per row, a list of (start, end)."""
        lengths = np.array([len(r) for r in input_ids], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = np.concatenate([np.asarray(r, dtype=np.int64) for r in input_ids]) if len(input_ids) else np.zeros(0, np.int64)
        ws = np.concatenate([np.asarray(r, dtype=bool) for r in word_start]) if len(word_start) else np.zeros(0, bool)
        rows = cls(input_ids=ids.astype(np.int64), offsets=offsets, word_start=ws)
        if spans is not None:
            counts = np.array([len(s) for s in spans], dtype=np.int64)
            flat = [tuple(x) for s in spans for x in s]
            rows.span_starts = np.array([a for a, _ in flat], dtype=np.int64)
            rows.span_ends = np.array([b for _, b in flat], dtype=np.int64)
            rows.span_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return rows


@dataclass
class Masked:
    """The masking of a chunk, flat like :class:`Rows` (same offsets).

    Per token: ``input_ids`` (after replacement), ``labels`` (original id at targets, -100 elsewhere),
    ``span_left``/``span_right``/``span_position`` (final-sequence SBO targets, 0 elsewhere).
    Per unit (sorted by row, then start): ``unit_row``, ``unit_start``, ``unit_end`` (row-local tokens),
    ``unit_words`` (complete words in the unit), ``unit_action`` (ACTION_MASK/RANDOM/KEEP),
    ``unit_candidate`` (True when the unit is a candidate span).
    """

    offsets: np.ndarray
    original_ids: np.ndarray
    input_ids: np.ndarray
    labels: np.ndarray
    span_left: np.ndarray
    span_right: np.ndarray
    span_position: np.ndarray
    sample_ids: np.ndarray
    maskable: np.ndarray  # per row: tokens that could be masked
    unit_row: np.ndarray
    unit_start: np.ndarray
    unit_end: np.ndarray
    unit_words: np.ndarray
    unit_action: np.ndarray
    unit_candidate: np.ndarray
    word_start: np.ndarray = field(repr=False, default=None)


# ------------------------------------------------------------------------------------------------
def _segment_cumsum(values: np.ndarray, seg_starts: np.ndarray, seg_ids: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` restarting at every segment (segments contiguous)."""
    c = np.cumsum(values)
    base = np.concatenate([[0], c])[seg_starts]
    return c - base[seg_ids]


def _greedy_fit(row: np.ndarray, tokens: np.ndarray, budget: np.ndarray, num_rows: int) -> np.ndarray:
    """BERT's rule, vectorised: walk each row's units in the given order (``row`` must be sorted, units
    of a row in priority order); take a unit if its ``tokens`` still fit in the row's budget, else skip it.

    Exact: each pass takes, among the untaken units that fit individually, the longest prefix that fits;
    the first unit past that prefix no longer fits and never will (the budget only shrinks).
    """
    taken = np.zeros(len(row), dtype=bool)
    if len(row) == 0:
        return taken
    rem = budget.astype(np.int64).copy()
    seg_starts = np.searchsorted(row, np.arange(num_rows), side="left")
    while True:
        elig = ~taken & (tokens <= rem[row])
        if not elig.any():
            return taken
        cs = _segment_cumsum(np.where(elig, tokens, 0), seg_starts, row)
        take = elig & (cs <= rem[row])
        taken |= take
        rem -= np.bincount(row[take], weights=tokens[take], minlength=num_rows).astype(np.int64)


def _order_by_priority(unit_row: np.ndarray, prio: np.ndarray, valid: np.ndarray, num_rows: int) -> np.ndarray:
    """Indices of the valid units sorted by (row, priority). Units must be grouped by row (``unit_row``
    non-decreasing). A padded [rows, units] argsort: much faster than a lexsort over all units."""
    if len(unit_row) == 0:
        return np.zeros(0, np.int64)
    counts = np.bincount(unit_row, minlength=num_rows)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    width = int(counts.max())
    key = np.full((num_rows, width), np.inf)
    within = np.arange(len(unit_row)) - start[unit_row]
    key[unit_row, within] = np.where(valid, prio, np.inf)
    order = np.argsort(key, axis=1)
    nvalid = np.bincount(unit_row[valid], minlength=num_rows)
    keep = np.arange(width)[None, :] < nvalid[:, None]
    return (start[:, None] + order)[keep]


class Masker:
    """Masks chunks of rows and collates them into batches (see the module docstring)."""

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
    def from_artifact(cls, cfg: MaskingConfig, artifact, *, max_seq_len: int = 512) -> "Masker":
        """A masker for ``schemas.artifact.Artifact`` ``artifact`` (its tokenizer's ids and unigram counts)."""
        return cls(
            cfg,
            vocab_size=artifact.vocab_size,
            special_token_ids=artifact.special_token_ids,
            unigram_counts=artifact.unigram_counts(),
            max_seq_len=max_seq_len,
        )

    # -- randomness --------------------------------------------------------------------------
    def generator(self, sample_id: int, epoch: int) -> np.random.Generator:
        """The row's generator: Philox keyed by (sample id, seed << 32 | epoch)."""
        if not 0 <= epoch < _SEED_LIMIT:
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
        if (n > self.max_seq_len - 2).any():
            i = int(np.argmax(n > self.max_seq_len - 2))
            raise ValueError(f"row of sample {int(sample_ids[i])} has {int(n[i])} tokens; max_seq_len {self.max_seq_len} allows {self.max_seq_len - 2}")
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
            units = self._greedy_units(gens, rows, R, offsets, n, budget, ids, forbidden, tok_row, wpos, wend, woff, nw, word_bad)
        u_row, u_start, u_end, u_words, u_act_u, u_cand = units
        # Rows no whole unit fitted in (every word longer than the budget) get part of a word.
        f_row, f_s, f_e, f_w, f_a = fill_empty_rows(gens, budget, np.bincount(u_row, minlength=R) > 0, offsets, wpos, wend, woff, word_bad)
        if len(f_row):
            u_row, u_start, u_end, u_words, u_act_u, u_cand = (
                np.concatenate([a, b]) for a, b in ((u_row, f_row), (u_start, f_s), (u_end, f_e), (u_words, f_w), (u_act_u, f_a), (u_cand, np.zeros(len(f_row), bool))))

        order = np.argsort((u_row << 20) | u_start, kind="stable")  # by row, then start (starts < 2**20)
        u_row, u_start, u_end, u_words, u_act_u, u_cand = (a[order] for a in (u_row, u_start, u_end, u_words, u_act_u, u_cand))
        action = np.where(u_act_u < cfg.mask_prob, ACTION_MASK, np.where(u_act_u < cfg.mask_prob + cfg.random_prob, ACTION_RANDOM, ACTION_KEEP))

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
        # SBO boundaries around the maximal masked run (trainer.sbo_targets): always observed tokens.
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
            offsets=offsets, original_ids=ids, input_ids=out_ids, labels=labels, span_left=left, span_right=right,
            span_position=pos, sample_ids=sample_ids, maskable=maskable, unit_row=u_row, unit_start=u_start,
            unit_end=u_end, unit_words=u_words, unit_action=action, unit_candidate=u_cand, word_start=ws,
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
        return u_row, cat(out_s, np.int64), cat(out_e, np.int64), cat(out_w, np.int64), cat(out_a, np.float64), np.zeros(len(u_row), bool)

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
            order = np.argsort((crow << 40) | (np.clip(cs, 0, (1 << 20) - 1) << 20) | np.clip(ce, 0, (1 << 20) - 1), kind="stable")
            big = np.int64(1 << 20)
            key_e = crow[order] * big + ce[order]
            prev_max = np.maximum.accumulate(key_e)
            prev = np.concatenate([[-1], prev_max[:-1]])
            overl = np.zeros(len(cs), bool)
            overl[order] = (crow[order] * big + cs[order]) < prev
            ok &= ~overl
            o2 = _order_by_priority(crow, prio, ok, R)
            cbudget = np.minimum(np.floor(cfg.candidate_share * budget + 0.5).astype(np.int64), budget)
            take = _greedy_fit(crow[o2], (ce - cs)[o2], cbudget, R)
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
        o = _order_by_priority(u_row, u_prio, ok, R)
        take = _greedy_fit(u_row[o], (u_e - u_s)[o], budget_left, R)
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

    # -- collation ---------------------------------------------------------------------------
    def _batch_shape(self, masked: Masked, start: int, stop: int) -> tuple[int, int]:
        n = np.diff(masked.offsets[start : stop + 1])
        longest = int(n.max()) + 2 if stop > start else 2
        T = min(-(-longest // PAD_TO_MULTIPLE) * PAD_TO_MULTIPLE, self.max_seq_len)
        if longest > T:
            raise ValueError(f"a row needs {longest} positions; max_seq_len is {self.max_seq_len}")
        return stop - start, T

    def _fill(self, masked: Masked, start: int, stop: int, out: np.ndarray) -> None:
        """Write rows ``start:stop`` into ``out`` [6, B, T]: input_ids, labels, span_left, span_right,
        span_position, attention_mask."""
        _, B, T = out.shape
        o = masked.offsets
        lo, hi = int(o[start]), int(o[stop])
        n = np.diff(o[start : stop + 1])
        r = np.repeat(np.arange(B), n)
        p = np.arange(hi - lo) - np.repeat(o[start:stop] - lo, n) + 1  # final positions (after [CLS])
        out[:] = 0
        out[0] = self.pad_id
        out[1] = IGNORE_INDEX
        out[0, :, 0] = self.cls_id
        out[0, np.arange(B), n + 1] = self.sep_id
        for k, values in enumerate((masked.input_ids, masked.labels, masked.span_left, masked.span_right, masked.span_position)):
            out[k, r, p] = values[lo:hi]
        out[5] = np.arange(T)[None, :] < (n + 2)[:, None]

    @staticmethod
    def _as_batch(t: torch.Tensor, sample_id: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "input_ids": t[0],
            "attention_mask": t[5],
            "labels": t[1],
            "span_left": t[2],
            "span_right": t[3],
            "span_position": t[4],
            "sample_id": sample_id,
        }

    def collate(self, masked: Masked, start: int = 0, stop: int | None = None) -> dict[str, torch.Tensor]:
        """The batch dict (module docstring) for rows ``start:stop`` of a masked chunk."""
        stop = masked.offsets.shape[0] - 1 if stop is None else stop
        B, T = self._batch_shape(masked, start, stop)
        out = np.empty((6, B, T), dtype=np.int64)
        self._fill(masked, start, stop, out)
        return self._as_batch(torch.from_numpy(out), torch.from_numpy(masked.sample_ids[start:stop].copy()))

    def collate_chunk(self, masked: Masked, micro_batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Consecutive batches of ``micro_batch_size`` rows of a masked chunk, as :meth:`collate` makes them,
        but all tensors are views of ONE storage: a DataLoader worker hands the whole chunk to the training
        process through a single shared-memory segment instead of one per tensor."""
        R = masked.offsets.shape[0] - 1
        bounds = [(a, min(a + micro_batch_size, R)) for a in range(0, R, micro_batch_size)]
        shapes = [self._batch_shape(masked, a, b) for a, b in bounds]
        sizes = [6 * B * T + B for B, T in shapes]
        buf = np.empty(int(sum(sizes)), dtype=np.int64)
        t = torch.from_numpy(buf)
        batches, off = [], 0
        for (a, b), (B, T), size in zip(bounds, shapes, sizes):
            block = buf[off : off + 6 * B * T].reshape(6, B, T)
            self._fill(masked, a, b, block)
            buf[off + 6 * B * T : off + size] = masked.sample_ids[a:b]
            batches.append(self._as_batch(t[off : off + 6 * B * T].view(6, B, T), t[off + 6 * B * T : off + size]))
            off += size
        return batches

    def __call__(self, rows: Rows, sample_ids: np.ndarray, epoch: int) -> dict[str, torch.Tensor]:
        return self.collate(self.mask(rows, sample_ids, epoch))


# ------------------------------------------------------------------------------------------------
def masking_stats(masked: Masked) -> dict[str, float]:
    """Statistics of a masked chunk: masked ratio, span lengths, per-unit action shares."""
    targets = int((masked.labels != IGNORE_INDEX).sum())
    maskable = int(masked.maskable.sum())
    units = len(masked.unit_row)
    act = masked.unit_action
    return {
        "rows": int(masked.offsets.shape[0] - 1),
        "maskable_tokens": maskable,
        "targets": targets,
        "masked_ratio": targets / maskable if maskable else 0.0,
        "units": units,
        "candidate_units": int(masked.unit_candidate.sum()),
        "mean_unit_words": float(masked.unit_words.mean()) if units else 0.0,
        "mean_unit_tokens": float((masked.unit_end - masked.unit_start).mean()) if units else 0.0,
        "share_masked": float((act == ACTION_MASK).mean()) if units else 0.0,
        "share_replaced": float((act == ACTION_RANDOM).mean()) if units else 0.0,
        "share_kept": float((act == ACTION_KEEP).mean()) if units else 0.0,
    }
