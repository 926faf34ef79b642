"""Open a preprocessed-corpus artifact (local path or any URI pyarrow.fs understands) and check it.

Shared by ``pipeline.verify``, ``pipeline.report`` and the trainer's loader so that every reader
refuses the same things with the same messages: no manifest (incomplete), unknown format version,
a shard whose schema is not the one the manifest's tokenizer implies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from schemas import format as fmt
from schemas import integrity


@dataclass(frozen=True)
class Artifact:
    """A complete artifact: its root, filesystem and parsed, version-checked manifest."""

    uri: str
    fs: pafs.FileSystem
    root: str
    manifest: dict[str, Any]

    @classmethod
    def open(cls, uri: str) -> Artifact:
        fs, root = fmt.split_uri(uri.rstrip("/"))
        raw = fmt.read_if_present(fs, f"{root}/{fmt.MANIFEST_FILE}")  # first: one request when it is there
        if raw is None and fs.get_file_info(root).type == pafs.FileType.NotFound:
            raise fmt.FormatError(f"{uri}: artifact directory does not exist")
        if raw is None:
            raise fmt.FormatError(
                f"{uri}: incomplete artifact: no {fmt.MANIFEST_FILE} (it is written last; the job that builds "
                f"this artifact did not finish, failed, or is still running)"
            )
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

    @cached_property
    def _shard_entries(self) -> dict[str, dict[str, Any]]:
        return {s["path"]: s for s in self.manifest["shards"]}

    def shard_entry(self, relative: str) -> dict[str, Any]:
        """The manifest's entry ({"path", "rows", "tokens", "bytes", "sha256"}) of a shard."""
        entry = self._shard_entries.get(relative)
        if entry is None:
            raise fmt.FormatError(f"{self.display(relative)}: not a shard of this artifact's manifest")
        return entry

    @cached_property
    def fingerprint(self) -> str:
        """The artifact's :func:`schemas.integrity.content_fingerprint` (same for every copy of it)."""
        return integrity.content_fingerprint(self.manifest)

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

    def check_shard(self, relative: str, mode: str = "once") -> str:
        """Check a shard's size and (``mode`` once/always) sha256 against the manifest; a mismatch raises
        :class:`schemas.integrity.ShardMismatchError` naming the shard. See :func:`schemas.integrity.verify_file`."""
        return integrity.verify_file(
            self.fs,
            self.path(relative),
            self.shard_entry(relative),
            self.display(relative),
            mode=mode,
            fingerprint=self.fingerprint,
            location=self.display(relative),
        )

    def check_shards(self, relatives: list[str], mode: str = "once", start: int = 0) -> dict[str, int]:
        """:meth:`check_shard` for each of ``relatives``, beginning at index ``start`` (mod their number) and
        wrapping around, so that ranks of one node given different starts hash different shards at the same time.
        Returns how many were checked by size only, hashed, or found in the node's cache."""
        done = {"size": 0, "hashed": 0, "cached": 0}
        n = len(relatives)
        for k in range(n):
            done[self.check_shard(relatives[(start + k) % n], mode)] += 1
        return done

    def open_shard(self, relative: str, local_copy: str | None = None) -> ipc.RecordBatchFileReader:
        """Open one shard for random access to its record batches, checking its size (against the manifest),
        version and schema. Its sha256 is :meth:`check_shard`'s job (it reads the whole file). ``local_copy``:
        read a checked local copy of the shard (memory-mapped) instead (``trainer/data/shard_cache.py``)."""
        where = self.display(relative)
        try:
            source = pa.memory_map(local_copy) if local_copy else self.fs.open_input_file(self.path(relative))
            integrity.check_size(self.shard_entry(relative), source.size(), where)
            reader = ipc.open_file(source)
        except FileNotFoundError:
            raise fmt.FormatError(f"{where}: shard listed in the manifest is missing") from None
        except (pa.ArrowInvalid, OSError) as e:
            raise fmt.FormatError(f"{where}: not a readable Arrow IPC file (truncated or corrupt?): {e}") from None
        fmt.check_schema_metadata(reader.schema, where)
        expected = fmt.shard_schema(self.vocab_size)
        if not reader.schema.equals(expected, check_metadata=False):
            raise fmt.FormatError(
                f"{where}: schema differs from the format's shard schema:\n{reader.schema}\nexpected:\n{expected}"
            )
        return reader

    def tokenizer_json(self, data: bytes | None = None) -> str:
        """The tokenizer file's text; ``data``: its bytes, already read (e.g. a cached copy checked against the manifest)."""
        return (self.read_bytes(self.manifest["tokenizer"]["file"]) if data is None else data).decode("utf-8")

    def unigram_counts(self, data: bytes | None = None):
        """numpy int64 array of length vocab_size: how often each token id occurs in the shards. ``data``: the
        unigram file's bytes, already read (e.g. a cached copy checked against the manifest)."""
        import numpy as np

        rel = self.manifest["unigram"]["file"]
        if data is None:
            with self.fs.open_input_file(self.path(rel)) as f:
                table = ipc.open_file(f).read_all()
        else:
            table = ipc.open_file(pa.BufferReader(data)).read_all()
        fmt.check_schema_metadata(table.schema, self.display(rel))
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        counts[table.column("token_id").to_numpy()] = table.column("count").to_numpy()
        return counts
