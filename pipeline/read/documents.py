"""ReadDocuments: file patterns -> documents, dead letters and one summary per input file."""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.metrics import Metrics

from pipeline.elements import DeadLetter, Document
from pipeline.read.records import ReaderOptions, read_file

log = logging.getLogger(__name__)

DOCUMENTS = "documents"
DEAD_LETTERS = "dead_letters"
INPUT_SUMMARIES = "input_summaries"


class _ReadFileFn(beam.DoFn):
    """Streams one file's records; a file is the unit of work (compressed files cannot be split)."""

    def __init__(self, options: ReaderOptions):
        self._options = options
        self._documents = Metrics.counter("read", "documents")
        self._dead = Metrics.counter("read", "dead_letters")
        self._files = Metrics.counter("read", "files")

    def process(self, path: str):
        log.info("reading %s", path)
        for rec in read_file(path, self._options):
            if isinstance(rec, Document):
                self._documents.inc()
                yield rec
            elif isinstance(rec, DeadLetter):
                self._dead.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, rec)
            else:
                self._files.inc()
                if rec.truncated:
                    log.warning("%s is truncated or corrupt: see dead_letter/ for how far reading got", path)
                log.info("read %s: %d records, %d bytes", path, rec.documents_read, rec.bytes)
                yield beam.pvalue.TaggedOutput(INPUT_SUMMARIES, rec)


class ReadDocuments(beam.PTransform):
    """Match ``patterns``, read every file with ``options``, and spread the documents over workers.

    Returns a dict of PCollections: ``documents`` (:class:`Document`), ``dead_letters``
    (:class:`DeadLetter`) and ``input_summaries`` (:class:`InputSummary`).
    """

    def __init__(self, patterns: list[str], options: ReaderOptions):
        super().__init__()
        self._patterns = list(patterns)
        self._options = options

    def expand(self, pbegin):
        paths = (
            pbegin
            | "Patterns" >> beam.Create(self._patterns)
            | "MatchFiles" >> fileio.MatchAll()
            | "Paths" >> beam.Map(lambda metadata: metadata.path)
            | "OnePerFile" >> beam.Distinct()
            | "SpreadFiles" >> beam.Reshuffle()
        )
        records = paths | "ReadFiles" >> beam.ParDo(_ReadFileFn(self._options)).with_outputs(
            DEAD_LETTERS, INPUT_SUMMARIES, main=DOCUMENTS
        )
        # No reshuffle of the documents: reading fuses with tokenizing and spilling, so texts are
        # never materialised; parallelism comes from the files (split big corpora into many).
        return {
            DOCUMENTS: records[DOCUMENTS],
            DEAD_LETTERS: records[DEAD_LETTERS],
            INPUT_SUMMARIES: records[INPUT_SUMMARIES],
        }
