"""How rows are masked: the schemes, their candidate-span columns, and :class:`MaskingConfig` (SpanBERT's defaults)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.format import SPECIAL_TOKENS
from trainer.config import config_from_dict

SCHEMES = ("subword", "whole_word", "span", "entity", "noun_phrase", "ngram")
# scheme -> the shard column with its candidate spans
CANDIDATE_COLUMNS = {"entity": "entity_spans", "noun_phrase": "noun_phrase_spans", "ngram": "ngram_spans"}
# spaCy labels of numerical entities (SpanBERT masked non-numerical named entities only).
NUMERIC_ENTITY_LABELS = ("DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL")
SPECIAL_TOKEN_NAMES = tuple(SPECIAL_TOKENS)  # pad, unk, cls, sep, mask (schemas/format.py)

SEED_LIMIT = 1 << 32  # seed and epoch share one 64-bit Philox key word


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
            bad(
                f"mask_prob + random_prob + keep_prob must be 1; got {self.mask_prob} + {self.random_prob} + {self.keep_prob} = {total}"
            )
        for name, lo in (("max_span_words", 1), ("max_span_positions", 1), ("start_retries", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                bad(f"{name} must be an integer >= {lo}; got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < SEED_LIMIT:
            bad(f"seed must be an integer in [0, 2**32); got {self.seed!r}")
        if isinstance(self.excluded_entity_labels, str) or not all(
            isinstance(x, str) for x in self.excluded_entity_labels
        ):
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
    def from_dict(cls, d: Mapping[str, Any]) -> MaskingConfig:
        return config_from_dict(cls, d)
