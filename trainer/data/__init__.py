"""Streaming loader: the artifact's Arrow shards -> masked SpanBERT batches, resumable at any step.

In: an artifact (local or ``gs://``/``s3://``), a :class:`DataConfig`, a ``trainer.masking.MaskingConfig``, the rank
and world size. Out: this rank's micro-batches (dicts of tensors, ``trainer.masking.collate``) and a state dict that
resumes the stream at any world size. ``blocks`` indexes and reads the shards' record batches, ``order`` is the epoch
order, ``stream`` the rank's stream and its state, ``segments`` the two-segment (NSP) inputs, ``stream_loader`` the
DataLoader over a stream, ``loader`` its builders for one artifact, ``checks`` the tokenizer and candidate checks,
``config`` the :class:`DataConfig`. A weighted mixture of several artifacts:
``sources`` parses and checks ``--data NAME=PATH[:WEIGHT]``, ``mixture_order`` is its order, ``mixture`` its stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.lazy import exports

if TYPE_CHECKING:
    from trainer.data.blocks import BlockReader, Blocks, index_blocks, open_artifact, split_shards
    from trainer.data.checks import TokenizerMismatchError, check_tokenizer
    from trainer.data.config import DataConfig
    from trainer.data.loader import build_eval_loader, build_train_loader
    from trainer.data.mixture import MixtureStream, build_mixture_loaders
    from trainer.data.mixture_order import MixtureOrder, source_seed
    from trainer.data.order import EpochOrder
    from trainer.data.sources import Source, check_sources, parse_sources
    from trainer.data.stream import MAX_CHUNK_ROWS, STATE_FORMAT, STATE_VERSION, ArtifactStream
    from trainer.data.stream_loader import StreamLoader

__getattr__ = exports(
    __name__,
    {
        "BlockReader": "blocks",
        "Blocks": "blocks",
        "index_blocks": "blocks",
        "open_artifact": "blocks",
        "split_shards": "blocks",
        "TokenizerMismatchError": "checks",
        "check_tokenizer": "checks",
        "DataConfig": "config",
        "build_eval_loader": "loader",
        "build_train_loader": "loader",
        "MixtureStream": "mixture",
        "build_mixture_loaders": "mixture",
        "MixtureOrder": "mixture_order",
        "source_seed": "mixture_order",
        "EpochOrder": "order",
        "Source": "sources",
        "check_sources": "sources",
        "parse_sources": "sources",
        "MAX_CHUNK_ROWS": "stream",
        "STATE_FORMAT": "stream",
        "STATE_VERSION": "stream",
        "ArtifactStream": "stream",
        "StreamLoader": "stream_loader",
    },
)

__all__ = [
    "MAX_CHUNK_ROWS",
    "STATE_FORMAT",
    "STATE_VERSION",
    "ArtifactStream",
    "BlockReader",
    "Blocks",
    "DataConfig",
    "EpochOrder",
    "MixtureOrder",
    "MixtureStream",
    "Source",
    "StreamLoader",
    "TokenizerMismatchError",
    "build_eval_loader",
    "build_mixture_loaders",
    "check_sources",
    "parse_sources",
    "source_seed",
    "build_train_loader",
    "check_tokenizer",
    "index_blocks",
    "open_artifact",
    "split_shards",
]
