"""The in-process FnApiRunner's state cache, sized by ``--max_cache_memory_usage_mb`` like Beam's worker processes.

Beam's worker processes take their state cache (user state and side inputs) from ``--max_cache_memory_usage_mb``,
0 by default (no cache); the FnApiRunner's in-process worker ignores the option and caches 100 MB. That worker weighs
every value it puts in the cache with ``objsize.get_deep_size``, and each call walks the globals of every loaded
module (milliseconds, whatever the value's size): a multimap side input looked up once per element pays it per
element. ``--dedup`` looks up every document's route that way in the main pass (and near's set-aside keys in the
confirmation pass): a near build of the 200 MB file took 230.7 s against 34.0 s without dedup, 20 MB holding each page
twice 44.9 s with the cache and 20.4 s without it, the same files (benchmarks/RESULTS.md). Without the cache a lookup
is one call to the runner's state handler, and a side input read whole (AsList, AsDict, AsSingleton) is still read
once per bundle (Beam's SideInputMap keeps it for the bundle)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def state_cache_mb(options) -> int:
    """``--max_cache_memory_usage_mb`` (Beam's default 0: no cache)."""
    from apache_beam.options.pipeline_options import WorkerOptions

    return max(0, options.view_as(WorkerOptions).max_cache_memory_usage_mb or 0)


@contextlib.contextmanager
def in_process_state_cache(options) -> Iterator[int]:
    """While the job runs, the in-process worker's cache is :func:`state_cache_mb` (Beam's module constant, put back
    after); yields the size."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    before = worker_handlers.STATE_CACHE_SIZE_MB
    worker_handlers.STATE_CACHE_SIZE_MB = size = state_cache_mb(options)
    try:
        yield size
    finally:
        worker_handlers.STATE_CACHE_SIZE_MB = before
