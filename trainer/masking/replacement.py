"""BERT's 80/10/10, decided per unit, and the per-token results of a chunk's chosen units.

Each unit is replaced as a whole: with ``mask_prob`` every token becomes [MASK], with ``random_prob`` every token
becomes a random token drawn from the unigram distribution (the row's uniform for that position), with
``keep_prob`` it stays unchanged. Every token of a unit is an MLM target, with its SBO boundaries around the
maximal masked run holding it (``trainer.masking.sbo_targets``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainer.masking.config import MaskingConfig
from trainer.masking.rows import ACTION_KEEP, ACTION_MASK, ACTION_RANDOM, IGNORE_INDEX
from trainer.masking.sbo_targets import run_bounds


def unit_actions(cfg: MaskingConfig, u_act_u: np.ndarray) -> np.ndarray:
    """Each unit's action (``ACTION_MASK``, ``ACTION_RANDOM`` or ``ACTION_KEEP``) from its action uniform."""
    return np.where(
        u_act_u < cfg.mask_prob,
        ACTION_MASK,
        np.where(u_act_u < cfg.mask_prob + cfg.random_prob, ACTION_RANDOM, ACTION_KEEP),
    )


def replace_units(
    cfg: MaskingConfig,
    u_row: np.ndarray,
    u_start: np.ndarray,
    u_end: np.ndarray,
    action: np.ndarray,
    *,
    offsets: np.ndarray,
    ids: np.ndarray,
    u_repl: np.ndarray,
    mask_id: int,
    sample_unigram: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(input ids, labels, SBO left, SBO right, SBO position), flat over the chunk's tokens, for units sorted by
    (row, start) that do not overlap. ``u_repl``: one uniform per token, the random replacement at that position."""
    total = int(offsets[-1])
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
    out_ids[flat[m]] = mask_id
    r = act_tok == ACTION_RANDOM
    out_ids[flat[r]] = sample_unigram(u_repl[flat[r]])
    return out_ids, labels, left, right, pos
