"""Parquet and ``datasets`` save_to_disk inputs (pipeline/read/columnar.py, issue 43): the documents of the same
text given as JSONL, whether a file is read whole or split over its row groups, and every bad case as a dead letter
naming the file and row group (or one line where nothing of the file can be read)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline

from pipeline import progress
from pipeline.elements import (
    CORRUPT_INPUT,
    DOCUMENT_TOO_LONG,
    INVALID_UTF8,
    MISSING_TEXT,
    NON_STRING_TEXT,
    DeadLetter,
    Document,
)
from pipeline.read import columnar, ranges
from pipeline.read.documents import ReadDocuments
from pipeline.read.records import ReaderOptions
from tests.conftest import WIKIPEDIA_SAMPLE

PARQUET = ReaderOptions(input_format="parquet")
HF = ReaderOptions(input_format="hf_dataset")


def wikipedia_pages(n: int) -> list[dict]:
    """The first ``n`` pages of the shared Wikipedia sample (id, title, text); skips when ../shared is absent."""
    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE}")
    pages = []
    with WIKIPEDIA_SAMPLE.open("rb") as f:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8"):
            pages.append(json.loads(line))
            if len(pages) == n:
                return pages
    raise AssertionError(f"the sample has fewer than {n} pages")


@pytest.fixture(scope="module")
def pages() -> list[dict]:
    return wikipedia_pages(120)


def _jsonl(pages: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), encoding="utf-8")
    return path


def _records(items) -> tuple[list, list]:
    docs, dead = [], []
    for item in items:
        if isinstance(item, Document):
            docs.append(item)
        elif isinstance(item, DeadLetter):
            dead.append(item)
    return docs, dead


def _read_split(path: Path, opts: ReaderOptions, split_bytes: int) -> tuple[list, list, int]:
    """Read ``path`` as the job does when it is split: plan, scan every range, plan the reads, read them (in
    reverse: the order must not matter); returns documents, dead letters and how many ranges held records."""
    plan = ranges.plan_file(str(path), path.stat().st_size, split_bytes)
    scans = [ranges.scan_range(r, opts) for r in plan if isinstance(r, ranges.Range)]
    reads = ranges.plan_reads(str(path), scans)
    parts = [list(ranges.read_range(r, opts)) for r in reversed(reads)]
    docs, dead = _records(item for part in parts for item in part)
    order = lambda rec: rec.source.line  # noqa: E731
    return sorted(docs, key=order), sorted(dead, key=order), sum(1 for part in parts if len(part) > 1)


def _as_tuples(docs: list[Document]) -> list[tuple]:
    return [(d.doc_id, d.text, d.cleaned) for d in docs]


def test_parquet_gives_the_documents_of_the_same_jsonl_whole_or_split_over_row_groups(pages, tmp_path):
    from pipeline.read.records import read_file as read_jsonl

    jsonl_docs, jsonl_dead = _records(read_jsonl(str(_jsonl(pages, tmp_path / "pages.jsonl")), ReaderOptions()))
    path = tmp_path / "pages.parquet"
    pq.write_table(pa.Table.from_pylist(pages), path, row_group_size=25)
    whole = list(ranges.read_file(str(path), PARQUET))
    docs, dead = _records(whole)
    assert len(docs) == len(pages) == len(jsonl_docs) and not dead and not jsonl_dead
    assert _as_tuples(docs) == _as_tuples(jsonl_docs)
    assert [d.source.line for d in docs] == list(range(1, len(pages) + 1))  # rows numbered as JSONL lines are
    summary = whole[-1]
    assert summary.documents_read == len(pages) and summary.bytes == path.stat().st_size and summary.sha256
    split_docs, split_dead, n_ranges = _read_split(path, PARQUET, path.stat().st_size // 7)
    assert n_ranges >= 4 and not split_dead  # 5 row groups over 8 ranges
    assert [(d.doc_id, d.text, d.source) for d in split_docs] == [(d.doc_id, d.text, d.source) for d in docs]


def test_struct_field_large_string_and_dictionary_columns_read_as_plain_ones(pages, tmp_path):
    texts = pa.array([p["text"] for p in pages], pa.large_string())
    ids = pa.array([p["id"] for p in pages]).dictionary_encode()
    path = tmp_path / "nested.parquet"
    meta = pa.StructArray.from_arrays([texts, pa.array([p["title"] for p in pages])], names=["body", "title"])
    pq.write_table(pa.table({"key": ids, "meta": meta, "other": pa.array(range(len(pages)))}), path, row_group_size=30)
    opts = ReaderOptions(input_format="parquet", text_field="meta.body", id_field="key")
    docs, dead = _records(ranges.read_file(str(path), opts))
    assert not dead and [(d.doc_id, d.text) for d in docs] == [
        (p["id"], p["text"].strip() and p["text"]) for p in pages
    ]
    assert columnar._Rows(str(path), opts, pq.ParquetFile(path).schema_arrow, "row group").columns == [
        "meta.body",
        "key",
    ]  # only the needed columns are read
    dict_path = tmp_path / "dictionary_text.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(4)), "text": pa.array(["a b", "c", "a b", "d"]).dictionary_encode()}), dict_path
    )
    docs, dead = _records(ranges.read_file(str(dict_path), PARQUET))
    assert not dead and [(d.doc_id, d.text) for d in docs] == [("0", "a b"), ("1", "c"), ("2", "a b"), ("3", "d")]


def _pages_file(pages: list[dict], path: Path, row_group_size: int) -> tuple[int, int]:
    """``pages`` written to the Parquet file ``path``: (its row groups, their bytes as progress counts them)."""
    pq.write_table(pa.Table.from_pylist(pages), path, row_group_size=row_group_size)
    meta = pq.ParquetFile(path).metadata
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    return len(groups), sum(g.column(c).total_compressed_size for g in groups for c in range(g.num_columns))


def test_progress_counts_the_bytes_of_the_row_groups(pages, tmp_path):
    path = tmp_path / "pages.parquet"
    _, expected = _pages_file(pages, path, 40)
    progress.reset()
    assert sum(1 for _ in columnar.read_part(str(path), PARQUET)) == len(pages) + 1
    assert progress.bytes_read_here() == expected > 0


def test_the_job_counts_the_row_groups_of_byte_ranges_in_beam_counters_once(pages, tmp_path):
    """The Beam counters a Parquet read gives (``progress:documents``, ``progress:bytes``): every row once and the bytes
    of every row group once, with the file read as byte ranges by the job's reader."""
    path = tmp_path / "pages.parquet"
    groups, expected = _pages_file(pages, path, 15)
    p = TestPipeline(runner="FnApiRunner")
    _ = p | ReadDocuments([str(path)], PARQUET, split_bytes=path.stat().st_size // 4)
    found = p.run().metrics().query(MetricsFilter().with_namespace(progress.NAMESPACE))["counters"]
    counters = {name: sum(c.committed for c in found if c.key.metric.name == name) for name in ("documents", "bytes")}
    assert groups == 8 and counters == {"documents": len(pages), "bytes": expected}


def _dead_in(path: Path, opts: ReaderOptions = PARQUET) -> tuple[list, list, int]:
    items = list(ranges.read_file(str(path), opts))
    docs, dead = _records(items)
    assert items[-1].documents_read == len(docs) + len(dead)  # every record counted once
    return docs, dead, items[-1].documents_read


def test_null_text_is_a_dead_letter_per_row_naming_file_and_row_group(tmp_path):
    path = tmp_path / "nulls.parquet"
    meta = pa.array([{"body": "first text"}, {"body": None}, None, {"body": "last text"}])
    pq.write_table(
        pa.table({"id": ["a", "b", "c", "d"], "meta": meta, "text": ["x", None, "y", "z"]}), path, row_group_size=2
    )
    docs, dead, _ = _dead_in(path)
    assert [d.doc_id for d in docs] == ["a", "c", "d"]
    assert [(d.reason, d.doc_id, d.source.line) for d in dead] == [(NON_STRING_TEXT, "b", 2)]
    assert dead[0].detail.startswith("row group 0 (rows 1-2, at byte ") and "row 2: 'text' is null" in dead[0].detail
    docs, dead, _ = _dead_in(path, ReaderOptions(input_format="parquet", text_field="meta.body"))
    assert [d.doc_id for d in docs] == ["a", "d"]  # a null struct gives a null field
    assert [(d.doc_id, d.source.line, d.detail.split(" (")[0]) for d in dead] == [
        ("b", 2, "row group 0"),
        ("c", 3, "row group 1"),
    ]


def test_missing_or_non_string_column_is_a_dead_letter_per_row_group(tmp_path):
    path = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"id": range(5), "text": range(5)}), path, row_group_size=2)
    docs, dead, read = _dead_in(path)
    assert not docs and read == 3
    assert [(d.reason, d.source.line) for d in dead] == [
        (NON_STRING_TEXT, 1),
        (NON_STRING_TEXT, 3),
        (NON_STRING_TEXT, 5),
    ]
    assert (
        "row group 1 (rows 3-4" in dead[1].detail
        and "is int64, not a string column; its 2 row(s) are lost" in dead[1].detail
    )
    docs, dead, read = _dead_in(path, ReaderOptions(input_format="parquet", text_field="body"))
    assert not docs and read == 3 and {d.reason for d in dead} == {MISSING_TEXT}
    assert "row group 2 (rows 5-5" in dead[2].detail and "no column 'body' (columns: id, text)" in dead[2].detail


