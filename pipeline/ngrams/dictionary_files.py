"""Write the dictionary: ngram_to_count + sources + corpus summary + dead letters -> the dictionary directory
(``WriteNgramDictionary``), in the format of ``schemas/NGRAM_DICTIONARY.md``, manifest last."""

from __future__ import annotations

import json
import logging
import operator
import time
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from pipeline import __version__
from pipeline.files import HashingSink, atomic_create, remove_abandoned_temporaries
from pipeline.ngrams.rules import NgramRules
from pipeline.output import check_lock, finished_earlier, release_lock
from schemas.ngram_dictionary import (
    ARROW_FILE,
    ARROW_SCHEMA,
    COLUMNS,
    DEAD_LETTER_FILE,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_FILE,
    SORT_ORDER,
    TSV_FILE,
)

_LOG = logging.getLogger("spanprep.build_ngram_dictionary")

ARROW_BATCH_ROWS = 64 * 1024  # rows per record batch of ngrams.arrow (and lines per write of the text files)


def _sorted_entries(ngram_to_count) -> list[tuple[str, int]]:
    """Count descending, then ngram ascending: two stable sorts on the existing objects (no key tuples)."""
    entries = sorted(ngram_to_count, key=operator.itemgetter(0))
    entries.sort(key=operator.itemgetter(1), reverse=True)  # reverse=True keeps equal counts in ngram order
    return entries


def write_arrow(path: str, entries: list[tuple[str, int]]) -> dict[str, Any]:
    """Write ``ngrams.arrow`` (entries already in dictionary order) batch by batch; its size and sha256."""
    with atomic_create(path, "application/vnd.apache.arrow.file") as f:
        out = HashingSink(f)
        with pa.ipc.new_file(pa.PythonFile(out, mode="w"), ARROW_SCHEMA) as writer:
            for start in range(0, len(entries), ARROW_BATCH_ROWS):
                rows = entries[start : start + ARROW_BATCH_ROWS]
                writer.write_batch(
                    pa.record_batch(
                        [
                            pa.array([ngram for ngram, _ in rows], pa.string()),
                            pa.array([ngram.count(" ") + 1 for ngram, _ in rows], pa.int8()),
                            pa.array([count for _, count in rows], pa.int64()),
                        ],
                        schema=ARROW_SCHEMA,
                    )
                )
    return out.record()


def write_lines(path: str, lines, mime_type: str) -> dict[str, Any]:
    """Write text lines (each ending in a newline) as UTF-8, in blocks; the file's size and sha256."""
    with atomic_create(path, mime_type) as f:
        out = HashingSink(f)
        block: list[str] = []
        for line in lines:
            block.append(line)
            if len(block) >= ARROW_BATCH_ROWS:
                out.write("".join(block).encode("utf-8"))
                block = []
        out.write("".join(block).encode("utf-8"))
    return out.record()


def _tsv_lines(entries: list[tuple[str, int]]):
    yield "\t".join(COLUMNS) + "\n"
    for ngram, count in entries:
        yield f"{ngram}\t{ngram.count(' ') + 1}\t{count}\n"


class _WriteDictionaryFiles(beam.DoFn):
    """The single list of surviving entries -> the dictionary files, manifest last; yields the manifest."""

    def __init__(self, *, output: str, options: dict[str, Any], rules: NgramRules, build_id: str | None = None):
        self._output = output
        self._options = options
        self._rules = rules
        self._build_id = build_id

    def process(self, ngram_to_count, sources, corpus_summary, dead_letters):
        started = time.monotonic()
        entries = _sorted_entries(ngram_to_count)
        per_n = {str(n): 0 for n in range(self._rules.min_n, self._rules.max_n + 1)}
        for ngram, _ in entries:
            per_n[str(ngram.count(" ") + 1)] += 1
        dead = sorted(dead_letters, key=lambda d: (d["source"], d["line"], d["reason"]))
        join = FileSystems.join
        files = {
            ARROW_FILE: write_arrow(join(self._output, ARROW_FILE), entries),
            TSV_FILE: write_lines(join(self._output, TSV_FILE), _tsv_lines(entries), "text/tab-separated-values"),
            DEAD_LETTER_FILE: write_lines(
                join(self._output, DEAD_LETTER_FILE),
                (json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in dead),
                "application/jsonl",
            ),
        }
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created_by": {"package": "spanprep", "version": __version__, "job": "pipeline.build_ngram_dictionary"},
            "options": self._options,
            "rules": {
                "threshold": f"count >= {self._rules.min_count} (inclusive)",
                "n": f"{self._rules.min_n} <= n <= {self._rules.max_n}",
                "barriers": "n-grams never cross a line, a heading line or <unk>; heading lines never count",
                "punctuation": "@-@ @,@ @.@, or a token made only of Unicode punctuation (P*) or symbol (S*) "
                "characters"
                + ("; n-grams containing one are dropped" if self._rules.drop_punctuation else "; counted like words"),
                "lowercase": self._rules.lowercase,
                "sort": SORT_ORDER,
            },
            "sources": sorted(sources, key=lambda s: s["path"]),
            "corpus": corpus_summary,
            "entries_per_n": per_n,
            "total_entries": len(entries),
            "files": files,
        }
        for name in remove_abandoned_temporaries(self._output):  # left by a writer killed mid-file, then retried
            _LOG.warning(
                "removed %s, left by a writer that was killed and retried", FileSystems.join(self._output, name)
            )
        data = (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        if self._build_id and finished_earlier(self._output, self._build_id, MANIFEST_FILE, data):
            _LOG.warning("%s: already written by an earlier attempt of this step (a retry)", MANIFEST_FILE)
            yield manifest
            return
        if self._build_id:
            check_lock(self._output, self._build_id)  # another build took the output over: write no manifest
        with atomic_create(FileSystems.join(self._output, MANIFEST_FILE), "application/json") as f:
            f.write(data)
        if self._build_id:
            release_lock(self._output)
        _LOG.info("wrote %d entries to %s in %.1f s", len(entries), self._output, time.monotonic() - started)
        yield manifest


class WriteNgramDictionary(beam.PTransform):
    """ngram_to_count (the survivors) + sources + corpus summary + dead letters -> the dictionary directory.

    The survivors are collected into one list (400k entries on WikiText-103: a few tens of MB) so that one
    worker writes the single sorted file; returns a PCollection holding the manifest.
    """

    def __init__(self, *, output: str, options: dict[str, Any], rules: NgramRules, build_id: str | None = None):
        super().__init__()
        self._write = _WriteDictionaryFiles(output=output, options=options, rules=rules, build_id=build_id)

    def expand(self, inputs):
        ngram_to_count, sources, corpus_summary, dead_letters = inputs
        all_entries = ngram_to_count | "CollectEntries" >> beam.combiners.ToList()
        return all_entries | "WriteFiles" >> beam.ParDo(
            self._write,
            sources=beam.pvalue.AsList(sources),
            corpus_summary=beam.pvalue.AsSingleton(corpus_summary),
            dead_letters=beam.pvalue.AsList(dead_letters),
        )
