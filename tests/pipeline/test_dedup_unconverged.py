"""A near-duplicate cluster wider than ``ROUNDS`` confirmed pairs (found by the attack round on issue 35)."""

from __future__ import annotations

import typing

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.dedup.unique_documents import ROUNDS, DropDuplicates
from pipeline.elements import Document, Source


def _create(items, label: str):
    return label >> (beam.Create(range(len(items))) | beam.Map(lambda i: items[i]).with_output_types(typing.Any))


def _chain(n: int) -> list[Document]:
    """d00 ~ d01 ~ ... : document k has the first k blocks of 15 words respelt, so neighbours are ~0.82-0.90 alike
    and documents two or more apart are below 0.8; d00 is the smallest key."""
    base = [f"w{i}" for i in range(300)]
    docs = []
    for k in range(n):
        words = [f"r{i // 15}_{i % 15}" if i // 15 < k else w for i, w in enumerate(base)]
        docs.append(Document(f"d{k:02d}", " ".join(words), Source("corpus.jsonl", k + 1, (k + 1) * 1000)))
    return docs


def _dangling(pairs):
    """(kept ids, removed (id, duplicate_of id)s) -> the removed records whose kept document is not kept."""
    kept, removed = pairs
    return sorted((doc, of) for doc, of in removed if of not in kept)


def test_an_unconverged_cluster_names_only_kept_documents():
    docs = _chain(14)
    with TestPipeline(runner="FnApiRunner") as p:
        inputs = {
            "documents": p | _create(docs, "Main"),
            "prepass": p | _create(docs, "Pre"),
            "confirm": p | _create(docs, "Confirm"),
        }
        out = inputs | DropDuplicates("near")
        stats = out["stats"] | beam.Filter(lambda s: s[0] == "unconverged")
        assert_that(stats | beam.Map(lambda s: s[1] > 0), equal_to([True]), "unconverged")
        kept = out["documents"] | beam.Map(lambda d: d.doc_id) | "AllKept" >> beam.combiners.ToList()
        removed = (
            out["removed"]
            | beam.Map(lambda r: (r.doc_id, r.detail["duplicate_of"]["doc_id"]))
            | "AllRemoved" >> beam.combiners.ToList()
        )
        joined = kept | beam.Map(lambda k, r: _dangling((set(k), r)), beam.pvalue.AsSingleton(removed))
        assert_that(joined, equal_to([[]]), "dangling")
    assert ROUNDS < 13
