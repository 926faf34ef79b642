"""Raw bytes of one input file -> decompressed chunks -> lines, in bounded memory.

Pure Python, no Beam. A file is read as a stream of ``CHUNK_BYTES`` chunks, hashed and counted as it
is read (:class:`HashingReader`), decompressed by extension (gzip and zstd, multi-member / multi-frame),
and split into lines without ever holding more than ``max_record_bytes`` of one line
(:func:`iter_lines`). A stream that ends inside a compressed member raises
:class:`TruncatedInputError`; one that cannot be decoded raises :class:`CorruptInputError`
(``pipeline.read.records`` turns both into dead letters).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, BinaryIO

import zstandard

CHUNK_BYTES = 1 << 20


class TruncatedInputError(Exception):
    """A compressed stream ended before its end-of-stream marker."""

    def __init__(self, compressed_bytes: int, decompressed_bytes: int, kind: str):
        self.compressed_bytes = compressed_bytes
        self.decompressed_bytes = decompressed_bytes
        super().__init__(
            f"{kind} stream is truncated: input ended after {compressed_bytes:,} compressed bytes "
            f"({decompressed_bytes:,} bytes decompressed) before the end-of-stream marker"
        )


class CorruptInputError(Exception):
    """A compressed stream could not be decoded at all."""


# -- byte streams ----------------------------------------------------------------------------


class HashingReader:
    """Counts and hashes every raw byte read from ``f``."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        if data:
            self.sha256.update(data)
            self.bytes += len(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK_BYTES):
            pass


def compression_of(path: str) -> str:
    name = path.lower()
    if name.endswith(".gz") or name.endswith(".gzip"):
        return "gzip"
    if name.endswith(".zst") or name.endswith(".zstd"):
        return "zstd"
    return "none"


def decompressed_chunks(raw: HashingReader, compression: str) -> Iterator[bytes]:
    """Yield decompressed chunks; multi-member gzip and multi-frame zstd are supported.

    Raises :class:`TruncatedInputError` when the input ends inside a member/frame: zstandard's
    stream reader returns a silent partial result in that case, so frames are tracked here.
    """
    if compression == "none":
        while chunk := raw.read(CHUNK_BYTES):
            yield chunk
        return
    new: Callable[[], Any]
    if compression == "gzip":
        new = partial(zlib.decompressobj, wbits=31)
        errors: tuple[type[Exception], ...] = (zlib.error,)
    else:
        new = zstandard.ZstdDecompressor().decompressobj
        errors = (zstandard.ZstdError,)
    out_bytes = 0
    obj = new()
    in_member = False  # bytes of the current member/frame have been fed
    while True:
        chunk = raw.read(CHUNK_BYTES)
        if not chunk:
            break
        while chunk:
            try:
                data = obj.decompress(chunk)
            except errors as e:
                raise CorruptInputError(
                    f"{compression} data is corrupt after {raw.bytes:,} compressed bytes: {e}"
                ) from None
            in_member = True
            if data:
                out_bytes += len(data)
                yield data
            if obj.eof:
                chunk = obj.unused_data
                obj = new()
                in_member = False
            else:
                chunk = b""
    if in_member:
        raise TruncatedInputError(raw.bytes, out_bytes, compression)


def iter_lines(
    chunks: Iterator[bytes], max_line_bytes: int, first_offset: int = 0, first_line: int = 1
) -> Iterator[tuple[int, int, bytes | None, int]]:
    """Split a chunk stream into lines without holding more than ``max_line_bytes`` of one line.

    Yields ``(line_number, byte_offset, line_or_None, line_length)`` with the newline stripped, numbering
    from ``first_line`` at ``first_offset``;
    ``line`` is ``None`` when the line is longer than ``max_line_bytes`` (it is skipped, not stored).
    A final line without a newline is yielded too.
    """
    line_no = first_line - 1
    offset = first_offset  # byte offset where the pending line starts
    pending: list[bytes] = []
    pending_len = 0
    overflow = False
    for chunk in chunks:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                piece = chunk[start:]
                if piece:
                    pending_len += len(piece)
                    if not overflow:
                        if pending_len > max_line_bytes:
                            overflow = True
                            pending = []
                        else:
                            pending.append(piece)
                break
            piece = chunk[start:nl]
            length = pending_len + len(piece)
            line_no += 1
            if overflow or length > max_line_bytes:
                yield line_no, offset, None, length
            else:
                line = b"".join(pending) + piece if pending else piece
                yield line_no, offset, line, length
            offset += length + 1
            pending, pending_len, overflow = [], 0, False
            start = nl + 1
    if pending_len:
        line_no += 1
        if overflow:
            yield line_no, offset, None, pending_len
        else:
            yield line_no, offset, b"".join(pending), pending_len


# -- formats ---------------------------------------------------------------------------------
