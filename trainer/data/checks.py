"""Checks of an artifact against what training needs: the model's tokenizer (:func:`check_tokenizer`) and the
candidate spans of the masking scheme (:func:`check_candidates`). The single-artifact loaders (``loader``), the
mixture (``mixture``) and its sources (``sources``) all check with these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas import format as fmt
from schemas.artifact import Artifact
from trainer.masking import MaskingConfig


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
