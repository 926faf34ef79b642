"""The job's removal stages, as ``build_shards`` options ask for them: documents in, the documents kept out, and
what the artifact records about the rest (``removed/<reason>.jsonl`` and the manifest's ``dedup``)."""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from pipeline.dedup import text
from pipeline.dedup.minhash import NearParams
from pipeline.dedup.unique_documents import DropDuplicates
from pipeline.write.removed import WriteRemoved


def near_params(o) -> NearParams:
    """``--dedup-*`` as parameters; ValueError (a user error) names the bad option."""
    return NearParams(threshold=o.dedup_threshold, shingle=o.dedup_shingle, bands=o.dedup_bands, rows=o.dedup_rows)


def describe(o) -> dict[str, Any]:
    """The manifest's ``dedup`` (its counts are added when the job ends)."""
    info: dict[str, Any] = {"mode": o.dedup}
    if o.dedup != "off":
        info["normalisation"] = text.NORMALISATION
        info["kept"] = "smallest (doc_id, source path, byte offset) among its confirmed duplicates"
    if o.dedup == "near":
        info["near"] = near_params(o).describe()
        info["confirmation"] = "exact Jaccard of shingle sets"
    return info


def remove_documents(documents, o) -> tuple[Any, dict[str, Any]]:
    """(the documents kept, the manifest's extra inputs: ``removed`` files and ``removal_stats``)."""
    if o.dedup == "off":
        return documents, {}
    unique = documents | "DropDuplicates" >> DropDuplicates(o.dedup, near_params(o) if o.dedup == "near" else None)
    removed = [unique["removed"]]
    files = removed | "AllRemoved" >> beam.Flatten() | "WriteRemoved" >> WriteRemoved(o.output)
    return unique["documents"], {"removed": files, "removal_stats": unique["stats"]}
