"""Where a sentence starts among the tokens: one rule for every family and every path (schemas/FORMAT.md).

A Punkt sentence starts at a character; its first token is the first token of the first tokenizer word that begins
at or after that character, where a word's beginning is its first non-space character: BPE's ``Ġ`` and Unigram's
``▁`` (a space of the text, or prepended) come before it, and so does the whitespace an added token with ``lstrip``
takes into its span. Where Punkt cuts inside one of the tokenizer's words (``...text.[1] Next`` is one Metaspace
word, ``▁text.[1]``), the sentence starts at the next word (``▁Next``): a row never starts inside a word
(FORMAT.md), and that is the sentence start the tokenizer's words allow. Words of whitespace alone (BPE's ``Ċ``)
never start a sentence. For WordPiece every Punkt start is a word start (its pre-tokenizer splits at whitespace and
isolates punctuation, and Punkt cuts only there), so this is the word holding the character.
"""

from __future__ import annotations

import numpy as np

_TOP = 0x3001  # every character Python calls whitespace is below U+3001 (U+3000 is the last)
_SPACE = np.array([chr(c).isspace() for c in range(_TOP)] + [False])


def code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)


def heads(cps: np.ndarray, word_begins: np.ndarray, word_ends: np.ndarray) -> np.ndarray:
    """For words ``[word_begins[i], word_ends[i])`` (positions in the text whose code points are ``cps``, in
    order): the position of each word's first non-space character, or -1 for a word of whitespace alone."""
    nonspace = np.flatnonzero(~_SPACE[np.minimum(cps, _TOP)])
    first = np.append(nonspace, len(cps))[np.searchsorted(nonspace, word_begins)]
    return np.where(first < word_ends, first, -1)


def first_tokens(head_tokens: np.ndarray, head_at: np.ndarray, starts: np.ndarray, n_tokens: int) -> np.ndarray:
    """For each sentence start (a position), the first token of the first word whose head (``head_at``, increasing;
    that word's first token ``head_tokens``) is at or after it; ``n_tokens`` when there is none."""
    return np.append(head_tokens, n_tokens)[np.searchsorted(head_at, starts, side="left")]


def sentence_firsts(text: str, token_starts: np.ndarray, word_start: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The rule on a whole encoding: ``token_starts`` are the tokens' character offsets, ``word_start`` marks the
    first token of each word; a word spans from its first token's offset to the next word's."""
    words = np.flatnonzero(word_start)
    begins = token_starts[words]
    h = heads(code_points(text), begins, np.append(begins[1:], len(text)))
    kept = h >= 0
    return first_tokens(words[kept], h[kept], starts, len(word_start))
