"""Checks on raw records that must never crash a worker: lone surrogates, JSON nesting, byte order marks.

Pure functions, no state; ``pipeline.read.records`` turns what they find into dead letters (FORMAT.md lists the
reasons).
"""

from __future__ import annotations

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
