"""Writing artifact files through Beam's FileSystems (local, gs://, s3://, hdfs://)."""

from __future__ import annotations

import uuid

from apache_beam.io.filesystems import FileSystems


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
