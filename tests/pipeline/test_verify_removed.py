"""verify on removed-document files whose checksum agrees but whose records the build could not have written
(review of issue 35, D7): one line naming the file and the line, exit 1, never a traceback.

One real artifact per module: the demo corpus plus an exact copy, two near copies (a word changed) and a page's
sentence as an evaluation example, built with ``--dedup near --decontaminate``; every case copies it, edits a
removed file's records and reseals its checksum so the damage reaches the record checks.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DEMO_CORPUS, build
from tests.pipeline.test_verify_hostile import manifest, run_verify, write_manifest

DUP, CONT = "removed/duplicate.jsonl", "removed/contaminated.jsonl"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("removed")
    docs = [json.loads(line) for line in DEMO_CORPUS.read_text(encoding="utf-8").splitlines()]
    copies = [{"id": "zz-exact", "text": docs[1]["text"].upper()}]
    copies.append({"id": docs[4]["id"], "text": docs[4]["text"]})  # a copy under its original's id: rows hold it
    for i in (2, 3):
        words = docs[i]["text"].split()
        words[len(words) // 2] = "changed"
        copies.append({"id": f"zz-near-{i}", "text": " ".join(words)})
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs + copies), encoding="utf-8")
    evals = root / "eval.jsonl"
    evals.write_text(json.dumps({"id": "ex1", "text": " ".join(docs[5]["text"].split()[10:30])}) + "\n")
    out = root / "artifact"
    m = build(corpus, out, "--train-tokenizer", "--vocab-size", "2000", "--num-shards", "2", "--dedup", "near",
              "--decontaminate", str(evals))  # fmt: skip
    assert (m["counts"]["documents_duplicate"], m["counts"]["documents_contaminated"]) == (4, 1)
    return out


@pytest.fixture
def art(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "artifact"
    shutil.copytree(built, copy, symlinks=True)
    return copy


def records(root: Path, relative: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / relative).read_text(encoding="utf-8").splitlines()]


def rewrite(root: Path, relative: str, recs: list[dict[str, Any]]) -> None:
    """``recs`` as the file's lines, its manifest entry (records, bytes, sha256) made to agree."""
    data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in recs).encode()
    (root / relative).write_bytes(data)
    m = manifest(root)
    entry = next((e for e in m["removed"] if e["path"] == relative), None)
    if entry is None:
        entry = {"path": relative}
        m["removed"].append(entry)
    entry.update(records=len(recs), bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    write_manifest(root, m)


def _edit(i: int, change: Callable[[dict[str, Any]], Any]) -> Callable[[list[dict]], list[dict]]:
    def edit(recs: list[dict]) -> list[dict]:
        change(recs[i])
        return recs

    return edit


def _near(recs: list[dict]) -> int:
    return next(i for i, r in enumerate(recs) if r["method"] == "near")


DUPLICATE_EDITS: dict[str, tuple[Callable[[list[dict]], list[dict]], str]] = {
    "no doc_id": (_edit(0, lambda r: r.pop("doc_id")), "no string doc_id"),
    "no source": (_edit(0, lambda r: r.pop("source")), "no source object"),
    "source line a string": (_edit(0, lambda r: r["source"].update(line="3")), "integer line"),
    "no duplicate_of": (_edit(0, lambda r: r.pop("duplicate_of")), "duplicate_of is not"),
    "duplicate_of itself": (
        _edit(0, lambda r: r.update(duplicate_of={k: r[k] for k in ("doc_id", "source")})),
        "smaller key",
    ),  # fmt: skip
    "method fuzzy": (_edit(0, lambda r: r.update(method="fuzzy")), "method 'fuzzy'"),
    "exact below 1": (
        lambda rs: _edit(
            next(i for i, r in enumerate(rs) if r["method"] == "exact"), lambda r: r.update(similarity=0.97)
        )(rs),
        "of an exact copy",
    ),  # fmt: skip
    "duplicate_of a smaller doc_id later in the file": (
        _edit(0, lambda r: r.update(duplicate_of={"doc_id": "", "source": dict(r["source"], byte_offset=1 << 40)})),
        "smaller key (source path",
    ),  # fmt: skip
    "near above 1": (
        lambda rs: _edit(_near(rs), lambda r: r.update(similarity=1.5))(rs),
        "outside [0, 1]",
    ),  # fmt: skip
    "near below 0": (lambda rs: _edit(_near(rs), lambda r: r.update(similarity=-0.01))(rs), "outside [0, 1]"),
    "similarity a string": (_edit(0, lambda r: r.update(similarity="1.0")), "no numeric similarity"),
    "not sorted": (lambda rs: rs[::-1], "not sorted"),
}


@pytest.mark.parametrize("case", DUPLICATE_EDITS)
def test_a_wrong_duplicate_record_is_one_line_naming_file_and_line(art: Path, case: str) -> None:
    edit, message = DUPLICATE_EDITS[case]
    rewrite(art, DUP, edit(records(art, DUP)))
    code, output = run_verify(art)
    lines = [line for line in output.splitlines() if f"{DUP} line " in line]
    assert code == 1 and "Traceback" not in output, output
    assert len(lines) == 1 and message in lines[0], output


CONTAMINATED_EDITS: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "no example ids": (lambda r: r["evaluation"][0].update(example_ids=[]), "0 example id(s)"),
    "no evaluation": (lambda r: r.pop("evaluation"), "no evaluation list"),
    "another file": (lambda r: r["evaluation"][0].update(file="other.jsonl"), "contamination.files"),
    "ngram size 8": (lambda r: r.update(ngram_size=8), "ngram_size 8"),
    "no n-gram found": (lambda r: r.update(ngrams_found=0), "ngrams_found 0"),
}


