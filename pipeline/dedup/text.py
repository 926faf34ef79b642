"""The one home of "the same words": how duplicate detection and evaluation-set overlap see a text.

Normalisation (docs/DEDUP.md): Unicode NFKD; the combining marks (characters of a non-zero canonical combining
class) that follow a Latin, Greek or Cyrillic letter removed (its accents); case folded (``str.casefold``); the words
are then the maximal runs of Unicode word characters and marks (``\\w``: letters, digits, underscore; and every
character of category M, so an Indic vowel sign or a kana's voicing mark stays inside its word). Punctuation, symbols
and whitespace only separate words. So ``Café, 3.5!`` is the words ``cafe``, ``3``, ``5``, and a text decoded from a
cased or uncased WordPiece artifact (whose decoder spaces punctuation differently and an uncased one strips accents)
has the same words as the text it was built from. Marks of other scripts are kept: they are letters of their words
(``दिल`` and ``दाल``, ``がっこう`` and ``かっこう`` are different words; removing all marks, or splitting words at
them, made them one and dropped different documents as copies).

Words and n-grams are hashed with blake2b (stable across processes, machines and Python versions; Python's
``hash`` is salted per process): a word to 64 bits, an n-gram to a polynomial of its word hashes modulo 2**64,
computed for all windows at once with numpy.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata

import numpy as np


def _ranges(codepoints: list[int]) -> str:
    """A regex character class body for ``codepoints`` (sorted), as ranges."""
    out: list[list[int]] = []
    for cp in codepoints:
        if out and cp == out[-1][1] + 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in out)


_MARKS = [cp for cp in range(0x300, 0x110000) if unicodedata.category(chr(cp)).startswith("M")]
_ASCII_WORD = re.compile(r"\w+")
_WORD = re.compile(r"(?:\w|[" + _ranges(_MARKS) + r"])+")
# Latin, IPA, Greek, Cyrillic (and their extensions): the letters whose combining marks are accents
_ACCENTED = "\u0000-\u052f\u1d00-\u1dbf\u1e00-\u1fff\u2c60-\u2c7f\ua640-\ua69f\ua720-\ua7ff\uab30-\uab6f"
_ACCENTS = re.compile(
    "(?<=[" + _ACCENTED + "])[" + _ranges([cp for cp in _MARKS if unicodedata.combining(chr(cp))]) + "]+"
)
NORMALISATION = (
    "NFKD, accents of Latin/Greek/Cyrillic letters removed, casefold; words are runs of \\w and marks "
    "(pipeline.dedup.text)"
)
# An odd 64-bit multiplier for the n-gram polynomial (any odd constant mixes; this one is the golden ratio's).
_BASE = np.uint64(0x9E3779B97F4A7C15)
_WORD_CACHE_LIMIT = 1 << 20  # words whose hashes one process remembers (about 100 MB at most)
_word_cache: dict[str, int] = {}


def normalise(text: str) -> str:
    """NFKD, the accents of Latin, Greek and Cyrillic letters removed, case folded (ASCII text: only lower-cased,
    which is the same)."""
    if text.isascii():
        return text.lower()
    return _ACCENTS.sub("", unicodedata.normalize("NFKD", text)).casefold()


_last = threading.local()  # per thread: the last text split and its words


def words(text: str) -> list[str]:
    """The normalised words of ``text`` (see the module docstring). The same text object asked for twice in a row
    by one thread (the overlap check, then the duplicate signature, fused in one worker) is split once; treat the
    list as read-only."""
    if getattr(_last, "text", None) is text:
        return _last.words
    found = (_ASCII_WORD if text.isascii() else _WORD).findall(normalise(text))
    _last.text, _last.words = text, found
    return found


def text_digest(text: str) -> bytes | None:
    """16 bytes naming the normalised text (its words joined by one space); None for a text without words."""
    found = words(text)
    if not found:
        return None
    return hashlib.blake2b(" ".join(found).encode("utf-8"), digest_size=16).digest()


def _word_hash(word: str) -> int:
    h = _word_cache.get(word)
    if h is None:
        if len(_word_cache) >= _WORD_CACHE_LIMIT:
            _word_cache.clear()
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
        _word_cache[word] = h
    return h


def word_hashes(found: list[str]) -> np.ndarray:
    """uint64 hash of each word, in order."""
    get = _word_cache.get
    hashes = [get(w) for w in found]
    if None in hashes:
        hashes = [_word_hash(w) if h is None else h for w, h in zip(found, hashes, strict=True)]
    return np.array(hashes, dtype=np.uint64)


def ngram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of every window of ``n`` consecutive words (``len - n + 1`` of them; none when shorter)."""
    count = len(hashes) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    out = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            out = out * _BASE + hashes[j : j + count]
    return out


def shingle_set(found: list[str], n: int) -> np.ndarray:
    """Sorted distinct hashes of the ``n``-word shingles of the words ``found``; 1 to n-1 words are one shingle of
    all of them; no words, none."""
    hashes = word_hashes(found)
    if 0 < len(hashes) < n:
        return ngram_hashes(hashes, len(hashes))
    return np.unique(ngram_hashes(hashes, n))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct hash arrays (0 when both are empty)."""
    if not len(a) and not len(b):
        return 0.0
    common = len(np.intersect1d(a, b, assume_unique=True))
    return common / (len(a) + len(b) - common)