def test_text_longer_than_max_record_bytes_is_a_dead_letter(tmp_path):
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({"id": ["short", "long", "wide"], "text": ["a b c", "word " * 40, "é" * 30]}), path)
    docs, dead, _ = _dead_in(path, ReaderOptions(input_format="parquet", max_record_bytes=50))
    assert [d.doc_id for d in docs] == ["short"]
    assert [(d.reason, d.doc_id) for d in dead] == [(DOCUMENT_TOO_LONG, "long"), (DOCUMENT_TOO_LONG, "wide")]
    assert dead[1].detail.endswith("row 3: text of 60 bytes exceeds --max-record-bytes=50")  # bytes, not characters


def test_text_that_is_not_utf8_is_a_dead_letter(tmp_path):
    path = tmp_path / "latin1.parquet"
    offsets = pa.py_buffer(np.array([0, 5, 10], dtype=np.int32).tobytes())
    text = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"good caf\xe9 ")])  # not validated
    pq.write_table(pa.table({"text": text}), path)
    docs, dead, _ = _dead_in(path)
    assert [d.text for d in docs] == ["good "]
    assert [(d.reason, d.doc_id, d.source.line) for d in dead] == [(INVALID_UTF8, "latin1.parquet:2", 2)]


def test_an_id_field_naming_the_text_column_gives_the_ids_jsonl_gives(tmp_path):
    """``--id-field text --text-field text``: a JSONL line's id is its text; a Parquet row's was ``<file>:<row>``, so
    the same documents gave other ids, and other shards, by input format."""
    from pipeline.read.records import read_file as read_jsonl

    rows = [{"text": "first text"}, {"text": "second text"}]
    opts = {"text_field": "text", "id_field": "text"}
    jsonl, _ = _records(read_jsonl(str(_jsonl(rows, tmp_path / "t.jsonl")), ReaderOptions(**opts)))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    docs, dead = _records(ranges.read_file(str(tmp_path / "t.parquet"), ReaderOptions(input_format="parquet", **opts)))
    assert not dead and [d.doc_id for d in jsonl] == ["first text", "second text"]
    assert _as_tuples(docs) == _as_tuples(jsonl)


