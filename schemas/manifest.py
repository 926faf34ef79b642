"""The shape of ``manifest.json`` (``FORMAT.md``): which keys a reader uses, of which JSON type, and which paths it may
name, checked before any value is used, so that a crafted or damaged manifest gives one line and not a traceback.

Two specs: :data:`READER_SPEC`, what every reader (``Artifact.open``: the trainer, ``pipeline.report``) needs, and
:data:`VERIFY_SPEC`, everything ``pipeline.verify`` checks. :func:`manifest_problems` lists what is wrong, as
``key.path: what`` strings; :func:`relative_path_problem` is the rule for a path the manifest names: relative to the
artifact, and never leaving it. Only the standard library is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# A leaf check returns what is wrong with a value, or None.
Check = Callable[[Any], str | None]
# Token ids are int32 in the widest shard schema; sizes and counts fit numpy's int64.
MAX_ID = 2**31 - 1
MAX_COUNT = 2**63 - 1
PACKS = ("doc-sentences", "full-sentences")
SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask")


def kind(value: Any) -> str:
    """A short, one-line description of a JSON value for messages: ``the string '12'``, ``null``, ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = repr(value if len(value) <= 40 else value[:40] + "…")
        return f"the string {shown}"
    if isinstance(value, (int, float)):
        text = str(value)
        return f"the number {text}" if len(text) <= 24 else f"a number of {len(text.lstrip('-'))} digits"
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def relative_path_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a file name the manifest gives, or None: it must be a plain relative path
    (``shards/part-00000-of-00004.arrow``) that stays inside the artifact: not absolute, no ``..``, ``.`` or empty
    part, no backslash, no control character. Checked before anything is opened."""
    if not isinstance(value, str):
        return f"expected a path relative to the artifact, got {kind(value)}"
    if not value:
        return "an empty path"
    if value.startswith("/") or "://" in value:
        return f"{value!r} leaves the artifact (an absolute path); paths in the manifest are relative to the artifact"
    parts = value.split("/")
    if ".." in parts:
        return f"{value!r} leaves the artifact ('..'); paths in the manifest stay inside the artifact"
    if any(p in ("", ".") for p in parts) or "\\" in value or any(ord(c) < 0x20 or c == "\x7f" for c in value):
        return f"{value!r} is not a plain relative path (an empty or '.' part, a backslash or a control character)"
    return None


def _integer(low: int, high: int) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{kind(value)}, out of range ({low}..{high})"
        return f"expected an integer, got {kind(value)}"

    return check


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) else f"expected a string, got {kind(value)}"


def _one_of(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        return None if value in choices and isinstance(value, str) else f"expected one of {choices}, got {kind(value)}"

    return check


def _or_null(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


@dataclass(frozen=True)
class Optional:
    """A key that may be absent (when present, its value must pass ``spec``)."""

    spec: Any


@dataclass(frozen=True)
class MapOf:
    """An object with any string keys whose values pass ``spec``."""

    spec: Any


COUNT = _integer(0, MAX_COUNT)
SIZE = _integer(1, MAX_ID)
ID = _or_null(_integer(0, MAX_ID))

READER_SPEC: dict[str, Any] = {
    "tokenizer": {"file": relative_path_problem, "vocab_size": SIZE, "special_token_ids": MapOf(ID)},
    "shards": [{"path": relative_path_problem, "rows": COUNT, "bytes": Optional(COUNT), "sha256": Optional(_string)}],
    "unigram": {"file": relative_path_problem},
    "rows_per_batch": Optional(SIZE),
}

VERIFY_SPEC: dict[str, Any] = {
    "tokenizer": {
        "file": relative_path_problem,
        "sha256": _string,
        "vocab_size": SIZE,
        "special_tokens": MapOf(_string),
        "special_token_ids": MapOf(ID),
    },
    "max_row_tokens": SIZE,
    "pack": _one_of(*PACKS),
    "counts": {
        "documents_read": COUNT,
        "documents_written": COUNT,
        "documents_dead_lettered": COUNT,
        "dead_lettered_by_reason": MapOf(COUNT),
        "documents_duplicate": Optional(COUNT),  # format 2.1 on (FORMAT.md, "removed/<reason>.jsonl")
        "documents_contaminated": Optional(COUNT),
        "rows": COUNT,
        "tokens": COUNT,
        "continuation_rows": Optional(COUNT),  # format 2.0 on (FORMAT.md, "Words longer than a row")
        "long_words": Optional(COUNT),
    },
    "inputs": [{"documents_read": COUNT}],
    "shards": [{"path": relative_path_problem, "rows": COUNT, "tokens": COUNT, "bytes": COUNT, "sha256": _string}],
    "unigram": {"file": relative_path_problem, "sha256": _string, "total": COUNT, "bytes": Optional(COUNT)},
    "dead_letter": [{"path": relative_path_problem, "records": COUNT, "bytes": COUNT, "sha256": _string}],
    "removed": Optional([{"path": relative_path_problem, "records": COUNT, "bytes": COUNT, "sha256": _string}]),
    "row_length_histogram": {"counts": [COUNT]},
}


def _walk(value: Any, spec: Any, where: str) -> Iterator[str]:
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            yield f"{where or 'the manifest'}: expected an object, got {kind(value)}"
            return
        for key, sub in spec.items():
            inner = f"{where}.{key}" if where else key
            if key not in value:
                if not isinstance(sub, Optional):
                    yield f"{inner}: missing"
                continue
            yield from _walk(value[key], sub.spec if isinstance(sub, Optional) else sub, inner)
    elif isinstance(spec, list):
        if not isinstance(value, list):
            yield f"{where}: expected a list, got {kind(value)}"
            return
        for i, item in enumerate(value):
            yield from _walk(item, spec[0], f"{where}[{i}]")
    elif isinstance(spec, MapOf):
        if not isinstance(value, dict):
            yield f"{where}: expected an object, got {kind(value)}"
            return
        for key, item in value.items():
            yield from _walk(item, spec.spec, f"{where}.{key if key.isprintable() else repr(key)}")
    else:
        problem = spec(value)
        if problem is not None:
            yield f"{where}: {problem}"


def manifest_problems(manifest: Any, spec: Mapping[str, Any] = VERIFY_SPEC) -> list[str]:
    """What is wrong with a parsed manifest's shape under ``spec`` (empty when nothing is), each ``key.path: what``.

    With :data:`VERIFY_SPEC` it also checks that the tokenizer names every special role of ``FORMAT.md`` and an id
    for each token it names."""
    problems = list(_walk(manifest, dict(spec), ""))
    if problems or spec is not VERIFY_SPEC:
        return problems
    tok = manifest["tokenizer"]
    for role in SPECIAL_ROLES:
        if role not in tok["special_tokens"]:
            problems.append(f"tokenizer.special_tokens.{role}: missing")
    for role in tok["special_tokens"]:
        if role not in tok["special_token_ids"]:
            problems.append(f"tokenizer.special_token_ids.{role}: missing (special_tokens names it)")
    return problems
