"""The report page ``report/index.html``: self-contained HTML (inline CSS, no scripts) with the summary
tables, the plots, the n-gram dictionary and example rows decoded with their candidate spans marked."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.report import removals
from pipeline.report.common import KIND_CSS, KIND_NAMES, README_FILE, percent, plural, versions
from pipeline.report.statistics import Dictionary, Example, Stats
from schemas import format as fmt
from schemas.artifact import Artifact


def _segment_texts(tok, ids: list[int], bounds: list[int]) -> list[str]:
    """Text of each token range [bounds[j], bounds[j+1]) as the tokenizer decodes the row (prefix decoding,
    so spaces and WordPiece joins come out as in the whole row)."""
    out, prev = [], ""
    for a, b in zip(bounds, bounds[1:]):
        full = tok.decode(ids[:b], skip_special_tokens=False)
        if full.startswith(prev):
            out.append(full[len(prev) :])
        else:  # the decoder rewrote earlier text: decode the piece alone
            out.append((" " if a else "") + tok.decode(ids[a:b], skip_special_tokens=False))
        prev = full
    return out


def render_example(tok, ex: Example, kinds: list[str]) -> str:
    """HTML of one row: the decoded text with each kind's spans marked (escaped; spans may nest or cross)."""
    n = len(ex.input_ids)
    cover = {k: np.zeros(n + 1, np.int64) for k in kinds}
    bounds = {0, n}
    for k in kinds:
        for s, e, _ in ex.spans[k]:
            cover[k][s] += 1
            cover[k][e] -= 1
            bounds.update((s, e))
    for k in kinds:
        cover[k] = np.cumsum(cover[k])
    cuts = sorted(bounds)
    texts = _segment_texts(tok, ex.input_ids, cuts)
    starts = {k: {s for s, _, _ in ex.spans[k]} for k in kinds}
    ends: dict[int, list[str]] = {}
    for _, e, label in ex.spans.get("entities", []) if "entities" in kinds else []:
        ends.setdefault(e, []).append(label)
    end_sets = {k: {e for _, e, _ in ex.spans[k]} for k in kinds}
    parts = []
    for (a, b), text in zip(zip(cuts, cuts[1:]), texts):
        body_classes, lead_classes = [], []
        for k in kinds:
            if cover[k][a] > 0:
                body_classes.append(KIND_CSS[k])
                if a in starts[k]:
                    body_classes.append(KIND_CSS[k] + "-s")
                elif a > 0 and cover[k][a - 1] > 0 and a not in end_sets[k]:
                    lead_classes.append(KIND_CSS[k])  # the space inside a span that goes on
        lead = text[: len(text) - len(text.lstrip())]
        for classes, piece in ((lead_classes, lead), (body_classes, text[len(lead) :])):
            if classes and piece:
                parts.append(f'<span class="{" ".join(classes)}">{html.escape(piece)}</span>')
            else:
                parts.append(html.escape(piece))
        for label in ends.get(b, []):
            parts.append(f'<span class="lbl">{html.escape(label)}</span>')
    return "".join(parts)


