"""What masking works on and produces: a chunk of rows (:class:`Rows`), its masking (:class:`Masked`) and
statistics of a masked chunk (:func:`masking_stats`). Flat ragged numpy arrays, so a chunk is vectorised."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

IGNORE_INDEX = -100  # label of positions that are not MLM targets
# Unit actions (per unit, not per token).
ACTION_MASK, ACTION_RANDOM, ACTION_KEEP = 0, 1, 2


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
    sentence_start: np.ndarray | None = None  # bool per token; only for two segments (trainer.data.segments)
    doc_id: np.ndarray | None = None  # per row; only for two segments

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, input_ids, word_start, spans=None) -> Rows:
        """Build from per-row sequences (tests, small tools). ``spans``: per row, a list of (start, end)."""
        lengths = np.array([len(r) for r in input_ids], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = (
            np.concatenate([np.asarray(r, dtype=np.int64) for r in input_ids])
            if len(input_ids)
            else np.zeros(0, np.int64)
        )
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
    word_start: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, bool))


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
