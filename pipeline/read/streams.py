"""Raw bytes of one input file -> decompressed chunks -> lines, in bounded memory.

Pure Python, no Beam. A file is read as a stream of ``CHUNK_BYTES`` chunks, hashed and counted as it
is read (:class:`HashingReader`), decompressed by extension (gzip and zstd, multi-member / multi-frame) in
chunks whose size does not depend on the compression ratio, and split into lines without ever holding more
than ``max_record_bytes`` of one line (:func:`iter_lines`; a line ends at ``\n``, and a ``\r`` just before
it belongs to the line end). A compressed file is decoded twice: :func:`check_members` first checks every
member/frame, and :func:`decompressed_chunks` then hands on only the members before the first damaged one.
A stream that ends inside a compressed member raises :class:`TruncatedInputError`; one that cannot be
decoded or fails a check raises :class:`CorruptInputError` (``pipeline.read.records`` turns both into dead
letters).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

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
    """A compressed stream could not be decoded, or a member/frame failed its check.

    ``good_members``: the members/frames before the damaged one, which decoded and checked out;
    ``member_start``: the compressed byte offset where the damaged one starts.
    """

    def __init__(self, message: str, good_members: int = 0, member_start: int = 0):
        self.good_members = good_members
        self.member_start = member_start
        super().__init__(message)


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


# zstd's decompressobj has no output limit, so it is fed this much at a time: a 4-byte zstd block (RLE) expands
# to 128 KiB, so one call yields at most ~32 MiB whatever the file (real text: ~40k calls, 0.05 s, per 40 MB).
ZSTD_PIECE_BYTES = 1 << 10
_OUT_BATCH_BYTES = 1 << 18  # decompressed output is handed on in chunks of about this size


class _Members:
    """Decodes a gzip (multi-member) or zstd (multi-frame) stream from ``read`` in bounded memory.

    Counts the members/frames that ended (``members``): a member ends only once its check passed (gzip: CRC32
    and length, always; zstd: the content checksum when the frame has one, the content size when it declares
    one), and the compressed bytes up to its end (``member_end``).
    """

    def __init__(self, read: Callable[[int], bytes], compression: str):
        self._read = read
        self.compression = compression
        self.members = 0
        self.member_end = 0
        self.in_bytes = 0  # compressed bytes fed to the decoders
        self.out_bytes = 0

    def _member(self) -> Callable[[bytes], Iterator[bytes | None]]:
        """A decoder for the next member/frame: call it with compressed bytes."""
        if self.compression == "gzip":
            gzip_obj = zlib.decompressobj(wbits=31)
            return lambda data: self._feed_gzip(gzip_obj, data)
        zstd_obj = zstandard.ZstdDecompressor().decompressobj()
        return lambda data: self._feed_zstd(zstd_obj, data)

    def _corrupt(self, error: Exception, upto: int) -> CorruptInputError:
        kind = "gzip member" if self.compression == "gzip" else "zstd frame"
        return CorruptInputError(
            f"{kind} {self.members + 1} (from compressed byte {self.member_end:,}) is corrupt, "
            f"detected by compressed byte {upto:,}: {error}",
            self.members,
            self.member_end,
        )

    # The two feeds yield the output of ``data`` in bounded pieces, then ``None`` if the member/frame ended,
    # after which ``self.rest`` holds the bytes that follow it.

    def _feed_gzip(self, obj: zlib._Decompress, data: bytes) -> Iterator[bytes | None]:
        self.rest = b""
        while data:
            fed = len(data)
            try:
                out = obj.decompress(data, CHUNK_BYTES)
            except zlib.error as e:
                raise self._corrupt(e, self.in_bytes + fed) from None
            yield out
            if obj.eof:
                self.in_bytes += fed - len(obj.unused_data)
                self.rest = obj.unused_data
                yield None
                return
            data = obj.unconsumed_tail
            self.in_bytes += fed - len(data)

    def _feed_zstd(self, obj: zstandard.ZstdDecompressionObj, data: bytes) -> Iterator[bytes | None]:
        self.rest = b""
        for at in range(0, len(data), ZSTD_PIECE_BYTES):
            piece = data[at : at + ZSTD_PIECE_BYTES]
            self.in_bytes += len(piece)
            try:
                out = obj.decompress(piece)
            except zstandard.ZstdError as e:
                raise self._corrupt(e, self.in_bytes) from None
            yield out
            if obj.eof:
                self.in_bytes -= len(obj.unused_data)
                self.rest = obj.unused_data + data[at + ZSTD_PIECE_BYTES :]
                yield None
                return

    def chunks(self, stop_after: int | None = None) -> Iterator[bytes]:
        """The decompressed stream in chunks of about ``_OUT_BATCH_BYTES`` (one decoder call's output at most
        beyond it); stops once ``stop_after`` members/frames ended.

        Raises :class:`CorruptInputError` when the data cannot be decoded or fails a check,
        :class:`TruncatedInputError` when the input ends inside a member/frame (zstandard's stream reader would
        return a silent partial result there).
        """
        feed = self._member()
        started = False  # bytes of the current member/frame have been fed
        out: list[bytes] = []
        out_len = 0
        while stop_after is None or self.members < stop_after:
            data = self._read(CHUNK_BYTES)
            if not data:
                break
            while data and (stop_after is None or self.members < stop_after):
                started = True
                ended = False
                for piece in feed(data):
                    if piece is None:
                        ended = True
                    elif piece:
                        out.append(piece)
                        out_len += len(piece)
                        self.out_bytes += len(piece)
                        if out_len >= _OUT_BATCH_BYTES:
                            yield out[0] if len(out) == 1 else b"".join(out)
                            out, out_len = [], 0
                data = b""
                if ended:
                    self.members += 1
                    self.member_end = self.in_bytes
                    data, feed, started = self.rest, self._member(), False
        if out:
            yield b"".join(out)
        if started and (stop_after is None or self.members < stop_after):
            raise TruncatedInputError(self.in_bytes, self.out_bytes, self.compression)


def check_members(read: Callable[[int], bytes], compression: str) -> CorruptInputError | None:
    """Decode a whole compressed stream, discarding the output: the error of its first damaged member/frame, or
    None when every one checked out (or the stream is merely truncated: the bytes before the cut are sound)."""
    members = _Members(read, compression)
    try:
        for _ in members.chunks():
            pass
    except TruncatedInputError:
        return None
    except CorruptInputError as e:
        return e
    return None


def decompressed_chunks(
    read: Callable[[int], bytes], compression: str, damage: CorruptInputError | None = None
) -> Iterator[bytes]:
    """Yield the decompressed chunks of the stream ``read`` gives; multi-member gzip and multi-frame zstd are
    supported, and no chunk exceeds ~``CHUNK_BYTES`` (zstd: ~32 MiB) whatever the compression ratio.

    ``damage``: what :func:`check_members` found in a first pass over the same stream: the chunks stop at the
    end of the last member/frame before the damaged one, then ``damage`` is raised. Raises
    :class:`TruncatedInputError` when the input ends inside a member/frame.
    """
    if compression == "none":
        while chunk := read(CHUNK_BYTES):
            yield chunk
        return
    members = _Members(read, compression)
    yield from members.chunks(None if damage is None else damage.good_members)
    if damage is not None:
        raise damage


def iter_lines(
    chunks: Iterator[bytes], max_line_bytes: int, first_offset: int = 0, first_line: int = 1
) -> Iterator[tuple[int, int, bytes | None, int]]:
    """Split a chunk stream into lines without holding more than ``max_line_bytes`` of one line.

    Yields ``(line_number, byte_offset, line_or_None, line_length)`` with the newline stripped, numbering
    from ``first_line`` at ``first_offset``;
    ``line`` is ``None`` when the line is longer than ``max_line_bytes`` (it is skipped, not stored).
    A ``\r`` just before the ``\n`` is part of the line end (CRLF): it is not in ``line`` and does not count
    against ``max_line_bytes``, but ``line_length`` (the bytes before the ``\n``) includes it, so that
    ``byte_offset + line_length + 1`` is where the next line starts. A lone ``\r`` is not a line end.
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
                        if pending_len > max_line_bytes + 1:  # + 1: room for the \r of a CRLF
                            overflow = True
                            pending = []
                        else:
                            pending.append(piece)
                break
            piece = chunk[start:nl]
            length = pending_len + len(piece)
            line_no += 1
            if overflow or length > max_line_bytes + 1:
                yield line_no, offset, None, length
            else:
                line = b"".join(pending) + piece if pending else piece
                if line.endswith(b"\r"):
                    line = line[:-1]
                yield line_no, offset, None if len(line) > max_line_bytes else line, length
            offset += length + 1
            pending, pending_len, overflow = [], 0, False
            start = nl + 1
    if pending_len:
        line_no += 1
        if overflow or pending_len > max_line_bytes:
            yield line_no, offset, None, pending_len
        else:
            yield line_no, offset, b"".join(pending), pending_len


# -- formats ---------------------------------------------------------------------------------
