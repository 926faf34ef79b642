"""Checks on raw records that must never crash a worker: lone surrogates, JSON nesting, byte order marks.

Pure functions, no state; ``pipeline.read.records`` turns what they find into dead letters (FORMAT.md lists the
reasons).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

# JSON records nest at most this deep; deeper lines are dead-lettered before parsing, so the parser's
# recursion can never fail a worker (and the limit does not depend on the worker's stack depth).
MAX_JSON_DEPTH = 100
UTF8_BOM = b"\xef\xbb\xbf"
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def unencodable_at(text: str) -> int | None:
    """Index of the first character UTF-8 cannot encode (a lone surrogate from a JSON ``\\ud800`` escape), or None."""
    m = _SURROGATE.search(text)
    return m.start() if m else None


def parse_json_within_depth(line: bytes, raw: str, limit: int = MAX_JSON_DEPTH) -> tuple[bool, object]:
    """``(too_deep, value)``: what :func:`json_depth_exceeds` and then ``json.loads`` give for ``line`` (``raw`` is
    its text); ``value`` is None when too deep, and ``json.loads``' error is raised as it would be.

    A line with more than ``limit`` brackets (375 of the 4,576 Wikipedia articles: their text's citation marks) is
    parsed first and the depth read off the parsed value, which nests exactly as the brackets outside strings do as
    long as no object repeats a key (``json.loads`` keeps the last value, and a deep one before it would go unseen).
    Only a line that does not parse (its error, a recursion past Python's limit) or repeats a key is scanned as
    before. Same answers, without the scan that took 0.1 s of the sample's read."""
    if line.count(b"[") + line.count(b"{") > limit:
        try:
            value = json.loads(raw, object_pairs_hook=_object_without_repeats)
        except (ValueError, RecursionError, _RepeatedKey):
            pass
        else:
            return (True, None) if _nests_deeper(value, limit) else (False, value)
    if json_depth_exceeds(line, limit):
        return True, None
    return False, json.loads(raw)


class _RepeatedKey(Exception):
    pass


def _object_without_repeats(pairs: list[tuple[str, object]]) -> dict:
    """The object ``json.loads`` builds, refused when a key repeats."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _RepeatedKey
    return obj


def _nests_deeper(value: object, limit: int) -> bool:
    """Whether parsed JSON ``value`` has more than ``limit`` levels of arrays and objects (no recursion: the caller's
    stack may be deep)."""
    pending = [(value, 1)] if isinstance(value, (dict, list)) else []
    while pending:
        node, depth = pending.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                pending.append((child, depth + 1))
    return False


def json_depth_exceeds(line: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``line`` nests arrays/objects deeper than ``limit`` (brackets inside strings do not count)."""
    if line.count(b"[") + line.count(b"{") <= limit:
        return False  # the common case: too few brackets to be that deep, no scan
    depth = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b'""', line)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def skip_bom(chunks: Iterator[bytes], found: list[bool]) -> Iterator[bytes]:
    """The chunks without a UTF-8 byte order mark at the very start; ``found[0]`` says whether there was one."""
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= len(UTF8_BOM):
            break
    if head.startswith(UTF8_BOM):
        found[0] = True
        head = head[len(UTF8_BOM) :]
    if head:
        yield head
    yield from chunks
