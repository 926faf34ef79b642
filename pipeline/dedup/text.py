"""The one home of "the same words": how duplicate detection and evaluation-set overlap see a text.

Normalisation (docs/DEDUP.md): the characters tokenizers erase deleted (``pipeline.dedup.erased``: ``ca<U+00AD>t``
is ``cat``); Unicode NFKD; the marks no letter owns removed (``pipeline.dedup.word_rules``): the combining marks
(characters of a non-zero canonical combining class) and non-spacing marks (Mn) that follow a Latin, Greek or
Cyrillic letter (its accents), a symbol, punctuation, a space, a Han ideograph or nothing (``∉``, NFKD ``∈`` +
U+0338, is ``∈``, as an uncased WordPiece reads it), and those after a kana but its voicing marks; case folded (``str.casefold``); connector punctuation (``_``)
made a space, as BERT's pre-tokenizer splits words there; the words are then the maximal runs of Unicode word
characters and marks (``\\w``: letters, digits, and the underscore, which is gone by then; and every
character of category M, so an Indic vowel sign or a kana's voicing mark stays inside its word), except that each
character of the scripts written without spaces between words, Han (CJK ideographs: unified, extensions,
compatibility) and kana (Hiragana, Katakana, their extensions; halfwidth katakana is full width after NFKD), is a
word of its own with the marks after it (``日本語の文章です`` is 8 words, ``abc日本`` is ``abc``, ``日``, ``本``, as BERT's
tokenizer splits them; with a whole sentence one word, no 13-gram was ever shared). Thai, Lao, Khmer and Myanmar
are not split: they have no spaces either, but their characters are letters, not words or syllables (a vowel may
be a letter of its own written before its consonant), so a character rule would make a 13-gram three words; they
need a dictionary segmenter, and their words stay the runs between spaces. Hangul is written with spaces.
Punctuation, symbols and whitespace only separate words. So ``Café, 3.5!`` is the words ``cafe``, ``3``, ``5``, and
a text decoded from a cased or uncased WordPiece artifact (whose decoder spaces punctuation differently and an
uncased one strips accents) has the same words as the text it was built from. Marks after a letter of another
script are kept: they are letters of their words (``दिल`` and ``दाल``, ``がっこう`` and ``かっこう`` are different words; removing all marks,
or splitting words at them, made them one and dropped different documents as copies).

Two ways to the same words. :func:`words` gives them as strings (the reference rule, :func:`normalise_reference`
then a regex). :func:`analyse` gives what the job needs, their 64-bit hashes and the digest of the whole word
sequence, without making a string per word: the text's code points as a numpy array, a table saying which code
points are word characters (and, in a text with any Han or kana, where a run is cut before and after each), and the
hashes of the runs computed for all words at once. Normalisation touches only the non-ASCII runs of a text (NFKD,
casefold and the marks rule act on a character and the marks after it, and an ASCII character is never a mark, so
the rest is only lower-cased). tests/pipeline/test_dedup.py checks both ways
give the same words on real pages, ASCII and not.

A word's hash (stable across processes, machines and Python versions; Python's ``hash`` is salted per process): a
polynomial of its code points modulo 2**64 mixed with its length by splitmix64's finaliser; an n-gram's, a
polynomial of its word hashes modulo 2**64 (all windows at once).
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import unicodedata
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.dedup import erased
from pipeline.dedup.word_rules import remove_strays
from pipeline.dedup.word_rules import rules as _rules

_LAZY = {"_MARKS": "marks", "_UNSPACED": "unspaced", "_WORD": "word", "_ACCENTS": "accents"}


def __getattr__(name: str) -> Any:  # text._WORD and the like, for the tests: the rules' tables
    if name in _LAZY:
        return getattr(_rules(), _LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_JOIN = "\uffff"  # joins the non-ASCII runs in _normalise
# The rule before the erased characters were deleted: what artifacts built with it record, and how the standalone
# check (pipeline.contamination) still reads them.
NORMALISATION_KEEPING_ERASED = (
    "NFKD, accents of Latin/Greek/Cyrillic letters removed, casefold; words are runs of \\w and marks, each Han "
    "ideograph and kana (with its marks) a word of its own (pipeline.dedup.text)"
)
NORMALISATION = (
    "characters tokenizers erase deleted (control, Default_Ignorable_Code_Point, pipeline.dedup.erased), then NFKD, "
    "combining and non-spacing marks removed unless after a letter or digit of a script other than Latin/Greek/"
    "Cyrillic/Han (a kana keeps its voicing marks), casefold; words are runs of letters, digits and marks (\\w "
    "but the underscore and other connector punctuation, which separate words), each Han ideograph and kana (with "
    "its marks) a word of its own (pipeline.dedup.text)"
)
# name -> whether the rule is the current one (``erase`` of the functions below) or the one before
RULES = {NORMALISATION: True, NORMALISATION_KEEPING_ERASED: False}
# Connector punctuation (category Pc) as NFKD leaves it: BERT's pre-tokenizer splits words at it, so a decoded
# WordPiece row has ``pattern _ sh`` where the text has ``pattern_sh``; the current rule makes it a space.
_CONNECTORS = ("_", "\u203f", "\u2040", "\u2054")


def _separate_connectors(text: str) -> str:
    if "_" in text:
        text = text.replace("_", " ")
    if not text.isascii():
        for c in _CONNECTORS[1:]:
            if c in text:
                text = text.replace(c, " ")
    return text


# An odd 64-bit multiplier for the n-gram polynomial (any odd constant mixes; this one is the golden ratio's).
_BASE = np.uint64(0x9E3779B97F4A7C15)
_CHAR_BASE = np.uint64(0xFF51AFD7ED558CCD)  # odd: the polynomial of a word's code points
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64's finaliser


def normalise_reference(text: str, erase: bool = True) -> str:
    """The rule as written: the erased characters deleted (with ``erase``: the current rule), NFKD, the marks no
    letter owns removed (with ``erase``; without, the accents of Latin, Greek and Cyrillic letters), case folded,
    connector punctuation made a space (with ``erase``)."""
    if not erase:
        return _rules().accents.sub("", unicodedata.normalize("NFKD", text)).casefold()
    text = "".join(c for c in text if ord(c) not in erased.deleted())
    return _separate_connectors(remove_strays(unicodedata.normalize("NFKD", text)).casefold())


def normalise(text: str, erase: bool = True) -> str:
    """:func:`normalise_reference`, applied to the non-ASCII runs only (each with the ASCII character before it, which
    the accent rule looks at); the ASCII between is lower-cased, which is the same. First, with ``erase`` (the rule
    :data:`NORMALISATION`; without, :data:`NORMALISATION_KEEPING_ERASED`), the characters a tokenizer erases are
    deleted (:func:`pipeline.dedup.erased.erase`), so ``ca<U+00AD>t`` is ``cat``, and at the end connector
    punctuation (``_``, and what NFKD makes ``_``) is made a space, so ``pattern_sh`` is ``pattern sh``."""
    if erase:
        return _separate_connectors(_normalise(erased.erase(text), remove_strays))
    return _normalise(text, functools.partial(_rules().accents.sub, ""))


def _normalise(text: str, marks: Callable[[str], str]) -> str:
    """The non-ASCII runs (each with the ASCII character before it) normalised in one call: joined by U+FFFF, a
    noncharacter that NFKD, casefold and the marks rules leave alone and that no mark can follow (an ASCII
    character comes after it), so each run comes out as alone, in a few C calls instead of several per run. A text
    holding U+FFFF is taken run by run."""
    if text.isascii():
        return text.lower()
    if _JOIN in text:
        return _normalise_runs(text, marks)
    pieces = _split_non_ascii(text)
    ascii_parts = pieces[0::2]
    runs = _JOIN.join([a[-1:] + n for a, n in zip(ascii_parts, pieces[1::2])])
    # each run keeps its ASCII character before (lower-cased, as casefold does), which leaves that piece instead
    pieces[1::2] = marks(unicodedata.normalize("NFKD", runs)).casefold().split(_JOIN)
    pieces[0:-1:2] = [a[:-1].lower() for a in ascii_parts[:-1]]
    pieces[-1] = pieces[-1].lower()
    return "".join(pieces)


def _split_non_ascii(text: str) -> list[str]:
    """``re.split("([^\\x00-\\x7f]+)", text)`` (ASCII, non-ASCII, ..., ASCII; the first and last may be empty) of a
    text that is not all ASCII, found with numpy: the regex's scan was most of :func:`normalise`'s time."""
    high = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32) > 0x7F
    edges = (np.flatnonzero(high[1:] != high[:-1]) + 1).tolist()
    bounds = [0, *([0] if high[0] else []), *edges, *([len(text)] if high[-1] else []), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def _normalise_runs(text: str, marks: Callable[[str], str]) -> str:
    parts, at = [], 0
    for m in _NON_ASCII.finditer(text):
        start, end = m.span()
        parts.append(text[at:start].lower())
        # with the ASCII character before (an ASCII character stays one character), which the marks rule looks at;
        # the erased characters are gone already, connectors are separated at the end
        run = text[start - 1 if start else start : end]
        parts.append(marks(unicodedata.normalize("NFKD", run)).casefold()[1 if start else 0 :])
        at = end
    parts.append(text[at:].lower())
    return "".join(parts)


_last = threading.local()  # per thread: the last text split and its words; the last analysed and its result


def words(text: str, erase: bool = True) -> list[str]:
    """The normalised words of ``text`` as strings (see the module docstring; ``erase``: :func:`normalise`'s). The
    same text object asked for twice in a row by one thread is split once; treat the list as read-only."""
    if getattr(_last, "text", None) is text and _last.words_erase == erase:
        return _last.words
    found = _rules().word.findall(normalise(text, erase))
    _last.text, _last.words, _last.words_erase = text, found, erase
    return found


_TABLES: list[np.ndarray] = []  # [kinds, word characters], filled a plane (2**16 code points) at a time
_PLANES: set[int] = set()  # the planes filled
_LETTER, _MARK, _ALONE = 1, 2, 3  # the kinds of word character (0: none)


def _kind_table(cp: np.ndarray | None = None) -> np.ndarray:
    """uint8 per code point (0 to 0x10FFFF): 0 for no word character, else its kind: ``_LETTER`` (``\\w``),
    ``_MARK`` (a mark) or ``_ALONE`` (a character of an unspaced script: a word with the marks after it). Filled
    from ``_WORD`` once per process and plane, for the planes of the code points ``cp`` (every plane when None):
    a plane's entries depend on that plane alone, and text outside plane 0 is rare, so most processes scan 1/17 of
    the code points (0.04 s instead of 0.7)."""
    if not _TABLES:
        _TABLES[:] = [np.zeros(0x110000, dtype=np.uint8), np.zeros(0x110000, dtype=bool)]
    wanted = set(range(0x11)) if cp is None else {0}
    if cp is not None and cp.dtype != np.uint8 and len(cp) and cp.max() >= 0x10000:
        wanted = {int(p) for p in np.unique(cp >> 16)}
    for plane in sorted(wanted - _PLANES):
        _fill_plane(plane)
    return _TABLES[0]


def _fill_plane(plane: int) -> None:
    """A plane's entries, made apart and copied in whole (two threads filling one plane write the same values)."""
    block = plane << 16
    # what _WORD matches: every \w character (the unspaced ones among them) and every mark, alone or in a run
    kinds = _rules().is_word[block : block + 0x10000].astype(np.uint8) * np.uint8(_LETTER)
    marks, unspaced = (np.asarray(cps, dtype=np.int64) - block for cps in (_rules().marks, _rules().unspaced))
    marks = marks[(marks >= 0) & (marks < 0x10000)]
    kinds[marks] = _MARK
    kinds[unspaced[(unspaced >= 0) & (unspaced < 0x10000)]] = _ALONE
    _TABLES[0][block : block + 0x10000] = kinds
    _TABLES[1][block : block + 0x10000] = kinds != 0
    _PLANES.add(plane)


def _word_table(cp: np.ndarray | None = None) -> np.ndarray:
    """bool per code point: is it a word character (``\\w``, a mark, an unspaced script's)? As :func:`_kind_table`."""
    _kind_table(cp)
    return _TABLES[1]


_POWERS: list[np.ndarray] = [np.ones(1, dtype=np.uint64)]


def _powers(n: int) -> np.ndarray:
    """``_CHAR_BASE ** i`` modulo 2**64 for i < n (grown as longer words come)."""
    if len(_POWERS[0]) < n:
        size = max(n, 2 * len(_POWERS[0]), 64)
        p = np.full(size, _CHAR_BASE, dtype=np.uint64)
        p[0] = 1
        with np.errstate(over="ignore"):
            _POWERS[0] = np.cumprod(p, dtype=np.uint64)
    return _POWERS[0]


def _hash_runs(cp: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """uint64 hash of each run ``cp[start : start + length]`` (runs in order, not overlapping, all non-empty)."""
    if not len(starts):
        return np.zeros(0, dtype=np.uint64)
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths  # where each run begins among the selected positions
    run_of = np.repeat(np.arange(len(starts)), lengths)
    within = np.arange(total) - offsets[run_of]
    positions = starts[run_of] + within
    with np.errstate(over="ignore"):
        terms = (cp[positions].astype(np.uint64) + np.uint64(1)) * _powers(int(lengths.max()))[within]
        z = np.add.reduceat(terms, offsets) ^ (lengths.astype(np.uint64) * _BASE)
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


# code points: the prefix-sum tables (16 bytes each) stop growing here; longer texts hash run by run
_PREFIX_LIMIT = 1 << 20
_INVERSE = np.uint64(pow(int(_CHAR_BASE), -1, 2**64))  # _CHAR_BASE is odd, so it has an inverse modulo 2**64
_PREFIX: list[tuple[np.ndarray, np.ndarray]] = []


def _prefix_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``_CHAR_BASE ** i`` and its inverse's ``** i`` modulo 2**64, for i < n (at least; grown as needed)."""
    if not _PREFIX or len(_PREFIX[0][0]) < n:
        size = min(max(n, 2 * len(_PREFIX[0][0]) if _PREFIX else 0, 4096), _PREFIX_LIMIT)
        up, down = np.full(size, _CHAR_BASE, dtype=np.uint64), np.full(size, _INVERSE, dtype=np.uint64)
        up[0] = down[0] = 1
        with np.errstate(over="ignore"):
            _PREFIX[:] = [(np.cumprod(up, dtype=np.uint64), np.cumprod(down, dtype=np.uint64))]
    return _PREFIX[0]


def _prefix_hash(cp: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    up, down = _prefix_tables(len(cp) + 1)
    sums = np.zeros(len(cp) + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.multiply(cp + np.uint64(1), up[: len(cp)], out=sums[1:])
        np.cumsum(sums, out=sums)
        z = (sums[ends] - sums[starts]) * down[starts]
        z ^= (ends - starts).astype(np.uint64) * _BASE
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def _hash_words(cp: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`_hash_runs` of the runs ``cp[start:end]``, the same values in fewer passes over the text: with
    ``S[i] = sum over j < i of (cp[j] + 1) * B**j`` (B = _CHAR_BASE), a run's polynomial is
    ``(S[end] - S[start]) * B**-start``, all modulo 2**64 (B is odd, so B**-1 exists). A text of ``_PREFIX_LIMIT``
    code points or more is taken in blocks of the words starting in each half of that (a run longer than a block
    is hashed by :func:`_hash_runs`)."""
    if not len(starts):
        return np.zeros(0, dtype=np.uint64)
    if len(cp) < _PREFIX_LIMIT:
        return _prefix_hash(cp, starts, ends)
    out = np.empty(len(starts), dtype=np.uint64)
    bounds = [0, *(np.flatnonzero(np.diff(starts // (_PREFIX_LIMIT // 2))) + 1).tolist(), len(starts)]
    for lo, hi in zip(bounds, bounds[1:]):
        a, b = int(starts[lo]), int(ends[hi - 1])
        if b - a < _PREFIX_LIMIT:
            out[lo:hi] = _prefix_hash(cp[a:b], starts[lo:hi] - a, ends[lo:hi] - a)
        else:
            out[lo:hi] = _hash_runs(cp, starts[lo:hi], ends[lo:hi] - starts[lo:hi])
    return out


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def word_hashes(found: list[str]) -> np.ndarray:
    """uint64 hash of each word, in order (the same as :func:`analyse` gives for the words of a text)."""
    lengths = np.fromiter(map(len, found), dtype=np.int64, count=len(found))
    return _hash_runs(_code_points("".join(found)), np.cumsum(lengths) - lengths, lengths)


def _digest(cp: np.ndarray) -> bytes:
    """blake2b of the code points ``cp`` (the words joined by one space): as UTF-32-LE, or, when they are all ASCII,
    as ASCII under blake2b's personalisation ``ascii`` (a quarter of the bytes to hash). Which one depends on the
    words alone, never on the text around them (an em dash between ASCII words leaves them ASCII)."""
    if cp.dtype == np.uint8 or not len(cp) or int(cp.max()) < 0x80:
        return hashlib.blake2b(cp.astype(np.uint8).tobytes(), digest_size=16, person=b"ascii").digest()
    return hashlib.blake2b(cp.astype(np.uint32).tobytes(), digest_size=16).digest()


def _runs(cp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(a bool per code point: is it inside a word, the words' starts, their ends, whether two words touch) of
    normalised code points: the words are the maximal runs of word characters, cut before each character of an
    unspaced script and after it and its marks (the one place :func:`analyse` and :func:`analyse_texts` cut; the
    same words as ``_WORD``). The cuts are looked for only among the code points that can be unspaced (few, in most
    texts that have any)."""
    mask = _word_table(cp)[cp]
    edges = np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    first_alone = _rules().first_alone  # a text of code points below this has no unspaced character
    if cp.dtype == np.uint8 or not len(cp) or cp.max() < first_alone:
        return mask, starts, ends, False
    kinds = _TABLES[0]  # filled for the planes of cp by _word_table(cp) above
    high = np.flatnonzero(cp >= first_alone)
    alone = high[kinds[cp[high]] == _ALONE]
    if not len(alone):
        return mask, starts, ends, False
    before = alone[alone > 0]
    before = before[mask[before - 1]]  # a cut before an unspaced character that follows a word character
    after = alone + 1  # and after it and its marks, before a letter
    while True:
        inside = after < len(cp)
        on_mark = np.zeros(len(after), dtype=bool)
        on_mark[inside] = kinds[cp[after[inside]]] == _MARK
        if not on_mark.any():
            break
        after[on_mark] += 1
    after = after[after < len(cp)]
    after = after[kinds[cp[after]] == _LETTER]
    cut = np.union1d(before, after)
    if not len(cut):
        return mask, starts, ends, False
    return mask, np.sort(np.concatenate([starts, cut])), np.sort(np.concatenate([ends, cut])), True


def text_digest(text: str, erase: bool = True) -> bytes | None:
    """16 bytes naming the normalised text (its words joined by one space); None for a text without words."""
    return analyse(text, erase)[1]


def analyse(text: str, erase: bool = True) -> tuple[np.ndarray, bytes | None]:
    """(the uint64 hashes of the normalised words of ``text``, 16 bytes naming the word sequence or None when there
    is no word): the same as ``word_hashes(words(text))`` and ``blake2b`` of the words joined by one space
    (:func:`_digest`); ``erase``: :func:`normalise`'s. The same text object asked for twice in a row by one thread is
    analysed once."""
    if getattr(_last, "analysed", None) is text and _last.analysis_erase == erase:
        return _last.analysis
    norm = normalise(text, erase)
    if norm.isascii():
        cp: np.ndarray = np.frombuffer(norm.encode("ascii"), dtype=np.uint8)
    else:
        cp = _code_points(norm)
    mask, starts, ends, touching = _runs(cp)
    hashes = _hash_words(cp, starts, ends)
    digest = None
    if len(starts) and not touching:
        joined = cp.copy()
        joined[ends[:-1]] = 32  # one space after every word but the last, in the gap after it
        mask[ends[:-1]] = True
        digest = _digest(joined[mask])
    elif len(starts):  # words touch (an unspaced script): no gap to write the space in
        digest = _digest(np.insert(cp[mask].astype(np.uint32), np.cumsum(ends[:-1] - starts[:-1]), 32))
    _last.analysed, _last.analysis, _last.analysis_erase = text, (hashes, digest), erase
    return hashes, digest


def ngram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of every window of ``n`` consecutive words (``len - n + 1`` of them; none when shorter)."""
    count = len(hashes) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    out = hashes[:count].copy()
    with np.errstate(over="ignore"):
        for j in range(1, n):
            out *= _BASE
            out += hashes[j : j + count]
    return out


_BETWEEN = "\uffff"  # joins texts in analyse_texts: a noncharacter, no word character, untouched by normalisation


def analyse_texts(texts: list[str], erase: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(the word hashes of all ``texts``, in order, the index of the text each word is in): :func:`analyse` of each,
    in a few numpy passes for all (an evaluation file is tens of thousands of short texts). The texts are joined by
    U+FFFF, which is no word character, has no decomposition or case and no accent before it is removed, so the
    words of the joined text are those of the texts one after another; a text holding U+FFFF itself is analysed
    alone."""
    if not texts:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    if any(_BETWEEN in t for t in texts):
        parts = [analyse(t, erase)[0] for t in texts]
        owner = np.repeat(np.arange(len(texts)), [len(p) for p in parts])
        return np.concatenate(parts), owner
    cp = _code_points(normalise(_BETWEEN.join(texts), erase))  # U+FFFF is no erased character
    _, starts, ends, _ = _runs(cp)
    between = np.flatnonzero(cp == ord(_BETWEEN))
    return _hash_words(cp, starts, ends), np.searchsorted(between, starts)


def ngrams_within(hashes: np.ndarray, owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(:func:`ngram_hashes` of words whose owners are ``owner``, keeping only windows of one owner; their owner)."""
    grams = ngram_hashes(hashes, n)
    keep = owner[: len(grams)] == owner[n - 1 : n - 1 + len(grams)]
    return grams[keep], owner[: len(grams)][keep]


def shingle_windows(hashes: np.ndarray, n: int) -> np.ndarray:
    """The hashes of the ``n``-word shingles of words of these hashes, one per window (so a shingle that occurs twice
    is there twice: a MinHash needs no more); 1 to n-1 words are one shingle of all of them; no words, none."""
    if 0 < len(hashes) < n:
        return ngram_hashes(hashes, len(hashes))
    return ngram_hashes(hashes, n)


def shingles_of(hashes: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct :func:`shingle_windows` (what the exact Jaccard compares)."""
    return np.unique(shingle_windows(hashes, n))


def shingle_set(found: list[str], n: int) -> np.ndarray:
    """:func:`shingles_of` the words ``found``."""
    return shingles_of(word_hashes(found), n)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct hash arrays (0 when both are empty)."""
    if not len(a) and not len(b):
        return 0.0
    common = len(np.intersect1d(a, b, assume_unique=True))
    return common / (len(a) + len(b) - common)
