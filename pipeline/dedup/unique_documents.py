"""DropDuplicates: documents -> the documents kept, and one ``RemovedDocument`` per copy left out.

``--dedup exact``: documents with the same normalised words (``pipeline.dedup.text``) are copies. ``--dedup near``:
first exact, then MinHash + LSH over word shingles on the documents exact kept; a pair that shares a band is a
*candidate*, and it is *confirmed* only if the exact Jaccard similarity of the two shingle sets reaches the
threshold (so no pair below the threshold is ever removed; LSH only decides which pairs get looked at).

Which copy stays: a document is removed if a confirmed duplicate with a smaller key exists, where the key is
``(doc_id, source path, byte offset)`` (the order the shards sort documents by); the record names the smallest such
duplicate. For exact copies (a clique) that keeps exactly the smallest of each group. For near copies it is one
pass, no connected components: in a chain A ~ B ~ C (A < B < C) where A and C are below the threshold, B and C are
both removed (each has a smaller duplicate) although C's is itself removed. The outcome is a function of the set of
documents alone: the same whatever the runner, the worker count or the input order.

Everything is grouped by Beam (GroupByKey on text digest, on band key, on pair): no process holds an index of the
corpus. Signatures are computed in the step right after reading (fused with it). What a document needs to know (its
candidate pairs; whether it is a copy) reaches it through multimap side inputs, which runners look up per key
instead of loading whole, so the documents themselves are never shuffled; only the shingle sets of documents in a
candidate pair are (computed again there: cheaper than carrying every document's through a shuffle).
"""

from __future__ import annotations

import hashlib
import json

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from pipeline.dedup import minhash, text
from pipeline.elements import DUPLICATE, Document, RemovedDocument, preview

DocKey = tuple[str, str, int, int]  # doc_id, source path, byte offset, line (the line only for the record)
MODES = ("off", "exact", "near")


def doc_key(d: Document) -> DocKey:
    return (d.doc_id, d.source.path, d.source.byte_offset, d.source.line)


def key_dict(key: DocKey) -> dict:
    return {"doc_id": key[0], "source": {"path": key[1], "byte_offset": key[2], "line": key[3]}}


def _side_key(key: DocKey) -> str:
    """A document key as the string key of a multimap side input (looked up per document, never loaded whole)."""
    return json.dumps(list(key), ensure_ascii=False)


class _SignFn(beam.DoFn):
    """document -> (text digest, (key, band keys)); the band keys only for ``near``."""

    def __init__(self, params: minhash.NearParams | None):
        self._params = params
        self._no_words = Metrics.counter("dedup", "documents_without_words")

    def process(self, doc: Document):
        found = text.words(doc.text)
        if not found:
            self._no_words.inc()  # nothing to compare: never a duplicate
            return
        digest = hashlib.blake2b(" ".join(found).encode("utf-8"), digest_size=16).digest()
        bands: tuple = ()
        if self._params is not None:
            shingles = text.shingle_set(found, self._params.shingle)
            bands = tuple(minhash.band_keys(minhash.signature(shingles, self._params.num_perm), self._params))
        yield digest, (doc_key(doc), bands)


def _exact_copies(digest_members):
    """The smallest key of a digest stays (and goes on to the bands); every other is an exact copy of it."""
    _, members = digest_members
    members = sorted(members)
    kept, bands = members[0]
    for band in bands:
        yield TaggedOutput("bands", (band, kept))
    for key, _ in members[1:]:
        yield key, {"method": "exact", "duplicate_of": key_dict(kept), "similarity": 1.0}


def _candidate_pairs(band_members):
    _, keys = band_members
    keys = sorted(set(keys))
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            yield a, b


def _pair_ends(pair):
    name = json.dumps([list(pair[0]), list(pair[1])], ensure_ascii=False)
    yield _side_key(pair[0]), name
    yield _side_key(pair[1]), name


class _PairShinglesFn(beam.DoFn):
    """A document in candidate pairs -> (pair, (its key, its shingle set)) per pair; the others -> nothing. The
    shingles are computed again here rather than carried: only documents in a pair cost a shuffle."""

    def __init__(self, shingle: int):
        self._shingle = shingle

    def process(self, doc: Document, pair_ends):
        key = doc_key(doc)
        pairs = list(pair_ends[_side_key(key)])  # a lazy iterable on portable runners
        if not pairs:
            return
        shingles = text.shingle_set(text.words(doc.text), self._shingle)
        for pair in pairs:
            yield pair, (key, shingles)


