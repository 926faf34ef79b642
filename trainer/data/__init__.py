"""Streaming loader: the artifact's Arrow shards -> masked SpanBERT batches, resumable at any step.

In: an artifact (local or ``gs://``/``s3://``), a :class:`DataConfig`, a ``trainer.masking.MaskingConfig``, the rank
and world size. Out: this rank's micro-batches (dicts of tensors, ``trainer.masking.collate``) and a state dict that
resumes the stream at any world size. ``blocks`` indexes and reads the shards' record batches, ``order`` is the epoch
order, ``stream`` the rank's stream and its state, ``segments`` the two-segment (NSP) inputs, ``loader`` the
DataLoader and its builders, ``config`` the :class:`DataConfig`.

Interface (what ``trainer/pretrain.py`` calls)
----------------------------------------------
::

    from trainer.data import DataConfig, build_train_loader, build_eval_loader, check_tokenizer
    from trainer.masking import MaskingConfig

    data_cfg = DataConfig(artifact="gs://bucket/corpus", seed=0, micro_batch_size=8, num_workers=2)
    mask_cfg = MaskingConfig(scheme="span", seed=0)
    loader, dataset = build_train_loader(data_cfg, mask_cfg, rank=rank, world_size=world_size,
                                         expected_vocab_size=model_cfg.vocab_size,
                                         expected_special_token_ids={"pad": 0, "cls": 2, "sep": 3, "mask": 4})
    loader.load_state_dict(saved)      # optional, BEFORE iterating (resume; any world size)
    it = iter(loader)                  # infinite unless DataConfig.num_epochs is set
    batch = next(it)                   # dict, see trainer/masking/collate.py: input_ids, attention_mask, labels,
                                       # span_left, span_right, span_position [B, T] and sample_id [B];
                                       # DataConfig.segments == 2 adds token_type_ids [B, T] and
                                       # next_sentence_label [B] (trainer/data/segments.py)
    state = loader.state_dict()        # == dataset.state_dict(): plain dict, save it in the checkpoint

    eval_loader, eval_set = build_eval_loader(data_cfg, mask_cfg, rank=rank, world_size=world_size)
    for batch in eval_loader: ...      # one pass over the held-out shards, same batches every time

``loader`` is a :class:`StreamLoader` (a ``torch.utils.data.DataLoader``); ``dataset`` an
:class:`ArtifactStream` (a ``torch.utils.data.IterableDataset``). ``check_tokenizer(artifact, vocab_size=,
special_token_ids=)`` raises :class:`TokenizerMismatchError` naming both sides; the builders call it when
given ``expected_*``. Every artifact problem (missing, incomplete, unknown format version, corrupt shard)
raises ``schemas.format.FormatError`` with a message naming the file; config mistakes raise ``ValueError``.
Building a loader checks its split's shards against the manifest first (size, and sha256 as
``DataConfig.verify_shards`` says: once per node by default; ``schemas/integrity.py``).

"""

from trainer.data.blocks import BlockReader, Blocks, index_blocks, open_artifact, split_shards
from trainer.data.config import DataConfig
from trainer.data.loader import (
    StreamLoader,
    TokenizerMismatchError,
    build_eval_loader,
    build_train_loader,
    check_tokenizer,
)
from trainer.data.order import EpochOrder
from trainer.data.stream import MAX_CHUNK_ROWS, STATE_FORMAT, STATE_VERSION, ArtifactStream

__all__ = [
    "MAX_CHUNK_ROWS", "STATE_FORMAT", "STATE_VERSION", "ArtifactStream", "BlockReader", "Blocks", "DataConfig",
    "EpochOrder", "StreamLoader", "TokenizerMismatchError", "build_eval_loader", "build_train_loader",
    "check_tokenizer", "index_blocks", "open_artifact", "split_shards",
]
