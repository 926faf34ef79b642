"""Writing artifact files through Beam's FileSystems (local, gs://, s3://, hdfs://), and reading a tokenizer's."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from typing import BinaryIO

from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.object_puts import put_object


class _S3File:
    """A writable file on s3:// that opens Beam's upload at the first byte; closed with no bytes written, the
    (empty) object is written with one PutObject, since S3 refuses Beam's multipart upload of zero parts."""

    def __init__(self, path: str, mime_type: str):
        self._path, self._mime_type, self.closed = path, mime_type, False
        self._raw: BinaryIO | None = None

    def write(self, data: bytes) -> int:
        if not len(data):
            return 0
        if self._raw is None:
            self._raw = FileSystems.create(
                self._path, mime_type=self._mime_type, compression_type=CompressionTypes.UNCOMPRESSED
            )
        return self._raw.write(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._raw is None:
                put_object(self._path, b"", mime_type=self._mime_type)
            else:
                self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create(path: str, mime_type: str = "application/octet-stream"):
    """``FileSystems.create`` (uncompressed), for files that may end up empty on any filesystem."""
    if path.startswith("s3://"):
        return _S3File(path, mime_type)
    return FileSystems.create(path, mime_type=mime_type, compression_type=CompressionTypes.UNCOMPRESSED)


class HashingSink:
    """A writable file object that forwards to ``sink`` and keeps the size and sha256 of what went
    through (pyarrow writes Arrow files through it with ``pa.PythonFile``)."""

    def __init__(self, sink):
        self._sink = sink
        self._digest = hashlib.sha256()
        self.bytes = 0
        self.closed = False

    def write(self, data) -> int:
        data = bytes(data)
        self._digest.update(data)
        self.bytes += len(data)
        self._sink.write(data)
        return len(data)

    def tell(self) -> int:
        return self.bytes

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def record(self) -> dict:
        return {"bytes": self.bytes, "sha256": self.sha256}


# The temporary name of a file being written: a killed writer (a worker lost mid-bundle, whose bundle the
# runner retries elsewhere) leaves one behind, which the job's last step removes (remove_abandoned_temporaries).
_TEMPORARY = re.compile(r"\..+\.tmp-[0-9a-f]{32}")


def temporary_name(path: str) -> str:
    """A fresh name beside ``path`` to write it under before :func:`move_into_place` (unique per attempt)."""
    directory, name = path.rsplit("/", 1)
    return f"{directory}/.{name}.tmp-{uuid.uuid4().hex}"


def move_into_place(tmp: str, path: str) -> None:
    """Rename the finished ``tmp`` to ``path``, replacing a file that an earlier attempt of the same bundle wrote,
    or that a duplicate attempt (a runner's speculative copy, a worker presumed dead) writes at the same time:
    same bytes either way. Locally one ``os.replace``, atomic, with no moment without ``path``; object stores copy
    over an existing object; a filesystem whose rename refuses an existing target gets it deleted first."""
    if "://" not in path:
        os.replace(tmp, path)
        return
    try:
        FileSystems.rename([tmp], [path])
    except BeamIOError:
        with contextlib.suppress(BeamIOError):
            FileSystems.delete([path])
        FileSystems.rename([tmp], [path])


@contextlib.contextmanager
def atomic_create(path: str, mime_type: str = "application/octet-stream") -> Iterator[BinaryIO]:
    """A file to write ``path`` through: written under a temporary name and renamed when the block ends without
    an error, so no reader and no retry ever sees a partial ``path``; on an error the temporary file is deleted."""
    tmp = temporary_name(path)
    try:
        with create(tmp, mime_type) as f:
            yield f
    except BaseException:
        with contextlib.suppress(Exception):
            FileSystems.delete([tmp])
        raise
    move_into_place(tmp, path)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` under a temporary name, then rename: readers never see a partial file.

    A retried bundle rewrites identical bytes, so replacing an existing file is safe.
    """
    with atomic_create(path) as f:
        f.write(data)


def remove_abandoned_temporaries(directory: str) -> list[str]:
    """Delete the temporary files that killed writers left directly in ``directory``; return their names.

    Called by a job's last step, once every writer has finished: any temporary file left then belongs to an
    attempt that died (its bundle was retried and wrote the file under its final name)."""
    matched = FileSystems.match([directory.rstrip("/") + "/.*.tmp-*"])[0].metadata_list
    stale = sorted(m.path for m in matched if _TEMPORARY.fullmatch(m.path.rsplit("/", 1)[1]))
    if stale:
        FileSystems.delete(stale)
    return [p.rsplit("/", 1)[1] for p in stale]


def read_bytes(path: str) -> bytes:
    with FileSystems.open(path) as f:
        return f.read()


class BeamFiles:
    """Reads files through Beam's FileSystems (local, gs://, s3://, with the job's options): the reader the jobs give
    ``schemas.tokenizers`` (``files.Files``) for a tokenizer's files."""

    def read(self, path: str) -> bytes:
        return read_bytes(path)

    def exists(self, path: str) -> bool:
        return FileSystems.exists(path)

    def join(self, directory: str, name: str) -> str:
        return FileSystems.join(directory, name)


BEAM_FILES = BeamFiles()


def delete_tree(path: str) -> None:
    """Delete every file under ``path`` and, on filesystems that have them, the directories."""
    matched = FileSystems.match([path.rstrip("/") + "/**"])[0].metadata_list
    if matched:
        FileSystems.delete([m.path for m in matched])
    try:
        if FileSystems.exists(path):
            FileSystems.delete([path])  # local: the (now empty) directory tree
    except BeamIOError:
        pass  # object stores have no directories left once their objects are gone
