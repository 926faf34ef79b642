"""Build an n-gram dictionary (Span Fine-tuning, Bao et al. 2021) from WikiText files with Apache Beam.

    .venv/bin/python -m pipeline.build_ngram_dictionary --input wiki.train.tokens --output dictionaries/wikitext103 \\
        --max-n 5 --min-n 2 --min-count 11 [--lowercase] [--drop-punctuation]

    # two local worker processes:
    .venv/bin/python -m pipeline.build_ngram_dictionary ... --direct_running_mode multi_processing --direct_num_workers 2
    # any Beam runner, inputs and output on gs:// or s3://:
    .venv/bin/python -m pipeline.build_ngram_dictionary --input 'gs://b/wikitext-103/wiki.*.tokens' --output gs://b/dict \\
        --runner DataflowRunner --project P --region R --temp_location gs://b/tmp \\
        --extra_package dist/spanprep-0.1.0.tar.gz    # workers need this package: python -m build --sdist
    (remote runners are not exercised by the tests here, which run offline)

``--input`` is repeatable and takes globs. ``--min-count`` is inclusive (keep ``count >= min_count``); its
default 11 is the paper's "more than ten times" (its public code keeps ``>= 10``). The counting rules are in
``pipeline/ngrams/`` (its package docstring) and ``dictionaries/README.md``. The runner is the local FnApiRunner unless
``--runner`` says otherwise.

Output directory, in the format of ``schemas/NGRAM_DICTIONARY.md`` (``ngrams.arrow``, ``ngrams.tsv``,
``dead_letter.jsonl``, and ``manifest.json``, written last: its presence means the dictionary is complete).
The stages are in ``pipeline/ngrams/``; this module is the job: options and the pipeline. Input matching,
the output guard (an ``--output`` holding any file needs ``--overwrite``; ``OUTPUT/_build.lock`` is held while
the job runs), logging and errors (one ``build_ngram_dictionary: error:`` line, exit status 2) follow the shard
job's convention in ``pipeline/runners/jobs.py``.

The same input and options give byte-identical files, whatever the runner or number of workers.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from pipeline.runners import jobs  # before Beam: it hides a warning Beam logs while it is imported (see jobs.py)

# isort: split
import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipeline import progress
from pipeline.ngrams.corpus_summary import CorpusSummary
from pipeline.ngrams.dictionary_files import WriteNgramDictionary
from pipeline.ngrams.frequent_ngrams import FrequentNgrams
from pipeline.ngrams.lines import ReadLines
from pipeline.ngrams.rules import PRUNING_MODES, NgramRules
from pipeline.ngrams.source_files import SourceFiles
from pipeline.runners import runner_checks
from pipeline.runners.jobs import LOCAL_RUNNERS, UsageError
from schemas import commands
from schemas.ngram_dictionary import DEAD_LETTER_FILE, NgramDictionary

_LOG = logging.getLogger("spanprep.build_ngram_dictionary")

AUTO_SPLITS = 64  # default: read the input in about this many byte ranges (parallelism), ...
MIN_AUTO_SPLIT_BYTES = 1 << 20  # ... of at least 1 MiB
MAX_AUTO_SPLIT_BYTES = 64 << 20  # ... and at most 64 MiB (Beam's own default)


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
            "--input",
            action="append",
            default=None,
            help="WikiText file or glob (local, gs://, s3://, ...); repeatable. Compressed files (.gz, .bz2, "
            ".zst) are read by extension.",
        )
        parser.add_argument("--output", default=None, help="output directory (local, gs://, s3://, ...)")
        parser.add_argument(
            "--min-n", "--min_n", dest="min_n", type=int, default=2, help="shortest n-gram kept (default 2)"
        )
        parser.add_argument(
            "--max-n", "--max_n", dest="max_n", type=int, default=5, help="longest n-gram counted (default 5)"
        )
        parser.add_argument(
            "--min-count",
            "--min_count",
            dest="min_count",
            type=int,
            default=11,
            help="keep n-grams with count >= MIN_COUNT (inclusive). Default 11: the paper's 'more than ten "
            "times'; its public code keeps count >= 10",
        )
        parser.add_argument("--lowercase", action="store_true", help="lowercase tokens before counting")
        parser.add_argument(
            "--drop-punctuation",
            "--drop_punctuation",
            dest="drop_punctuation",
            action="store_true",
            help="drop n-grams that contain a punctuation token (@-@ @,@ @.@, or only Unicode P*/S* chars)",
        )
        parser.add_argument(
            "--pruning",
            choices=PRUNING_MODES,
            default="apriori",
            help="apriori (default): count the words, then each length n only where both of its (n-1)-grams "
            "are frequent (exact; reads the input twice); none: count every n-gram as a string in one pass "
            "(for min-count 1 or 2)",
        )
        parser.add_argument(
            "--split-mb",
            "--split_mb",
            dest="split_mb",
            type=float,
            default=None,
            help="input files are read in byte ranges of about this size, so that workers share a big file "
            "(default: the input size / 64, within 1..64 MB)",
        )
        parser.add_argument(
            "--max-keys-per-bundle",
            "--max_keys_per_bundle",
            dest="max_keys_per_bundle",
            type=int,
            default=1_000_000,
            help="a worker flushes its partial counts when it holds this many distinct n-grams (bounds its "
            "memory: about 16 bytes per key as numbers, 100+ as strings; default 1000000)",
        )
        parser.add_argument(
            "--overwrite", action="store_true", help="replace a dictionary that already exists at --output"
        )


# --------------------------------------------------------------------------------------------------
# The job


def _unknown_flags(options: PipelineOptions, argv: list[str]) -> list[str]:
    known = options.get_all_options()
    with_unknown = options.get_all_options(retain_unknown_options=True)
    unknown = {name for name in with_unknown if name not in known}
    return [a for a in argv if a.startswith("--") and a[2:].split("=", 1)[0].replace("-", "_") in unknown]


def _print_help() -> None:
    parser = argparse.ArgumentParser(
        prog=commands.module("pipeline.build_ngram_dictionary"),
        description="Build an n-gram dictionary (Span Fine-tuning) from WikiText files with Apache Beam.",
        epilog="Beam's pipeline options are accepted too, e.g. --direct_running_mode multi_processing "
        "--direct_num_workers 2, or --runner DataflowRunner ... (default runner: FnApiRunner, in-process). "
        "Rules and output format: dictionaries/README.md.",
        formatter_class=jobs.HelpFormatter,
    )
    NgramDictionaryOptions._add_argparse_args(parser)  # pylint: disable=protected-access
    progress.ProgressOptions._add_argparse_args(parser.add_argument_group("progress and logging"))
    parser.print_help()


def _parse(argv: list[str]) -> tuple[PipelineOptions, NgramDictionaryOptions, NgramRules]:
    if "-h" in argv or "--help" in argv:
        _print_help()
        raise SystemExit(0)
    options = PipelineOptions(argv)
    opts = options.view_as(NgramDictionaryOptions)
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = jobs.DEFAULT_RUNNER
    jobs.refuse_stray_words(options)
    unknown = _unknown_flags(options, argv)
    if unknown and jobs.runner_name(standard.runner) in LOCAL_RUNNERS:
        raise UsageError(f"unknown option(s): {' '.join(unknown)} (see --help)")
    if unknown:
        _LOG.warning("options not known to this job or Beam's core options, passed to the runner: %s", unknown)
    if not opts.input:
        raise UsageError("--input is required (a WikiText file or glob; repeatable)")
    if not opts.output:
        raise UsageError("--output is required (the dictionary directory to write)")
    try:
        rules = NgramRules(
            min_n=opts.min_n,
            max_n=opts.max_n,
            min_count=opts.min_count,
            lowercase=opts.lowercase,
            drop_punctuation=opts.drop_punctuation,
        )
    except ValueError as e:
        raise UsageError(
            str(e).replace("min_n", "--min-n").replace("max_n", "--max-n").replace("min_count", "--min-count")
        ) from None
    if opts.split_mb is not None and not opts.split_mb > 0:
        raise UsageError(f"--split-mb must be > 0, got {opts.split_mb}")
    if opts.max_keys_per_bundle < 1:
        raise UsageError(f"--max-keys-per-bundle must be >= 1, got {opts.max_keys_per_bundle}")
    return options, opts, rules


def build_pipeline(
    p: beam.Pipeline,
    files: list[tuple[str, int]],
    opts,
    rules: NgramRules,
    split_bytes: int,
    manifest_options: dict[str, Any],
    build_id: str,
) -> None:
    """The job, as a sentence: read the files' lines, summarise the corpus, keep the frequent n-grams, write them."""
    paths = p | "InputFiles" >> beam.Create([path for path, _ in files])
    sources = paths | "SourceFiles" >> SourceFiles()
    path_to_line = paths | "ReadLines" >> ReadLines(split_bytes=split_bytes, with_filename=True)
    corpus_summary, dead_letters = path_to_line | "CorpusSummary" >> CorpusSummary()
    ngram_to_count = {"lines": path_to_line, "paths": paths} | "FrequentNgrams" >> FrequentNgrams(
        rules, pruning=opts.pruning, split_bytes=split_bytes, max_keys_per_bundle=opts.max_keys_per_bundle
    )
    _ = (ngram_to_count, sources, corpus_summary, dead_letters) | "WriteNgramDictionary" >> (
        WriteNgramDictionary(output=opts.output, options=manifest_options, rules=rules, build_id=build_id)
    )


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the job; return the manifest it wrote. Raises :class:`~pipeline.runners.jobs.UsageError` for bad options or input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options, opts, rules = _parse(argv)
    runner_checks.check_runner(options)
    jobs.apply_log_level(options)
    FileSystems.set_options(options)  # Beam's S3 filesystem takes its endpoint and credentials from them
    jobs.check_location("--output", opts.output)
    files = jobs.match_inputs(opts.input, example="*.tokens")
    build_id = jobs.prepare_output(opts.output, opts.overwrite)

    total_bytes = sum(size for _, size in files)
    _LOG.info("input: %d file(s), %.1f MB", len(files), total_bytes / 1e6)
    passes = 2 if opts.pruning == "apriori" and rules.max_n > 1 else 1
    _LOG.info(
        "counting n-grams of length %d..%d (min count %d, %s pruning: %d read(s) of the input) with %s",
        rules.min_n,
        rules.max_n,
        rules.min_count,
        opts.pruning,
        passes,
        options.view_as(StandardOptions).runner,
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
    with jobs.lock_released_on_failure(opts.output, build_id):
        jobs.run_pipeline(
            options,
            lambda p: build_pipeline(p, files, opts, rules, split_bytes, manifest_options, build_id),
            total_bytes,  # each read of the input is a phase of its own in the progress line
            unit="lines",
        )
    manifest = NgramDictionary.open(opts.output).manifest
    elapsed = time.monotonic() - started
    _LOG.info(
        "done in %.1f s: %d entries (%s) in %s",
        elapsed,
        manifest["total_entries"],
        ", ".join(f"n={n}: {c}" for n, c in manifest["entries_per_n"].items()),
        opts.output,
    )
    undecodable = manifest["corpus"]["undecodable_lines"]
    if undecodable:
        _LOG.warning(
            "%d input line(s) are not UTF-8: skipped, listed in %s",
            undecodable,
            FileSystems.join(opts.output, DEAD_LETTER_FILE),
        )
    return manifest


def main(argv: list[str] | None = None) -> int:
    jobs.configure_logging()
    return jobs.exit_code("build_ngram_dictionary", lambda: run(argv))


if __name__ == "__main__":
    from schemas.quick_exit import quick_exit

    quick_exit(main())
