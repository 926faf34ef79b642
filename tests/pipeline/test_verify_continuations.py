"""verify and continuation rows (format 2.0, FORMAT.md "Words longer than a row"): a row may start inside a word only
as a marked continuation of a full row of its document lying inside that word; a 1.x artifact holds none. Each case
damages a copy of a real artifact (the demo corpus plus real long words, rows of 6 tokens) the way a buggy writer
would, with the checksums re-computed so that the rows reach the checks; verify exits 1 with one line naming the
shard and the rule."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from schemas import format as fmt
from schemas import invariants as inv
from tests.conftest import DEMO_CORPUS, build
from tests.pipeline.test_long_words import LONG_WORD_BUILD, LONG_WORDS_TEXT
from tests.pipeline.test_verify_hostile import assert_one_line_naming, manifest, reseal, run_verify, write_manifest

NUM_SHARDS = 2
Rows = list[dict]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("continuations")
    corpus = root / "corpus.jsonl"
    extra = json.dumps({"id": "long-words", "text": LONG_WORDS_TEXT}) + "\n"
    corpus.write_text(DEMO_CORPUS.read_text(encoding="utf-8") + extra, encoding="utf-8")
    out = root / "artifact"
    m = build(corpus, out, *LONG_WORD_BUILD, "--num-shards", str(NUM_SHARDS))
    assert m["counts"]["continuation_rows"] > m["counts"]["long_words"] > 0  # some words span 3 rows or more
    return out


@pytest.fixture
def art(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "artifact"
    shutil.copytree(built, copy)
    return copy


def shard_of_long_words() -> str:
    return fmt.shard_filename(fmt.shard_of("long-words", NUM_SHARDS), NUM_SHARDS)


def rewrite_rows(root: Path, relative: str, edit: Callable[[Rows], None]) -> None:
    """Rewrite a shard's rows through ``edit`` (same schema, batches and compression) and reseal it."""
    path = root / relative
    table = ipc.open_file(str(path)).read_all()
    rows = table.to_pylist()
    edit(rows)
    new = pa.Table.from_pylist(rows, schema=table.schema)
    options = ipc.IpcWriteOptions(compression=fmt.SHARD_COMPRESSION)
    with ipc.new_file(str(path), table.schema, options=options) as w:
        w.write_table(new, max_chunksize=fmt.ROWS_PER_BATCH)
    reseal(root, relative)


def _first(rows: Rows, test: Callable[[int], bool]) -> int:
    return next(i for i in range(1, len(rows)) if test(i))


def _continuation(rows: Rows) -> int:
    """A continuation row that follows another continuation row (a word of three rows or more)."""
    return _first(rows, lambda i: not rows[i]["word_start"][0] and not rows[i - 1]["word_start"][0])


def _mark(rows: Rows, i: int) -> None:
    rows[i]["word_start"][0] = rows[i]["sentence_start"][0] = False


def unmarked(rows: Rows) -> None:
    """A row that starts inside a word (its first token a ## token) without the mark."""
    rows[_continuation(rows)]["word_start"][0] = True


def marked_as_a_sentence_start(rows: Rows) -> None:
    rows[_continuation(rows)]["sentence_start"][0] = True


def marked_first_row_of_a_document(rows: Rows) -> None:
    _mark(rows, _first(rows, lambda i: rows[i]["seq_index"] == 0 and len(rows[i]["input_ids"]) > 1))


def marked_after_a_row_that_is_not_full(rows: Rows) -> None:
    same = lambda i: rows[i]["doc_id"] == rows[i - 1]["doc_id"]  # noqa: E731
    _mark(rows, _first(rows, lambda i: same(i) and len(rows[i - 1]["input_ids"]) < 6 and rows[i]["word_start"][0]))


def marked_after_a_full_row_where_a_word_starts(rows: Rows) -> None:
    """The row before is full, but a word starts inside it: a word continuing from there should have started a row."""
    _mark(
        rows,
        _first(
            rows,
            lambda i: (
                rows[i]["doc_id"] == rows[i - 1]["doc_id"]
                and len(rows[i - 1]["input_ids"]) == 6
                and any(rows[i - 1]["word_start"][1:])
                and rows[i]["word_start"][0]
            ),
        ),
    )


ROW_EDITS = {
    "an unmarked row starting inside a word": (unmarked, "unmarked"),
    "a continuation marked as a sentence start": (marked_as_a_sentence_start, "sentence"),
    "a marked row that is its document's first": (marked_first_row_of_a_document, "document"),
    "a continuation after a row that is not full": (marked_after_a_row_that_is_not_full, "full"),
    "a continuation after a full row where a word starts": (marked_after_a_full_row_where_a_word_starts, "one_word"),
}