CSS = """
:root { color-scheme: light; }
body { font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #111827;
       margin: 0; background: #f9fafb; }
main { max-width: 1060px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 1.6em; margin: 0 0 2px; }
h2 { font-size: 1.2em; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid #e5e7eb; }
.sub { color: #4b5563; margin: 0 0 18px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .88em; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(175px, 1fr)); gap: 12px; margin: 8px 0 10px; }
.card { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 14px; }
.card .k { color: #6b7280; font-size: .82em; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 1.45em; font-weight: 650; }
.card .d { color: #4b5563; font-size: .85em; }
table { border-collapse: collapse; background: #fff; border: 1px solid #e5e7eb; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #f0f1f3; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f4f6; font-weight: 600; font-size: .9em; }
.tables { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 14px; align-items: start; }
.tables table { width: 100%; }
figure { margin: 0 0 22px; background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 12px; }
figure img { max-width: 100%; height: auto; display: block; }
figcaption { color: #374151; font-size: .92em; margin-top: 6px; }
.note { background: #fffbeb; border: 1px solid #fde68a; border-radius: 6px; padding: 8px 12px; color: #78350f; }
.bad { color: #b91c1c; font-weight: 600; }
.example { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 14px; margin: 0 0 14px; }
.example .meta { color: #6b7280; font-size: .85em; margin-bottom: 6px; }
.example .text { line-height: 2.0; max-height: 18em; overflow-y: auto; white-space: pre-wrap; overflow-wrap: anywhere; }
.ent { background: #fde68a; border-radius: 2px; }
.ent-s { margin-left: 2px; }
.np { text-decoration: underline 2px #2563eb; text-underline-offset: 4px; }
.np-s { margin-left: 2px; }
.ng { border-top: 2px dotted #059669; }
.lbl { font-size: .62em; font-weight: 700; color: #92400e; vertical-align: super; margin: 0 2px 0 1px; }
.legend span { margin-right: 16px; }
footer { color: #6b7280; font-size: .85em; margin-top: 36px; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _n(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


def _table(headers: list[str], rows: list[list[Any]], numeric: frozenset[int] | set[int] = frozenset()) -> str:
    head = "".join(
        f'<th class="n">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>" for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            raw = (
                v
                if isinstance(v, _Html)
                else _e(v if not isinstance(v, (int, float)) or isinstance(v, bool) else _n(v))
            )
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            cells.append(f'<td class="n">{raw}</td>' if i in numeric and number else f"<td>{raw}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Html(str):
    """Already-escaped HTML."""


def _dead_letter_examples(art: Artifact) -> dict[str, dict]:
    """The first record of each dead-letter file (read up to its first newline only)."""
    out = {}
    for d in art.manifest.get("dead_letter", []):
        try:
            with art.fs.open_input_stream(art.path(d["path"])) as f:
                head = f.read(1 << 16).split(b"\n", 1)[0]
            rec = json.loads(head.decode("utf-8", "replace"))
            out[d["path"]] = rec if isinstance(rec, dict) else {}
        except (OSError, ValueError):
            out[d["path"]] = {}
    return out


@dataclass
class Figure:
    file: str
    alt: str
    caption: str


def build_html(
    art: Artifact, stats: Stats, figures: list[Figure], dictionary: Dictionary | None, tok, pretty_name: str
) -> str:
    m = art.manifest
    c = m["counts"]
    cand = m.get("candidates") or {}
    kinds = [k for k in fmt.CANDIDATE_KINDS if k in cand.get("kinds", [])]
    total_bytes = sum(s["bytes"] for s in m["shards"])
    doc_tokens = np.asarray(stats.doc_tokens, dtype=np.int64)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(pretty_name)}: spanprep artifact report</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<h1>{_e(pretty_name)}</h1>",
        f'<p class="sub">spanprep preprocessed corpus <code>{_e(art.uri)}</code> · format {_e(m["format_version"])} · '
        f"built {_e(m.get('created_at', '?'))} by spanprep {_e(m.get('created_by', {}).get('version', '?'))} · "
        f'dataset card: <a href="../{README_FILE}">README.md</a> · <a href="../{fmt.MANIFEST_FILE}">manifest.json</a></p>',
    ]
    # -- key figures -------------------------------------------------------------------------
    dead = c["documents_dead_lettered"]
    cards = [
        ("documents written", _n(c["documents_written"]), f"of {_n(c['documents_read'])} read"),
        ("dead-lettered", _n(dead), f"{percent(dead, c['documents_read'])} of documents read"),
        (
            "rows",
            _n(c["rows"]),
            f"≤ {m['max_row_tokens']} tokens each, mean {c['tokens'] / c['rows']:.0f}" if c["rows"] else "no rows",
        ),
        ("tokens", _n(c["tokens"]), f"{plural(len(m['shards']), 'shard')}, {total_bytes / 1e6:,.1f} MB"),
    ]
    if kinds:
        spans = cand.get("spans", {})
        cards.append(
            (
                "candidate spans",
                _n(sum(spans.get(k, 0) for k in kinds)),
                ", ".join(f"{KIND_NAMES[k]} {_n(spans.get(k, 0))}" for k in kinds),
            )
        )
    else:
        cards.append(("candidate spans", "none", "built without --mask-candidates"))
    out.append(
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div><div class="d">{_e(d)}</div></div>'
            for k, v, d in cards
        )
        + "</div>"
    )

    tok_info = m["tokenizer"]
    docs_rows = [
        ["documents read", c["documents_read"]],
        ["documents written", c["documents_written"]],
        ["documents dead-lettered", c["documents_dead_lettered"]],
        *[
            [_Html(f"&nbsp;&nbsp;reason <code>{_e(r)}</code>"), n]
            for r, n in sorted(c["dead_lettered_by_reason"].items())
        ],
        *([["documents left out as duplicates", c["documents_duplicate"]]] if "documents_duplicate" in c else []),
        *(
            [["documents left out as evaluation overlap", c["documents_contaminated"]]]
            if "documents_contaminated" in c
            else []
        ),
        ["documents cleaned (control characters removed)", c.get("documents_cleaned", 0)],
        ["duplicate document ids", c.get("duplicate_doc_ids", 0)],
    ]
    rows_rows = [
        ["rows", c["rows"]],
        ["tokens", c["tokens"]],
        ["sentences", c["sentences"]],
        ["sentences longer than a row (cut)", c["sentences_cut"]],
        *(
            [["words longer than a row", c["long_words"]], ["their continuation rows", c["continuation_rows"]]]
            if "long_words" in c  # format 2.0 on
            else []
        ),
        [f"max tokens per row (max_seq_len − {fmt.SPECIAL_POSITIONS})", m["max_row_tokens"]],
        ["mean tokens per row", round(c["tokens"] / c["rows"], 1) if c["rows"] else "n/a"],
        ["packing", m["pack"]],
        ["shards", len(m["shards"])],
    ]
    build_rows = [
        ["tokenizer", f"WordPiece, {tok_info['source']}, {'uncased' if tok_info.get('lowercase') else 'cased'}"],
        ["vocabulary", tok_info["vocab_size"]],
        ["input_ids type", m.get("input_ids_type", "")],
        ["inputs", len(m["inputs"])],
        ["runner", m.get("options", {}).get("beam", {}).get("runner", "?")],
        ["created by", ", ".join(f"{k} {v}" for k, v in versions(m))],
    ]
    cand_rows: list[list[Any]] = []
    if kinds:
        for k in kinds:
            covered = stats.tokens_covered.get(k, 0)
            cand_rows.append(
                [
                    KIND_NAMES[k],
                    cand.get("spans", {}).get(k, 0),
                    cand.get("dropped_at_row_boundary", {}).get(k, 0),
                    percent(covered, stats.tokens_read),
                ]
            )
        model = cand.get("spacy_model") or {}
    out.append("<h2>Summary</h2>")
    out.append('<div class="tables">')
    out.append(_table(["documents", ""], docs_rows, {1}))
    out.append(_table(["rows and tokens", ""], rows_rows, {1}))
    out.append(_table(["build", ""], build_rows, {1}))
    if kinds:
        extra = []
        if cand.get("spacy_model"):
            extra.append(f"spaCy {model.get('name', '?')} {model.get('version', '')}")
        if cand.get("np_chunker"):
            extra.append(f"noun phrases by {cand['np_chunker']}")
        out.append(
            "<div>"
            + _table(
                ["mask candidates", "spans", "cut by a row end (dropped)", "tokens covered*"], cand_rows, {1, 2, 3}
            )
            + f'<p class="d">{_e("; ".join(extra))}. *in {_e(stats.scope())}.</p></div>'
        )
    out.append("</div>")
    if dead:
        firsts = _dead_letter_examples(art)
        dl_rows = []
        for d in m.get("dead_letter", []):
            rec = firsts.get(d["path"], {})
            reason = d["path"].rsplit("/", 1)[-1].removesuffix(".jsonl")
            src = rec.get("source") or {}
            where = f"{src.get('path', '?')}:{src.get('line', '?')}" if src else ""
            dl_rows.append(
                [
                    _Html(f'<a href="../{_e(d["path"])}"><code>{_e(reason)}</code></a>'),
                    d["records"],
                    f"{where} {rec.get('detail', '')}".strip(),
                    (rec.get("preview") or "")[:160],
                ]
            )
        out.append("<h2>Dead letters</h2>")
        out.append(_table(["reason (file)", "records", "first: where and why", "first: preview"], dl_rows, {1}))
    if removals.checked(m):
        out.append("<h2>Duplicates and evaluation overlap</h2>")
        out.append(f"<p>{_e(removals.dedup_line(m))}</p><p>{_e(removals.contamination_line(m))}</p>")
        if removals.contamination_rows(m):
            out.append(_table(removals.HEADERS, removals.contamination_rows(m), {1, 2, 3, 5}))
    # -- plots -------------------------------------------------------------------------------
    out.append("<h2>Plots</h2>")
    out.append(
        f'<p class="sub">Row lengths, documents and shards come from the manifest (every row); the other plots from {_e(stats.scope())}.</p>'
    )
    for f in figures:
        out.append(
            f'<figure><img src="{_e(f.file)}" alt="{_e(f.alt)}"><figcaption>{_e(f.caption)}</figcaption></figure>'
        )
    # -- n-gram dictionary ---------------------------------------------------------------------
    if cand.get("ngram_dictionary"):
        out.append("<h2>N-gram dictionary</h2>")
        info = cand["ngram_dictionary"]
        out.append(
            f"<p>{_n(int(info.get('entries', 0)))} entries (n ≤ {_e(info.get('max_n', '?'))}) from <code>{_e(info.get('path'))}</code>.</p>"
        )
        if dictionary is None or not dictionary.reachable:
            out.append(f'<p class="note">{_e(dictionary.message if dictionary else "not reachable")}</p>')
        else:
            if not dictionary.message.endswith("matches the manifest)"):
                out.append(f'<p class="note">{_e(dictionary.message)}</p>')
            rows = [
                [n, entries, " · ".join(f"{r['ngram']} ({r['count']:,})" for r in top)]
                for n, (entries, top) in sorted(dictionary.per_n.items())
            ]
            out.append(_table(["n", "entries", "most frequent (occurrences)"], rows, {0, 1}))
    # -- examples ----------------------------------------------------------------------------
    out.append("<h2>Example rows</h2>")
    if stats.examples:
        legend = " ".join(f'<span class="{KIND_CSS[k]}">{_e(KIND_NAMES[k])}</span>' for k in kinds)
        chosen = "rows with at least one candidate span" if kinds else "rows"
        out.append(
            f'<p class="legend">{len(stats.examples)} {chosen} chosen at random (seed {stats.seed}) from {_e(stats.scope())}, decoded with '
            f"the artifact's tokenizer.json. {('Marks: ' + legend + '; entity labels are raised after the entity.') if kinds else ''}</p>"
        )
        for ex in stats.examples:
            counts = ", ".join(f"{len(ex.spans[k])} {KIND_NAMES[k]}" for k in kinds)
            meta = (
                f"document {ex.doc_id}, row {ex.seq_index} · {len(ex.input_ids)} tokens"
                + (f" · {counts}" if counts else "")
                + f" · {ex.shard}"
            )
            out.append(
                f'<div class="example"><div class="meta">{_e(meta)}</div><div class="text">{render_example(tok, ex, kinds)}</div></div>'
            )
    else:
        out.append('<p class="note">no row to show</p>')
    out.append(
        f"<footer>Made by <code>python -m pipeline.report</code> from the manifest and the shards. Check the artifact with "
        f"<code>python -m pipeline.verify {_e(art.uri)}</code>. Format: schemas/FORMAT.md, version {_e(m['format_version'])}."
        + (
            f" Tokens per document: {len(doc_tokens):,} documents, median {int(np.median(doc_tokens)):,}, mean {doc_tokens.mean():,.0f}, max {int(doc_tokens.max()):,}."
            if len(doc_tokens)
            else ""
        )
        + "</footer>"
    )
    out.append("</main></body></html>")
    return "\n".join(out) + "\n"
