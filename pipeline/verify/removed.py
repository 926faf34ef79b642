"""What each record of ``removed/<reason>.jsonl`` says (format 2.1; schemas/FORMAT.md, "removed/<reason>.jsonl"),
beyond the checksum ``pipeline.verify`` checks for every file: a record the build could not have written is
reported, one line per kind of problem naming the file and the first line that has it.

- every record: ``doc_id`` (string) and ``source`` (``path`` string, ``line`` and ``byte_offset`` integers);
  records sorted as the writer sorts them (source path, byte offset, line, doc_id); no source recorded twice in
  the removed files (a document is removed once);
- ``duplicate``: ``method`` ``exact`` (``similarity`` 1.0) or ``near`` (``similarity`` from 0 to 1: the exact
  Jaccard with the document kept, which in a chain A ~ B ~ C may be below ``dedup.near.threshold``), the method the
  manifest's ``dedup.mode`` allows, and ``duplicate_of`` the document its cluster keeps, so one with a smaller key
  ``(source path, byte offset, line, doc_id)``;
- ``contaminated``: ``ngram_size`` the manifest's, ``ngrams_found`` at least 1, ``evaluation`` a non-empty list of
  ``{file, examples, example_ids}`` naming an evaluation file of the manifest's ``contamination.files`` and
  1 to 100 example ids (at most ``examples``).

Across the files and the rows (:func:`named_problems`, :func:`input_problems`, :func:`row_problems`): a
``duplicate_of`` never names a document that is itself removed (its source in no record); every source (a record's
and its ``duplicate_of``'s) is in a file among the manifest's ``inputs``; with ``doc-sentences`` packing, every ``duplicate_of``
names a doc_id that rows hold (with ``full-sentences`` a short kept document may start no row, so its id may be in
none); a removed document's doc_id is in no row, unless it names a document of its own id (a copy under the same id:
the corpus gave one id twice and one was kept). Rows carry no source, so a corpus that gave one id to different
documents and lost one of them as a copy of another is reported as well.
"""

from __future__ import annotations

from typing import Any

REASONS = ("duplicate", "contaminated")
MAX_EXAMPLE_IDS = 100  # pipeline.dedup.clean_documents.MAX_EXAMPLE_IDS: a record names at most this many


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def source_problem(source: Any) -> str | None:
    if not isinstance(source, dict):
        return "no source object"
    if not isinstance(source.get("path"), str) or not _int(source.get("line")) or not _int(source.get("byte_offset")):
        return "source without a string path and integer line and byte_offset"
    return None


def _duplicate_problem(r: dict[str, Any], m: dict[str, Any]) -> str | None:
    dedup = _obj(m.get("dedup"))
    mode, method = dedup.get("mode"), r.get("method")
    similarity: Any = r.get("similarity")
    if method not in ("exact", "near"):
        return f"method {method!r} is neither 'exact' nor 'near'"
    if mode not in ("exact", "near") or (method == "near" and mode != "near"):
        return f"method {method!r} but the manifest's dedup.mode is {mode!r}"
    if not _number(similarity):
        return "no numeric similarity"
    if method == "exact" and similarity != 1.0:
        return f"similarity {similarity} of an exact copy (1.0)"
    if method == "near" and not 0.0 <= similarity <= 1.0:
        return f"similarity {similarity} outside [0, 1]"
    of = r.get("duplicate_of")
    if not isinstance(of, dict) or not isinstance(of.get("doc_id"), str) or source_problem(of.get("source")):
        return "duplicate_of is not {doc_id, source}"
    if sort_key(of) >= sort_key(r):
        return "duplicate_of is not a document with a smaller key (source path, byte offset, line, doc_id)"
    return None


def _contaminated_problem(r: dict[str, Any], m: dict[str, Any]) -> str | None:
    c = _obj(m.get("contamination"))
    if r.get("ngram_size") != c.get("ngram_size") or not _int(r.get("ngram_size")):
        return f"ngram_size {r.get('ngram_size')!r}, the manifest's contamination.ngram_size is {c.get('ngram_size')!r}"
    if not _int(r.get("ngrams_found")) or r["ngrams_found"] < 1:
        return f"ngrams_found {r.get('ngrams_found')!r} (a contaminated document holds at least 1)"
    evaluation, files = r.get("evaluation"), _obj(c.get("files"))
    if not isinstance(evaluation, list) or not evaluation:
        return "no evaluation list"
    for e in evaluation:
        if not isinstance(e, dict) or e.get("file") not in files:
            return "an evaluation entry names no evaluation file of the manifest's contamination.files"
        ids: Any = e.get("example_ids")
        n: Any = e.get("examples")
        if not _int(n) or not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return f"{e['file']}: no integer examples and list of example_ids"
        if not 1 <= len(ids) <= min(n, MAX_EXAMPLE_IDS):
            return f"{e['file']}: {len(ids)} example id(s) for {n} example(s)"
    return None


