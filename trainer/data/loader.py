"""The DataLoader over a stream (:class:`StreamLoader`), the builders of the training and evaluation loaders,
and the tokenizer check.

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
given ``expected_*``, and refuse a masking scheme whose candidate spans the artifact lacks
(:func:`check_candidates`). Every artifact problem (missing, incomplete, unknown format version, corrupt shard)
raises ``schemas.format.FormatError`` with a message naming the file; config mistakes raise ``ValueError``.
Building a loader checks its split's shards against the manifest first (size, and sha256 as
``DataConfig.verify_shards`` says: once per node by default; ``schemas/integrity.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from schemas import format as fmt
from schemas.artifact import Artifact
from trainer.data.blocks import open_artifact
from trainer.data.config import DataConfig
from trainer.data.stream import ArtifactStream, WorkerDataError
from trainer.masking import MaskingConfig

if TYPE_CHECKING:
    from trainer.data.mixture import MixtureStream


class TokenizerMismatchError(ValueError):
    """The artifact was tokenized with another vocabulary than the model expects."""


def check_tokenizer(
    artifact: Artifact | Mapping[str, Any], *, vocab_size: int, special_token_ids: Mapping[str, int] | None = None
) -> None:
    """Raise :class:`TokenizerMismatchError` unless the artifact's tokenizer matches the model's.

    ``artifact``: an :class:`Artifact` or its manifest. ``vocab_size`` must be equal; every special token
    named in ``special_token_ids`` (any of pad, unk, cls, sep, mask) must have the same id.
    """
    manifest = artifact.manifest if isinstance(artifact, Artifact) else artifact
    where = artifact.uri if isinstance(artifact, Artifact) else "artifact"
    tok = manifest.get("tokenizer") or {}
    a_vocab = tok.get("vocab_size")
    a_special = dict(tok.get("special_token_ids") or {})
    problems = []
    if a_vocab != vocab_size:
        problems.append(f"vocab_size {a_vocab} (artifact) != {vocab_size} (model)")
    for name, mid in (special_token_ids or {}).items():
        if a_special.get(name) != mid:
            problems.append(f"[{name.upper()}] id {a_special.get(name)} (artifact) != {mid} (model)")
    if problems:
        raise TokenizerMismatchError(
            f"{where}: tokenizer mismatch: {'; '.join(problems)}. The artifact was tokenized with "
            f"vocab_size={a_vocab}, special_token_ids={a_special}; the model config expects vocab_size={vocab_size}, "
            f"special_token_ids={dict(special_token_ids or {})}. Train with a model config of the artifact's tokenizer "
            f"(its tokenizer.json) or rebuild the artifact with the model's tokenizer."
        )


def missing_candidates(artifact: Artifact, mask_cfg: MaskingConfig) -> str | None:
    """The candidate kind (``entities``, ``noun_phrases``, ``ngrams``) that ``mask_cfg``'s scheme masks and the
    artifact was built without (its manifest's ``candidates.kinds``), or None."""
    column = mask_cfg.candidate_column
    kind = next((k for k, c in fmt.CANDIDATE_KINDS.items() if c == column), None)
    kinds = (artifact.manifest.get("candidates") or {}).get("kinds") or []
    return kind if kind is not None and kind not in kinds else None


def check_candidates(artifact: Artifact, mask_cfg: MaskingConfig) -> None:
    """Refuse (ValueError, one line) a scheme whose candidate spans the artifact was built without: it would
    train as plain whole-word masking."""
    kind = missing_candidates(artifact, mask_cfg)
    if kind is not None:
        raise ValueError(
            f"--scheme {mask_cfg.scheme} masks {kind} candidates, but {artifact.uri} was built without them (its "
            f"manifest's candidates.kinds; pipeline --mask-candidates {kind}); rebuild it with them, or choose a "
            f"scheme without candidates"
        )


def _identity(x):
    return x


class StreamLoader(DataLoader):
    """A DataLoader over an :class:`ArtifactStream` (or a ``MixtureStream``) that yields micro-batches and tracks consumption.

    Iterating yields batch dicts; the dataset's state advances by one global step per batch *handed out*,
    so ``state_dict()`` taken between batches resumes exactly at the next one. Every ``iter()`` starts
    from the current state (the training split) or from the start (the evaluation split).
    """

    def __init__(self, dataset: ArtifactStream | MixtureStream):
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

    dataset: ArtifactStream | MixtureStream

    def __iter__(self):
        ds = self.dataset
        ds._generation += 1
        generation = ds._generation
        return self._flatten(super().__iter__(), ds, generation)

    @staticmethod
    def _flatten(chunks, ds: ArtifactStream | MixtureStream, generation: int):
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
