"""Open a preprocessed-corpus artifact (local path or any URI pyarrow.fs understands) and check it.

Shared by ``pipeline.verify``, ``pipeline.report`` and the trainer's loader so that every reader
refuses the same things with the same messages: no manifest (incomplete), unknown format version,
a shard whose schema is not the one the manifest's tokenizer implies.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from schemas import format as fmt


def _split_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if uri.startswith("gs://") and emulator:
        # Google's client libraries (and so Beam and gcsfs) send gs:// to a GCS-compatible server named by
        # STORAGE_EMULATOR_HOST; pyarrow does not read it, so give it as endpoint_override (no credentials).
        scheme, _, host = emulator.rpartition("://")
        return pafs.GcsFileSystem(anonymous=True, endpoint_override=host.rstrip("/"), scheme=scheme or "http"), uri[len("gs://") :]
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), os.path.abspath(uri)


@dataclass(frozen=True)
class Artifact:
    """A complete artifact: its root, filesystem and parsed, version-checked manifest."""

    uri: str
    fs: pafs.FileSystem
    root: str
    manifest: dict[str, Any]

    @classmethod
    def open(cls, uri: str) -> "Artifact":
        fs, root = _split_uri(uri.rstrip("/"))
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.NotFound:
            raise fmt.FormatError(f"{uri}: artifact directory does not exist")
        manifest_path = f"{root}/{fmt.MANIFEST_FILE}"
        if fs.get_file_info(manifest_path).type == pafs.FileType.NotFound:
            raise fmt.FormatError(
                f"{uri}: incomplete artifact: no {fmt.MANIFEST_FILE} (it is written last; the job that builds "
                f"this artifact did not finish, failed, or is still running)"
            )
        with fs.open_input_stream(manifest_path) as f:
            raw = f.read()
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise fmt.FormatError(f"{uri}/{fmt.MANIFEST_FILE}: not valid JSON ({e})") from None
        if not isinstance(manifest, dict):
            raise fmt.FormatError(f"{uri}/{fmt.MANIFEST_FILE}: expected a JSON object")
        fmt.check_manifest(manifest, f"{uri}/{fmt.MANIFEST_FILE}")
        return cls(uri=uri.rstrip("/"), fs=fs, root=root, manifest=manifest)

    # -- paths -------------------------------------------------------------------------------
    def path(self, relative: str) -> str:
        """Filesystem path (for ``self.fs``) of a file named relative to the artifact root."""
        return f"{self.root}/{relative}"

    def display(self, relative: str) -> str:
        """Path for messages: the user's URI plus the relative name."""
        return f"{self.uri}/{relative}"

    @property
    def shard_paths(self) -> list[str]:
        return [s["path"] for s in self.manifest["shards"]]

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["tokenizer"]["vocab_size"])

    @property
    def special_token_ids(self) -> dict[str, int]:
        return dict(self.manifest["tokenizer"]["special_token_ids"])

    # -- readers -----------------------------------------------------------------------------
    def read_bytes(self, relative: str) -> bytes:
        with self.fs.open_input_stream(self.path(relative)) as f:
            return f.read()

    def open_shard(self, relative: str) -> ipc.RecordBatchFileReader:
        """Open one shard for random access to its record batches, checking version and schema."""
        where = self.display(relative)
        try:
            source = self.fs.open_input_file(self.path(relative))
            reader = ipc.open_file(source)
        except FileNotFoundError:
            raise fmt.FormatError(f"{where}: shard listed in the manifest is missing") from None
        except (pa.ArrowInvalid, OSError) as e:
            raise fmt.FormatError(f"{where}: not a readable Arrow IPC file (truncated or corrupt?): {e}") from None
        fmt.check_schema_metadata(reader.schema, where)
        expected = fmt.shard_schema(self.vocab_size)
        if not reader.schema.equals(expected, check_metadata=False):
            raise fmt.FormatError(f"{where}: schema differs from the format's shard schema:\n{reader.schema}\nexpected:\n{expected}")
        return reader

    def tokenizer_json(self) -> str:
        return self.read_bytes(self.manifest["tokenizer"]["file"]).decode("utf-8")

    def unigram_counts(self):
        """numpy int64 array of length vocab_size: how often each token id occurs in the shards."""
        import numpy as np

        rel = self.manifest["unigram"]["file"]
        with self.fs.open_input_file(self.path(rel)) as f:
            table = ipc.open_file(f).read_all()
        fmt.check_schema_metadata(table.schema, self.display(rel))
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        counts[table.column("token_id").to_numpy()] = table.column("count").to_numpy()
        return counts
