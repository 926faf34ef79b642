"""FindMaskCandidates: documents -> documents annotated with spaCy entity and noun-phrase spans.

The Beam stage around :mod:`pipeline.candidates.spacy_spans`: spaCy loads once per worker in ``setup``
and runs with ``nlp.pipe`` over batches of documents; each batch comes out as
:class:`~pipeline.elements.AnnotatedDocument` s, and each bundle reports which model it actually used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.candidates.spacy_spans import (
    DEFAULT_MAX_CHARS,
    NLTK_NP_GRAMMAR,
    SPACY_KINDS,
    Chunker,
    annotate,
    default_spacy_model,
    describe,
    load_spacy,
)
from pipeline.elements import AnnotatedDocument, Document

MODELS = "models"


class _AnnotateFn(beam.DoFn):
    """Annotates batches of documents; reports, once per bundle, which model it actually used."""

    def __init__(self, model: str | None, kinds: tuple[str, ...], np_chunker: str, max_chars: int, batch_size: int):
        self._model = model
        self._kinds = kinds
        self._np_chunker = np_chunker
        self._max_chars = max_chars
        self._batch_size = batch_size
        self._spans = {k: Metrics.counter("candidates", k) for k in kinds}

    def setup(self):
        # The default is resolved here, on the worker, from what the worker has installed.
        name = self._model or default_spacy_model()
        self._nlp = load_spacy(name, self._kinds, self._np_chunker)
        self._description = json.dumps(describe(self._nlp, name), sort_keys=True)
        self._chunker = (
            Chunker(NLTK_NP_GRAMMAR) if self._np_chunker == "nltk" and "noun_phrases" in self._kinds else None
        )

    def start_bundle(self):
        self._used = False

    def process(self, batch: list[Document]):
        self._used = True
        results = annotate(
            self._nlp,
            [d.text for d in batch],
            self._kinds,
            self._np_chunker,
            self._chunker,
            self._max_chars,
            self._batch_size,
        )
        for doc, spans in zip(batch, results):
            for cs in spans:
                self._spans[cs.kind].inc(len(cs.starts))
            yield AnnotatedDocument(doc, spans)

    def finish_bundle(self):
        if self._used:
            yield beam.pvalue.TaggedOutput(MODELS, WindowedValue(self._description, MIN_TIMESTAMP, (GlobalWindow(),)))


class FindMaskCandidates(beam.PTransform):
    """Batch documents, run spaCy over each batch once, and attach entity / noun-phrase spans.

    Returns a dict: ``documents`` (:class:`AnnotatedDocument`) and ``models`` (the JSON description of
    each distinct spaCy model the workers used; ``model=None`` means each worker's default).
    """

    def __init__(
        self,
        model: str | None,
        kinds: Iterable[str],
        np_chunker: str = "spacy",
        max_chars: int = DEFAULT_MAX_CHARS,
        batch_size: int = 32,
    ):
        super().__init__()
        kinds = tuple(k for k in SPACY_KINDS if k in set(kinds))
        if not kinds:
            raise ValueError("FindMaskCandidates needs entities and/or noun_phrases")
        if np_chunker not in ("spacy", "nltk"):
            raise ValueError(f"np_chunker must be spacy or nltk, got {np_chunker!r}")
        self._fn = _AnnotateFn(model, kinds, np_chunker, max_chars, batch_size)
        self._batch_size = batch_size

    def expand(self, documents):
        out = (
            documents
            | "Batch" >> beam.BatchElements(min_batch_size=self._batch_size, max_batch_size=self._batch_size)
            | "Annotate" >> beam.ParDo(self._fn).with_outputs(MODELS, main="documents")
        )
        return {"documents": out["documents"], MODELS: out[MODELS] | "DistinctModels" >> beam.Distinct()}
