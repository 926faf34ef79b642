"""DropContaminated: documents -> those sharing no n-gram with the evaluation sets, one ``RemovedDocument`` per other
(``--drop-contaminated documents``; with ``none`` every document is kept), and the per-file figures for the manifest.

The evaluation n-grams (``pipeline.dedup.overlap``) are built by the workers from the files (read again, checked
against the launcher's sha256) and reach each step as one side input: inside a DoFn, Beam would bz2-compress them
each time it pickles the step and decompress them each time it builds it (all 8 GLUE and XQuAD files: 375k pairs,
3 MB, 0.35 s to compress, 15 times in one local job). Each document is checked where it is; the n-grams found are
combined into one set (a subset of the evaluation's), from which the figures are computed once at the end.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from pipeline.dedup import overlap
from pipeline.dedup.eval_sets import EvalFile, EvalFileError
from pipeline.elements import CONTAMINATED, Document, RemovedDocument, preview

MAX_EXAMPLE_IDS = 100  # a record names at most this many examples of one file (and says how many there are)


class _CheckFn(beam.DoFn):
    def __init__(self, n: int, drop: bool):
        self._n, self._drop = n, drop
        self._index: overlap.OverlapIndex | None = None
        self._contaminated = Metrics.counter("contamination", "documents")

    def _index_of(self, sets: list[overlap.EvalSet]) -> overlap.OverlapIndex:
        if self._index is None or self._index.sets is not sets:  # a side input is the same object within a bundle
            self._index = overlap.OverlapIndex(sets, self._n)
        return self._index

    def process(self, doc: Document, sets: list[overlap.EvalSet]):
        index = self._index_of(sets)
        grams = index.scan(doc.doc_id, doc.text, record=False)
        if not len(grams):
            yield doc
            return
        self._contaminated.inc()
        yield TaggedOutput("found", grams)
        for s in sets:
            if len(overlap.members(s.pair_hashes, grams)):
                yield TaggedOutput("files", s.name)
        if not self._drop:
            yield doc
            return
        matched = []
        for s in sets:
            held = s.examples_holding(grams)
            if len(held):
                ids = [s.example_ids[i] for i in held[:MAX_EXAMPLE_IDS]]
                matched.append({"file": s.name, "examples": len(held), "example_ids": ids})
        detail = {"ngram_size": self._n, "ngrams_found": int(len(grams)), "evaluation": matched}
        yield TaggedOutput("removed", RemovedDocument(CONTAMINATED, doc.doc_id, doc.source, detail, preview(doc.text)))


def _figures(found: list[int], documents: list[tuple[str, int]], sets: list[overlap.EvalSet], n: int) -> dict:
    index = overlap.OverlapIndex(sets, n)
    index.found.update(np.array(found, dtype=np.int64).view(np.uint64).tolist())
    per_file = dict(documents)
    return {
        name: {
            **{k: v for k, v in r.items() if k not in ("documents", "contaminated_examples")},
            "documents": per_file.get(name, 0),
        }
        for name, r in index.report().items()
    }


def _build(indexed_file: tuple[int, EvalFile], n: int) -> tuple[int, overlap.EvalSet]:
    """A worker's read of an evaluation file; a refusal names the option, as the launcher's check does (the job
    reports it in one line: ``pipeline.runners.jobs.run_pipeline``)."""
    i, f = indexed_file
    try:
        examples = f.examples()
    except EvalFileError as e:
        raise EvalFileError(f"--decontaminate {e}") from None
    return i, overlap.EvalSet.build(f.path, examples, n)


class DropContaminated(beam.PTransform):
    """``documents`` -> ``{"documents", "removed", "figures"}``; figures: one dict, per evaluation file its
    examples, examples_contaminated, examples_too_short, ngrams, ngrams_found, ngram_fraction_found."""

    def __init__(self, files: list[EvalFile], n: int, drop: bool):
        super().__init__()
        self._files, self._n, self._drop = files, n, drop

    def expand(self, documents):
        n = self._n
        sets = beam.pvalue.AsSingleton(
            documents.pipeline
            | "EvalFiles" >> beam.Create(list(enumerate(self._files)))
            | "BuildEvalSets" >> beam.Map(_build, n)
            | "AllEvalSets" >> beam.combiners.ToList()
            | "InOrder" >> beam.Map(lambda built: [s for _, s in sorted(built, key=lambda b: b[0])])
        )
        checked = documents | "Check" >> beam.ParDo(_CheckFn(n, self._drop), sets).with_outputs(
            "found", "files", "removed", main="documents"
        )
        documents_per_file = (
            checked["files"]
            | "DocumentsPerFile" >> beam.combiners.Count.PerElement()
            | "AllFiles" >> beam.combiners.ToList()
        )
        figures = (
            checked["found"]
            | "FoundNgrams" >> beam.FlatMap(lambda grams: grams.view(np.int64).tolist())  # Beam's ints are signed
            | "Distinct" >> beam.Distinct()
            | "AllFound" >> beam.combiners.ToList()
            | "Figures"
            >> beam.Map(
                lambda found, docs, built: _figures(found, docs, built, n),
                beam.pvalue.AsSingleton(documents_per_file),
                sets,
            )
        )
        return {"documents": checked["documents"], "removed": checked["removed"], "figures": figures}
