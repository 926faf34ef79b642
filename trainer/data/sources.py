"""The sources of a mixture: ``--data NAME=PATH[:WEIGHT]`` parsed (:func:`parse_sources`), checked against each
other before training (:func:`check_sources`), and each one's own stream (:func:`source_stream`).

``--data PATH`` given once is the single-artifact loader, unchanged. ``--data NAME=PATH[:WEIGHT]``, repeatable, is a
mixture (``trainer.data.mixture``): NAME (letters, digits, ``_``, ``-``; it names the source's metrics
``eval/NAME/...`` and counts) is what comes before the first ``=``; WEIGHT (a number > 0) is what follows the last
``:`` when it reads as a number, so ``s3://`` and ``gs://`` paths need no quoting. Weights are all given or all left
out (then each source weighs its number of training rows).

**The sources are kept in the order of their names, never in ``--data`` order** (:func:`by_name`): everything per
source (the mixture's order and counts, its indices in batches, the loader state, the checkpoint's first source,
whose ``max_seq_len`` is the default sequence length) follows the names, so any order of the same ``--data`` flags
trains and resumes the same run.

Every source must have the tokenizer of the first by name (same tokenizer.json sha256, vocabulary and special ids),
rows that fit ``--max-seq-len``, and, for a scheme that masks candidate spans (entity, noun_phrase, ngram), those
candidates (the manifest's ``candidates.kinds``); otherwise :func:`check_sources` raises a ``ValueError`` of one line
naming both sources (the offending one and the first, or one that has the candidates).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schemas import format as fmt
from schemas.artifact import Artifact
from trainer.data.checks import missing_candidates
from trainer.data.config import DataConfig
from trainer.data.mixture_order import source_seed
from trainer.masking import MaskingConfig

if TYPE_CHECKING:  # imported in source_stream: parse_sources runs in trainer/pretrain.py's checks before torch
    from trainer.data.stream import ArtifactStream

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Source:
    """One ``--data NAME=PATH[:WEIGHT]``."""

    name: str
    uri: str
    weight: float | None = None  # None: the source's number of training rows

    def describe(self) -> str:
        return f"--data {self.name} ({self.uri})"


def by_name(sources: list[Source], *alongside: list) -> tuple[list, ...]:
    """``sources`` sorted by name, and each list of ``alongside`` (one item per source) in the same order."""
    order = sorted(range(len(sources)), key=lambda k: sources[k].name)
    return tuple([items[k] for k in order] for items in (sources, *alongside))


def parse_source(spec: str) -> Source | None:
    """A named source, or None for a plain path (``--data PATH``)."""
    head, eq, rest = spec.partition("=")
    if not eq or not NAME.fullmatch(head):
        return None
    uri, weight = rest, None
    path, colon, tail = rest.rpartition(":")
    if colon:
        try:
            weight = float(tail)
        except ValueError:
            weight = None
        else:
            uri = path
    if not uri.strip():
        raise ValueError(f"--data {spec}: no artifact path after {head}=")
    if weight is not None and not (weight > 0 and weight != float("inf")):
        raise ValueError(f"--data {spec}: the weight must be a number > 0; got {tail}")
    return Source(head, uri, weight)


def parse_sources(specs: str | list[str] | tuple[str, ...]) -> list[Source] | None:
    """The mixture's sources in name order (:func:`by_name`), or None when ``specs`` is one plain artifact path (the
    single-artifact loader)."""
    specs = [specs] if isinstance(specs, str) else list(specs)
    if not specs:
        raise ValueError("--data: give the artifact with --data ARTIFACT (or several with --data NAME=PATH[:WEIGHT])")
    parsed = [parse_source(s) for s in specs]
    if len(specs) == 1 and parsed[0] is None:
        return None
    plain = [s for s, p in zip(specs, parsed) if p is None]
    if plain:
        raise ValueError(
            f"--data {plain[0]}: name every source of a mixture, --data NAME=PATH[:WEIGHT] (NAME: a letter, then "
            f"letters, digits, _ or -)"
        )
    sources = [p for p in parsed if p is not None]
    names = [s.name for s in sources]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"--data: source name(s) {', '.join(dup)} given more than once")
    weighted = [s.weight is not None for s in sources]
    if any(weighted) and not all(weighted):
        missing = [s.name for s in sources if s.weight is None]
        raise ValueError(
            f"--data: give every source a weight (NAME=PATH:WEIGHT) or none (natural sizes); "
            f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} none"
        )
    return by_name(sources)[0]


def _tokenizer(artifact: Artifact) -> tuple:
    tok = artifact.manifest.get("tokenizer") or {}
    return tok.get("sha256"), tok.get("vocab_size"), tok.get("special_token_ids")


def check_sources(
    sources: list[Source], artifacts: list[Artifact], max_seq_len: int, mask_cfg: MaskingConfig, length_from: str
) -> None:
    """Refuse (ValueError, one line naming both sources) sources that cannot be mixed (module docstring), checked in
    name order (:func:`by_name`), so the source named does not depend on the order of ``--data``. ``length_from``:
    where ``max_seq_len`` comes from, for the message (the option, or the first source by name)."""
    sources, artifacts = by_name(sources, artifacts)
    first, art0 = sources[0], artifacts[0]
    sha0, vocab0, special0 = _tokenizer(art0)
    room = fmt.max_row_tokens(max_seq_len)
    for src, art in zip(sources, artifacts):
        sha, vocab, special = _tokenizer(art)
        if (sha, vocab, special) != (sha0, vocab0, special0):
            raise ValueError(
                f"{src.describe()} and {first.describe()} have different tokenizers (tokenizer.json sha256 "
                f"{str(sha)[:12]} vs {str(sha0)[:12]}, vocabulary {vocab} vs {vocab0}, special ids {special} vs "
                f"{special0}): every source of a mixture must be built with the same tokenizer (pipeline --tokenizer FILE)"
            )
        rows = int(art.manifest.get("max_row_tokens", room))
        if rows > room:
            raise ValueError(
                f"{src.describe()} holds rows of up to {rows} tokens (built for max_seq_len "
                f"{art.manifest.get('max_seq_len')}), more than sequence length {max_seq_len} ({length_from}) leaves "
                f"room for ({room}); raise --max-seq-len to at least {rows + fmt.SPECIAL_POSITIONS} or rebuild {src.name}"
            )
        kind = missing_candidates(art, mask_cfg)
        if kind is not None:
            having = next((s for s, a in zip(sources, artifacts) if missing_candidates(a, mask_cfg) is None), None)
            raise ValueError(
                f"--scheme {mask_cfg.scheme} masks {kind} candidates, but {src.describe()} was built without them "
                f"(pipeline --mask-candidates {kind})"
                + (f", unlike {having.describe()}" if having is not None else ", like every other source")
                + "; rebuild it with them, or choose a scheme without candidates"
            )


def source_configs(source: Source, data_cfg: DataConfig, mask_cfg: MaskingConfig) -> tuple[DataConfig, MaskingConfig]:
    """The source's own data and masking configs: its artifact, and seeds derived from (seed, name)."""
    data = dataclasses.replace(
        data_cfg, artifact=source.uri, seed=source_seed(data_cfg.seed, source.name), samples_per_epoch=None
    )
    return data, dataclasses.replace(mask_cfg, seed=source_seed(mask_cfg.seed, source.name))


def source_stream(
    source: Source,
    artifact: Artifact,
    data_cfg: DataConfig,
    mask_cfg: MaskingConfig,
    *,
    rank: int,
    world_size: int,
    split: str,
) -> ArtifactStream:
    """The source's single-artifact stream (its shards checked against its manifest, its shard cache, its masker):
    the mixture reads its training split through it, and evaluates on its held-out split."""
    data, mask = source_configs(source, data_cfg, mask_cfg)
    from trainer.data.stream import ArtifactStream

    return ArtifactStream(artifact, data, mask, rank=rank, world_size=world_size, split=split)
