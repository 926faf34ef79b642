"""The same Wikipedia pages given as JSONL, as Parquet (flat, and with the text inside a struct column), and as a
``datasets`` save_to_disk directory build byte-identical shards, read whole or split over row groups, with one or
two worker processes (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.read import ranges
from tests.conftest import build
from tests.pipeline.test_columnar_inputs import wikipedia_pages

PAGES = 200
ROW_GROUP = 50  # a few row groups, so that a file splits over them
SPLIT = ["--split-bytes", "100000"]  # the Parquet file is ~300 KB: 3-4 ranges, each owning whole row groups
TWO_WORKERS = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """The first pages of the Wikipedia sample in every form, and the JSONL build (its trained tokenizer is the
    others' ``--tokenizer``)."""
    pages = wikipedia_pages(PAGES)
    root = tmp_path_factory.mktemp("columnar")
    jsonl = root / "pages.jsonl"
    jsonl.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), encoding="utf-8")
    flat = root / "pages.parquet"
    pq.write_table(pa.Table.from_pylist(pages), flat, row_group_size=ROW_GROUP)
    nested = root / "nested.parquet"
    meta = pa.StructArray.from_arrays(
        [pa.array([p["title"] for p in pages]), pa.array([p["text"] for p in pages], pa.large_string())],
        names=["title", "body"],
    )
    pq.write_table(pa.table({"page": [p["id"] for p in pages], "meta": meta}), nested, row_group_size=ROW_GROUP)
    reference = root / "jsonl"
    build(jsonl, reference, "--train-tokenizer", "--vocab-size", "3000", "--num-shards", "2")
    return {"pages": pages, "root": root, "flat": flat, "nested": nested, "reference": reference}


def _options(corpus: dict) -> list[str]:
    return ["--tokenizer", str(corpus["reference"] / "tokenizer.json"), "--num-shards", "2"]


def _assert_same_shards(reference: Path, other: Path, same_counts: bool = True) -> int:
    names = sorted(p.name for p in (reference / "shards").iterdir())
    assert names == sorted(p.name for p in (other / "shards").iterdir()) and len(names) == 2
    for name in names:
        assert (reference / "shards" / name).read_bytes() == (other / "shards" / name).read_bytes(), name
    counts = [json.loads((a / "manifest.json").read_text())["counts"] for a in (reference, other)]
    assert counts[0] == counts[1] or not same_counts
    return counts[1]["documents_written"]


def test_parquet_split_over_row_groups_with_two_workers_builds_the_jsonl_shards(corpus, tmp_path):
    flat = corpus["flat"]
    plan = ranges.plan_file(str(flat), flat.stat().st_size, 100000)
    assert len(plan) > 3 and pq.ParquetFile(flat).metadata.num_row_groups == PAGES // ROW_GROUP
    manifest = build(flat, tmp_path / "two", "--input-format", "parquet", *_options(corpus), *SPLIT, *TWO_WORKERS)
    assert manifest["counts"]["documents_read"] == PAGES
    assert _assert_same_shards(corpus["reference"], tmp_path / "two") == PAGES


def test_parquet_struct_field_on_one_worker_builds_the_jsonl_shards(corpus, tmp_path):
    fields = ["--text-field", "meta.body", "--id-field", "page"]
    build(corpus["nested"], tmp_path / "one", "--input-format", "parquet", *fields, *_options(corpus), *SPLIT)
    assert _assert_same_shards(corpus["reference"], tmp_path / "one") == PAGES


def test_parquet_whole_files_with_bad_rows_build_the_jsonl_shards_and_count_every_row(corpus, tmp_path):
    """Beside the pages, a file whose rows cannot be used: they are dead letters naming file and row group, counted
    (documents_read == written + dead-lettered), and the shards are those of the pages alone."""
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["b1", "b2", "b3", "b4"], "text": pa.array([None] * 4, pa.string())}), bad)
    inputs = [corpus["flat"], bad]
    manifest = build(inputs, tmp_path / "one", "--input-format", "parquet", *_options(corpus), "--split-bytes", "0")
    assert _assert_same_shards(corpus["reference"], tmp_path / "one", same_counts=False) == PAGES
    counts = manifest["counts"]
    assert counts["documents_read"] == PAGES + 4 == counts["documents_written"] + counts["documents_dead_lettered"]
    assert counts["dead_lettered_by_reason"] == {"non_string_text": 4}
    letters = [json.loads(line) for line in (tmp_path / "one" / "dead_letter" / "non_string_text.jsonl").open()]
    assert [(d["doc_id"], d["source"]["path"], d["source"]["line"]) for d in letters] == [
        (f"b{i}", str(bad), i) for i in range(1, 5)
    ]
    assert all(d["detail"].startswith("row group 0 (rows 1-4, at byte ") for d in letters)


def test_hf_dataset_directory_builds_the_jsonl_shards(corpus, tmp_path, monkeypatch):
    import datasets

    datasets.disable_progress_bars()
    monkeypatch.setattr(datasets.config, "DEFAULT_MAX_BATCH_SIZE", ROW_GROUP)  # batches of 50 rows, as a big set's
    directory = tmp_path / "dataset"
    datasets.Dataset.from_list(corpus["pages"]).save_to_disk(str(directory), num_shards=2)
    manifest = build(directory, tmp_path / "out", "--input-format", "hf_dataset", *_options(corpus), *SPLIT)
    assert [Path(i["path"]).name for i in manifest["inputs"]] == [
        "data-00000-of-00002.arrow",
        "data-00001-of-00002.arrow",
    ]
    assert _assert_same_shards(corpus["reference"], tmp_path / "out") == PAGES
