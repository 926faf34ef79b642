"""What ``--resume`` may change, and what it refuses: one line each, before any process group exists.

A checkpoint's ``spanprep_trainer.json`` records (besides the model and the tokenizer, which ``trainer.engine``
compares) the artifact's content fingerprint (``schemas.integrity.content_fingerprint``: the same for every copy
of the artifact, different for any other artifact), the options of the run that wrote it and the loader's
position. On resume:

* another artifact (another fingerprint) is refused, naming both;
* a mixture's checkpoint resumed with one ``--data PATH`` is refused naming its sources and the ``--data NAME=PATH``
  flags that resume it;
* a data-stream change the loader cannot continue (held-out shards, seed, shuffle window, masking scheme or mask
  seed) is refused with the loader's own reason;
* a ZeRO stage DeepSpeed cannot load the checkpoint into (anything but 1 <-> 2) is refused;
* every other changed option is accepted and listed (``changed_options``), e.g. a longer ``--max-steps``, another
  ``--lr``, ``--max-seq-len`` or number of ranks; the engine prints the list when the run resumes.

Checkpoints written before these fields existed are resumed as before (nothing to compare against).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.config import ConfigError
from trainer.data.mixture import STATE_FORMAT as MIXTURE_STATE
from trainer.data.mixture import MixtureStream

# Differ on every resume by design: not worth a line.
NOT_OPTIONS = {"run.resume"}


def checkpoint_record(artifact, options: Mapping[str, Any], data_state: Mapping[str, Any]) -> dict[str, Any]:
    """The fields this module needs, for the checkpoint's meta file."""
    return {"artifact_fingerprint": artifact.fingerprint, "options": dict(options), "data_state": dict(data_state)}


def _describe(uri: Any, fingerprint: Any, manifest: Mapping[str, Any] | None = None) -> str:
    what = f"{uri} (fingerprint {str(fingerprint)[:12]}"
    if manifest is not None:
        what += f", {len(manifest.get('shards', []))} shards, {manifest.get('counts', {}).get('rows', '?')} rows"
    return what + ")"


def check_same_artifact(meta: Mapping[str, Any], artifact, where: str) -> None:
    """Refuse (ConfigError, one line) to resume checkpoint ``where`` on an artifact other than its own. A mixture's
    sources (in any order) are compared one by one by its loader state instead (``check_data_stream``)."""
    saved = meta.get("artifact_fingerprint")
    if saved is None or saved == artifact.fingerprint or (meta.get("data_state") or {}).get("format") == MIXTURE_STATE:
        return
    raise ConfigError(
        f"cannot resume {where} on {_describe(artifact.uri, artifact.fingerprint, artifact.manifest)}: the checkpoint "
        f"was trained on another artifact, {_describe(meta.get('artifact'), saved)}; resume with --data pointing at "
        f"that artifact (or a copy of it), or start a new run in another --output-dir"
    )


def _mixture_flags(meta: Mapping[str, Any], state: Mapping[str, Any]) -> str:
    """What a mixture's checkpoint was trained on and the ``--data`` flags that resume it (one line)."""
    saved = state.get("sources")
    sources: Mapping[str, Any] = saved if isinstance(saved, Mapping) else {}
    names = sorted(sources)
    run = (meta.get("options") or {}).get("run") or {}
    given = run.get("data") if isinstance(run, Mapping) else None
    if isinstance(given, list) and all(isinstance(d, str) for d in given) and len(given) == len(names):
        flags = [f"--data {d}" for d in given]  # as the run gave them, weights included
    else:
        uris = {n: s.get("uri", "PATH") if isinstance(s, Mapping) else "PATH" for n, s in sources.items()}
        flags = [f"--data {n}={uris[n]}[:WEIGHT]" for n in names]
    return (
        f"it was trained on a mixture of {len(names)} sources ({', '.join(names)}); resume it with the same sources, "
        f"one --data NAME=PATH[:WEIGHT] each: {' '.join(flags)}"
    )


def check_data_stream(meta: Mapping[str, Any], train_loader, where: str) -> None:
    """Refuse (ConfigError, one line) when the loader cannot continue the checkpoint's sample stream."""
    state = meta.get("data_state")
    if state is None:
        return
    if (
        isinstance(state, Mapping)
        and state.get("format") == MIXTURE_STATE
        and not isinstance(train_loader.dataset, MixtureStream)
    ):
        raise ConfigError(f"cannot resume {where} with one --data PATH: {_mixture_flags(meta, state)}")
    try:
        train_loader.load_state_dict(state)  # the same state Trainer.resume loads again from DeepSpeed's files
    except ValueError as e:
        raise ConfigError(f"cannot resume {where}: {e}") from None


# ZeRO stages whose checkpoints load into each other at the same number of ranks (1 and 2 write the same
# per-rank optimizer files; 0 writes none, 3 partitions the weights too: DeepSpeed's loader fails on a mix).
COMPATIBLE_ZERO_STAGES = ({0}, {1, 2}, {3})


def check_zero_stage(meta: Mapping[str, Any], stage: int, where: str) -> None:
    """Refuse (ConfigError, one line) a ZeRO stage DeepSpeed cannot load the checkpoint's optimizer files into."""
    saved = meta.get("zero_stage")
    if saved is None or saved == stage or any({saved, stage} <= group for group in COMPATIBLE_ZERO_STAGES):
        return
    raise ConfigError(
        f"cannot resume {where} (ZeRO stage {saved}) with ZeRO stage {stage}: DeepSpeed cannot load its optimizer files "
        f"into that stage (stages 1 and 2 can take each other's); resume with a DeepSpeed config of stage {saved}"
    )


def _flatten(options: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_options(meta: Mapping[str, Any], options: Mapping[str, Any]) -> list[str]:
    """``"section.name: old -> new"`` for every option that differs from the checkpoint's run (sorted)."""
    saved = meta.get("options")
    if saved is None:
        return []
    old, new = _flatten(saved), _flatten(options)
    return [
        f"{k}: {old.get(k, '(unset)')!r} -> {new.get(k, '(unset)')!r}"
        for k in sorted(set(old) | set(new))
        if k not in NOT_OPTIONS and old.get(k) != new.get(k)
    ]