@pytest.mark.parametrize("case", CONTAMINATED_EDITS)
def test_a_wrong_contaminated_record_is_one_line_naming_file_and_line(art: Path, case: str) -> None:
    change, message = CONTAMINATED_EDITS[case]
    rewrite(art, CONT, _edit(0, change)(records(art, CONT)))
    code, output = run_verify(art)
    lines = [line for line in output.splitlines() if f"{CONT} line 1: " in line]
    assert code == 1 and "Traceback" not in output and len(lines) == 1 and message in lines[0], output


def test_a_document_removed_twice_is_one_line(art: Path) -> None:
    contaminated = records(art, CONT)
    contaminated[0]["source"] = records(art, DUP)[0]["source"]
    rewrite(art, CONT, contaminated)
    code, output = run_verify(art)
    assert code == 1 and "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "source recorded twice" in line]
    assert len(lines) == 1 and f"{DUP} line 1" in lines[0] and f"{CONT} line 1" in lines[0], output


def test_a_removed_file_of_an_unknown_reason_is_refused(art: Path) -> None:
    """Its records would be in no count: documents_read would not be what the files account for."""
    first = records(art, DUP)[0]
    rec = {**first, "reason": "foo", "source": {"path": first["source"]["path"], "line": 10**6, "byte_offset": 10**9}}
    rewrite(art, "removed/foo.jsonl", [rec])
    code, output = run_verify(art)
    lines = [line for line in output.splitlines() if "removed/foo.jsonl" in line]
    assert code == 1 and "Traceback" not in output and len(lines) == 1, output
    assert "not a removed-documents file of the format" in lines[0]


def test_the_built_removed_files_verify(art: Path) -> None:
    code, output = run_verify(art)
    assert code == 0, output


# -- what the records name, against the other records and the rows (issue 42, item 4) ------------------------------


def _named_removed(rs: list[dict]) -> list[dict]:
    """The last near copy names the exact copy, itself removed (its source is a smaller key: earlier in the file)."""
    exact = next(r for r in rs if r["method"] == "exact" and r["doc_id"] == "zz-exact")
    last = max((r for r in rs if r["method"] == "near"), key=lambda r: r["source"]["byte_offset"])
    last["duplicate_of"] = {"doc_id": exact["doc_id"], "source": exact["source"]}
    return rs


def _named_nowhere(rs: list[dict]) -> list[dict]:
    """A near copy names a document at the corpus's first byte under an id no row holds."""
    near = next(r for r in rs if r["method"] == "near")
    near["duplicate_of"] = {"doc_id": "nowhere", "source": {**near["source"], "byte_offset": 0, "line": 1}}
    return rs


def _last(change: Callable[[dict[str, Any]], Any]) -> Callable[[list[dict]], list[dict]]:
    """``change`` on the record of the largest key (the file stays sorted when its path or offset grows)."""

    def edit(rs: list[dict]) -> list[dict]:
        change(rs[-1])
        return rs

    return edit


NAMED_EDITS: dict[str, tuple[str, Callable[[list[dict]], list[dict]], str]] = {
    "a source in no input file": (
        DUP,
        _last(lambda r: r["source"].update(path=r["source"]["path"] + ".elsewhere")),
        "source names a file that is not among the manifest's inputs",
    ),
    "a contaminated source in no input file": (
        CONT,
        _last(lambda r: r["source"].update(path=r["source"]["path"] + ".elsewhere")),
        "source names a file that is not among the manifest's inputs",
    ),
    "a duplicate_of in no input file": (
        DUP,
        _last(lambda r: r["duplicate_of"]["source"].update(path="/0-never-read.jsonl")),
        "source names a file that is not among the manifest's inputs",
    ),
    "duplicate_of a removed document": (DUP, _named_removed, "duplicate_of names a removed document (removed/"),
    "duplicate_of a document no row holds": (DUP, _named_nowhere, "duplicate_of names a doc_id no row holds"),
    "a removed id among the rows": (
        CONT,
        lambda rs: [{**rs[0], "doc_id": records_of_kept[0]}],
        "a removed document's doc_id is held by rows",
    ),
}
records_of_kept: list[str] = []  # a doc id the rows hold, set by the test (the module's artifact decides it)


@pytest.mark.parametrize("case", NAMED_EDITS)
def test_a_removed_record_naming_what_the_artifact_does_not_hold_is_one_line(art: Path, case: str) -> None:
    """verify trusted what the records name: a duplicate_of naming a removed document or one that exists nowhere,
    a removed document's id that rows hold, a source (or a duplicate_of's source) in a file the build never read, all
    passed once the manifest was resealed."""
    relative, edit, message = NAMED_EDITS[case]
    dup_of = {r["duplicate_of"]["doc_id"] for r in records(art, DUP)}
    records_of_kept[:] = sorted(dup_of - {r["doc_id"] for r in records(art, DUP)})
    rewrite(art, relative, edit(records(art, relative)))
    code, output = run_verify(art)
    lines = [line for line in output.splitlines() if f"{relative} line " in line]
    assert code == 1 and "Traceback" not in output, output
    assert len(lines) == 1 and message in lines[0], output


def test_a_near_similarity_below_the_threshold_verifies(art: Path) -> None:
    """The bounds FORMAT.md and DEDUP.md state, [0, 1] for near: a chain's record names the kept document with their
    own similarity, which may be below dedup.near.threshold (0.8 here)."""
    rs = records(art, DUP)
    rs[_near(rs)]["similarity"] = 0.31
    rewrite(art, DUP, rs)
    code, output = run_verify(art)
    assert code == 0, output
