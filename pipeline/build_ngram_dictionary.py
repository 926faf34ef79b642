"""Build an n-gram dictionary (Span Fine-tuning, Bao et al. 2021) from WikiText files with Apache Beam.

    python -m pipeline.build_ngram_dictionary --input wiki.train.tokens --output dictionaries/wikitext103 \\
        --max-n 5 --min-n 2 --min-count 11 [--lowercase] [--drop-punctuation]

    # two local worker processes:
    python -m pipeline.build_ngram_dictionary ... --direct_running_mode multi_processing --direct_num_workers 2
    # any Beam runner, inputs and output on gs:// or s3://:
    python -m pipeline.build_ngram_dictionary --input 'gs://b/wikitext-103/wiki.*.tokens' --output gs://b/dict \\
        --runner DataflowRunner --project P --region R --temp_location gs://b/tmp \\
        --extra_package dist/spanprep-0.1.0.tar.gz    # workers need this package: python -m build --sdist
    (remote runners are not exercised by the tests here, which run offline)

``--input`` is repeatable and takes globs. ``--min-count`` is inclusive (keep ``count >= min_count``); its
default 11 is the paper's "more than ten times" (its public code keeps ``>= 10``). The counting rules are in
``pipeline/ngram_counts.py`` and ``dictionaries/README.md``. The runner is the local FnApiRunner unless
``--runner`` says otherwise.

Output directory (``manifest.json`` is written last: its presence means the dictionary is complete):

- ``ngrams.arrow``: Arrow IPC file, columns ``ngram`` (string: tokens joined by one space), ``n`` (int8),
  ``count`` (int64); rows sorted by count descending, then by ngram ascending in Unicode code point order
  (the same as UTF-8 byte order).
- ``ngrams.tsv``: the same rows, same order, tab-separated, with the header ``ngram<TAB>n<TAB>count``.
- ``dead_letter.jsonl``: one record per input line that is not UTF-8 (``source``, ``reason``, ``line``);
  usually empty.
- ``manifest.json``: format version, package version, options, sources (path, bytes, sha256), what the input
  was made of (lines by kind, tokens), entries per n, total entries, and size and sha256 of each file above.

The same input and options give byte-identical files, whatever the runner or number of workers.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import sys
import time
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipeline import ngram_counts
from pipeline.files import HashingSink
from pipeline.ngram_counts import CorpusSummary, FrequentNgrams, NgramRules, ReadLines, SourceFiles

_LOG = logging.getLogger("spanprep.build_ngram_dictionary")

FORMAT = "spanprep-ngram-dictionary"
FORMAT_VERSION = 1
ARROW_FILE = "ngrams.arrow"
TSV_FILE = "ngrams.tsv"
DEAD_LETTER_FILE = "dead_letter.jsonl"
MANIFEST_FILE = "manifest.json"
SORT_ORDER = "count descending, then ngram ascending by Unicode code point (= UTF-8 byte order)"
ARROW_SCHEMA = pa.schema(
    [
        pa.field("ngram", pa.string(), nullable=False),
        pa.field("n", pa.int8(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
    ],
    metadata={"format": FORMAT, "format_version": str(FORMAT_VERSION)},
)
ARROW_BATCH_ROWS = 64 * 1024
AUTO_SPLITS = 64  # default: read the input in about this many byte ranges (parallelism), ...
MIN_AUTO_SPLIT_BYTES = 1 << 20  # ... of at least 1 MiB
MAX_AUTO_SPLIT_BYTES = 64 << 20  # ... and at most 64 MiB (Beam's own default)
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")


class UsageError(Exception):
    """Bad options or input: reported as one ``error:`` line, without a traceback."""


class NgramDictionaryOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        # Beam parses the flags of every PipelineOptions subclass imported in the process with ONE parser
        # (get_all_options); two jobs that both define --input would make every pipeline in that process fail
        # with "conflicting option string". Let the later definition win instead (argparse copies the handler
        # into its default group at construction). This job reads its own options through view_as(), which
        # parses with this class alone.
        parser.conflict_handler = "resolve"
        parser._optionals.conflict_handler = "resolve"  # pylint: disable=protected-access
        parser.add_argument(
            "--input", action="append", default=None,
            help="WikiText file or glob (local, gs://, s3://, ...); repeatable. Compressed files (.gz, .bz2, "
            ".zst) are read by extension.",
        )
        parser.add_argument("--output", default=None, help="output directory (local, gs://, s3://, ...)")
        parser.add_argument("--min-n", "--min_n", dest="min_n", type=int, default=2,
                            help="shortest n-gram kept (default 2)")
        parser.add_argument("--max-n", "--max_n", dest="max_n", type=int, default=5,
                            help="longest n-gram counted (default 5)")
        parser.add_argument(
            "--min-count", "--min_count", dest="min_count", type=int, default=11,
            help="keep n-grams with count >= MIN_COUNT (inclusive). Default 11: the paper's 'more than ten "
            "times'; its public code keeps count >= 10",
        )
        parser.add_argument("--lowercase", action="store_true", help="lowercase tokens before counting")
        parser.add_argument(
            "--drop-punctuation", "--drop_punctuation", dest="drop_punctuation", action="store_true",
            help="drop n-grams that contain a punctuation token (@-@ @,@ @.@, or only Unicode P*/S* chars)",
        )
        parser.add_argument(
            "--pruning", choices=ngram_counts.PRUNING_MODES, default="apriori",
            help="apriori (default): count the words, then each length n only where both of its (n-1)-grams "
            "are frequent (exact; reads the input twice); none: count every n-gram as a string in one pass "
            "(for min-count 1 or 2)",
        )
        parser.add_argument(
            "--split-mb", "--split_mb", dest="split_mb", type=float, default=None,
            help="input files are read in byte ranges of about this size, so that workers share a big file "
            "(default: the input size / 64, within 1..64 MB)",
        )
        parser.add_argument(
            "--max-keys-per-bundle", "--max_keys_per_bundle", dest="max_keys_per_bundle", type=int,
            default=1_000_000,
            help="a worker flushes its partial counts when it holds this many distinct n-grams (bounds its "
            "memory: about 16 bytes per key as numbers, 100+ as strings; default 1000000)",
        )
        parser.add_argument("--overwrite", action="store_true",
                            help="replace a dictionary that already exists at --output")


# --------------------------------------------------------------------------------------------------
# Writing the dictionary


def _sorted_entries(ngram_to_count) -> list[tuple[str, int]]:
    """Count descending, then ngram ascending: two stable sorts on the existing objects (no key tuples)."""
    entries = sorted(ngram_to_count, key=operator.itemgetter(0))
    entries.sort(key=operator.itemgetter(1), reverse=True)  # reverse=True keeps equal counts in ngram order
    return entries


def _create(path: str, mime_type: str):
    return FileSystems.create(path, mime_type=mime_type, compression_type=CompressionTypes.UNCOMPRESSED)


def write_arrow(path: str, entries: list[tuple[str, int]]) -> dict[str, Any]:
    """Write ``ngrams.arrow`` (entries already in dictionary order) batch by batch; its size and sha256."""
    with _create(path, "application/vnd.apache.arrow.file") as f:
        out = HashingSink(f)
        with pa.ipc.new_file(pa.PythonFile(out, mode="w"), ARROW_SCHEMA) as writer:
            for start in range(0, len(entries), ARROW_BATCH_ROWS):
                rows = entries[start : start + ARROW_BATCH_ROWS]
                writer.write_batch(pa.record_batch(
                    [
                        pa.array([ngram for ngram, _ in rows], pa.string()),
                        pa.array([ngram.count(" ") + 1 for ngram, _ in rows], pa.int8()),
                        pa.array([count for _, count in rows], pa.int64()),
                    ],
                    schema=ARROW_SCHEMA,
                ))
    return out.record()


def write_lines(path: str, lines, mime_type: str) -> dict[str, Any]:
    """Write text lines (each ending in a newline) as UTF-8, in blocks; the file's size and sha256."""
    with _create(path, mime_type) as f:
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
    yield "ngram\tn\tcount\n"
    for ngram, count in entries:
        yield f"{ngram}\t{ngram.count(' ') + 1}\t{count}\n"


