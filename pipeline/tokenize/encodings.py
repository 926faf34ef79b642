"""A document's encoding as arrays (:class:`Encoded`), long texts in pieces, character spans to token spans.

Used by ``tokenized_documents``; numpy and the tokenizer's ``Encoding`` only, no Beam.
"""

from __future__ import annotations

import itertools

import numpy as np


def char_spans_to_tokens(
    starts: np.ndarray, ends: np.ndarray, token_starts: np.ndarray, token_ends: np.ndarray, word_start: np.ndarray
):
    """Map character spans to token spans ``[first, last + 1)`` covering them.

    A token belongs to a span when its characters overlap the span. The result is widened to
    whole words (a span never starts or ends inside a word). Returns (token_spans (k, 2) int32,
    keep mask) where spans covering no token are not kept.
    """
    if len(starts) == 0:
        return np.empty((0, 2), np.int32), np.zeros(0, bool)
    first = np.searchsorted(token_ends, starts, side="right")  # first token ending after span start
    last = np.searchsorted(token_starts, ends, side="left")  # one past the last token starting before span end
    keep = last > first
    first = first[keep]
    last = last[keep]
    if len(first):
        # widen to word boundaries
        word_id = np.cumsum(word_start) - 1
        word_first = np.flatnonzero(word_start)
        word_end = np.append(word_first[1:], len(word_start))
        first = word_first[word_id[first]]
        last = word_end[word_id[last - 1]]
    return np.stack([first, last], axis=1).astype(np.int32), keep


# Longer texts are encoded in pieces cut at a line break (else a space): the tokenizer's own encoding
# costs about 600 bytes of memory per token, so one 50 MB record used to need ~10 GB. Pieces give the
# same tokens: WordPiece's normalizer works per character and its pre-tokenizer splits at every whitespace.
# Byte-level BPE's regex keeps a run of whitespace together (and a space before a word joins the word), so there
# a piece starts only at a line feed followed by a non-space character, not an added token (``strict``): the regex makes such a line
# feed a word of its own, and the whitespace before it ends the same way at the end of a piece
# (``schemas/tokenizers/families.py``). Unigram behind Metaspace (``metaspace``): only at a space between two
# printable ASCII characters (``schemas/tokenizers/families.py``).
ENCODE_PIECE_CHARS = 1 << 20


def text_pieces(
    text: str, limit: int, strict: bool = False, added: tuple[str, ...] = (), metaspace: bool = False
) -> list[tuple[int, int]]:
    """``[start, end)`` character ranges of at most ``limit`` characters, each (but the first) starting at a
    line break or, failing that, a space; a run of ``limit`` characters without either stays whole. ``strict``:
    only at a line feed followed by a non-space character that does not start one of the ``added`` tokens (the
    tokenizer matches those first, so the regex would see the line feed at the end of a stretch of text; a text
    without such a line feed within the limit stays whole). ``metaspace``: only at a space (U+0020) between two
    printable non-space ASCII characters, with none of the ``added`` tokens ending before it or starting after it."""
    pieces, start, n = [], 0, len(text)
    while n - start > limit:
        if metaspace:
            cut = _metaspace_cut(text, start, limit, added)
        elif strict:
            cut = _strict_cut(text, start, limit, added)
        else:
            cut = text.rfind("\n", start + 1, start + limit)
        if cut < 0 and not strict and not metaspace:
            cut = text.rfind(" ", start + 1, start + limit)
        if cut < 0:
            break
        pieces.append((start, cut))
        start = cut
    pieces.append((start, n))
    return pieces


def _strict_cut(text: str, start: int, limit: int, added: tuple[str, ...]) -> int:
    """The last line feed in ``text[start + 1 : start + limit]`` followed by a non-space character, or -1.
    (Python's whitespace includes every character the regex's ``\\s`` matches.)"""
    end = start + limit
    while True:
        cut = text.rfind("\n", start + 1, end)
        if cut < 0 or (cut + 1 < len(text) and not text[cut + 1].isspace() and not text.startswith(added, cut + 1)):
            return cut
        end = cut


def _metaspace_cut(text: str, start: int, limit: int, added: tuple[str, ...]) -> int:
    """The last space in ``text[start + 1 : start + limit]`` between two printable non-space ASCII characters and
    next to none of the ``added`` tokens, or -1."""
    end = start + limit
    while True:
        cut = text.rfind(" ", start + 1, end)
        if cut < 0 or (
            cut + 1 < len(text)
            and "!" <= text[cut - 1] <= "~"
            and "!" <= text[cut + 1] <= "~"
            and not text.startswith(added, cut + 1)
            and not text.endswith(added, 0, cut)
        ):
            return cut
        end = cut


def word_numbers(word_ids: list) -> np.ndarray:
    """An Encoding's word numbers as an array; a token without one (an added token inside text) is a word alone."""
    try:
        return np.array(word_ids, dtype=np.int64)
    except TypeError:
        return np.array([-1 - i if v is None else v for i, v in enumerate(word_ids)], dtype=np.int64)


class Encoded:
    """A tokenizer encoding as arrays: ids, word numbers (distinct per word) and character offsets (n, 2).

    Offsets are read back from the tokenizer only when asked for (they cost about a quarter of the
    encoding itself).
    """

    def __init__(self, ids: np.ndarray, words: np.ndarray, offsets: np.ndarray | None = None, encoding=None):
        self.ids = ids
        self.words = words
        self._offsets = offsets
        self._encoding = encoding

    @property
    def offsets(self) -> np.ndarray:
        if self._offsets is None:
            n = len(self.ids)
            self._offsets = np.fromiter(
                itertools.chain.from_iterable(self._encoding.offsets), dtype=np.int64, count=2 * n
            ).reshape(n, 2)
        return self._offsets

    @classmethod
    def of(cls, enc, char_base: int = 0) -> Encoded:
        w = word_numbers(enc.word_ids)
        ids = np.array(enc.ids, dtype=np.int64)
        if char_base:
            return cls(ids, w, cls(ids, w, encoding=enc).offsets + char_base)
        return cls(ids, w, encoding=enc)

    @classmethod
    def concatenate(cls, parts: list[Encoded]) -> Encoded:
        if len(parts) == 1:
            return parts[0]
        words, base = [], 0
        for p in parts:  # renumber the words so that no word continues across pieces
            if len(p.words):
                w = p.words - p.words.min() + base
                base = int(w.max()) + 1
                words.append(w)
        return cls(
            np.concatenate([p.ids for p in parts]),
            np.concatenate(words) if words else np.zeros(0, np.int64),
            np.concatenate([p.offsets for p in parts]).reshape(-1, 2),
        )
