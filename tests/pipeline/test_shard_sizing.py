"""``--shard-size-mb N`` (issue 43): shards of about N MB, their number chosen from tokens counted before the job;
one of it and ``--num-shards``; neither: shards of about 256 MB, so a small corpus is one shard."""

from __future__ import annotations

import io
import itertools
import json
import os
from pathlib import Path

import pytest
import zstandard

from pipeline import build_shards, shard_sizing
from pipeline.read.records import ReaderOptions
from pipeline.tokenize import training
from schemas.artifact import Artifact
from tests.conftest import WIKIPEDIA_SAMPLE, build


@pytest.fixture(scope="module")
def wikipedia_cut(tmp_path_factory) -> Path:
    """The first 700 articles of the Wikipedia sample as plain JSONL (4 MB)."""
    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE}")
    path = tmp_path_factory.mktemp("cut") / "pages.jsonl"
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        path.write_text("".join(itertools.islice(reader, 700)), encoding="utf-8")
    return path


def test_shards_come_out_within_a_quarter_of_the_size_asked(wikipedia_cut, tmp_path):
    asked_mb = 0.25
    m = build(wikipedia_cut, tmp_path / "out", "--train-tokenizer", "bpe", "--vocab-size", "2000",
              "--shard-size-mb", str(asked_mb))  # fmt: skip
    sizes = [s["bytes"] for s in m["shards"]]
    assert len(sizes) >= 3, sizes  # a few shards, so the test says something about each
    assert [os.path.getsize(tmp_path / "out" / s["path"]) for s in m["shards"]] == sizes
    assert all(abs(size / (asked_mb * 1e6) - 1) <= 0.25 for size in sizes), sizes
    assert m["options"]["num_shards"] == len(sizes) and m["options"]["shard_size_mb"] == asked_mb


def test_the_estimate_reads_a_compressed_file_as_its_plain_copy(wikipedia_cut, tmp_path, monkeypatch):
    """The same documents as .zst (its bytes scaled by how much a prefix expands) and as plain JSONL give
    estimates of the same size; the plain one is read to its end here, so it is the text's own."""
    lines = wikipedia_cut.read_text(encoding="utf-8").splitlines(keepends=True)[:250]
    plain_path = tmp_path / "pages.jsonl"
    plain_path.write_text("".join(lines), encoding="utf-8")
    texts = [json.loads(line)["text"] for line in lines]
    tok = training.train("bpe", texts[:60], 1000, lowercase=False)
    packed = tmp_path / "pages.jsonl.zst"
    packed.write_bytes(zstandard.ZstdCompressor(level=3).compress(plain_path.read_bytes()))
    opts = ReaderOptions(input_format="jsonl")
    plain = shard_sizing.estimate([(str(plain_path), plain_path.stat().st_size)], opts, tok, 1000, 510)
    monkeypatch.setattr(shard_sizing, "READ_BYTES", 400_000)  # only a prefix of the .zst: its expansion counts
    zst = shard_sizing.estimate([(str(packed), packed.stat().st_size)], opts, tok, 1000, 510)
    encoded = tok.encode_batch(texts, add_special_tokens=False)
    real = sum(len(e.ids) for e in encoded)
    assert plain.tokens > 0 and abs(plain.tokens / real - 1) < 0.05, (plain, real)
    assert abs(zst.tokens / real - 1) < 0.25, (zst, real)


def test_neither_option_gives_one_shard_for_a_small_corpus(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text("A first document. It has two sentences.\n\nA second one.\n")
    m = build(corpus, tmp_path / "out", "--input-format", "text", "--vocab-size", "100")
    assert len(m["shards"]) == 1 and m["options"]["num_shards"] == 1
    assert Artifact.open(str(tmp_path / "out")).manifest["counts"]["documents_written"] == 2


@pytest.mark.parametrize(
    "args,message",
    [
        (["--num-shards", "2", "--shard-size-mb", "100"], "give one of --num-shards and --shard-size-mb, not both"),
        (["--shard-size-mb", "0"], "--shard-size-mb must be a positive number of MB, got 0"),
        (["--shard-size-mb", "nan"], "--shard-size-mb must be a positive number of MB, got nan"),
        (["--num-shards", "0"], "--num-shards must be at least 1, got 0"),
    ],
)
def test_shard_options_that_cannot_work_are_one_line_exit_2(args, message, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Some text.\n")
    argv = ["--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out"), *args]
    assert build_shards.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_estimate_reads_parquet_as_its_rows(wikipedia_cut, tmp_path, monkeypatch):
    """A Parquet file is sampled as its rows (the columnar reader), not parsed as JSON lines: its estimate equals
    the same documents' as JSONL within the sample's error; only a prefix of the row groups is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = wikipedia_cut.read_text(encoding="utf-8").splitlines(keepends=True)[:250]
    docs = [json.loads(line) for line in lines]
    texts = [d["text"] for d in docs]
    tok = training.train("bpe", texts[:60], 1000, lowercase=False)
    path = tmp_path / "pages.parquet"
    pq.write_table(pa.Table.from_pylist(docs), path, row_group_size=25)
    monkeypatch.setattr(shard_sizing, "READ_BYTES", 400_000)
    got = shard_sizing.estimate(
        [(str(path), path.stat().st_size)], ReaderOptions(input_format="parquet"), tok, 1000, 510
    )
    real = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    assert abs(got.tokens / real - 1) < 0.25, (got, real)