def record_problem(r: dict[str, Any], reason: str, m: dict[str, Any]) -> str | None:
    """What is wrong with one record of ``removed/<reason>.jsonl`` (its ``reason`` already checked), or None."""
    if not isinstance(r.get("doc_id"), str):
        return "no string doc_id"
    problem = source_problem(r.get("source"))
    if problem:
        return problem
    if reason == "duplicate":
        return _duplicate_problem(r, m)
    if reason == "contaminated":
        return _contaminated_problem(r, m)
    return None


def sort_key(r: dict[str, Any]) -> tuple:
    """The order ``pipeline.write.removed`` writes records in."""
    s = r["source"]
    return (s["path"], s["byte_offset"], s["line"], r["doc_id"])


def file_problems(path: str, records: list[tuple[int, dict]], m: dict[str, Any], seen: dict[tuple, str]) -> list[str]:
    """One line per kind of problem in one removed file (``records``: (line number, object) with the file's
    reason); ``seen``: the sources recorded so far in any removed file (updated)."""
    reason = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
    found: dict[str, list[int]] = {}
    before: tuple | None = None
    for n, r in records:
        problem = record_problem(r, reason, m)
        if problem:
            found.setdefault(problem, []).append(n)
            before = None
            continue
        key = sort_key(r)
        if before is not None and key < before:
            found.setdefault("not sorted by (source path, byte offset, line, doc_id)", []).append(n)
        before = key
        where = (key[0], key[1], key[2])
        if where in seen:
            found.setdefault(f"source recorded twice (also {seen[where]})", []).append(n)
        seen.setdefault(where, f"{path} line {n}")
    lines = []
    for problem, at in found.items():
        more = f" (and {len(at) - 1} more line(s))" if len(at) > 1 else ""
        lines.append(f"{path} line {at[0]}: {problem}{more}")
    return lines


def named_problems(records: list[tuple[str, int, dict]]) -> list[str]:
    """``records``: (file, line, record) of every valid record of the removed files. One line per kind of problem:
    a ``duplicate_of`` whose source is a removed document's."""
    removed = {tuple(sort_key(r)[:3]): f"{path} line {n}" for path, n, r in records}
    found: dict[str, list[str]] = {}
    for path, n, r in records:
        of = r.get("duplicate_of")
        if isinstance(of, dict):
            at = removed.get(tuple(sort_key(of)[:3]))
            if at:
                found.setdefault(f"{path}: duplicate_of names a removed document ({at})", []).append(f"line {n}")
    return _first_lines(found)


def input_problems(records: list[tuple[str, int, dict]], inputs: Any) -> list[str]:
    """One line per kind of problem: a record's ``source``, or its ``duplicate_of``'s, in a file that is not among
    the manifest's ``inputs`` (every removed document was read from one of them)."""
    paths = {i.get("path") for i in inputs if isinstance(i, dict)} if isinstance(inputs, list) else set()
    found: dict[str, list[str]] = {}
    for path, n, r in records:
        of = r.get("duplicate_of")
        for what, source in (("source", r["source"]), ("duplicate_of's source", isinstance(of, dict) and of["source"])):
            if isinstance(source, dict) and source["path"] not in paths:
                problem = f"{path}: {what} names a file that is not among the manifest's inputs"
                found.setdefault(problem, []).append(f"line {n}")
    return _first_lines(found)


def watched_ids(records: list[tuple[str, int, dict]]) -> set[str]:
    """The doc ids :func:`row_problems` needs to know the rows' answer for."""
    ids = {r["doc_id"] for _, _, r in records}
    return ids | {r["duplicate_of"]["doc_id"] for _, _, r in records if isinstance(r.get("duplicate_of"), dict)}


def row_problems(records: list[tuple[str, int, dict]], in_rows: set[str], doc_sentences: bool) -> list[str]:
    """``in_rows``: which of :func:`watched_ids` the rows hold. One line per kind of problem: a removed document's id
    in the rows (but a copy of a document of its own id), a ``duplicate_of`` no row holds (``doc-sentences`` only)."""
    found: dict[str, list[str]] = {}
    removed = {tuple(sort_key(r)[:3]) for _, _, r in records}  # naming one is named_problems' line already
    for path, n, r in records:
        of = r.get("duplicate_of")
        own_id = isinstance(of, dict) and of["doc_id"] == r["doc_id"]
        if r["doc_id"] in in_rows and not own_id:
            found.setdefault(f"{path}: a removed document's doc_id is held by rows", []).append(f"line {n}")
        if not isinstance(of, dict) or tuple(sort_key(of)[:3]) in removed:
            continue
        if doc_sentences and of["doc_id"] not in in_rows:
            found.setdefault(f"{path}: duplicate_of names a doc_id no row holds", []).append(f"line {n}")
    return _first_lines(found)


def _first_lines(found: dict[str, list[str]]) -> list[str]:
    lines = []
    for problem, at in found.items():
        more = f" (and {len(at) - 1} more line(s))" if len(at) > 1 else ""
        path, _, what = problem.partition(": ")
        lines.append(f"{path} {at[0]}: {what}{more}")
    return lines
