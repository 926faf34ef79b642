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


def delete_tree(path: str) -> None:
    """Delete every file under ``path`` and, on filesystems that have them, the directories."""
    from apache_beam.io.filesystem import BeamIOError

    matched = FileSystems.match([path.rstrip("/") + "/**"])[0].metadata_list
    if matched:
        FileSystems.delete([m.path for m in matched])
    try:
        if FileSystems.exists(path):
            FileSystems.delete([path])  # local: the (now empty) directory tree
    except BeamIOError:
        pass  # object stores have no directories left once their objects are gone
