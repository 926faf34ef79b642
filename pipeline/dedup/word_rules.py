"""The character classes of the word rule (``pipeline.dedup.text``, docs/DEDUP.md "Normalisation"): which code points
are marks, which are characters of a script written without spaces, and the patterns that take the words and remove
the marks no letter owns. Built on first use from Unicode's tables as this Python has them."""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from pipeline.dedup import word_table


def runs(codepoints: list[int]) -> list[list[int]]:
    """``[first, last]`` of each run of consecutive code points in ``codepoints`` (sorted)."""
    out: list[list[int]] = []
    for cp in codepoints:
        if out and cp == out[-1][1] + 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def _ranges(codepoints: list[int]) -> str:
    """A regex character class body for ``codepoints`` (sorted), as ranges."""
    return "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in runs(codepoints))


# Scripts written without spaces between words, whose every character is a word (with the marks after it): Han
# (the CJK unified ideographs, their extensions and the compatibility ideographs), the ideographic letters and
# numbers among the CJK symbols (々 〆 〇 〡 ...), Hiragana and Katakana (with their extensions; halfwidth katakana is
# full width after NFKD). Only their word characters: their punctuation still separates words, their marks (the
# kana voicing marks U+3099/U+309A) stay with the character before them.
_UNSPACED_BLOCKS = [(0x3000, 0x303F), (0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
                    (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0x1AFF0, 0x1B16F), (0x20000, 0x3FFFF)]  # fmt: skip
# Latin, IPA, Greek, Cyrillic (and their extensions): the letters whose combining marks are accents
_ACCENTED = "\u0000-\u052f\u1d00-\u1dbf\u1e00-\u1fff\u2c60-\u2c7f\ua640-\ua69f\ua720-\ua7ff\uab30-\uab6f"
_ACCENTED_RANGES = [(0x0, 0x52F), (0x1D00, 0x1DBF), (0x1E00, 0x1FFF), (0x2C60, 0x2C7F), (0xA640, 0xA69F),
                    (0xA720, 0xA7FF), (0xAB30, 0xAB6F)]  # fmt: skip
_KANA_BLOCKS = [(0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F), (0x1AFF0, 0x1B16F)]
_VOICING = "\u3099\u309a"  # the kana voicing marks (NFKD: が is か + U+3099): letters of their kana


@dataclass(frozen=True)
class _Rules:
    marks: list[int]  # every code point of category M
    unspaced: list[int]  # the word characters of _UNSPACED_BLOCKS that are no marks
    word: re.Pattern  # a character of an unspaced script and its marks; or a run of other word characters and marks
    accents: re.Pattern  # the combining marks after a Latin, Greek or Cyrillic letter (the rule before format 2.2)
    stray_run: re.Pattern  # a run of the marks the current rule may remove (see _owners)
    accented_run: re.Pattern  # such a run after a Latin, Greek or Cyrillic letter (all of it removed: the most)
    owners: np.ndarray  # uint8 per code point: what a run of such marks after it keeps (_NONE, _ALL, _VOICING_ONLY)
    first_alone: int  # no code point below this is unspaced
    is_word: np.ndarray  # bool per code point: is it \\w (Python's re)


def scan() -> tuple[list[int], list[int], np.ndarray]:
    """What the rule takes from this Python's Unicode tables, by scanning every code point (~0.4 s): the marks (every
    code point of category M), the unspaced scripts' word characters, and per code point whether it is ``\\w``."""
    marks = [cp for cp in range(0x300, 0x110000) if unicodedata.category(chr(cp)).startswith("M")]
    unspaced = [
        cp
        for a, b in _UNSPACED_BLOCKS
        for cp in range(a, b + 1)
        if re.match(r"\w", chr(cp)) and not unicodedata.category(chr(cp)).startswith("M")
    ]
    everything = re.sub(r"\W", "\0", "".join(map(chr, range(0x110000))))  # U+0000 is no word character
    word = np.frombuffer(everything.encode("utf-32-le", "surrogatepass"), dtype=np.uint32) != 0
    return marks, unspaced, word


def parse(table: str) -> list[tuple[int, int]]:
    """``"0300-036F 0483 ..."`` (the generated tables' hex ranges) -> [(0x300, 0x36F), (0x483, 0x483), ...]."""
    return [(int(a, 16), int(b or a, 16)) for a, _, b in (part.partition("-") for part in table.split())]


def table_of(table: str) -> np.ndarray:
    """bool per code point (0 to 0x10FFFF): is it in the hex ranges ``table``?"""
    out = np.zeros(0x110000, dtype=bool)
    for a, b in parse(table):
        out[a : b + 1] = True
    return out


def stored() -> tuple[list[int], list[int], np.ndarray] | None:
    """:func:`scan` as ``word_table`` recorded it, when this Python's Unicode tables are the version it was made
    from (``tests/pipeline/test_word_table.py`` checks that it is what the scan gives); else None."""
    if word_table.UNIDATA_VERSION != unicodedata.unidata_version:
        return None
    marks, unspaced = (
        [cp for a, b in parse(t) for cp in range(a, b + 1)] for t in (word_table.MARKS, word_table.UNSPACED)
    )
    return marks, unspaced, table_of(word_table.WORD)


@functools.cache
def rules() -> _Rules:
    """The tables of the rule, built on first use from :func:`stored` (or a :func:`scan`, ~0.4 s, under another
    Unicode version): every job and worker imports this module, most never compare a word."""
    marks, unspaced, is_word = stored() or scan()
    mark_class = "[" + _ranges(marks) + "]"
    word = re.compile(
        "[" + _ranges(unspaced) + "]" + mark_class + r"*|(?:[^\W" + _ranges(unspaced) + "]|" + mark_class + ")+"
    )
    accents = re.compile(
        "(?<=[" + _ACCENTED + "])[" + _ranges([cp for cp in marks if unicodedata.combining(chr(cp))]) + "]+"
    )
    return _Rules(marks, unspaced, word, accents, *_owners(marks, unspaced, is_word), min(unspaced), is_word)


_NONE, _ALL, _VOICING_ONLY = 0, 1, 2


def _owners(marks: list[int], unspaced: list[int], is_word: np.ndarray) -> tuple[re.Pattern, re.Pattern, np.ndarray]:
    """The marks the current rule removes (docs/DEDUP.md, "Marks"): the combining marks (non-zero combining class)
    and non-spacing marks (Mn), in a run after anything but a letter or digit of a script other than Latin, Greek,
    Cyrillic and Han, or a mark that such a letter keeps: after a Latin, Greek or Cyrillic letter (its accents), a
    symbol, punctuation, a space, the start of the text, a Han ideograph; after a kana, all but the voicing marks
    that begin the run. A mark after a letter of another script is a letter of that word (``दिल`` is not ``दल``).
    The patterns of a run of such marks and of one after a Latin, Greek or Cyrillic letter, and per code point what
    such a run after it keeps."""
    owners = is_word.astype(np.uint8)
    for a, b in _ACCENTED_RANGES:
        owners[a : b + 1] = _NONE
    alone = np.array(unspaced)
    owners[alone] = _NONE
    for a, b in _KANA_BLOCKS:
        owners[alone[(alone >= a) & (alone <= b)]] = _VOICING_ONLY
    owners[marks] = _ALL
    stray = [cp for cp in marks if unicodedata.combining(chr(cp)) or unicodedata.category(chr(cp)) == "Mn"]
    letters = _ranges([cp for a, b in _ACCENTED_RANGES for cp in range(a, b + 1) if owners[cp] == _NONE])
    # the astral marks apart, behind a test of one range: a class of all of them is a list of ~800 ranges that the
    # regex engine tries one by one on every character (it made the rule ~10% slower); the others are a table lookup
    bmp, astral = _ranges([cp for cp in stray if cp < 0x10000]), _ranges([cp for cp in stray if cp >= 0x10000])
    run = f"(?:[{bmp}]|(?=[\U00010000-\U0010ffff])[{astral}])+"
    return re.compile(run), re.compile(f"(?<=[{letters}]){run}"), owners


def remove_strays(text: str) -> str:
    """``text`` (NFKD) without the marks no letter owns (:func:`_owners`): the runs after a Latin, Greek or Cyrillic
    letter (most of them) in one substitution, then the others by the character before each."""
    r = rules()
    text = r.accented_run.sub("", text)
    if r.stray_run.search(text) is None:
        return text
    parts, at = [], 0
    for m in r.stray_run.finditer(text):
        start, end = m.span()
        keep = r.owners[ord(text[start - 1])] if start else _NONE
        if keep == _VOICING_ONLY:
            while start < end and text[start] in _VOICING:
                start += 1
        elif keep == _ALL:
            continue
        if start < end:
            parts.append(text[at:start])
            at = end
    if not parts:
        return text
    parts.append(text[at:])
    return "".join(parts)
