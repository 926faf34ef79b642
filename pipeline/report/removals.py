"""What the report page and the dataset card say about duplicates and evaluation-set overlap (format 2.1 manifests:
``dedup``, ``contamination``, ``removed``, ``counts.documents_duplicate`` / ``documents_contaminated``; an older
manifest has none of them and gets nothing)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any


def checked(m: dict) -> bool:
    """Whether the build looked for duplicates or evaluation overlap at all."""
    return (m.get("dedup") or {}).get("mode", "off") != "off" or bool(m.get("contamination"))


def dedup_line(m: dict) -> str:
    d = m.get("dedup") or {}
    c = m["counts"]
    mode = d.get("mode", "off")
    if mode == "off":
        return "Duplicates: not looked for (`--dedup off`)."
    text = f"Duplicates (`--dedup {mode}`): {c.get('documents_duplicate', 0):,} documents left out as copies"
    if mode == "near":
        near = d.get("near", {})
        text += (
            f" (Jaccard of {near.get('shingle_words')}-word shingles at least {near.get('threshold')}, confirmed exactly; "
            f"{d.get('candidate_pairs', 0):,} candidate pairs, {d.get('confirmed_pairs', 0):,} confirmed; LSH misses "
            f"{100 * near.get('false_negative_rate_at_threshold', 0):.2f}% of the pairs at the threshold)"
        )
    return text + ", each recorded in `removed/duplicate.jsonl` with the document it copies."


def contamination_rows(m: dict) -> list[list[Any]]:
    """Per evaluation file: name, examples, contaminated, too short, n-grams found, documents."""
    info = m.get("contamination") or {}
    rows = []
    for name, r in sorted((info.get("files") or {}).items()):
        rows.append(
            [
                PurePosixPath(name).name,
                r.get("examples", 0),
                r.get("examples_contaminated", 0),
                r.get("examples_too_short", 0),
                f"{r.get('ngrams_found', 0):,} of {r.get('ngrams', 0):,}",
                r.get("documents", 0),
            ]
        )
    return rows


HEADERS = ["evaluation file", "examples", "contaminated", "too short", "n-grams found", "documents"]


def contamination_line(m: dict) -> str:
    info = m.get("contamination")
    if not info:
        return "Evaluation-set overlap: not checked at build time (`.venv/bin/python -m pipeline.contamination` checks it now)."
    what = (
        f"{m['counts'].get('documents_contaminated', 0):,} documents holding one were left out "
        "(`removed/contaminated.jsonl` names the examples)"
        if info.get("drop") == "documents"
        else "they were kept (`--drop-contaminated none`)"
    )
    return f"Evaluation-set overlap (`--decontaminate`, {info.get('ngram_size')}-grams of normalised words): {what}."


def card_section(m: dict) -> list[str]:
    """The dataset card's section, as Markdown lines."""
    lines = ["## Duplicates and evaluation-set overlap", "", "- " + dedup_line(m), "- " + contamination_line(m)]
    rows = contamination_rows(m)
    if rows:
        lines += ["", "| " + " | ".join(HEADERS) + " |", "|---|" + "---:|" * (len(HEADERS) - 1)]
        lines += ["| " + " | ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in row) + " |" for row in rows]
    return lines + [""]
