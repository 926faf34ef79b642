"""Row invariants of the artifact format (``FORMAT.md``), checked on one record batch's flat columns.

One home for the checks that ``pipeline.verify`` and the trainer's block reader (``trainer.data.blocks``) both make
on every row they read. Each function says *what* is wrong (a boolean mask, or the offending value) on the numpy
arrays of a record batch: ``offsets`` are a list column's offsets (row ``i`` is ``values[offsets[i]:offsets[i+1]]``),
``lengths`` its row lengths (``np.diff(offsets)``). The caller words the message: verify counts and reports every
problem, the loader stops at the first one naming the shard and batch. Only numpy is needed.
"""

from __future__ import annotations

import numpy as np


def flags_align(offsets: np.ndarray, flag_offsets: np.ndarray) -> bool:
    """A per-token column (``word_start``, ``sentence_start``) has exactly the row lengths of ``input_ids``."""
    return bool(np.array_equal(offsets, flag_offsets))


def rows_too_long(lengths: np.ndarray, max_row_tokens: int) -> np.ndarray:
    """Per row: more tokens than the artifact's ``max_row_tokens`` (``format.max_row_tokens(max_seq_len)``)."""
    return np.asarray(lengths) > max_row_tokens


def empty_rows(lengths: np.ndarray) -> np.ndarray:
    """Per row: no tokens at all (the pipeline never writes one)."""
    return np.asarray(lengths) < 1


def token_id_beyond_vocab(ids: np.ndarray, vocab_size: int) -> int | None:
    """The largest token id when it is not below ``vocab_size``, else None."""
    if len(ids) == 0:
        return None
    top = int(np.max(ids))
    return top if top >= vocab_size else None


def spans_outside_rows(starts: np.ndarray, ends: np.ndarray, span_row: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per candidate span (``entity_spans``, ``noun_phrase_spans``, ``ngram_spans``): empty or not inside its row,
    i.e. ``0 <= start < end <= len(input_ids)`` violated. ``span_row``: the row of each span."""
    return (starts < 0) | (ends <= starts) | (ends > lengths[span_row])
