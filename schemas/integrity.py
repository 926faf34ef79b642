"""Does a file of an artifact match its manifest? One home for "size and sha256 as the manifest says".

Used by the trainer's loader (through ``Artifact.check_shard``) and meant for ``pipeline.verify`` and the
object-store readers: they all need the same answer and the same message. Only the standard library and
pyarrow.fs are needed.

Checking a shard's sha256 means reading the whole file. A training job opens every shard on every rank at
start, so the ``"once"`` mode remembers a good result in a local cache directory (one marker file per shard
version) and the next rank, or the next job, on the same node skips the hashing. The marker's name is a digest
of the artifact's content fingerprint, the shard's location, its manifest sha256 and the file's size and
modification time as the filesystem reports them: a replaced or rewritten file has another marker. Ranks of
one node hash a shard one at a time (an exclusive ``flock`` per marker), so it is hashed once, not once per rank.
A failed check is never cached.

Cache directory: ``$SPANPREP_CACHE_DIR/verified-shards``, else ``$XDG_CACHE_HOME/spanprep/verified-shards``,
else ``~/.cache/spanprep/verified-shards``. It must be on a local filesystem (``flock``); deleting it is safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow.fs as pafs

from schemas import commands
from schemas import format as fmt

HASH_CHUNK = 8 << 20
# always: hash every shard whenever a process opens the artifact; once: once per node per shard version
# (cached); off: sizes only.
CHECKSUM_MODES = ("once", "always", "off")
CACHE_ENV = "SPANPREP_CACHE_DIR"


class ShardMismatchError(fmt.FormatError):
    """A file differs from its manifest entry (size or sha256)."""


def file_sha256(fs: pafs.FileSystem, path: str) -> tuple[int, str]:
    """(bytes, sha256 hex) of a file, read in 8 MiB chunks."""
    h = hashlib.sha256()
    n = 0
    with fs.open_input_stream(path) as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
            n += len(chunk)
    return n, h.hexdigest()


def content_fingerprint(manifest: Mapping[str, Any]) -> str:
    """sha256 of what an artifact holds: its tokenizer, layout and every shard's path, rows, size and sha256.

    Stable across copies and moves of the artifact (no location, no build time): two artifacts with the same
    fingerprint hold byte-identical shards, so a training run may continue on either.
    """
    tok = manifest.get("tokenizer") or {}
    shards = [[s.get("path"), s.get("rows"), s.get("bytes"), s.get("sha256")] for s in manifest.get("shards", [])]
    blob = {"tokenizer_sha256": tok.get("sha256"), "rows_per_batch": manifest.get("rows_per_batch"), "shards": shards}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_size(entry: Mapping[str, Any], actual: int, where: str) -> None:
    expected = entry.get("bytes")
    if expected is not None and int(expected) != actual:
        raise ShardMismatchError(
            f"{where}: {actual:,} bytes, the manifest says {int(expected):,} (truncated, appended to or replaced); "
            f"run {commands.module('pipeline.verify')} on the artifact"
        )


def check_sha256(fs: pafs.FileSystem, path: str, entry: Mapping[str, Any], where: str) -> None:
    """Raise :class:`ShardMismatchError` naming ``where`` unless the file's size and sha256 are the manifest's."""
    nbytes, sha = file_sha256(fs, path)
    check_size(entry, nbytes, where)
    if entry.get("sha256") != sha:
        raise ShardMismatchError(
            f"{where}: sha256 {sha[:16]}… differs from the manifest's {str(entry.get('sha256'))[:16]}… (the file "
            f"was modified or corrupted); rebuild or re-copy the artifact, and run {commands.module('pipeline.verify')} on it"
        )


def cache_dir() -> str:
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "spanprep")
    return os.path.join(root, "verified-shards")


def _marker_name(fingerprint: str, location: str, entry: Mapping[str, Any], info: pafs.FileInfo) -> str:
    key = json.dumps(
        [
            fingerprint,
            location,
            entry.get("path"),
            entry.get("sha256"),
            info.size,
            info.mtime_ns if info.mtime is not None else None,
        ]
    )
    return hashlib.sha256(key.encode()).hexdigest()


@contextlib.contextmanager
def locked(path: str, *, shared: bool = False, blocking: bool = True) -> Iterator[bool]:
    """Hold a ``flock`` on ``path + ".lock"`` (exclusive, or shared) for the block; yields whether it is held
    (always True when ``blocking``). Used for the verified-shard markers and trainer/data/shard_cache.py."""
    with open(path + ".lock", "a") as lock:
        flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(lock, flags)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def verify_file(
    fs: pafs.FileSystem,
    path: str,
    entry: Mapping[str, Any],
    where: str,
    *,
    mode: str = "once",
    fingerprint: str = "",
    location: str = "",
    cache: str | None = None,
) -> str:
    """Check one file against its manifest ``entry`` ({"bytes", "sha256", ...}); return what was done:
    ``"size"`` (mode off), ``"hashed"``, or ``"cached"`` (mode once, a marker of an earlier check on this node).

    ``where`` names the file in messages; ``location`` (the file's URI) and ``fingerprint`` (the artifact's
    :func:`content_fingerprint`) key the cache.
    """
    if mode not in CHECKSUM_MODES:
        raise ValueError(f"shard checksum mode must be one of {', '.join(CHECKSUM_MODES)}; got {mode!r}")
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise fmt.FormatError(f"{where}: shard listed in the manifest is missing")
    check_size(entry, int(info.size), where)
    if mode == "off":
        return "size"
    if mode == "always":
        check_sha256(fs, path, entry, where)
        return "hashed"
    directory = cache or cache_dir()
    os.makedirs(directory, exist_ok=True)
    marker = os.path.join(directory, _marker_name(fingerprint, location or path, entry, info))
    with locked(marker):
        if os.path.exists(marker):
            return "cached"
        check_sha256(fs, path, entry, where)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".marker-")
        with os.fdopen(fd, "w") as f:
            json.dump({"file": location or path, "sha256": entry.get("sha256"), "bytes": info.size}, f)
        os.replace(tmp, marker)
    return "hashed"
