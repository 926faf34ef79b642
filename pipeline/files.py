"""Writing artifact files through Beam's FileSystems (local, gs://, s3://, hdfs://)."""

from __future__ import annotations

import hashlib
import uuid
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


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` under a temporary name, then rename: readers never see a partial file.

    A retried bundle rewrites identical bytes, so replacing an existing file is safe.
    """
    directory, name = path.rsplit("/", 1)
    tmp = f"{directory}/.{name}.tmp-{uuid.uuid4().hex}"
    with create(tmp) as f:
        f.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def read_bytes(path: str) -> bytes:
    with FileSystems.open(path) as f:
        return f.read()


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
