"""ReadDocuments: file patterns -> documents, dead letters and one summary per input file."""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.metrics import Metrics

from pipeline import progress
from pipeline.elements import DeadLetter, Document
from pipeline.read.ranges import (
    DEFAULT_SPLIT_BYTES,
    FileHash,
    Range,
    RangeRead,
    WholeFile,
    combine_summaries,
    hash_file,
    plan_file,
    plan_reads,
    read_file,
    read_range,
    scan_range,
)
from pipeline.read.records import ReaderOptions

log = logging.getLogger(__name__)

DOCUMENTS = "documents"
DEAD_LETTERS = "dead_letters"
INPUT_SUMMARIES = "input_summaries"
_HASHES = "hashes"


class _ScanFn(beam.DoFn):
    """Scans one byte range (or hashes one split file); a whole-file read passes through."""

    def __init__(self, options: ReaderOptions):
        self._options = options

    def process(self, item: WholeFile | FileHash | Range):
        if isinstance(item, FileHash):
            yield beam.pvalue.TaggedOutput(_HASHES, hash_file(item.path))
        elif isinstance(item, Range):
            yield item.path, scan_range(item, self._options)
        else:
            yield item.path, item


class _ReadFn(beam.DoFn):
    """Streams the records of one file, or of one byte range of a split file, counted in the progress ``phase``."""

    def __init__(self, options: ReaderOptions, phase: str = progress.MAIN):
        self._options = options
        self._phase = phase
        self._documents = Metrics.counter("read", "documents")
        self._dead = Metrics.counter("read", "dead_letters")
        self._ranges = Metrics.counter("read", "ranges")

    def start_bundle(self):
        progress.start_bundle()

    def process(self, item: WholeFile | RangeRead):
        if isinstance(item, RangeRead):
            log.debug("reading %s from byte %d (range %d)", item.path, item.start, item.index)
            self._ranges.inc()
            records = read_range(item, self._options)
        else:
            log.info("reading %s", item.path)
            records = read_file(item.path, self._options)
        for rec in progress.counting_as(self._phase, records):
            if isinstance(rec, Document):
                self._documents.inc()
                progress.add(1, phase=self._phase)
                yield rec
            elif isinstance(rec, DeadLetter):
                self._dead.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, rec)
            else:
                if rec.truncated:
                    log.warning("%s is truncated or corrupt: see dead_letter/ for how far reading got", item.path)
                yield beam.pvalue.TaggedOutput(INPUT_SUMMARIES, rec)

    def finish_bundle(self):
        progress.flush()


class _CombineSummariesFn(beam.DoFn):
    def __init__(self):
        self._files = Metrics.counter("read", "files")

    def process(self, path_and_parts):
        summary = combine_summaries(*path_and_parts)
        self._files.inc()
        log.info("read %s: %d records, %d bytes", summary.path, summary.documents_read, summary.bytes)
        yield summary


class ReadDocuments(beam.PTransform):
    """Match ``patterns``, read every file with ``options``, and spread the work over workers.

    A file is one piece of work, unless it is uncompressed and larger than ``split_bytes`` (> 0): then
    it is read as byte ranges in parallel, with the same records, ids and positions
    (``pipeline/read/ranges.py``). Returns a dict of PCollections: ``documents`` (:class:`Document`),
    ``dead_letters`` (:class:`DeadLetter`) and ``input_summaries`` (one :class:`InputSummary` per file).

    ``files``: the ``(path, size)`` of every file the patterns match, once each, when the caller has listed them
    already (``jobs.match_inputs``). When none of them is split and there are at most ``LISTED_FILES_MAX``, the job
    reads that list directly: the same reads without the five steps that match, plan and scan at run time
    (four of them stages of their own: about 0.2 s of a local run).

    ``progress_phase``: what the reading counts as in the job's progress (``pipeline/progress.py``): the default
    for the read that feeds the output, a name for a second read of the same input (``--dedup``'s pre-pass).
    """

    LISTED_FILES_MAX = 1000  # more file names would weigh on the job graph (Dataflow limits its size)

    def __init__(
        self,
        patterns: list[str],
        options: ReaderOptions,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        files: list[tuple[str, int]] | None = None,
        progress_phase: str = progress.MAIN,
    ):
        super().__init__()
        self._patterns = list(patterns)
        self._phase = progress_phase
        self._options = options
        self._split_bytes = split_bytes
        self._whole_files = None
        if files is not None and len(files) <= self.LISTED_FILES_MAX:
            plans = [plan_file(path, size, split_bytes, options.input_format) for path, size in files]
            if all(len(plan) == 1 and isinstance(plan[0], WholeFile) for plan in plans):
                self._whole_files = [plan[0] for plan in plans]

    def expand(self, pbegin):
        if self._whole_files is not None:
            return self._read_listed_files(pbegin)
        scanned = (
            pbegin
            | "Patterns" >> beam.Create(self._patterns)
            | "MatchFiles" >> fileio.MatchAll()
            | "PathsAndSizes" >> beam.Map(lambda metadata: (metadata.path, metadata.size_in_bytes))
            | "OnePerFile" >> beam.Distinct()
            | "Plan"
            >> beam.FlatMap(
                lambda path_and_size, split, fmt: plan_file(path_and_size[0], path_and_size[1], split, fmt),
                self._split_bytes,
                self._options.input_format,
            )
            | "SpreadScans" >> beam.Reshuffle()
            | "Scan" >> beam.ParDo(_ScanFn(self._options)).with_outputs(_HASHES, main="scans")
        )
        records = self._read(
            scanned["scans"] | "GroupByFile" >> beam.GroupByKey() | "PlanReads" >> beam.FlatMapTuple(plan_reads)
        )
        summaries = (
            (records[INPUT_SUMMARIES], scanned[_HASHES])
            | "SummaryParts" >> beam.Flatten()
            | "KeyByFile" >> beam.Map(lambda part: (part.path, part))
            | "GroupParts" >> beam.GroupByKey()
            | "CombineParts" >> beam.ParDo(_CombineSummariesFn())
        )
        # No reshuffle of the documents: reading fuses with tokenizing and spilling, so texts are
        # never materialised; parallelism comes from the files and the byte ranges of big plain files.
        return {DOCUMENTS: records[DOCUMENTS], DEAD_LETTERS: records[DEAD_LETTERS], INPUT_SUMMARIES: summaries}

    def _read_listed_files(self, pbegin):
        """Whole files only, listed by the caller: each read gives its file's one summary part."""
        # no reshuffle of its own: SpreadReads spreads the reads (two would cost a stage each, per read of the input)
        records = self._read(pbegin | "ListedFiles" >> beam.Create(self._whole_files, reshuffle=False))
        summaries = (
            records[INPUT_SUMMARIES]
            | "OnePart" >> beam.Map(lambda part: (part.path, [part]))
            | "CombineParts" >> beam.ParDo(_CombineSummariesFn())
        )
        return {DOCUMENTS: records[DOCUMENTS], DEAD_LETTERS: records[DEAD_LETTERS], INPUT_SUMMARIES: summaries}

    def _read(self, reads):
        """WholeFile / RangeRead items -> the tagged outputs of reading them, spread over the workers."""
        return (
            reads
            | "SpreadReads" >> beam.Reshuffle()
            | "Read"
            >> beam.ParDo(_ReadFn(self._options, self._phase)).with_outputs(
                DEAD_LETTERS, INPUT_SUMMARIES, main=DOCUMENTS
            )
        )