def test_an_id_that_is_not_utf8_is_a_dead_letter(tmp_path):
    """As the JSONL line holding it would be; before, the document was kept under the id ``<file>:<row>``."""
    path = tmp_path / "ids.parquet"
    offsets = pa.py_buffer(np.array([0, 5, 10], dtype=np.int32).tobytes())
    ids = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"id-okid-\xff\xfe")])  # not validated
    pq.write_table(pa.table({"id": ids, "text": ["first text", "second text"]}), path)
    docs, dead, _ = _dead_in(path)
    assert [(d.doc_id, d.text) for d in docs] == [("id-ok", "first text")]
    assert [(d.reason, d.doc_id, d.source.line) for d in dead] == [(INVALID_UTF8, "ids.parquet:2", 2)]
    assert "invalid UTF-8 at byte 3 of 'id'" in dead[0].detail and "row group 0" in dead[0].detail


def test_damaged_row_group_is_a_dead_letter_and_the_others_are_read(pages, tmp_path):
    path = tmp_path / "damaged.parquet"
    pq.write_table(pa.Table.from_pylist(pages[:60]), path, row_group_size=20, write_page_checksum=True)
    column = pq.ParquetFile(path).metadata.row_group(1).column(2)  # text
    data = bytearray(path.read_bytes())
    at = column.dictionary_page_offset + column.total_compressed_size // 2  # inside the text of row group 1
    data[at : at + 8] = b"\x00\xff" * 4
    path.write_bytes(bytes(data))
    docs, dead, read = _dead_in(path)
    assert [d.doc_id for d in docs] == [p["id"] for p in pages[:20] + pages[40:60]]
    assert read == 41 and [(d.reason, d.source.line) for d in dead] == [(CORRUPT_INPUT, 21)]
    assert dead[0].detail.startswith("row group 1 (rows 21-40, at byte ") and "its 20 row(s) are lost" in dead[0].detail