def test_intact_artifact_with_continuation_rows_verifies(art: Path) -> None:
    code, output = run_verify(art)
    assert code == 0, output
    assert f"{manifest(art)['counts']['continuation_rows']:,} continuation rows checked" in output


@pytest.mark.parametrize("case", ROW_EDITS)
def test_a_row_starting_inside_a_word_against_the_rule_is_one_line(art: Path, case: str) -> None:
    edit, rule = ROW_EDITS[case]
    relative = shard_of_long_words()
    rewrite_rows(art, relative, edit)
    code, output = run_verify(art)
    assert_one_line_naming(code, output, relative)
    assert code == 1
    assert [line for line in output.splitlines() if inv.CONTINUATION_RULES[rule] in line and relative in line], output


def as_format_1(root: Path) -> None:
    """The artifact as a 1.x writer left it: stamped 1.0 everywhere (manifest, each shard's and unigram.arrow's schema
    metadata; resealed), without the manifest keys 2.0 added."""
    stamp = b"\x03\x00\x00\x00" + fmt.FORMAT_VERSION.encode()  # the flatbuffer string: length 3, then the bytes
    for relative in [*(s["path"] for s in manifest(root)["shards"]), fmt.UNIGRAM_FILE]:
        data = (root / relative).read_bytes()
        assert data.count(stamp) == 2  # the schema at the start and the footer's copy
        (root / relative).write_bytes(data.replace(stamp, b"\x03\x00\x00\x001.0"))
        reseal(root, relative)
    m = manifest(root)
    m["format_version"] = "1.0"
    del m["counts"]["continuation_rows"], m["counts"]["long_words"], m["options"]["long_words"]
    write_manifest(root, m)


@pytest.mark.parametrize("manifest_version", ["2.0", "2.1"])
def test_a_format_2_manifest_over_shards_stamped_1_0_is_rejected(built: Path, tmp_path: Path, manifest_version) -> None:
    """Issue 32: shards a 1.x writer stamped under a 2.x manifest (resealed: the checksums hold) are two writers' files;
    verify names each shard (before: OK, exit 0)."""
    corpus = built.parent / "corpus.jsonl"
    out = tmp_path / "old"
    build(corpus, out, *LONG_WORD_BUILD, "--num-shards", str(NUM_SHARDS), "--long-words", "dead-letter")
    as_format_1(out)
    m = manifest(out)
    m["format_version"] = manifest_version
    m["counts"].update(continuation_rows=0, long_words=0)
    m["options"]["long_words"] = "dead-letter"
    write_manifest(out, m)
    code, output = run_verify(out)
    assert code == 1, output
    shards = [s["path"] for s in m["shards"]]
    lines = [line for line in output.splitlines() if "stamped format version 1.0, but the manifest says" in line]
    assert len(lines) == len(shards) == NUM_SHARDS and all(any(p in line for line in lines) for p in shards), output


def test_a_format_1_artifact_with_continuation_rows_is_rejected(art: Path) -> None:
    as_format_1(art)
    code, output = run_verify(art)
    assert code == 1, output
    assert [line for line in output.splitlines() if inv.CONTINUATION_RULES["version"] in line], output


def test_a_format_1_artifact_without_continuation_rows_still_verifies(built: Path, tmp_path: Path) -> None:
    """Readers keep reading 1.x: the same corpus built with the old rule (--long-words dead-letter), stamped 1.0, verifies
    and gets its report (pipeline.report); the trainer's loader: tests/trainer/test_long_word_rows.py."""
    from pipeline.report import write_report

    corpus = built.parent / "corpus.jsonl"
    out = tmp_path / "old"
    m = build(corpus, out, *LONG_WORD_BUILD, "--num-shards", str(NUM_SHARDS), "--long-words", "dead-letter")
    assert m["counts"]["dead_lettered_by_reason"]["word_too_long"] > 0 and m["counts"]["continuation_rows"] == 0
    as_format_1(out)
    write_report(str(out))
    assert "words longer than a row" not in (out / fmt.REPORT_DIR / "index.html").read_text(encoding="utf-8")
    code, output = run_verify(out)
    assert code == 0, output


def test_continuation_rows_differing_from_the_manifest_count_are_reported(art: Path) -> None:
    m = manifest(art)
    m["counts"]["continuation_rows"] += 1
    write_manifest(art, m)
    code, output = run_verify(art)
    assert code == 1 and "continuation rows, manifest says continuation_rows" in output, output
