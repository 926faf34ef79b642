"""What a finished ``build_shards`` says: its summary, the one line of a build that wrote nothing, and a warning
about mostly empty shards."""

from __future__ import annotations

import logging

from schemas import commands
from schemas import format as fmt

log = logging.getLogger("pipeline.build_shards")


def nothing_written(manifest: dict, output: str) -> str:
    """The one line of a build that wrote no document: why each was dead-lettered, by reason and count."""
    c = manifest["counts"]
    if not c["documents_read"]:
        return f"no document written: the input holds no documents; {output} holds no rows"
    reasons = ", ".join(f"{k}: {v:,}" for k, v in sorted(c["dead_lettered_by_reason"].items(), key=lambda kv: -kv[1]))
    return (
        f"no document written: all {c['documents_read']:,} documents were dead-lettered ({reasons}; "
        f"{output}/{fmt.DEAD_LETTER_DIR}/ holds them with their positions); the artifact holds no rows and "
        "pipeline.verify refuses it"
    )


def warn_empty_shards(manifest: dict) -> None:
    """Most shards empty: --num-shards is far above the number of documents (each shard costs a file and a bundle)."""
    shards = manifest["shards"]
    empty = sum(1 for s in shards if s["rows"] == 0)
    if len(shards) > 1 and empty * 2 > len(shards):
        log.warning(
            "%d of %d shards are empty: --num-shards %d is far above the %d documents written; every shard is a file "
            "(and a bundle to write and a file to open when training), so use fewer shards",
            empty,
            len(shards),
            len(shards),
            manifest["counts"]["documents_written"],
        )


def summary(manifest: dict, output: str) -> str:
    """What ``build_shards`` prints when it ends: the counts, rows, shards, tokenizer and how to check it."""
    c = manifest["counts"]
    lines = [
        f"artifact: {output}",
        f"  documents: {c['documents_read']:,} read, {c['documents_written']:,} written, {c['documents_dead_lettered']:,} dead-lettered"
        + (
            f" ({', '.join(f'{k}: {v:,}' for k, v in c['dead_lettered_by_reason'].items())})"
            if c["dead_lettered_by_reason"]
            else ""
        ),
        *(
            [
                f"  left out: {c['documents_duplicate']:,} duplicate(s), {c['documents_contaminated']:,} contaminated "
                f"({fmt.REMOVED_DIR}/)"
            ]
            if c.get("documents_duplicate") or c.get("documents_contaminated")
            else []
        ),
        f"  rows: {c['rows']:,} of at most {manifest['max_row_tokens']} tokens; tokens: {c['tokens']:,}; sentences: {c['sentences']:,}",
        *(
            [f"  words longer than a row: {c['long_words']:,}, continued in {c['continuation_rows']:,} rows"]
            if c.get("long_words")
            else []
        ),
        f"  shards: {len(manifest['shards'])} in {output}/{fmt.SHARDS_DIR}/ ({sum(s['bytes'] for s in manifest['shards']):,} bytes)",
        f"  tokenizer: {manifest['tokenizer']['source']}, vocabulary {manifest['tokenizer']['vocab_size']:,}",
        f"  check it: {commands.module('pipeline.verify')} {output}",
    ]
    return "\n".join(lines)