def test_a_file_with_no_readable_footer_is_one_line_naming_it(pages, tmp_path, capsys):
    from pipeline import build_shards

    good = tmp_path / "good.parquet"
    pq.write_table(pa.Table.from_pylist(pages[:5]), good)
    bad = tmp_path / "cut.parquet"
    bad.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(columnar.ColumnarError, match=f"^{bad}: not a readable Parquet file"):
        columnar.check_files([str(good), str(bad)], "parquet")
    out = tmp_path / "out"
    argv = [
        "--input",
        str(tmp_path / "*.parquet"),
        "--input-format",
        "parquet",
        "--output",
        str(out),
        "--train-tokenizer",
    ]
    assert build_shards.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"build_shards: error: {bad}: not a readable Parquet file (Parquet magic bytes"), err
    assert "Traceback" not in "\n".join(err) and not out.exists()
    # read anyway (the file changed after the launcher's check): one dead letter, counted, nothing else
    items = list(ranges.read_file(str(bad), PARQUET))
    assert [(i.reason, i.source.line) for i in items[:-1]] == [(CORRUPT_INPUT, 1)]
    assert items[-1].documents_read == 1 and items[-1].truncated


def _save_to_disk(pages: list[dict], directory: Path, monkeypatch, shards: int = 2) -> Path:
    """``save_to_disk`` in record batches of 20 rows (``datasets`` writes up to 1,000 rows a batch: a corpus's
    files hold many, these few pages would be one)."""
    import datasets

    datasets.disable_progress_bars()
    monkeypatch.setattr(datasets.config, "DEFAULT_MAX_BATCH_SIZE", 20)
    datasets.Dataset.from_list(pages).save_to_disk(str(directory), num_shards=shards)
    return directory


def test_hf_dataset_directory_gives_the_documents_whole_or_split_over_record_batches(pages, tmp_path, monkeypatch):
    directory = _save_to_disk(pages, tmp_path / "ds", monkeypatch)
    files = columnar.hf_dataset_files(str(directory))
    assert [Path(f).name for f in files] == ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]
    docs = [d for f in files for d in _records(ranges.read_file(f, HF))[0]]
    assert [(d.doc_id, d.text) for d in docs] == [(p["id"], p["text"]) for p in pages]
    first = Path(files[0])
    whole, _ = _records(ranges.read_file(str(first), HF))
    split, dead, n_ranges = _read_split(first, HF, first.stat().st_size // 5)
    assert n_ranges >= 2 and not dead and len(whole) == len(pages) // 2
    assert [(d.doc_id, d.text, d.source) for d in split] == [(d.doc_id, d.text, d.source) for d in whole]


def test_dataset_dict_directory_is_refused_naming_its_splits(pages, tmp_path, capsys):
    import datasets

    from pipeline import build_shards

    datasets.disable_progress_bars()
    part = datasets.Dataset.from_list(pages[:4])
    datasets.DatasetDict({"train": part, "validation": part}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(columnar.ColumnarError) as e:
        columnar.hf_dataset_files(str(tmp_path / "dd"))
    assert str(e.value) == (
        f"--input {tmp_path / 'dd'}: a DatasetDict directory with the splits train, validation; "
        f"give one split's directory, e.g. --input {tmp_path / 'dd' / 'train'}"
    )
    with pytest.raises(columnar.ColumnarError, match="no state.json: not a directory written by"):
        columnar.hf_dataset_files(str(tmp_path))
    argv = ["--input", str(tmp_path / "dd"), "--input-format", "hf_dataset", "--output", str(tmp_path / "out")]
    assert build_shards.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"build_shards: error: {e.value}" and "Traceback" not in "\n".join(err)


def test_damaged_arrow_stream_keeps_the_batches_before_the_damage(pages, tmp_path, monkeypatch):
    directory = _save_to_disk(pages[:60], tmp_path / "ds", monkeypatch, shards=1)
    (path,) = columnar.hf_dataset_files(str(directory))
    offsets = []
    with pa.OSFile(path) as f:  # where each record batch starts
        reader = pa.ipc.MessageReader.open_stream(f)
        while True:
            offsets.append(f.tell())
            try:
                reader.read_next_message()
            except StopIteration:
                break
    assert len(offsets) > 3
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: offsets[2] + 100])  # cut inside the second record batch
    items = list(ranges.read_file(path, HF))
    docs, dead = _records(items)
    first_batch_rows = len(docs)
    assert first_batch_rows == 20 and items[-1].truncated and items[-1].documents_read == first_batch_rows + 1
    assert [(d.reason, d.source.line, d.source.byte_offset) for d in dead] == [
        (CORRUPT_INPUT, first_batch_rows + 1, offsets[2])
    ]
    assert dead[0].detail.startswith(
        f"record batch 1 (from row {first_batch_rows + 1}, at byte {offsets[2]:,}) cannot be read"
    )
    assert dead[0].detail.endswith("the rest of the file is lost")


