"""A node-local cache of whole shards for artifacts on object stores (``DataConfig.cache_dir``), with read-ahead.

The loader reads record batches with ranged reads; from a bucket every such read is a round trip. With a cache
directory, a shard is copied whole into it on first use and read from the local copy (memory-mapped) afterwards:

* **fill**: the object is streamed to a temporary file in the cache directory, its size and sha256 checked
  against the manifest (``schemas.integrity.check_sha256``, the one home of that check), then renamed into place
  atomically. A shard that does not match is refused with the error naming it and is never cached.
* **shared by ranks and workers of a node**: cache files are named by the shard's manifest sha256 (so copies of
  one artifact share them); a fill holds an exclusive ``flock`` per shard (``schemas.integrity.locked``), so a
  shard is downloaded once per node however many processes want it; a reader holds a shared lock on the shard
  while it has it open, which keeps it from being evicted.
* **bounded**: after a fill, the least recently used shards (by modification time, touched on every use) that no
  process holds are deleted until the cache is at most ``max_bytes``. Shards in use are never deleted, so the
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

from schemas import integrity
from schemas.artifact import Artifact

COPY_CHUNK = 8 << 20


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
        path = self.local_path(relative)
        if os.path.exists(path):
            return False
        with integrity.locked(path + ".fill"):
            if os.path.exists(path):
                return False
            entry, where = self.artifact.shard_entry(relative), self.artifact.display(relative)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".fill-")
            try:
                with os.fdopen(fd, "wb") as out, self.artifact.fs.open_input_stream(self.artifact.path(relative)) as src:
                    while chunk := src.read(COPY_CHUNK):
                        out.write(chunk)
                integrity.check_sha256(pafs.LocalFileSystem(), tmp, entry, where)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(tmp)
                raise
        with self._mutex:
            self.fills += 1
        self.evict(keep=path)
        return True

    def evict(self, keep: str = "") -> list[str]:
        """Delete least recently used, unheld shards until the cache is <= max_bytes; returns the deleted files."""
        files = []
        for name in os.listdir(self.directory):
            if name.endswith(".arrow"):
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
