"""The DataLoader over a stream (:class:`StreamLoader`): one artifact's (``stream.ArtifactStream``, built by
``loader``) or a mixture's (``mixture.MixtureStream``), both a :class:`Stream`; and how a stream's DataLoader workers
share its chunks and hand back a data error (:func:`this_workers_chunks`). Both streams and both builders use these;
this module imports neither."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from schemas import format as fmt
from trainer.data.config import DataConfig

T = TypeVar("T")


class WorkerDataError:
    """What a DataLoader worker yields instead of raising a data error (a ``FormatError``): torch re-raises a
    worker's exception in the parent with the worker's traceback in its message; the loader raises ``error``
    itself (one line, naming the file)."""

    def __init__(self, error: fmt.FormatError):
        self.error = error


def this_workers_chunks(jobs: Iterable[T], make: Callable[[T], Any]) -> Iterator[Any]:
    """``make(job)`` for this DataLoader worker's share of ``jobs`` (every ``num_workers``-th, from its id; all of
    them in the main process). In a worker a data error ends its share as one :class:`WorkerDataError`."""
    info = get_worker_info()
    wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
    for m, job in enumerate(jobs):
        if m % nw == wid:
            try:
                chunk = make(job)
            except fmt.FormatError as e:
                if info is None:
                    raise
                yield WorkerDataError(e)
                return
            yield chunk


class Stream(IterableDataset):
    """What :class:`StreamLoader` reads of its dataset, which yields chunks of batch dicts (or one
    :class:`WorkerDataError`): ``stream.ArtifactStream`` and ``mixture.MixtureStream`` are streams."""

    data_cfg: DataConfig
    split: str  # "train" or "eval"
    _generation: int  # bumped by every iter(): an older iterator refuses to go on

    @property
    def num_batches(self) -> int | None:
        raise NotImplementedError

    def _advance(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        raise NotImplementedError


def _identity(x):
    return x


class StreamLoader(DataLoader):
    """A DataLoader over a :class:`Stream` (an ``ArtifactStream`` or a ``MixtureStream``) that yields micro-batches and
    tracks consumption.

    Iterating yields batch dicts; the dataset's state advances by one global step per batch *handed out*,
    so ``state_dict()`` taken between batches resumes exactly at the next one. Every ``iter()`` starts
    from the current state (the training split) or from the start (the evaluation split).
    """

    def __init__(self, dataset: Stream):
        cfg = dataset.data_cfg
        super().__init__(
            dataset,
            batch_size=None,
            num_workers=cfg.num_workers,
            collate_fn=_identity,
            pin_memory=cfg.pin_memory,
            prefetch_factor=cfg.prefetch_factor if cfg.num_workers > 0 else None,
            persistent_workers=False,
            in_order=True,
        )

    dataset: Stream

    def __iter__(self):
        ds = self.dataset
        ds._generation += 1
        generation = ds._generation
        return self._flatten(super().__iter__(), ds, generation)

    @staticmethod
    def _flatten(chunks, ds: Stream, generation: int):
        try:
            for chunk in chunks:
                if isinstance(chunk, WorkerDataError):
                    raise chunk.error
                for batch in chunk:
                    if ds._generation != generation:
                        raise RuntimeError(
                            "the loader's state was loaded or a new iterator was created: iterate the loader again"
                        )
                    if ds.split == "train":
                        ds._advance()
                    yield batch
        finally:
            # Stop the workers now, on an error or close(), not when the iterator is collected: a raised error's
            # traceback keeps it alive until interpreter exit, whose join of the workers (which ignore SIGTERM
            # in training, trainer/engine/signals.py) then never returns.
            shutdown = getattr(chunks, "_shutdown_workers", None)  # torch's multi-process iterator
            if shutdown is not None:
                shutdown()

    def __len__(self) -> int:
        n = self.dataset.num_batches
        if n is None:
            raise TypeError("the training stream is infinite (DataConfig.num_epochs is None): it has no length")
        return n

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        self.dataset.load_state_dict(state, strict=strict)