class _WriteDictionaryFiles(beam.DoFn):
    """The single list of surviving entries -> the dictionary files, manifest last; yields the manifest."""

    def __init__(self, *, output: str, options: dict[str, Any], rules: NgramRules):
        self._output = output
        self._options = options
        self._rules = rules

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
            "created_by": {"package": "spanprep", "version": package_version(),
                           "job": "pipeline.build_ngram_dictionary"},
            "options": self._options,
            "rules": {
                "threshold": f"count >= {self._rules.min_count} (inclusive)",
                "n": f"{self._rules.min_n} <= n <= {self._rules.max_n}",
                "barriers": "n-grams never cross a line, a heading line or <unk>; heading lines never count",
                "punctuation": "@-@ @,@ @.@, or a token made only of Unicode punctuation (P*) or symbol (S*) "
                "characters" + ("; n-grams containing one are dropped" if self._rules.drop_punctuation
                                else "; counted like words"),
                "lowercase": self._rules.lowercase,
                "sort": SORT_ORDER,
            },
            "sources": sorted(sources, key=lambda s: s["path"]),
            "corpus": corpus_summary,
            "entries_per_n": per_n,
            "total_entries": len(entries),
            "files": files,
        }
        with _create(FileSystems.join(self._output, MANIFEST_FILE), "application/json") as f:
            f.write((json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        _LOG.info("wrote %d entries to %s in %.1f s", len(entries), self._output, time.monotonic() - started)
        yield manifest


class WriteNgramDictionary(beam.PTransform):
    """ngram_to_count (the survivors) + sources + corpus summary + dead letters -> the dictionary directory.

    The survivors are collected into one list (400k entries on WikiText-103: a few tens of MB) so that one
    worker writes the single sorted file; returns a PCollection holding the manifest.
    """

    def __init__(self, *, output: str, options: dict[str, Any], rules: NgramRules):
        super().__init__()
        self._write = _WriteDictionaryFiles(output=output, options=options, rules=rules)

    def expand(self, inputs):
        ngram_to_count, sources, corpus_summary, dead_letters = inputs
        all_entries = ngram_to_count | "CollectEntries" >> beam.combiners.ToList()
        return all_entries | "WriteFiles" >> beam.ParDo(
            self._write,
            sources=beam.pvalue.AsList(sources),
            corpus_summary=beam.pvalue.AsSingleton(corpus_summary),
            dead_letters=beam.pvalue.AsList(dead_letters),
        )


# --------------------------------------------------------------------------------------------------
# The job


def package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("spanprep")
    except metadata.PackageNotFoundError:
        return "0.1.0"


def _match_inputs(patterns: list[str]) -> list[tuple[str, int]]:
    """Every file the patterns match, sorted and de-duplicated, with its size; UsageError if one matches none."""
    found: dict[str, int] = {}
    for pattern in patterns:
        try:
            metadata_list = FileSystems.match([pattern])[0].metadata_list
        except Exception as e:  # BeamIOError, missing credentials or filesystem plugin, bad scheme, ...
            raise UsageError(f"--input {pattern}: cannot list it ({e})") from None
        files = [(m.path, m.size_in_bytes) for m in metadata_list if not os.path.isdir(m.path)]
        if not files:
            if metadata_list:
                raise UsageError(f"--input {pattern}: is a directory; give the files (e.g. {pattern}/*.tokens)")
            raise UsageError(f"--input {pattern}: no such file (the pattern matched nothing)")
        found.update(files)
    return sorted(found.items())


def _unknown_flags(options: PipelineOptions, argv: list[str]) -> list[str]:
    known = options.get_all_options()
    with_unknown = options.get_all_options(retain_unknown_options=True)
    unknown = {name for name in with_unknown if name not in known}
    return [a for a in argv if a.startswith("--") and a[2:].split("=", 1)[0].replace("-", "_") in unknown]


def _print_help() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m pipeline.build_ngram_dictionary",
        description="Build an n-gram dictionary (Span Fine-tuning) from WikiText files with Apache Beam.",
        epilog="Beam's pipeline options are accepted too, e.g. --direct_running_mode multi_processing "
        "--direct_num_workers 2, or --runner DataflowRunner ... (default runner: FnApiRunner, in-process). "
        "Rules and output format: dictionaries/README.md.",
    )
    NgramDictionaryOptions._add_argparse_args(parser)  # pylint: disable=protected-access
    parser.print_help()


def _parse(argv: list[str]) -> tuple[PipelineOptions, NgramDictionaryOptions, NgramRules]:
    if "-h" in argv or "--help" in argv:
        _print_help()
        raise SystemExit(0)
    options = PipelineOptions(argv)
    opts = options.view_as(NgramDictionaryOptions)
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = "FnApiRunner"  # the DirectRunner tries to download a runner binary
    runner_name = standard.runner if isinstance(standard.runner, str) else type(standard.runner).__name__
    unknown = _unknown_flags(options, argv)
    if unknown and runner_name.split(".")[-1] in LOCAL_RUNNERS:
        raise UsageError(f"unknown option(s): {' '.join(unknown)} (see --help)")
    if unknown:
        _LOG.warning("options not known to this job or Beam's core options, passed to the runner: %s", unknown)
    if not opts.input:
        raise UsageError("--input is required (a WikiText file or glob; repeatable)")
    if not opts.output:
        raise UsageError("--output is required (the dictionary directory to write)")
    try:
        rules = NgramRules(
            min_n=opts.min_n, max_n=opts.max_n, min_count=opts.min_count,
            lowercase=opts.lowercase, drop_punctuation=opts.drop_punctuation,
        )
    except ValueError as e:
        raise UsageError(str(e).replace("min_n", "--min-n").replace("max_n", "--max-n")
                         .replace("min_count", "--min-count")) from None
    if opts.split_mb is not None and not opts.split_mb > 0:
        raise UsageError(f"--split-mb must be > 0, got {opts.split_mb}")
    if opts.max_keys_per_bundle < 1:
        raise UsageError(f"--max-keys-per-bundle must be >= 1, got {opts.max_keys_per_bundle}")
    return options, opts, rules


def _prepare_output(output: str, overwrite: bool) -> None:
    if "://" not in output and os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"--output {output}: exists and is not a directory")
    manifest = FileSystems.join(output, MANIFEST_FILE)
    if FileSystems.exists(manifest):
        if not overwrite:
            raise UsageError(f"--output {output}: a dictionary already exists there (pass --overwrite to replace it)")
        FileSystems.delete([manifest])  # until the new manifest is written, the directory reads as incomplete
    if "://" not in output:
        try:
            os.makedirs(output, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--output {output}: cannot create it ({e.strerror})") from None


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the job; returns the manifest it wrote. Bad options or input: ``error: ...`` on stderr, SystemExit(2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        options, opts, rules = _parse(argv)
        FileSystems.set_options(options)  # Beam's S3 filesystem takes its endpoint and credentials from them
        files = _match_inputs(opts.input)
        _prepare_output(opts.output, opts.overwrite)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None

    total_bytes = sum(size for _, size in files)
    _LOG.info("input: %d file(s), %.1f MB", len(files), total_bytes / 1e6)
    passes = 2 if opts.pruning == "apriori" and rules.max_n > 1 else 1
    _LOG.info(
        "counting n-grams of length %d..%d (min count %d, %s pruning: %d read(s) of the input) with %s",
        rules.min_n, rules.max_n, rules.min_count, opts.pruning, passes, options.view_as(StandardOptions).runner,
    )
    manifest_options = {
        "input": list(opts.input),
        "min_n": rules.min_n,
        "max_n": rules.max_n,
        "min_count": rules.min_count,
        "lowercase": rules.lowercase,
        "drop_punctuation": rules.drop_punctuation,
        "pruning": opts.pruning,
        "split_mb": opts.split_mb,
        "max_keys_per_bundle": opts.max_keys_per_bundle,
    }
    if opts.split_mb is None:
        split_bytes = min(max(total_bytes // AUTO_SPLITS, MIN_AUTO_SPLIT_BYTES), MAX_AUTO_SPLIT_BYTES)
    else:
        split_bytes = max(1, int(opts.split_mb * (1 << 20)))
    manifest_options["split_bytes"] = split_bytes
    started = time.monotonic()
    with beam.Pipeline(options=options) as p:
        paths = p | "InputFiles" >> beam.Create([path for path, _ in files])
        sources = paths | "SourceFiles" >> SourceFiles()
        path_to_line = paths | "ReadLines" >> ReadLines(split_bytes=split_bytes, with_filename=True)
        corpus_summary, dead_letters = path_to_line | "CorpusSummary" >> CorpusSummary()
        ngram_to_count = {"lines": path_to_line, "paths": paths} | "FrequentNgrams" >> FrequentNgrams(
            rules, pruning=opts.pruning, split_bytes=split_bytes, max_keys_per_bundle=opts.max_keys_per_bundle
        )
        _ = (ngram_to_count, sources, corpus_summary, dead_letters) | "WriteNgramDictionary" >> (
            WriteNgramDictionary(output=opts.output, options=manifest_options, rules=rules)
        )
    manifest = read_manifest(opts.output)
    elapsed = time.monotonic() - started
    _LOG.info(
        "done in %.1f s: %d entries (%s) in %s",
        elapsed, manifest["total_entries"],
        ", ".join(f"n={n}: {c}" for n, c in manifest["entries_per_n"].items()), opts.output,
    )
    undecodable = manifest["corpus"]["undecodable_lines"]
    if undecodable:
        _LOG.warning("%d input line(s) are not UTF-8: skipped, listed in %s", undecodable,
                     FileSystems.join(opts.output, DEAD_LETTER_FILE))
    return manifest


def read_manifest(output: str) -> dict[str, Any]:
    with FileSystems.open(FileSystems.join(output, MANIFEST_FILE),
                          compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return json.loads(f.read().decode("utf-8"))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    run()


if __name__ == "__main__":
    main()
