"""A node-local cache of an artifact's files for artifacts on object stores (``DataConfig.cache_dir``), with read-ahead.

The loader reads record batches with ranged reads; from a bucket every such read is a round trip. With a cache
directory, a shard is copied whole into it on first use and read from the local copy (memory-mapped) afterwards;
the small files the loader reads (unigram counts, tokenizer) are cached the same way:

* **staleness**: the manifest is the source of truth and is always read from the artifact (one small GET per
  loader). Cache files are named by the sha256 the manifest gives for the file, so a cached copy *is* the content
  the manifest names: a rebuilt artifact lists other sha256s and never meets an old copy, and a warm cache serves
  every listed file (shard footers for the index, record batches, unigram counts, tokenizer) without asking the
  bucket for it. Files the manifest gives no sha256 are always read from the artifact.
* **fill**: the object is streamed to a temporary file in the cache directory, its size and sha256 checked
  against the manifest (``schemas.integrity.check_sha256``, the one home of that check), then renamed into place
  atomically. A file that does not match is refused with the error naming it and is never cached; a download
  that fails is a ``FormatError`` naming the file too.
* **shared by ranks and workers of a node**: cache files are named by the manifest's sha256 (so copies of
  one artifact share them); a fill holds an exclusive ``flock`` per file (``schemas.integrity.locked``), so a
  file is downloaded once per node however many processes want it; a reader holds a shared lock on a shard
  while it has it open (and on any file while it opens or reads it), which keeps it from being evicted.
* **bounded**: after a fill, the least recently used files (by modification time, touched on every use) that no
  process holds are deleted until the cache is at most ``max_bytes``. Files in use are never deleted, so the
  bound can be exceeded by the shards open at one time.
* **read-ahead**: :meth:`ShardCache.prefetch` fills the given shards in one background thread, at most
  ``read_ahead`` of them queued at a time; a failed prefetch is forgotten (the foreground fill raises the error).

It must be on a local filesystem (``flock``); deleting it while no job runs is safe.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow.fs as pafs

from schemas import format as fmt
from schemas import integrity
from schemas.artifact import Artifact

COPY_CHUNK = 8 << 20
SUFFIXES = (".arrow", ".file")  # shards, other files (both named by sha256)


class ShardCache:
    """Whole-shard cache of one artifact in ``directory`` (module docstring)."""

    def __init__(self, artifact: Artifact, directory: str, max_bytes: int, read_ahead: int = 2):
        if max_bytes < 0 or read_ahead < 0:
            raise ValueError(f"shard cache: max_bytes and read_ahead must be >= 0; got {max_bytes}, {read_ahead}")
        self.artifact = artifact
        self.directory = os.path.join(directory, "shards")
        self.max_bytes = max_bytes
        self.read_ahead = read_ahead
        os.makedirs(self.directory, exist_ok=True)
        self.fills = 0  # shards this process downloaded (tests, progress)
        self._held: dict[str, contextlib.ExitStack] = {}
        self._pending: dict[str, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._mutex = threading.Lock()

    def __getstate__(self):  # DataLoader workers get their own locks, pool and counters
        d = dict(self.__dict__)
        d.update(_held={}, _pending={}, _pool=None, _mutex=None, fills=0)
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._mutex = threading.Lock()

    def local_path(self, relative: str) -> str:
        """Cache file of a shard (it may not exist yet)."""
        return os.path.join(self.directory, f"{self.artifact.shard_entry(relative)['sha256']}.arrow")

    def has(self, relative: str) -> bool:
        """Whether the shard is in the cache now (checked when it was filled)."""
        return os.path.exists(self.local_path(relative))

    # -- use -----------------------------------------------------------------------------------
    def acquire(self, relative: str) -> str:
        """The local copy of a shard, filled if needed and held (not evictable) until :meth:`release`."""
        path = self.local_path(relative)
        if relative not in self._held:
            stack = contextlib.ExitStack()
            stack.enter_context(integrity.locked(path, shared=True))
            self._held[relative] = stack
        try:
            self.fill(relative)
        except BaseException:
            self.release(relative)
            raise
        os.utime(path)  # least recently used = oldest mtime
        return path

    def open_shard(self, relative: str):
        """The shard's reader (``Artifact.open_shard``) from the cached copy if there is one, else from the artifact
        (ranged reads; nothing is filled). For the index: a warm cache answers without the bucket."""
        path = self.local_path(relative)
        if os.path.exists(path):
            with integrity.locked(path, shared=True):
                if os.path.exists(path):  # not evicted meanwhile; once mapped, a later eviction does not matter
                    return self.artifact.open_shard(relative, local_copy=path)
        return self.artifact.open_shard(relative)

    def read_file(self, relative: str, entry: dict) -> bytes:
        """The bytes of a non-shard file of the artifact with manifest ``entry`` ({"sha256", "bytes"?, ...}), from
        the cache (filled and checked first if needed); from the artifact when the entry has no sha256."""
        sha = entry.get("sha256")
        if not sha:
            return self.artifact.read_bytes(relative)
        path = os.path.join(self.directory, f"{sha}.file")
        with integrity.locked(path, shared=True):
            self._fill(relative, entry, path)
            os.utime(path)
            with open(path, "rb") as f:
                return f.read()

    def release(self, relative: str) -> None:
        stack = self._held.pop(relative, None)
        if stack is not None:
            stack.close()

    def close(self) -> None:
        for rel in list(self._held):
            self.release(rel)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # -- fill and evict ------------------------------------------------------------------------
    def fill(self, relative: str) -> bool:
        """Download, check and install a shard unless it is cached; True if this call downloaded it."""
        filled = self._fill(relative, self.artifact.shard_entry(relative), self.local_path(relative))
        if filled:
            with self._mutex:
                self.fills += 1
        return filled

    def _fill(self, relative: str, entry: dict, path: str) -> bool:
        if os.path.exists(path):
            return False
        with integrity.locked(path + ".fill"):
            if os.path.exists(path):
                return False
            where = self.artifact.display(relative)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".fill-")
            try:
                try:
                    with (
                        os.fdopen(fd, "wb") as out,
                        self.artifact.fs.open_input_stream(self.artifact.path(relative)) as src,
                    ):
                        while chunk := src.read(COPY_CHUNK):
                            out.write(chunk)
                except FileNotFoundError:
                    raise fmt.FormatError(f"{where}: file listed in the manifest is missing") from None
                except OSError as e:
                    raise fmt.FormatError(f"{where}: download into the cache {self.directory} failed: {e}") from None
                integrity.check_sha256(pafs.LocalFileSystem(), tmp, entry, where)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(tmp)
                raise
        self.evict(keep=path)
        return True

    def evict(self, keep: str = "") -> list[str]:
        """Delete least recently used, unheld files until the cache is <= max_bytes; returns the deleted files."""
        files = []
        for name in os.listdir(self.directory):
            if name.endswith(SUFFIXES) and not name.startswith("."):
                p = os.path.join(self.directory, name)
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(p)
                    files.append((st.st_mtime_ns, st.st_size, p))
        total = sum(size for _, size, _ in files)
        deleted = []
        for _, size, p in sorted(files):
            if total <= self.max_bytes:
                break
            if p == keep:
                continue
            with integrity.locked(p, blocking=False) as free:
                if free and os.path.exists(p):
                    os.remove(p)
                    deleted.append(p)
                    total -= size
        return deleted

    # -- read-ahead ----------------------------------------------------------------------------
    def prefetch(self, relatives: list[str]) -> None:
        """Fill ``relatives`` in the background, in order, at most ``read_ahead`` queued at a time."""
        if self.read_ahead == 0:
            return
        with self._mutex:
            for rel, fut in list(self._pending.items()):
                if fut.done():
                    del self._pending[rel]
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-read-ahead")
            for rel in relatives:
                if len(self._pending) >= self.read_ahead:
                    break
                if rel not in self._pending and not os.path.exists(self.local_path(rel)):
                    self._pending[rel] = self._pool.submit(self._quiet_fill, rel)

    def _quiet_fill(self, relative: str) -> None:
        with contextlib.suppress(Exception):  # the foreground fill of this shard raises the error, naming it
            self.fill(relative)