class _ConfirmFn(beam.DoFn):
    """(pair, the two (key, shingles)) -> (b, (a, similarity)) when the exact Jaccard reaches the threshold."""

    def __init__(self, threshold: float):
        self._threshold = threshold
        self._confirmed = Metrics.counter("dedup", "confirmed_pairs")

    def process(self, pair_shingles):
        _, ends = pair_shingles
        (a, shingles_a), (b, shingles_b) = sorted(ends, key=lambda end: end[0])
        similarity = text.jaccard(shingles_a, shingles_b)
        if similarity >= self._threshold:
            self._confirmed.inc()
            yield b, (a, round(similarity, 6))


def _near_copy(key_matches):
    key, matches = key_matches
    a, similarity = min(matches)  # the smallest confirmed duplicate
    return key, {"method": "near", "duplicate_of": key_dict(a), "similarity": similarity}


class _SplitFn(beam.DoFn):
    def process(self, doc: Document, marks):
        found = next(iter(marks[_side_key(doc_key(doc))]), None)  # at most one mark per document
        if found is not None:
            detail = json.loads(found)
            yield TaggedOutput("removed", RemovedDocument(DUPLICATE, doc.doc_id, doc.source, detail, preview(doc.text)))
        else:
            yield doc


class DropDuplicates(beam.PTransform):
    """``documents`` -> ``{"documents": kept, "removed": RemovedDocument, "stats": (name, count)}``."""

    def __init__(self, mode: str, params: minhash.NearParams | None = None):
        super().__init__()
        if mode not in ("exact", "near"):
            raise ValueError(f"DropDuplicates: mode must be exact or near, got {mode!r}")
        self._params = (params or minhash.NearParams()) if mode == "near" else None

    def expand(self, documents):
        signed = documents | "Sign" >> beam.ParDo(_SignFn(self._params))
        exact = (
            signed
            | "GroupByDigest" >> beam.GroupByKey()
            | "ExactCopies" >> beam.FlatMap(_exact_copies).with_outputs("bands", main="copies")
        )
        marks = [exact["copies"]]
        stats = []
        if self._params is not None:
            pairs = (
                exact["bands"]
                | "GroupByBand" >> beam.GroupByKey()
                | "CandidatePairs" >> beam.FlatMap(_candidate_pairs)
                | "DistinctPairs" >> beam.Distinct()
            )
            ends = pairs | "PairEnds" >> beam.FlatMap(_pair_ends).with_output_types(tuple[str, str])
            confirmed = (
                documents
                | "PairShingles" >> beam.ParDo(_PairShinglesFn(self._params.shingle), beam.pvalue.AsMultiMap(ends))
                | "GroupByPair" >> beam.GroupByKey()
                | "Confirm" >> beam.ParDo(_ConfirmFn(self._params.threshold))
            )
            marks.append(confirmed | "GroupByCopy" >> beam.GroupByKey() | "NearCopies" >> beam.Map(_near_copy))
            stats = [
                pairs
                | "CountCandidates" >> beam.combiners.Count.Globally()
                | "NameCandidates" >> beam.Map(lambda n: ("candidate_pairs", n)),
                confirmed
                | "CountConfirmed" >> beam.combiners.Count.Globally()
                | "NameConfirmed" >> beam.Map(lambda n: ("confirmed_pairs", n)),
            ]
        side_marks = (
            marks
            | "AllCopies" >> beam.Flatten()
            | "AsSideMarks"
            >> beam.Map(
                lambda m: (_side_key(m[0]), json.dumps(m[1], sort_keys=True, ensure_ascii=False))
            ).with_output_types(tuple[str, str])
        )
        split = documents | "Split" >> beam.ParDo(_SplitFn(), beam.pvalue.AsMultiMap(side_marks)).with_outputs(
            "removed", main="documents"
        )
        pipeline = documents.pipeline
        stats_pc = (stats or [pipeline | "NoStats" >> beam.Create([])]) | "AllStats" >> beam.Flatten()
        return {"documents": split["documents"], "removed": split["removed"], "stats": stats_pc}
