"""The job's removal stages, as ``build_shards`` options ask for them: documents in, the documents kept out, and
what the artifact records about the rest (``removed/<reason>.jsonl`` and the manifest's ``dedup``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam

from pipeline.dedup import text
from pipeline.dedup.clean_documents import DropContaminated
from pipeline.dedup.eval_sets import EvalFile, EvalFileError, given_twice, twice_message
from pipeline.dedup.minhash import NearParams
from pipeline.dedup.unique_documents import DropDuplicates
from pipeline.write.removed import WriteRemoved


def near_params(o) -> NearParams:
    """``--dedup-*`` as parameters; ValueError (a user error) names the bad option."""
    return NearParams(
        threshold=o.dedup_threshold,
        shingle=o.dedup_shingle,
        bands=o.dedup_bands,
        rows=o.dedup_rows,
        max_bucket=o.dedup_max_bucket,
    )


def eval_files(o) -> list[EvalFile]:
    """``--decontaminate``'s files read and checked in the launcher: a file that cannot be used is a ValueError (one
    line, file and position) before the job starts. The job's workers read them again (:class:`DropContaminated`),
    as they read the input, and refuse a file whose bytes changed in between. Read each time it is called (a
    second build in one process sees the files as they are then): ``build_shards`` calls it once per build."""
    paths = tuple(o.decontaminate or ())
    if o.contamination_ngram < 1:
        raise ValueError(f"--contamination-ngram must be at least 1, got {o.contamination_ngram}")
    twice = given_twice(paths)
    if twice:  # its examples would be counted twice, and every record would name it twice
        raise ValueError(twice_message("--decontaminate", *twice))
    files = []
    for path in paths:
        try:
            files.append(EvalFile.check(path))
        except EvalFileError as e:
            raise ValueError(f"--decontaminate {e}") from None
    return files


def describe(o) -> dict[str, Any]:
    """The manifest's ``dedup`` (its counts are added when the job ends)."""
    info: dict[str, Any] = {"mode": o.dedup}
    if o.dedup != "off":
        info["normalisation"] = text.NORMALISATION
        info["kept"] = "the smallest (source path, byte offset, line, doc_id) of each cluster of copies"
    if o.dedup == "near":
        info["near"] = near_params(o).describe()
        info["confirmation"] = "exact Jaccard of shingle sets"
    return info


def describe_contamination(o) -> dict[str, Any] | None:
    """The manifest's ``contamination`` before the job's figures are added; None without ``--decontaminate``."""
    if not o.decontaminate:
        return None
    return {
        "ngram_size": o.contamination_ngram,
        "drop": o.drop_contaminated,
        "normalisation": text.NORMALISATION,
        "files": {},
    }


PREPASS = "dedup pre-pass"  # the progress phases (pipeline/progress.py) of --dedup's other reads of the input
CONFIRMATION = "dedup confirmation"


def remove_documents(
    documents,
    o,
    reread: Callable[[str, str], Any],
    checked: list[EvalFile] | None = None,
    files: list[tuple[str, int]] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """(the documents kept, the manifest's extra inputs: ``removed`` files, ``removal_stats``, ``contamination``).
    ``reread(label, phase)``: the input's documents read again (``--dedup``'s pre-pass, and near's confirmation
    pass), counted as ``phase`` in the progress line; ``checked``: :func:`eval_files` as the launcher read them
    (read here when None). Evaluation overlap is checked first, then duplicates among the
    rest: without ``--dedup`` on the documents as they are read (no shuffle); with it in the pre-pass, whose
    contaminated documents the main pass then leaves out (recorded once)."""
    removed = []
    extra: dict[str, Any] = {}
    sets = eval_files(o) if checked is None else checked
    drop = o.drop_contaminated == "documents"
    if o.dedup == "off":
        if sets:
            clean = documents | "DropContaminated" >> DropContaminated(sets, o.contamination_ngram, drop)
            documents = clean["documents"]
            removed.append(clean["removed"])
            extra["contamination"] = clean["figures"]
    else:
        inputs = {"documents": documents, "prepass": reread("ReadForDedup", PREPASS)}
        if o.dedup == "near":
            inputs["confirm"] = reread("ReadForConfirmation", CONFIRMATION)
        if sets:
            clean = inputs["prepass"] | "DropContaminated" >> DropContaminated(sets, o.contamination_ngram, drop)
            inputs["prepass"] = clean["documents"]
            removed.append(clean["removed"])
            extra["contamination"] = clean["figures"]
            inputs["dropped"] = clean["removed"] | "ContaminatedKeys" >> beam.Map(
                lambda r: (r.source.path, r.source.byte_offset, r.source.line, r.doc_id)
            )
        params = near_params(o) if o.dedup == "near" else None
        size = sum(n for _, n in files) if files is not None else None
        unique = inputs | "DropDuplicates" >> DropDuplicates(o.dedup, params, size)
        documents = unique["documents"]
        removed.append(unique["removed"])
        extra["removal_stats"] = unique["stats"]
    if removed:
        extra["removed"] = (
            removed
            | "AllRemoved" >> beam.Flatten()
            | "WriteRemoved" >> WriteRemoved(o.output, o.spill_buffer_mb << 20, files=files)
        )
    return documents, extra