def test_parquet_in_s3_split_over_row_groups_reads_as_the_local_file(pages, s3_store, tmp_path, monkeypatch):
    """Footer and row groups are read through Beam's FileSystems (seek, read): the same on s3:// as on local disk."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    FileSystems.set_options(PipelineOptions(s3_store.beam_args))
    local = tmp_path / "pages.parquet"
    pq.write_table(pa.Table.from_pylist(pages), local, row_group_size=25)
    uri = s3_store.uri("columnar", "pages.parquet")
    with s3_store.pyarrow_fs().open_output_stream(uri.split("://", 1)[1]) as out:
        out.write(local.read_bytes())
    columnar.check_files([uri], "parquet")
    size = local.stat().st_size
    plan = ranges.plan_file(uri, size, size // 4)
    reads = ranges.plan_reads(uri, [ranges.scan_range(r, PARQUET) for r in plan if isinstance(r, ranges.Range)])
    remote, dead = _records(item for r in reads for item in ranges.read_range(r, PARQUET))
    here, _ = _records(ranges.read_file(str(local), PARQUET))
    assert not dead and len(reads) >= 4 and len(remote) == len(pages)
    assert [(d.doc_id, d.text, d.source.line, d.source.byte_offset) for d in remote] == [
        (d.doc_id, d.text, d.source.line, d.source.byte_offset) for d in here
    ]


def test_an_hf_dataset_file_in_a_bucket_is_read_whole_and_a_local_one_split():
    big = 10 * ranges.DEFAULT_SPLIT_BYTES
    assert ranges.plan_file("s3://b/ds/data-00000-of-00001.arrow", big, 1 << 20, "hf_dataset") == [
        ranges.WholeFile("s3://b/ds/data-00000-of-00001.arrow")
    ]
    assert len(ranges.plan_file("/ds/data-00000-of-00001.arrow", big, 1 << 20, "hf_dataset")) == 41  # hash + 40
    assert len(ranges.plan_file("s3://b/pages.parquet", big, 1 << 20, "parquet")) == 41


def test_an_arrow_batch_that_fails_validation_is_a_dead_letter_and_the_next_batches_are_read(tmp_path):
    path = tmp_path / "data-00000-of-00001.arrow"
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    offsets = pa.py_buffer(np.array([0, 5, 10], dtype=np.int32).tobytes())
    latin1 = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"good caf\xe9 ")])  # not validated
    with pa.ipc.new_stream(str(path), schema) as writer:
        writer.write_batch(pa.record_batch([pa.array(["a", "b"]), pa.array(["one", "two"])], schema=schema))
        writer.write_batch(pa.record_batch([pa.array(["c", "d"]), latin1], schema=schema))
        writer.write_batch(pa.record_batch([pa.array(["e"]), pa.array(["five"])], schema=schema))
    docs, dead, read = _dead_in(path, HF)
    assert [d.doc_id for d in docs] == ["a", "b", "e"] and [d.source.line for d in docs] == [1, 2, 5]
    assert read == 4 and [(d.reason, d.source.line) for d in dead] == [(CORRUPT_INPUT, 3)]
    assert dead[0].detail.startswith("record batch 1 (rows 3-4, at byte ") and "its 2 row(s) are lost" in dead[0].detail


def test_only_the_named_columns_are_read(pages, tmp_path):
    """Damage in a column the build does not name goes unseen: it is never read (only id and text are)."""
    path = tmp_path / "title_damaged.parquet"
    pq.write_table(pa.Table.from_pylist(pages[:40]), path, row_group_size=20, write_page_checksum=True)
    title = pq.ParquetFile(path).metadata.row_group(0).column(1)
    assert title.path_in_schema == "title"
    data = bytearray(path.read_bytes())
    start = title.dictionary_page_offset if title.has_dictionary_page else title.data_page_offset
    at = start + title.total_compressed_size // 2
    data[at : at + 8] = b"\x00\xff" * 4
    path.write_bytes(bytes(data))
    with pytest.raises(OSError):
        pq.ParquetFile(path, page_checksum_verification=True).read_row_group(0)  # the damage is there
    docs, dead, _ = _dead_in(path)
    assert not dead and [(d.doc_id, d.text) for d in docs] == [(p["id"], p["text"]) for p in pages[:40]]
    docs, dead, _ = _dead_in(path, ReaderOptions(input_format="parquet", id_field="title"))
    assert [(d.reason, d.source.line) for d in dead] == [(CORRUPT_INPUT, 1)] and len(docs) == 20
