"""Masking on the fly, in the DataLoader workers: artifact rows in, masked batches out.

In: a chunk of rows (:class:`Rows`, flat ragged numpy arrays read by ``trainer.data``), their global sample ids and
the epoch. Out: the model's batch dicts (``collate``), with MLM labels and SBO targets; masks are a pure function of
(seed, epoch, sample id). ``config`` holds :class:`MaskingConfig`, ``masker`` the schemes (rules in its docstring)
and the draws, ``units`` the units of every scheme but ``span`` and ``spans`` the span sampler, ``greedy`` the
fit-or-skip selection, ``replacement`` the 80/10/10 per unit, ``sbo_targets`` the SBO boundaries over maximal masked
runs, ``collate`` the batch layout, ``rows`` the chunk types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.lazy import exports

if TYPE_CHECKING:
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

__getattr__ = exports(
    __name__,
    {
        "PAD_TO_MULTIPLE": "collate",
        "Collator": "collate",
        "CANDIDATE_COLUMNS": "config",
        "NUMERIC_ENTITY_LABELS": "config",
        "SCHEMES": "config",
        "SPECIAL_TOKEN_NAMES": "config",
        "MaskingConfig": "config",
        "Masker": "masker",
        "ACTION_KEEP": "rows",
        "ACTION_MASK": "rows",
        "ACTION_RANDOM": "rows",
        "IGNORE_INDEX": "rows",
        "Masked": "rows",
        "Rows": "rows",
        "masking_stats": "rows",
    },
)

__all__ = [
    "ACTION_KEEP",
    "ACTION_MASK",
    "ACTION_RANDOM",
    "CANDIDATE_COLUMNS",
    "IGNORE_INDEX",
    "NUMERIC_ENTITY_LABELS",
    "PAD_TO_MULTIPLE",
    "SCHEMES",
    "SPECIAL_TOKEN_NAMES",
    "Collator",
    "Masked",
    "Masker",
    "MaskingConfig",
    "Rows",
    "masking_stats",
]
