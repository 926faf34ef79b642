"""Masking on the fly, in the DataLoader workers: artifact rows in, masked batches out.

In: a chunk of rows (:class:`Rows`, flat ragged numpy arrays read by ``trainer.data``), their global sample ids and
the epoch. Out: the model's batch dicts (``collate``), with MLM labels and SBO targets; masks are a pure function of
(seed, epoch, sample id). ``config`` holds :class:`MaskingConfig`, ``masker`` the schemes (rules in its docstring),
``sbo_targets`` the SBO boundaries over maximal masked runs, ``collate`` the batch layout, ``rows`` the chunk types.

Public interface
----------------
``MaskingConfig``  typed keyword-only config (``scheme``, ``mask_ratio``, ``geometric_p``, ...).
``Rows``           a chunk of artifact rows as flat ragged numpy arrays (see its docstring).
``Masker``         ``Masker(cfg, vocab_size=, special_token_ids=, unigram_counts=, max_seq_len=)`` or
                   ``Masker.from_artifact(cfg, artifact, max_seq_len=)``;
                   ``masker.mask(rows, sample_ids, epoch) -> Masked`` (flat per-token results + the units);
                   ``masker.collate(masked, start, stop) -> batch dict`` for rows ``start:stop`` of a chunk;
                   ``masker(rows, sample_ids, epoch) -> batch dict`` for a whole chunk.
"""

from trainer.masking.collate import PAD_TO_MULTIPLE, Collator
from trainer.masking.config import (
    CANDIDATE_COLUMNS,
    NUMERIC_ENTITY_LABELS,
    SCHEMES,
    SPECIAL_TOKEN_NAMES,
    MaskingConfig,
)
from trainer.masking.masker import Masker
from trainer.masking.rows import ACTION_KEEP, ACTION_MASK, ACTION_RANDOM, IGNORE_INDEX, Masked, Rows, masking_stats

__all__ = [
    "ACTION_KEEP", "ACTION_MASK", "ACTION_RANDOM", "CANDIDATE_COLUMNS", "IGNORE_INDEX", "NUMERIC_ENTITY_LABELS",
    "PAD_TO_MULTIPLE", "SCHEMES", "SPECIAL_TOKEN_NAMES", "Collator", "Masked", "Masker", "MaskingConfig", "Rows",
    "masking_stats",
]
