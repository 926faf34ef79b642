"""Where the input came from: file paths -> source records with size and sha256 (``SourceFiles``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems


class _HashFile(beam.DoFn):
    CHUNK = 8 << 20

    def process(self, path: str) -> Iterator[dict[str, Any]]:
        import hashlib

        digest = hashlib.sha256()
        size = 0
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            while chunk := f.read(self.CHUNK):
                digest.update(chunk)
                size += len(chunk)
        yield {"path": path, "bytes": size, "sha256": digest.hexdigest()}


class SourceFiles(beam.PTransform):
    """file paths -> source records ``{"path", "bytes", "sha256"}`` of the raw (still compressed) files."""

    def expand(self, paths):
        return paths | "HashFiles" >> beam.ParDo(_HashFile())
