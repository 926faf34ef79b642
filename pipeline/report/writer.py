"""Write a report: statistics, plots, page and card made in memory, then ``ARTIFACT/report/`` and
``ARTIFACT/README.md`` written through the artifact's filesystem."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.report.card import build_card
from pipeline.report.common import (
    DEFAULT_EXAMPLES,
    DEFAULT_MAX_ROWS,
    INDEX_FILE,
    KIND_NAMES,
    MAX_PLOTTED_SPAN_LEN,
    README_FILE,
    TOP_LABELS,
    TOP_NGRAMS,
    ReportError,
    percent,
)
from pipeline.report.page import Figure, build_html
from pipeline.report.plots import (
    no_candidates,
    plot_doc_tokens,
    plot_documents,
    plot_entity_labels,
    plot_ngrams,
    plot_row_lengths,
    plot_shards,
    plot_span_lengths,
    plot_spans_per_row,
    png,
    pyplot,
)
from pipeline.report.statistics import collect, read_dictionary
from schemas import format as fmt
from schemas.artifact import Artifact

log = logging.getLogger("pipeline.report")


def _write(art: Artifact, relative: str, data: bytes) -> None:
    try:
        with art.fs.open_output_stream(art.path(relative)) as f:
            f.write(data)
    except OSError as e:
        raise ReportError(f"cannot write {art.display(relative)}: {e}") from None


def _decoder(art: Artifact):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(art.tokenizer_json())
    except (OSError, Exception) as e:
        raise ReportError(f"{art.display(art.manifest['tokenizer']['file'])}: cannot load the tokenizer: {e}") from None


def write_report(
    uri: str | Artifact,
    *,
    license: str | None = None,
    source_license: str | None = None,
    pretty_name: str | None = None,
    language: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    seed: int = 0,
    examples: int = DEFAULT_EXAMPLES,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write ARTIFACT/report/ (plots, index.html) and ARTIFACT/README.md. Returns what was written.

    ``uri`` is the artifact's path or URI, or an opened :class:`Artifact`. Progress goes to ``progress``
    (default: this module's logger at INFO, which ``build_shards --report`` shows).

    Raises :class:`schemas.format.FormatError` (``ReportError`` is one) with a message when the artifact is
    missing, incomplete or unreadable, or the report cannot be written."""
    say = progress or log.info
    if max_rows < 1:
        raise ReportError(f"--max-rows must be at least 1, got {max_rows}")
    art = uri if isinstance(uri, Artifact) else Artifact.open(uri)
    plt = pyplot()
    m = art.manifest
    name = pretty_name or os.path.basename(art.root.rstrip("/")) or "spanprep artifact"
    tok = _decoder(art)
    started = time.time()
    say(f"{art.uri}: {m['counts']['rows']:,} rows in {len(m['shards'])} shards")
    stats = collect(art, max_rows=max_rows, seed=seed, examples=examples, progress=say)
    dictionary = read_dictionary((m.get("candidates") or {}).get("ngram_dictionary"))

    c = m["counts"]
    dl = ", ".join(f"{r} {n:,}" for r, n in sorted(c["dead_lettered_by_reason"].items()))
    hist = m["row_length_histogram"]
    full = hist["counts"][-1] if hist["counts"] else 0
    tokens = [s["tokens"] for s in m["shards"]]
    kinds = (m.get("candidates") or {}).get("kinds", [])
    why_no_spans = no_candidates(m, stats)

    def words_caption() -> str:
        parts = []
        for k in kinds:
            if stats.spans_read.get(k):
                mean_t = (
                    float((np.arange(len(stats.span_tokens[k])) * stats.span_tokens[k]).sum()) / stats.spans_read[k]
                )
                mean_w = float((np.arange(len(stats.span_words[k])) * stats.span_words[k]).sum()) / stats.spans_read[k]
                parts.append(f"{KIND_NAMES[k]} {mean_t:.1f} tokens / {mean_w:.1f} words")
        return (
            "Mean span length: "
            + "; ".join(parts)
            + f" (in {stats.scope()}); the last bar gathers {MAX_PLOTTED_SPAN_LEN} and longer."
        )

    doc_arr = np.asarray(stats.doc_tokens, dtype=np.int64)
    plan = [
        (
            "documents.png",
            "Documents read, written and dead-lettered by reason",
            lambda: plot_documents(plt, m),
            f"{c['documents_read']:,} documents read, {c['documents_written']:,} written, {c['documents_dead_lettered']:,} dead-lettered"
            + (f" ({dl})" if dl else "")
            + (f", {c['documents_duplicate']:,} duplicates left out" if c.get("documents_duplicate") else "")
            + (
                f", {c['documents_contaminated']:,} left out as evaluation overlap"
                if c.get("documents_contaminated")
                else ""
            )
            + ".",
        ),
        (
            "row_lengths.png",
            "Histogram of row lengths in tokens",
            lambda: plot_row_lengths(plt, m),
            f"{c['rows']:,} rows, {c['tokens']:,} tokens; {full:,} rows ({percent(full, c['rows'])}) are in the last bin, "
            f"up to the limit of {m['max_row_tokens']} tokens.",
        ),
        (
            "doc_tokens.png",
            "Histogram of tokens per document",
            lambda: plot_doc_tokens(plt, stats),
            (
                f"Tokens per document (sum of its rows' lengths) over {len(doc_arr):,} documents"
                + (" whose first row was sampled" if stats.sampled else "")
                + f": median {int(np.median(doc_arr)):,}, mean {doc_arr.mean():,.0f}, max {int(doc_arr.max()):,}."
            )
            if len(doc_arr)
            else "Tokens per document: not available (see the plot).",
        ),
        (
            "shards.png",
            "Tokens per shard",
            lambda: plot_shards(plt, m),
            f"{len(tokens)} shards; tokens per shard from {min(tokens, default=0):,} to {max(tokens, default=0):,} "
            f"(documents go to shards by a hash of their id).",
        ),
        (
            "spans_per_row.png",
            "Candidate spans per row by kind",
            lambda: plot_spans_per_row(plt, m, stats),
            (why_no_spans.capitalize() + ".")
            if why_no_spans
            else f"How many candidate spans a row holds, by kind, in {stats.scope()}.",
        ),
        (
            "span_lengths.png",
            "Candidate span lengths in tokens and in words by kind",
            lambda: plot_span_lengths(plt, m, stats),
            (why_no_spans.capitalize() + ".") if why_no_spans else words_caption(),
        ),
        (
            "entity_labels.png",
            "Most frequent entity labels",
            lambda: plot_entity_labels(plt, m, stats),
            (
                f"Top {min(TOP_LABELS, len(stats.entity_labels))} of {len(stats.entity_labels)} spaCy entity labels over "
                f"{sum(stats.entity_labels.values()):,} entity spans in {stats.scope()}."
            )
            if stats.entity_labels
            else (why_no_spans or "no entity span in the rows read").capitalize() + ".",
        ),
    ]
    if dictionary is not None and dictionary.reachable and dictionary.top:
        plan.append(
            (
                "ngrams.png",
                "Most frequent n-grams of the dictionary",
                lambda: plot_ngrams(plt, dictionary.top),
                f"The {min(TOP_NGRAMS, len(dictionary.top))} most frequent entries of the n-gram dictionary {dictionary.path}.",
            )
        )

    # Everything is made in memory first, so a failure leaves the previous report as it was.
    figures = [Figure(file, alt, caption) for file, alt, _, caption in plan]
    pngs = {file: png(make()) for file, _, make, _ in plan}
    page = build_html(art, stats, figures, dictionary, tok, name)
    card = build_card(
        m, pretty_name=name, license=license, source_license=source_license, language=language, uri=art.uri
    )
    try:
        art.fs.delete_dir_contents(art.path(fmt.REPORT_DIR), missing_dir_ok=True)
        art.fs.create_dir(art.path(fmt.REPORT_DIR), recursive=True)
    except OSError as e:
        raise ReportError(f"cannot write {art.display(fmt.REPORT_DIR)}: {e}") from None
    for file, data in pngs.items():
        _write(art, f"{fmt.REPORT_DIR}/{file}", data)
    _write(art, f"{fmt.REPORT_DIR}/{INDEX_FILE}", page.encode("utf-8"))
    _write(art, README_FILE, card.encode("utf-8"))
    say(
        f"wrote {art.display(fmt.REPORT_DIR + '/' + INDEX_FILE)} and {art.display(README_FILE)} in {time.time() - started:.1f} s"
    )
    return {
        "index": art.display(f"{fmt.REPORT_DIR}/{INDEX_FILE}"),
        "card": art.display(README_FILE),
        "plots": [art.display(f"{fmt.REPORT_DIR}/{f.file}") for f in figures],
        "stats": stats,
    }
