"""Row invariants of the artifact format (``FORMAT.md``), checked on one record batch's flat columns.

One home for the checks that ``pipeline.verify`` and the trainer's block reader (``trainer.data.blocks``) both make
on every row they read. Each function says *what* is wrong (a boolean mask, or the offending value) on the numpy
arrays of a record batch: ``offsets`` are a list column's offsets (row ``i`` is ``values[offsets[i]:offsets[i+1]]``),
``lengths`` its row lengths (``np.diff(offsets)``). The caller words the message: verify counts and reports every
problem, the loader stops at the first one naming the shard and batch. Only numpy is needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

# Special tokens a row may hold, by role (FORMAT.md, "Special tokens never come from text"): [UNK] stands for unknown
# text (WikiText's <unk>); full-sentences packing puts [SEP] between documents. Every other special token (the
# manifest's [PAD] [CLS] [MASK], [SEP] otherwise, and any other special added token of tokenizer.json) is the
# trainer's to place, never the text's.
ALLOWED_SPECIAL_ROLES = {"doc-sentences": ("unk",), "full-sentences": ("unk", "sep")}


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


def token_id_outside_vocab(ids: np.ndarray, vocab_size: int) -> int | None:
    """A token id outside ``0..vocab_size-1`` (a negative one first: signed id columns), else None."""
    if len(ids) == 0:
        return None
    if np.issubdtype(ids.dtype, np.signedinteger):
        low = int(np.min(ids))
        if low < 0:
            return low
    return token_id_beyond_vocab(ids, vocab_size)


def forbidden_special_ids(manifest: Mapping[str, Any], special_added_ids: Iterable[int] = ()) -> np.ndarray:
    """The sorted token ids no row may hold: the manifest's special tokens and ``special_added_ids`` (the ids of
    tokenizer.json's added tokens marked special, when the caller has loaded it), except the roles
    :data:`ALLOWED_SPECIAL_ROLES` allows for the manifest's ``pack``."""
    ids = manifest["tokenizer"]["special_token_ids"]
    allowed = {ids.get(role) for role in ALLOWED_SPECIAL_ROLES.get(manifest.get("pack", ""), ("unk",))}
    special = {i for i in ids.values() if i is not None} | set(special_added_ids)
    return np.array(sorted(special - allowed), dtype=np.int64)


def special_ids_in_rows(ids: np.ndarray, forbidden: np.ndarray) -> np.ndarray:
    """Per token: it is one of the ``forbidden`` special ids (:func:`forbidden_special_ids`).

    One comparison per forbidden id, in the ids' own dtype: 3.5x faster than ``np.isin`` on a record batch of uint16
    ids (comparing them with int64 values upcasts every element; benchmarks/RESULTS.md, issue 21)."""
    forbidden = np.asarray(forbidden)
    if np.issubdtype(ids.dtype, np.integer):
        info = np.iinfo(ids.dtype)  # ids outside the dtype's range cannot occur in it
        forbidden = forbidden[(forbidden >= info.min) & (forbidden <= info.max)].astype(ids.dtype)
    hit = np.zeros(ids.shape, dtype=bool)
    for f in forbidden:
        hit |= ids == f
    return hit


def spans_outside_rows(starts: np.ndarray, ends: np.ndarray, span_row: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per candidate span (``entity_spans``, ``noun_phrase_spans``, ``ngram_spans``): empty or not inside its row,
    i.e. ``0 <= start < end <= len(input_ids)`` violated. ``span_row``: the row of each span."""
    return (starts < 0) | (ends <= starts) | (ends > lengths[span_row])


def first_forbidden_id(ids: np.ndarray, forbidden: np.ndarray) -> int | None:
    """The position in ``ids`` of the first of the ``forbidden`` special ids, else None."""
    hit = special_ids_in_rows(ids, forbidden)
    return int(np.argmax(hit)) if hit.any() else None


def rows_starting_inside_a_word(word_start: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per row: ``word_start[0]`` is false, i.e. the row starts inside a word (a continuation row, format 2.0 on).
    ``word_start``: the flat values of a batch's ``word_start`` column; empty rows start no word and count as not."""
    lengths = np.diff(offsets)
    if not len(word_start):
        return np.zeros(len(lengths), dtype=bool)
    return (lengths > 0) & ~np.asarray(word_start, dtype=bool)[np.minimum(offsets[:-1], len(word_start) - 1)]


# Why a row that starts inside a word is not a valid continuation row (FORMAT.md, "Words longer than a row"), in the
# order :func:`continuation_problems` reports them.
CONTINUATION_RULES = {
    "unmarked": "start inside a word (with a token that continues a word, e.g. WordPiece's ##) but are not marked as "
    "continuation rows (word_start[0] is true)",
    "version": "start inside a word in a format 1.x artifact (continuation rows exist since format 2.0)",
    "sentence": "start inside a word but are marked as a sentence start",
    "document": "start inside a word but follow no row of their document (a document's first row starts at a word)",
    "full": "start inside a word but the row before is not full (a word is cut only into rows of max_row_tokens)",
    "one_word": "start inside a word but the row before has a word start after its first token (a word longer than "
    "a row starts its own row)",
}


def continuation_problems(
    first_word_start: np.ndarray,
    first_sentence_start: np.ndarray,
    previous_same_document: np.ndarray,
    previous_length: np.ndarray,
    previous_inner_word_starts: np.ndarray,
    max_row_tokens: int,
    allowed: bool,
    first_token_continues: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per rule of :data:`CONTINUATION_RULES`, which rows break it. A row whose ``word_start[0]`` is false starts
    inside a word: it must be a continuation row, i.e. (format 2.0 on, ``allowed``) its ``sentence_start[0]`` is
    false, the row before it is the previous row of the same document (``previous_same_document``), holds
    ``max_row_tokens`` tokens (``previous_length``) and lies inside that one word: no word starts in it after its
    first token (``previous_inner_word_starts``), so the word started at that row's start or that row is itself a
    continuation. All arguments are per row of one shard, in shard order; ``previous_*`` describe the row before.
    ``first_token_continues`` (when the tokenizer tells it, e.g. WordPiece's ``##`` tokens): the row's first token
    can only continue a word, so a row starting with it and not marked starts inside a word unmarked."""
    inside = ~np.asarray(first_word_start, dtype=bool)
    unmarked = {} if first_token_continues is None else {"unmarked": ~inside & first_token_continues}
    if not allowed:
        return {**unmarked, "version": inside}
    return {
        **unmarked,
        "sentence": inside & np.asarray(first_sentence_start, dtype=bool),
        "document": inside & ~np.asarray(previous_same_document, dtype=bool),
        "full": inside & np.asarray(previous_same_document, dtype=bool) & (previous_length != max_row_tokens),
        "one_word": inside & np.asarray(previous_same_document, dtype=bool) & (previous_inner_word_starts > 0),
    }
