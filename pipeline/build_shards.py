"""Build a preprocessed-corpus artifact: raw corpus -> 512-token WordPiece rows in Arrow shards.

    .venv/bin/python -m pipeline.build_shards \\
        --input 'corpus/*.jsonl.zst' --input-format jsonl --output artifacts/wiki \\
        --tokenizer tokenizer.json --max-seq-len 512 --num-shards 64

    # WikiText, training a cased WordPiece vocabulary on the input, 2 local worker processes:
    .venv/bin/python -m pipeline.build_shards --input wiki.train.tokens --input-format wikitext \\
        --output artifacts/wt103 --train-tokenizer --vocab-size 28996 \\
        --direct_running_mode multi_processing --direct_num_workers 2

Runs on the local FnApiRunner unless ``--runner`` says otherwise (DataflowRunner, FlinkRunner,
SparkRunner, PortableRunner: see docs/RUNNING.md). The artifact format is schemas/FORMAT.md.
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

from pipeline import build_shards_options, build_summary, progress, report, shard_sizing
from pipeline.build_shards_options import BuildShardsOptions
from pipeline.candidates import spacy_spans
from pipeline.candidates.mask_candidates import FindMaskCandidates
from pipeline.dedup import removal
from pipeline.dedup.eval_sets import EvalFile
from pipeline.elements import Document
from pipeline.files import BEAM_FILES
from pipeline.read import columnar
from pipeline.read.documents import ReadDocuments
from pipeline.read.ranges import read_file
from pipeline.read.records import ReaderOptions
from pipeline.runners import runner_checks
from pipeline.runners.jobs import LOCAL_RUNNERS, SECRET_OPTION, JobFailed, UsageError, redact_argv
from pipeline.tokenize import tokenizer, training
from pipeline.tokenize.tokenized_documents import TokenizeDocuments
from pipeline.write.dead_letters import WriteDeadLetters
from pipeline.write.manifest import WriteManifest, library_versions
from pipeline.write.shards import ShardSpec, WriteShards
from schemas import commands
from schemas import format as fmt
from schemas.artifact import Artifact
from schemas.ngram_dictionary import NgramDictionary
from schemas.segmenter import Segmenter
from schemas.tokenizers import hf_directory
from schemas.tokenizers.files import from_file

log = logging.getLogger("pipeline.build_shards")

_FAMILY_NAMES = {"wordpiece": "WordPiece", "bpe": "byte-level BPE", "unigram": "Unigram"}
MIN_SPLIT_BYTES = 4096  # a smaller --split-bytes is almost surely a unit mistake (it is bytes)


# What "--input DIR: is a directory" suggests instead, per --input-format.
INPUT_GLOBS = {"jsonl": "*.jsonl", "wikitext": "wiki.*.tokens", "text": "*.txt", "parquet": "*.parquet"}


def _job_parser(with_progress: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=commands.module("pipeline.build_shards"),
        description=__doc__,
        formatter_class=jobs.HelpFormatter,
        epilog="Any Apache Beam pipeline option is accepted too (--runner, --direct_running_mode, --direct_num_workers, "
        "Dataflow's --project/--region/--temp_location, ...); see docs/RUNNING.md.",
    )
    BuildShardsOptions._add_argparse_args(parser)
    if with_progress:  # --help only: how the job reports is no option of the build (not in the manifest)
        progress.ProgressOptions._add_argparse_args(parser.add_argument_group("progress and logging"))
    return parser


def _job_option_names() -> list[str]:
    return [a.dest for a in _job_parser()._actions if a.dest != "help"]


def _parse(argv: list[str]) -> tuple[argparse.Namespace, PipelineOptions]:
    options = BuildShardsOptions(argv)
    jobs.refuse_stray_words(options)
    known = options.get_all_options()
    with_unknown = options.get_all_options(retain_unknown_options=True)
    unknown = sorted(set(with_unknown) - set(known))
    if unknown:
        raise UsageError("unrecognised option(s): " + ", ".join("--" + u for u in unknown) + " (see --help)")
    values = options.get_all_options()
    opts = argparse.Namespace(**{name: values[name] for name in _job_option_names()})
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = jobs.DEFAULT_RUNNER
    return opts, options


def _validate(o: argparse.Namespace) -> list[EvalFile]:
    """Refuse bad options as a :class:`UsageError`; return ``--decontaminate``'s files, read and checked (a bad
    evaluation file stops the job before it starts; the workers get these, pinned by their sha256)."""
    if not o.input:
        raise UsageError("--input is required (a file or glob; repeat it for several)")
    if not o.output:
        raise UsageError("--output is required (the artifact directory)")
    if o.max_seq_len < 8:
        raise UsageError(f"--max-seq-len must be at least 8, got {o.max_seq_len}")
    if o.max_record_bytes < 1:
        raise UsageError("--max-record-bytes must be positive")
    if o.split_bytes != 0 and o.split_bytes < MIN_SPLIT_BYTES:
        raise UsageError(
            f"--split-bytes must be 0 (never split) or at least {MIN_SPLIT_BYTES:,}, got {o.split_bytes:,}"
        )
    if o.spill_buffer_mb < 1:
        raise UsageError("--spill-buffer-mb must be at least 1")
    if o.encode_cache_mb < 0:
        raise UsageError(f"--encode-cache-mb must be 0 (no cache) or more, got {o.encode_cache_mb}")
    if o.encoder_threads < 0:
        raise UsageError(f"--encoder-threads must be 0 (automatic) or more, got {o.encoder_threads}")
    sources = [s for s in ("tokenizer", "vocab", "tokenizer_from") if getattr(o, s)]
    if len(sources + (["train_tokenizer"] if o.train_tokenizer else [])) > 1:
        raise UsageError("give only one of --tokenizer, --vocab, --tokenizer-from, --train-tokenizer")
    try:
        build_shards_options.check_tokenizer_training(o.train_tokenizer, o.lowercase)
        build_shards_options.check_shard_sizing(o.num_shards, o.shard_size_mb)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if o.vocab_size < len(fmt.SPECIAL_TOKENS) + 1:
        raise UsageError(f"--vocab-size {o.vocab_size} is too small")
    try:
        removal.near_params(o)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if (o.tokenizer or o.tokenizer_from) and o.lowercase:
        raise UsageError(
            "--lowercase applies to --vocab and --train-tokenizer; a tokenizer.json or a tokenizer directory "
            "carries its own casing"
        )
    try:
        return removal.eval_files(o)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _candidate_kinds(o) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in (o.mask_candidates or "").split(",") if k.strip())
    unknown = [k for k in kinds if k not in fmt.CANDIDATE_KINDS]
    if unknown:
        raise UsageError(
            f"--mask-candidates: unknown kind(s) {', '.join(unknown)}; choose from {', '.join(fmt.CANDIDATE_KINDS)}"
        )
    if "ngrams" in kinds and not o.ngram_dictionary:
        raise UsageError(
            "--mask-candidates ngrams needs --ngram-dictionary DIR "
            f"(built by {commands.module('pipeline.build_ngram_dictionary')})"
        )
    if o.ngram_dictionary and "ngrams" not in kinds:
        raise UsageError("--ngram-dictionary is only used with --mask-candidates ngrams")
    return tuple(k for k in fmt.CANDIDATE_KINDS if k in kinds)


def _candidates_manifest(o, kinds: tuple[str, ...], local_runner: bool = True) -> dict[str, Any]:
    """What the manifest says about the candidates; also checks that spaCy / the dictionary load."""
    info: dict[str, Any] = {"kinds": list(kinds), "spacy_model": None, "np_chunker": None, "ngram_dictionary": None}
    if "entities" in kinds or "noun_phrases" in kinds:
        # Checked here for a clear early error; the workers load (and the manifest records) their own.
        name = o.spacy_model or spacy_spans.default_spacy_model()
        try:
            spacy_spans.load_spacy(name, [k for k in kinds if k != "ngrams"], o.np_chunker)
        except (ImportError, OSError, ValueError) as e:
            message = f"--spacy-model {name}: cannot load it here ({e})"
            if local_runner:
                raise UsageError(message + "; install the model package first") from None
            log.warning("%s; the workers must have it", message)
    if "noun_phrases" in kinds:
        info["np_chunker"] = o.np_chunker
    if "ngrams" in kinds:
        try:
            seg = Segmenter.from_dictionary(o.ngram_dictionary)
            dictionary = NgramDictionary.open(o.ngram_dictionary)
            sha256 = dictionary.arrow_sha256()
        except (ValueError, OSError) as e:
            raise UsageError(f"--ngram-dictionary: {e}") from None
        info["ngram_dictionary"] = {
            "path": o.ngram_dictionary,
            "sha256": sha256,
            "entries": dictionary.manifest.get("total_entries"),  # rows of ngrams.arrow
            "segmenter_entries": len(seg),  # distinct multi-word entries after lowercasing / @-@ normalisation
            "max_n": seg.max_n,
            "lowercase": seg.lowercase,
        }
    return info


def _match_inputs(o) -> list[tuple[str, int]]:
    """``jobs.match_inputs`` of ``--input``; an hf_dataset directory is first replaced by its Arrow files, and every
    Parquet / Arrow file must have a readable footer or schema (else one line naming it)."""
    try:
        if o.input_format == "hf_dataset":
            for pattern in o.input:
                jobs.check_location("--input", pattern)
            o.input = [path for directory in o.input for path in columnar.hf_dataset_files(directory)]
        files = jobs.match_inputs(o.input, example=INPUT_GLOBS.get(o.input_format, "*"))
        if o.input_format in ("parquet", "hf_dataset"):
            columnar.check_files([path for path, _ in files], o.input_format)
    except columnar.ColumnarError as e:
        raise UsageError(str(e)) from None
    return files


def _reader_options(o, unk_token: str | None) -> ReaderOptions:
    return ReaderOptions(
        input_format=o.input_format,
        text_field=o.text_field,
        id_field=o.id_field,
        max_record_bytes=o.max_record_bytes,
        wikitext_headings=o.wikitext_headings,
        wikitext_unk=unk_token,
        wikitext_detokenize=o.wikitext_detokenize,
    )


def _load_tokenizer(
    o, paths: list[str], total_bytes: int = 0, every_s: float = progress.DEFAULT_SECONDS
) -> tokenizer.TokenizerSpec:
    try:
        if o.tokenizer:
            return tokenizer.make_spec(from_file(o.tokenizer, BEAM_FILES), "file")
        if o.vocab:
            return tokenizer.make_spec(tokenizer.from_vocab(o.vocab, o.lowercase), "vocab", o.lowercase)
        if o.tokenizer_from:
            tok, _, roles = hf_directory.from_directory(o.tokenizer_from, BEAM_FILES)
            return tokenizer.make_spec(tok, "directory", roles=roles)
    except OSError as e:
        raise UsageError(f"cannot read the tokenizer: {e}") from None
    except tokenizer.TokenizerError as e:
        given = f"--tokenizer {o.tokenizer}" if o.tokenizer else f"--tokenizer-from {o.tokenizer_from}"
        raise UsageError(f"{given}: {e}" if o.tokenizer or o.tokenizer_from else str(e)) from None
    # Train on the input, read once here in the launching process (for big corpora, train once
    # and pass --tokenizer to later runs).
    kind = o.train_tokenizer or "wordpiece"
    log.info(
        "%straining a %s %s vocabulary of %d on the input",
        "" if o.train_tokenizer else "no --tokenizer/--vocab given: ",
        "lowercase" if o.lowercase else "cased",
        _FAMILY_NAMES[kind],
        o.vocab_size,
    )
    ropts = _reader_options(o, training.unk_token(kind) if o.wikitext_unk == "keep" else None)
    started = time.time()
    count = [0]
    progress.reset()  # read_file counts the raw bytes it reads in this process
    shown = [time.monotonic()]

    def texts():
        for path in paths:
            for rec in read_file(path, ropts):
                if isinstance(rec, Document):
                    count[0] += 1
                    if every_s > 0 and time.monotonic() - shown[0] >= every_s:
                        shown[0] = time.monotonic()
                        done = progress.describe(
                            count[0], progress.bytes_read_here(), total_bytes, time.time() - started
                        )
                        log.info("tokenizer training: %s", done)
                    yield rec.text

    tok = training.train(kind, texts(), vocab_size=o.vocab_size, lowercase=o.lowercase)
    if count[0] == 0:
        raise UsageError("no valid document in the input to train a tokenizer on (every record was rejected)")
    size = tok.get_vocab_size()
    log.info(
        "trained a %s vocabulary of %d on %d documents in %.1f s%s",
        _FAMILY_NAMES[kind],
        size,
        count[0],
        time.time() - started,
        f" (fewer than --vocab-size {o.vocab_size}: the input has no more pieces that occur at least twice, the "
        "trainer's minimum; a larger input gives more)"
        if size < o.vocab_size
        else "",
    )
    return tokenizer.make_spec(tok, "trained", o.lowercase)


def _static_manifest_fields(
    o, argv: list[str], options: PipelineOptions, candidates: dict, build_id: str | None = None
) -> dict[str, Any]:
    build = dict(vars(o))
    beam_opts = {k: v for k, v in options.get_all_options(drop_default=True).items() if k not in build}
    beam_opts = {k: ("<redacted>" if SECRET_OPTION.search(k) else v) for k, v in beam_opts.items()}
    beam_opts["runner"] = options.view_as(StandardOptions).runner
    return {
        "created_by": library_versions(),
        "command": redact_argv(list(argv)),
        "options": {**build, "beam": beam_opts},
        "max_seq_len": o.max_seq_len,
        "pack": o.pack,
        "candidates": candidates,
        "build_id": build_id,
        "dedup": removal.describe(o),
        "contamination": removal.describe_contamination(o),
    }


def build_pipeline(
    p: beam.Pipeline,
    o,
    spec: tokenizer.TokenizerSpec,
    static: dict,
    files: list[tuple[str, int]] | None = None,
    eval_files: list[EvalFile] | None = None,
) -> None:
    """The job, as a sentence: read documents, tokenize them, write shards; dead letters and the manifest beside.
    ``files``: what ``--input`` matched, ``(path, size)``, when the launcher listed it (see ``ReadDocuments``)."""
    info = spec.describe()
    unk = info["special_tokens"]["unk"] if o.wikitext_unk == "keep" else None
    shard_spec = ShardSpec(
        output=o.output,
        num_shards=o.num_shards,
        vocab_size=info["vocab_size"],
        max_row_tokens=fmt.max_row_tokens(o.max_seq_len),
        pack=o.pack,
        separator_id=info["special_token_ids"]["sep"],
    )
    ids_dtype = "uint16" if fmt.token_id_type(info["vocab_size"]) == fmt.token_id_type(1) else "int32"

    read = p | "ReadDocuments" >> ReadDocuments(o.input, _reader_options(o, unk), o.split_bytes, files=files)
    reread = lambda label, phase: (  # noqa: E731  (another read of the input, apart in the progress line)
        p | label >> ReadDocuments(o.input, _reader_options(o, unk), o.split_bytes, files=files, progress_phase=phase)
    )["documents"]
    documents, removed = removal.remove_documents(read["documents"], o, reread, eval_files, files)
    kinds = static["candidates"]["kinds"]
    spacy_kinds = [k for k in kinds if k in ("entities", "noun_phrases")]
    if spacy_kinds:
        annotated = documents | "FindMaskCandidates" >> FindMaskCandidates(
            o.spacy_model,
            spacy_kinds,
            np_chunker=o.np_chunker,
            max_chars=o.spacy_max_chars,
            batch_size=o.spacy_batch_size,
        )
        documents, spacy_models = annotated["documents"], annotated["models"]
    else:
        spacy_models = p | "NoSpacy" >> beam.Create([])
    segmenter = o.ngram_dictionary if "ngrams" in kinds else None
    tokenized = documents | "TokenizeDocuments" >> TokenizeDocuments(
        spec,
        ids_dtype,
        segmenter_path=segmenter,
        encoder_threads=o.encoder_threads,
        cache_bytes=o.encode_cache_mb << 20,
        max_word_tokens=shard_spec.max_row_tokens if o.long_words == "dead-letter" else None,
    )
    shards = tokenized["documents"] | "WriteShards" >> WriteShards(shard_spec, buffer_bytes=o.spill_buffer_mb << 20)
    dead_letters = (
        (read["dead_letters"], tokenized["dead_letters"])
        | "AllDeadLetters" >> beam.Flatten()
        | "WriteDeadLetters" >> WriteDeadLetters(o.output, o.spill_buffer_mb << 20)
    )
    _ = {
        "input_summaries": read["input_summaries"],
        "shards": shards,
        "dead_letters": dead_letters,
        "spacy_models": spacy_models,
        **removed,
    } | "WriteManifest" >> WriteManifest(o.output, spec, static)


def run(argv: list[str] | None = None) -> dict:
    """Run the job; return the manifest. Raises :class:`UsageError` for bad options or inputs."""
    argv = list(sys.argv[1:] if argv is None else argv)
    o, options = _parse(argv)
    eval_files = _validate(o)
    runner_checks.check_runner(options)
    jobs.apply_log_level(options)
    # Before the first FileSystems call: Beam's S3 filesystem takes its endpoint and credentials from the options.
    FileSystems.set_options(options)
    o.input = list(o.input)
    jobs.check_output(o.output, o.overwrite)  # before any input is read or a tokenizer trained; claimed below
    files = _match_inputs(o)
    paths = [path for path, _ in files]
    log.info(
        "%d input file(s) matched (%.1f MB); output %s; runner %s",
        len(paths),
        sum(size for _, size in files) / 1e6,
        o.output,
        options.view_as(StandardOptions).runner,
    )
    kinds = _candidate_kinds(o)
    runner = jobs.runner_name(options.view_as(StandardOptions).runner)
    candidates = _candidates_manifest(o, kinds, local_runner=runner in LOCAL_RUNNERS)
    if not o.encoder_threads:
        o.encoder_threads = jobs.local_cores_per_worker(options) if runner in LOCAL_RUNNERS else 1
    spec = _load_tokenizer(
        o, paths, sum(size for _, size in files), options.view_as(progress.ProgressOptions).progress_seconds
    )
    o.num_shards = shard_sizing.choose(
        o.num_shards,
        o.shard_size_mb,
        files,
        _reader_options(o, spec.special_tokens["unk"] if o.wikitext_unk == "keep" else None),
        spec.load_for_text(),
        spec.describe()["vocab_size"],
        fmt.max_row_tokens(o.max_seq_len),
    )
    build_id = jobs.prepare_output(o.output, o.overwrite, (fmt.SHARDS_DIR, fmt.DEAD_LETTER_DIR))
    with jobs.lock_released_on_failure(o.output, build_id):
        static = _static_manifest_fields(o, argv, options, candidates, build_id)
        started = time.time()
        total_bytes = sum(size for _, size in files)
        build = lambda p: build_pipeline(p, o, spec, static, files, eval_files)  # noqa: E731
        jobs.run_pipeline(options, build, total_bytes)  # WriteManifest checks the lock
    manifest = Artifact.open(o.output).manifest
    log.info("pipeline finished in %.1f s", time.time() - started)
    if manifest["counts"]["documents_written"] == 0:
        raise JobFailed(build_summary.nothing_written(manifest, o.output))
    build_summary.warn_empty_shards(manifest)
    if o.report:
        report.write_report(o.output)
    return manifest


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        _job_parser(with_progress=True).print_help()
        return 0
    jobs.configure_logging()

    def run_and_summarise() -> None:
        manifest = run(argv)
        print(build_summary.summary(manifest, manifest["options"]["output"]))

    return jobs.exit_code("build_shards", run_and_summarise)


if __name__ == "__main__":
    from schemas.quick_exit import quick_exit

    quick_exit(main())
