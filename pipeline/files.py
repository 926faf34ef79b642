"""Writing artifact files through Beam's FileSystems (local, gs://, s3://, hdfs://)."""

from __future__ import annotations

import hashlib
import uuid

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems


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
    with FileSystems.create(tmp) as f:
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
