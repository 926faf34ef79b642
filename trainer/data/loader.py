"""The builders of the training and evaluation loaders over one artifact (the DataLoader over a stream is
``stream_loader.StreamLoader``, the tokenizer and candidate checks are in ``checks``).

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
special_token_ids=)`` raises ``TokenizerMismatchError`` naming both sides; the builders call it when
given ``expected_*``, and refuse a masking scheme whose candidate spans the artifact lacks
(``checks.check_candidates``). Every artifact problem (missing, incomplete, unknown format version, corrupt shard)
raises ``schemas.format.FormatError`` with a message naming the file; config mistakes raise ``ValueError``.
Building a loader checks its split's shards against the manifest first (size, and sha256 as
``DataConfig.verify_shards`` says: once per node by default; ``schemas/integrity.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from trainer.data.blocks import open_artifact
from trainer.data.checks import check_candidates, check_tokenizer
from trainer.data.config import DataConfig
from trainer.data.stream import ArtifactStream
from trainer.data.stream_loader import StreamLoader
from trainer.masking import MaskingConfig


def _build(
    split: str,
    data_cfg: DataConfig,
    mask_cfg: MaskingConfig,
    rank: int,
    world_size: int,
    expected_vocab_size,
    expected_special_token_ids,
):
    artifact = open_artifact(data_cfg.artifact)
    check_candidates(artifact, mask_cfg)
    if expected_vocab_size is not None or expected_special_token_ids:
        check_tokenizer(
            artifact,
            vocab_size=expected_vocab_size if expected_vocab_size is not None else artifact.vocab_size,
            special_token_ids=expected_special_token_ids,
        )
    dataset = ArtifactStream(artifact, data_cfg, mask_cfg, rank=rank, world_size=world_size, split=split)
    return StreamLoader(dataset), dataset


def build_train_loader(
    data_cfg: DataConfig,
    mask_cfg: MaskingConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    expected_vocab_size: int | None = None,
    expected_special_token_ids: Mapping[str, int] | None = None,
) -> tuple[StreamLoader, ArtifactStream]:
    """(loader, dataset) of this rank's training stream (``trainer.data``, ``trainer.data.stream``). ``expected_*``:
    the model's tokenizer settings, checked against the artifact's (:func:`check_tokenizer`)."""
    return _build("train", data_cfg, mask_cfg, rank, world_size, expected_vocab_size, expected_special_token_ids)


def build_eval_loader(
    data_cfg: DataConfig,
    mask_cfg: MaskingConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    expected_vocab_size: int | None = None,
    expected_special_token_ids: Mapping[str, int] | None = None,
) -> tuple[StreamLoader, ArtifactStream]:
    """(loader, dataset) of this rank's part of one pass over the held-out shards: unshuffled, masks with
    epoch 0 (the same every evaluation), ``len(loader)`` batches on every rank (the tail that does not fill a
    global step is not used)."""
    return _build("eval", data_cfg, mask_cfg, rank, world_size, expected_vocab_size, expected_special_token_ids)
