"""The dataset card ``README.md`` in the style of Hugging Face's: YAML front matter, how the artifact was built,
its sources and licences, counts, how to use it and its limitations; every number from the manifest."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pipeline.report import removals
from pipeline.report.common import DEFAULT_LICENSE, KIND_NAMES, plural, versions
from schemas import format as fmt

# Punkt model names (build_shards --language) -> ISO 639-1, for the card's language field.
PUNKT_LANGUAGES = {
    "czech": "cs", "danish": "da", "dutch": "nl", "english": "en", "estonian": "et", "finnish": "fi",
    "french": "fr", "german": "de", "greek": "el", "italian": "it", "malayalam": "ml", "norwegian": "no",
    "polish": "pl", "portuguese": "pt", "russian": "ru", "slovene": "sl", "spanish": "es", "swedish": "sv",
    "turkish": "tr",
}  # fmt: skip


def size_category(n: int) -> str:
    """Hugging Face's size_categories bucket for n examples (rows)."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
              (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
              (10_000_000_000, "1B<n<10B"), (100_000_000_000, "10B<n<100B"), (1_000_000_000_000, "100B<n<1T")]  # fmt: skip
    for bound, name in bounds:
        if n < bound:
            return name
    return "n>1T"


def _md(value: Any) -> str:
    """A markdown table cell."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def build_card(
    m: dict, *, pretty_name: str, license: str | None, source_license: str | None, language: str | None, uri: str
) -> str:
    c = m["counts"]
    cand = m.get("candidates") or {}
    kinds = [k for k in fmt.CANDIDATE_KINDS if k in cand.get("kinds", [])]
    opts = m.get("options", {})
    lang = language or PUNKT_LANGUAGES.get(str(opts.get("language", "")).lower())
    lic_line = (
        f"license: {json.dumps(license)}"
        if license
        else f"license: {DEFAULT_LICENSE}  # not given: set it with python -m pipeline.report --license <id>"
    )
    front = [
        "---",
        f"pretty_name: {json.dumps(pretty_name)}",
        lic_line,
        "language:",
        f"- {lang}" if lang else "- unknown  # set it with --language <ISO 639-1 code>",
        "task_categories:",
        "- fill-mask",
        "task_ids:",
        "- masked-language-modeling",
        "size_categories:",
        f"- {size_category(int(c['rows']))}",
        "tags:",
        "- spanbert",
        "- spanprep",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        f"    path: {fmt.SHARDS_DIR}/*.arrow",
        "---",
    ]
    command = ["python", "-m", "pipeline.build_shards", *[str(a) for a in m.get("command", [])]]
    tok = m["tokenizer"]
    # The manifest keeps the job's own options at the top level and Beam's under "beam".
    shown = {k: v for k, v in opts.items() if k != "beam" and v not in (None, "")}
    beam = opts.get("beam", {})
    lines = front + [
        "",
        f"# {pretty_name}",
        "",
        "## What it is",
        "",
        f"A preprocessed corpus for SpanBERT-style pre-training, made by spanprep (`.venv/bin/python -m pipeline.build_shards`): "
        f"{c['rows']:,} rows of at most {m['max_row_tokens']} WordPiece tokens ({c['tokens']:,} tokens in all) from "
        f"{plural(c['documents_written'], 'document')}, in {plural(len(m['shards']), 'Arrow IPC file')} (`{fmt.SHARDS_DIR}/*.arrow`, zstd). "
        f"One row is one training sequence without its special tokens: a trainer adds `[CLS]` before and `[SEP]` after "
        f"(max_seq_len {m['max_seq_len']}). Packing: `{m['pack']}`"
        + (
            " (whole sentences, never across documents, as SpanBERT)."
            if m["pack"] == "doc-sentences"
            else " (across documents with [SEP], RoBERTa FULL-SENTENCES)."
        )
        + (
            f" Mask candidates are stored per row as token spans: {', '.join(KIND_NAMES[k] for k in kinds)}."
            if kinds
            else " No mask candidates were stored (the span columns are empty)."
        ),
        "",
        f"Format `{m['format']}` version {m['format_version']} (spanprep's `schemas/FORMAT.md`). Files: `manifest.json` "
        "(counts, checksums, options; written last), `tokenizer.json` (the exact tokenizer), `unigram.arrow` (token "
        "frequencies), `shards/`, `dead_letter/` (rejected input records with the reason), `report/index.html` (plots "
        "and example rows).",
        "",
        "| column | type | meaning |",
        "|---|---|---|",
        "| `doc_id` | string | the source document |",
        "| `seq_index` | int32 | row number within the document |",
        f"| `input_ids` | list<{m.get('input_ids_type', 'uint16')}> | WordPiece ids, no [CLS]/[SEP] |",
        "| `word_start` | list<bool> | token begins a word |",
        "| `sentence_start` | list<bool> | token begins a sentence |",
        "| `entity_spans` | list<struct<start, end, label>> | named-entity candidates, token range [start, end) |",
        "| `noun_phrase_spans` | list<struct<start, end>> | noun-phrase candidates |",
        "| `ngram_spans` | list<struct<start, end>> | dictionary n-gram segments |",
        "",
        "## How it was built",
        "",
        _fence(shlex.join(command), "bash"),
        "",
        "| software | version |",
        "|---|---|",
        *[f"| {_md(k)} | {_md(v)} |" for k, v in versions(m)],
        "",
        f"Built {m.get('created_at', '?')} on the `{beam.get('runner', '?')}` Beam runner. Tokenizer: WordPiece, "
        f"{'uncased' if tok.get('lowercase') else 'cased'}, {tok['vocab_size']:,} ids, source `{tok['source']}` "
        f"(sha256 `{tok['sha256']}`).",
    ]
    if kinds:
        model = cand.get("spacy_model") or {}
        bits = []
        if model:
            bits.append(
                f"spaCy model `{model.get('name')}` {model.get('version', '')} (spaCy {model.get('spacy', '?')})"
            )
        if cand.get("np_chunker"):
            bits.append(f"noun phrases from `{cand['np_chunker']}`")
        if cand.get("ngram_dictionary"):
            d = cand["ngram_dictionary"]
            bits.append(
                f"n-gram dictionary `{d.get('path')}` ({int(d.get('entries', 0)):,} entries, sha256 `{d.get('sha256')}`)"
            )
        lines += ["", "Mask candidates: " + "; ".join(bits) + "."]
    lines += [
        "",
        "Options of the job:",
        "",
        "| option | value |",
        "|---|---|",
        *[f"| `{_md(k)}` | {_md(json.dumps(v) if not isinstance(v, str) else v)} |" for k, v in sorted(shown.items())],
        "",
        "## Source data",
        "",
        "| input | bytes | sha256 | documents read | truncated |",
        "|---|---:|---|---:|---|",
        *[
            f"| `{_md(i['path'])}` | {i['bytes']:,} | `{i['sha256']}` | {i['documents_read']:,} | {'yes' if i.get('truncated') else 'no'} |"
            for i in m["inputs"]
        ],
        "",
        "### Licence of the sources",
        "",
        source_license.strip()
        if source_license
        else "Not stated: whoever made this card did not give `--source-license`. Check the terms of the sources above "
        "before you use or share this dataset.",
        "",
        "### Licence of this dataset",
        "",
        f"`{license}`."
        if license
        else "Unknown: set it with `.venv/bin/python -m pipeline.report ARTIFACT --license <id>`.",
        "",
        "## Counts",
        "",
        "All from `manifest.json` (`counts`); every document read is written, dead-lettered, or left out as a duplicate "
        "or as evaluation overlap.",
        "",
        "| count | value |",
        "|---|---:|",
        *[
            f"| `{k}` | {c[k]:,} |"
            for k in (
                "documents_read",
                "documents_written",
                "documents_dead_lettered",
                "documents_duplicate",
                "documents_contaminated",
                "documents_cleaned",
                "duplicate_doc_ids",
                "inputs_with_byte_order_mark",
                "rows",
                "tokens",
                "sentences",
                "sentences_cut",
                "long_words",
                "continuation_rows",
            )
            if k in c
        ],
        *[f"| `dead_lettered_by_reason.{_md(r)}` | {n:,} |" for r, n in sorted(c["dead_lettered_by_reason"].items())],
        *[f"| `candidates.spans.{k}` | {int(cand.get('spans', {}).get(k, 0)):,} |" for k in kinds],
        *[
            f"| `candidates.dropped_at_row_boundary.{k}` | {int(cand.get('dropped_at_row_boundary', {}).get(k, 0)):,} |"
            for k in kinds
        ],
        "",
        *(removals.card_section(m) if removals.checked(m) else []),
        "## How to use it",
        "",
        "With pyarrow (one shard):",
        "",
        _fence(
            f'import pyarrow.ipc as ipc\ntable = ipc.open_file("{uri}/{m["shards"][0]["path"] if m["shards"] else "shards/part-00000-of-00001.arrow"}").read_all()',
            "python",
        ),
        "",
        "With Hugging Face `datasets`:",
        "",
        _fence(
            f'import datasets\nds = datasets.load_dataset("arrow", data_files="{uri}/{fmt.SHARDS_DIR}/*.arrow", split="train")',
            "python",
        ),
        "",
        "Pre-training SpanBERT on it with spanprep's trainer:",
        "",
        _fence(
            f".venv/bin/deepspeed trainer/pretrain.py --deepspeed_config trainer/configs/zero2.json --data {shlex.quote(uri)} \\\n"
            f"    --preset base --max-steps 100000 --output-dir runs/base",
            "bash",
        ),
        "",
        f"Check it first (checksums, counts, invariants): `.venv/bin/python -m pipeline.verify {shlex.quote(uri)}`. The decoded text: "
        '`tokenizers.Tokenizer.from_file("tokenizer.json").decode(ids)`.',
        "",
        "## Limitations",
        "",
        f"- Text is lossy where the tokenizer is: {'it lowercases, and ' if tok.get('lowercase') else ''}characters outside the "
        "vocabulary become `[UNK]`; the original text is not stored, only token ids.",
        "- Rows hold whole sentences; a sentence longer than a row is cut at a word boundary "
        f"({c['sentences_cut']:,} here)"
        + (
            f"; a word longer than a row goes on in continuation rows that start inside it ({c['long_words']:,} such "
            f"words, {c['continuation_rows']:,} rows)"
            if c.get("long_words")
            else ""
        )
        + ". Rows never contain `[CLS]`/`[SEP]`"
        + (" except the document separators of full-sentences packing." if m["pack"] != "doc-sentences" else "."),
        f"- {c['documents_dead_lettered']:,} input records were rejected and are not in the shards (see `dead_letter/`).",
    ]
    if kinds:
        lines.append(
            "- Mask candidates come from automatic tools (spaCy's statistical tagger, parser and NER; greedy dictionary "
            "matching) and contain their errors; a candidate cut by a row boundary is dropped, not clipped."
        )
    lines += [
        "- Documents with the same id are kept"
        + (f" ({c.get('duplicate_doc_ids', 0):,} duplicate ids here)" if c.get("duplicate_doc_ids") else "")
        + (
            "; copies of text were left out (see above)"
            if (m.get("dedup") or {}).get("mode", "off") != "off"
            else "; no deduplication of text was done"
        )
        + ", and no filtering for quality, personal data or toxicity.",
        "- There is one split, `train`; a trainer holds out shards for evaluation itself.",
        "",
    ]
    return "\n".join(lines)
