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

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from schemas import format as fmt
from schemas import integrity
from schemas import manifest as mf


def malformed(where: str, problems: list[str]) -> str:
    """The one line for a manifest whose shape is wrong: the first problem, and how many more there are."""
    more = f" (and {len(problems) - 1} more problem(s) in the manifest)" if len(problems) > 1 else ""
    return f"{where}: {problems[0]}{more}"


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
        where = f"{uri.rstrip('/')}/{fmt.MANIFEST_FILE}"
        try:
            raw = fmt.read_if_present(fs, f"{root}/{fmt.MANIFEST_FILE}")  # first: one request when it is there
        except OSError as e:  # a directory, a special file, no permission
            raise fmt.FormatError(f"{where}: cannot be read: {fmt.one_line(e)}") from None
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
            raise fmt.FormatError(f"{where}: not valid JSON ({e})") from None
        except RecursionError:
            raise fmt.FormatError(f"{where}: not a manifest (JSON nested too deeply)") from None
        if not isinstance(manifest, dict):
            raise fmt.FormatError(f"{where}: expected a JSON object, got {mf.kind(manifest)}")
        fmt.check_manifest(manifest, where)
        problems = mf.manifest_problems(manifest, mf.READER_SPEC)
        if problems:
            raise fmt.FormatError(malformed(where, problems))
        return cls(uri=uri.rstrip("/"), fs=fs, root=root, manifest=manifest)

    # -- paths -------------------------------------------------------------------------------
    def path(self, relative: str) -> str:
        """Filesystem path (for ``self.fs``) of a file named relative to the artifact root. Raises FormatError for a
        name that would leave the artifact (absolute, ``..``): nothing outside it is ever opened."""
        problem = mf.relative_path_problem(relative)
        if problem is not None:
            raise fmt.FormatError(f"{self.uri}: refused to open {problem}")
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
        except fmt.ARROW_READ_ERRORS as e:
            raise fmt.FormatError(
                f"{where}: not a readable Arrow IPC file (truncated or corrupt?): {fmt.one_line(e)}"
            ) from None
        fmt.check_schema_metadata(reader.schema, where)
        expected = fmt.shard_schema(self.vocab_size)
        if not reader.schema.equals(expected, check_metadata=False):
            raise fmt.FormatError(
                f"{where}: schema differs from the format's shard schema: {fmt.schema_difference(reader.schema, expected)}"
            )
        return reader

    def tokenizer_json(self, data: bytes | None = None) -> str:
        """The tokenizer file's text; ``data``: its bytes, already read (e.g. a cached copy checked against the manifest)."""
        return (self.read_bytes(self.manifest["tokenizer"]["file"]) if data is None else data).decode("utf-8")

    def unigram_counts(self, data: bytes | None = None) -> np.ndarray:
        """numpy int64 array of length vocab_size: how often each token id occurs in the shards. ``data``: the
        unigram file's bytes, already read (e.g. a cached copy checked against the manifest). Raises FormatError
        naming the file unless it is an Arrow file of the unigram schema holding one row per vocabulary id, in id
        order, with counts >= 0."""
        rel = self.manifest["unigram"]["file"]
        where = self.display(rel)
        try:
            if data is None:
                with self.fs.open_input_file(self.path(rel)) as f:
                    table = ipc.open_file(f).read_all()
            else:
                table = ipc.open_file(pa.BufferReader(data)).read_all()
            table.validate(full=True)
        except FileNotFoundError:
            raise fmt.FormatError(f"{where}: missing") from None
        except fmt.ARROW_READ_ERRORS as e:
            raise fmt.FormatError(
                f"{where}: not a readable Arrow IPC file (truncated or corrupt?): {fmt.one_line(e)}"
            ) from None
        fmt.check_schema_metadata(table.schema, where)
        expected = fmt.unigram_schema()
        if not table.schema.equals(expected, check_metadata=False):
            raise fmt.FormatError(
                f"{where}: schema differs from the format's unigram schema: {fmt.schema_difference(table.schema, expected)}"
            )
        if table.num_rows != self.vocab_size:
            raise fmt.FormatError(
                f"{where}: {table.num_rows:,} rows; one per vocabulary id ({self.vocab_size:,}) expected"
            )
        if any(table.column(name).null_count for name in ("token_id", "count")):
            raise fmt.FormatError(f"{where}: null token_id or count")
        ids = table.column("token_id").to_numpy()
        wrong = np.flatnonzero(ids != np.arange(len(ids)))
        if wrong.size:
            raise fmt.FormatError(
                f"{where}: row {int(wrong[0])} holds token_id {int(ids[wrong[0]])}; the rows are the ids 0..{len(ids) - 1} in order"
            )
        counts = table.column("count").to_numpy().astype(np.int64)
        if counts.size and counts.min() < 0:
            raise fmt.FormatError(f"{where}: negative count {int(counts.min())} (token_id {int(counts.argmin())})")
        return counts
