"""The shard job: composites on a handful of elements, then the whole job on real WikiText-2."""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import typing
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import zstandard
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline import build_shards
from pipeline.elements import DeadLetter, Document, Source
from pipeline.read import records
from pipeline.read.documents import ReadDocuments
from pipeline.read.records import ReaderOptions
from pipeline.tokenize import tokenizer
from pipeline.tokenize.tokenized_documents import TokenizeDocuments
from pipeline.verify import verify
from pipeline.write.dead_letters import WriteDeadLetters
from pipeline.write.shards import ShardSpec, WriteShards
from schemas import format as fmt
from schemas.artifact import Artifact
from tests.conftest import WIKITEXT2_BUILD, build, wikitext2


def _pipeline() -> TestPipeline:
    return TestPipeline(runner="FnApiRunner")


def _create(items):
    """Elements as our DoFns emit them: plain pickled objects (beam.Create would infer a schema)."""
    return "Create" >> (beam.Create(range(len(items))) | beam.Map(lambda i: items[i]).with_output_types(typing.Any))


@pytest.fixture(scope="module")
def small_spec(tmp_path_factory):
    texts = ["The cat sat on the mat. It was warm.", "Dr. Smith went to Washington. He stayed for 3.5 days!"] * 20
    return tokenizer.make_spec(tokenizer.train(texts, vocab_size=200), "trained")


# -- composites ------------------------------------------------------------------------------


def test_read_documents_splits_documents_dead_letters_and_summaries(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "1", "text": "One."}\n{"id": "2"}\n')
    (tmp_path / "b.jsonl").write_text('{"id": "3", "text": "Three."}\nnot json\n')
    with _pipeline() as p:
        out = p | ReadDocuments([str(tmp_path / "*.jsonl")], ReaderOptions())
        assert_that(out["documents"] | "Ids" >> beam.Map(lambda d: d.doc_id), equal_to(["1", "3"]), label="docs")
        assert_that(
            out["dead_letters"] | "Reasons" >> beam.Map(lambda d: (d.reason, d.source.line)),
            equal_to([("missing_text", 2), ("malformed_json", 2)]),
            label="dead",
        )
        assert_that(
            out["input_summaries"] | "Counts" >> beam.Map(lambda s: (Path(s.path).name, s.documents_read)),
            equal_to([("a.jsonl", 2), ("b.jsonl", 2)]),
            label="sums",
        )


def test_tokenize_documents_finds_sentences_and_dead_letters_tokenless_text(small_spec):
    src = Source("f", 1, 0)
    docs = [Document("a", "The cat sat. It was warm.", src), Document("z", "\u200b\u200b", src)]
    with _pipeline() as p:
        out = p | _create(docs) | TokenizeDocuments(small_spec, "uint16")
        assert_that(
            out["documents"] | beam.Map(lambda d: (d.doc_id, d.num_sentences, bool(d.word_start[0]), len(d.ids) > 5)),
            equal_to([("a", 2, True, True)]),
            label="docs",
        )
        assert_that(
            out["dead_letters"] | beam.Map(lambda d: (d.reason, d.doc_id)), equal_to([("no_tokens", "z")]), label="dead"
        )


def test_write_shards_writes_every_shard_even_empty_ones(tmp_path, small_spec):
    from pipeline.elements import TokenizedDocument

    (tmp_path / "shards").mkdir()
    docs = [
        TokenizedDocument(
            f"d{i}", "f", i, i, np.arange(1, 30, dtype=np.uint16), np.ones(29, bool), np.eye(1, 29, 0, dtype=bool)[0]
        )
        for i in range(3)
    ]
    spec = ShardSpec(
        str(tmp_path), num_shards=5, vocab_size=200, max_row_tokens=10, pack="doc-sentences", separator_id=3
    )
    with _pipeline() as p:
        results = p | _create(docs) | WriteShards(spec)
        assert_that(results | beam.Map(lambda r: r["index"]), equal_to(list(range(5))), label="all")
        assert_that(
            results | "Totals" >> beam.Map(lambda r: ("rows", r["rows"])) | beam.CombinePerKey(sum),
            equal_to([("rows", 9)]),
            label="rows",
        )
    files = sorted(p.name for p in (tmp_path / "shards").iterdir())
    assert files == [fmt.shard_filename(i, 5).split("/")[1] for i in range(5)]
    total = sum(ipc.open_file(str(tmp_path / "shards" / f)).read_all().num_rows for f in files)
    assert total == 9


def test_write_dead_letters_one_sorted_file_per_reason(tmp_path):
    (tmp_path / "dead_letter").mkdir()
    letters = [
        DeadLetter("empty_text", "x", Source("b", 9, 90)),
        DeadLetter("empty_text", "x", Source("a", 5, 50)),
        DeadLetter("malformed_json", "y", Source("a", 1, 0)),
    ]
    with _pipeline() as p:
        results = p | _create(letters) | WriteDeadLetters(str(tmp_path))
        assert_that(
            results | beam.Map(lambda r: (r["path"], r["records"])),
            equal_to([("dead_letter/empty_text.jsonl", 2), ("dead_letter/malformed_json.jsonl", 1)]),
        )
    lines = [json.loads(line) for line in (tmp_path / "dead_letter" / "empty_text.jsonl").read_text().splitlines()]
    assert [line["source"]["path"] for line in lines] == ["a", "b"]


# -- the whole job on real WikiText-2 --------------------------------------------------------


def _rows_by_doc(artifact: Path) -> dict[str, list[dict]]:
    by_doc: dict[str, list[dict]] = {}
    for shard in sorted(glob.glob(str(artifact / "shards" / "*.arrow"))):
        for row in ipc.open_file(shard).read_all().to_pylist():
            by_doc.setdefault(row["doc_id"], []).append(row)
    return by_doc


def test_wikitext2_valid_rows_are_document_bounded_lossless_and_bounded(wikitext2_artifact):
    art = Artifact.open(str(wikitext2_artifact))
    m = art.manifest
    assert m["counts"]["documents_read"] == m["counts"]["documents_written"] == 60
    by_doc = _rows_by_doc(wikitext2_artifact)
    assert len(by_doc) == 60
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(art.tokenizer_json())
    docs = [
        d
        for d in records.read_file(
            str(wikitext2("valid")), ReaderOptions(input_format="wikitext", wikitext_unk="[UNK]")
        )
        if isinstance(d, Document)
    ]
    checked_rows = 0
    for d in docs:
        rows = by_doc[d.doc_id]
        assert [r["seq_index"] for r in rows] == list(range(len(rows)))  # one document, in order, nothing else
        assert all(1 <= len(r["input_ids"]) <= 510 for r in rows)
        concatenated = [i for r in rows for i in r["input_ids"]]
        assert concatenated == tok.encode(d.text, add_special_tokens=False).ids
        for r in rows:
            assert r["word_start"][0] and r["sentence_start"][0]
            assert len(r["word_start"]) == len(r["sentence_start"]) == len(r["input_ids"])
        checked_rows += len(rows)
    assert checked_rows == m["counts"]["rows"] > 0
    assert m["counts"]["tokens"] == sum(len(r["input_ids"]) for rows in by_doc.values() for r in rows)
    report = verify(str(wikitext2_artifact))
    assert report.ok, report.problems
    assert report.checked["rows checked"] == m["counts"]["rows"]


def test_word_starts_follow_the_tokenizers_words(wikitext2_artifact):
    art = Artifact.open(str(wikitext2_artifact))
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(art.tokenizer_json())
    rows = ipc.open_file(str(wikitext2_artifact / fmt.shard_filename(0, 4))).get_batch(0).to_pylist()[:20]
    checked = 0
    for r in rows:
        pieces = [tok.id_to_token(i) for i in r["input_ids"]]
        for piece, start in zip(pieces, r["word_start"]):
            # with a WordPiece vocabulary the ## convention and the tokenizer's word ids agree
            assert start == (not piece.startswith("##"))
            checked += 1
    assert checked > 1000


def test_wikitext2_test_split_has_62_documents(tmp_path):
    m = build(wikitext2("test"), tmp_path / "a", *WIKITEXT2_BUILD)
    assert m["counts"]["documents_written"] == 62 and m["counts"]["documents_dead_lettered"] == 0
    assert len(_rows_by_doc(tmp_path / "a")) == 62


def _digests(artifact: Path) -> dict[str, str]:
    files = sorted(p for p in artifact.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert len(files) >= 6
    return {str(p.relative_to(artifact)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_same_input_gives_byte_identical_artifacts_on_any_runner_and_worker_count(wikitext2_artifact, tmp_path):
    first = _digests(wikitext2_artifact)
    build(wikitext2("valid"), tmp_path / "again", *WIKITEXT2_BUILD)
    assert _digests(tmp_path / "again") == first
    from pipeline import build_shards as job

    job.run(
        [
            "--input",
            str(wikitext2("valid")),
            "--output",
            str(tmp_path / "mp"),
            *WIKITEXT2_BUILD,
            "--runner",
            "FnApiRunner",
            "--direct_running_mode",
            "multi_processing",
            "--direct_num_workers",
            "2",
        ]
    )
    assert _digests(tmp_path / "mp") == first


def test_the_encode_cache_never_changes_the_artifact(wikitext2_artifact, tmp_path):
    """No cache, and a 1 MiB cache that WikiText-2 valid fills (it is emptied twice), give the same files."""
    shards = {k: v for k, v in _digests(wikitext2_artifact).items() if k != "manifest.json"}
    for mb in ("0", "1"):
        build(wikitext2("valid"), tmp_path / mb, *WIKITEXT2_BUILD, "--encode-cache-mb", mb)
        assert {k: v for k, v in _digests(tmp_path / mb).items() if k != "manifest.json"} == shards
    assert json.loads((tmp_path / "1" / "manifest.json").read_text())["options"]["encode_cache_mb"] == 1


def test_given_tokenizer_or_vocab_reproduce_the_trained_run(wikitext2_artifact, tmp_path):
    first = _digests(wikitext2_artifact)
    build(
        wikitext2("valid"),
        tmp_path / "tok",
        "--input-format",
        "wikitext",
        "--num-shards",
        "4",
        "--tokenizer",
        str(wikitext2_artifact / "tokenizer.json"),
    )
    assert _digests(tmp_path / "tok") == first
    vocab = json.loads((wikitext2_artifact / "tokenizer.json").read_text())["model"]["vocab"]
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    build(
        wikitext2("valid"),
        tmp_path / "voc",
        "--input-format",
        "wikitext",
        "--num-shards",
        "4",
        "--vocab",
        str(tmp_path / "vocab.txt"),
    )
    assert {k: v for k, v in _digests(tmp_path / "voc").items() if k.startswith("shards/")} == {
        k: v for k, v in first.items() if k.startswith("shards/")
    }


def test_full_sentences_packing_crosses_documents_and_verifies(tmp_path, wikitext2_artifact):
    m = build(
        wikitext2("valid"),
        tmp_path / "fs",
        "--input-format",
        "wikitext",
        "--num-shards",
        "2",
        "--tokenizer",
        str(wikitext2_artifact / "tokenizer.json"),
        "--pack",
        "full-sentences",
    )
    doc = Artifact.open(str(wikitext2_artifact)).manifest["counts"]
    assert m["pack"] == "full-sentences"
    assert m["counts"]["rows"] < doc["rows"]  # fewer, fuller rows
    assert m["counts"]["tokens"] > doc["tokens"]  # plus separators between documents
    report = verify(str(tmp_path / "fs"))
    assert report.ok, report.problems


# -- bad input: exact accounting ------------------------------------------------------------


def _bad_corpus(root: Path) -> dict[str, int]:
    good = [json.dumps({"id": f"g{i}", "text": f"Document number {i}. It has two sentences."}) for i in range(30)]
    lines = good[:10] + [
        "{broken json",
        json.dumps({"id": "e1", "text": "  \t "}),
        json.dumps({"id": "n1", "text": None}),
        json.dumps({"id": "m1", "body": "no text field"}),
        json.dumps({"id": "c1", "text": "Control\u0000 characters\u0007 are cleaned."}),
        json.dumps({"id": "z1", "text": "\u200b"}),
        json.dumps({"id": "big", "text": "word " * 3000}),
    ]
    (root / "a.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"id": "u1", "text": "bad \xff byte"}\n')
    (root / "b.jsonl.gz").write_bytes(gzip.compress(("\n".join(good[10:20]) + "\n").encode()))
    # six zstd frames of 500 records; the file ends in the middle of the last frame
    frames = [
        zstandard.ZstdCompressor().compress(
            "".join(
                json.dumps({"id": f"t{i}", "text": f"Truncated file record {i}, with some words."}) + "\n"
                for i in range(k, k + 500)
            ).encode()
        )
        for k in range(0, 3000, 500)
    ]
    (root / "c.jsonl.zst").write_bytes(b"".join(frames)[: -len(frames[-1]) // 2])
    return {"written_min": 21}


def test_bad_input_is_accounted_for_exactly(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _bad_corpus(corpus)
    m = build(
        str(corpus / "*"),
        tmp_path / "out",
        "--input-format",
        "jsonl",
        "--train-tokenizer",
        "--vocab-size",
        "300",
        "--num-shards",
        "3",
        "--max-record-bytes",
        "10000",
    )
    c = m["counts"]
    by_reason = c["dead_lettered_by_reason"]
    assert by_reason == {
        "empty_text": 1,
        "invalid_utf8": 1,
        "line_too_long": 1,
        "malformed_json": 1,
        "missing_text": 1,
        "no_tokens": 1,
        "non_string_text": 1,
        "truncated_input": 1,
    }
    truncated = next(i for i in m["inputs"] if i["path"].endswith("c.jsonl.zst"))
    assert truncated["truncated"] and 2500 <= truncated["documents_read"] - 1 < 3000
    assert c["documents_read"] == c["documents_written"] + c["documents_dead_lettered"]
    assert c["documents_written"] == 10 + 1 + 10 + (
        truncated["documents_read"] - 1
    )  # good a, cleaned c1, b, what c held
    assert c["documents_cleaned"] == 1
    letters = [
        json.loads(line)
        for f in sorted((tmp_path / "out" / "dead_letter").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert len(letters) == c["documents_dead_lettered"] == 8
    positions = {
        letter["reason"]: (Path(letter["source"]["path"]).name, letter["source"]["line"]) for letter in letters
    }
    assert positions["malformed_json"] == ("a.jsonl", 11)
    assert positions["invalid_utf8"] == ("a.jsonl", 18)
    assert positions["truncated_input"][0] == "c.jsonl.zst"
    assert verify(str(tmp_path / "out")).ok


# -- interoperability and the command line --------------------------------------------------


def test_shards_open_with_plain_pyarrow_and_hugging_face_datasets(wikitext2_artifact):
    files = sorted(glob.glob(str(wikitext2_artifact / "shards" / "*.arrow")))
    rows = sum(ipc.open_file(f).read_all().num_rows for f in files)
    expected = Artifact.open(str(wikitext2_artifact)).manifest["counts"]["rows"]
    assert rows == expected > 0
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(
        "arrow", data_files=files, split="train", cache_dir=str(wikitext2_artifact.parent / "hf-cache")
    )
    assert ds.num_rows == expected
    assert set(ds.column_names) == {
        "doc_id",
        "seq_index",
        "input_ids",
        "word_start",
        "sentence_start",
        "entity_spans",
        "noun_phrase_spans",
        "ngram_spans",
    }


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "--input is required"),
        (["--input", "/nonexistent/*.jsonl", "--output", "OUT"], "no file matches"),
        (["--input", "IN", "--output", "OUT", "--num-shardz", "3"], "unrecognised option"),
        (["--input", "IN", "--output", "OUT", "--tokenizer", "t.json", "--vocab", "v.txt"], "only one of"),
        (
            ["--input", "IN", "--output", "OUT", "--tokenizer", "/nonexistent/tokenizer.json"],
            "cannot read the tokenizer",
        ),
        (["--input", "IN", "--output", "OUT", "--max-seq-len", "4"], "--max-seq-len must be at least 8"),
        (
            ["--input", "IN", "--output", "OUT", "--encoder-threads", "-1"],
            "--encoder-threads must be 0 (automatic) or more",
        ),
        (
            ["--input", "IN", "--output", "OUT", "--encode-cache-mb", "-1"],
            "--encode-cache-mb must be 0 (no cache) or more",
        ),
    ],
)
def test_usage_errors_are_one_clear_line(args, message, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Some text.\n")
    args = [str(tmp_path / "in.txt") if a == "IN" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    assert build_shards.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "args,word",
    [
        (["--input", "IN", "--output", "OUT", "foo"], "foo"),
        (["--input", "IN", "foo", "--output", "OUT", "--vocab-size", "100"], "foo"),
        (["--input", "IN", "IN2", "--output", "OUT"], "IN2"),  # a second file needs its own --input
    ],
)
def test_a_stray_word_is_refused_in_one_line_before_any_work(args, word, tmp_path, capsys):
    """Beam's options ignore a word that is no option's value: the job refuses it, naming it, before it claims the
    output (a build of the same command without the word runs: test_refuses_to_overwrite_an_artifact_unless_asked)."""
    names = {"IN": str(tmp_path / "in.txt"), "IN2": str(tmp_path / "in2.txt"), "OUT": str(tmp_path / "out")}
    for name in ("in.txt", "in2.txt"):
        (tmp_path / name).write_text("Some text.\n")
    word = names.get(word, word)
    assert build_shards.main([names.get(a, a) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"build_shards: error: stray word(s) on the command line: {word} ("), err
    assert not (tmp_path / "out").exists()


def test_refuses_to_overwrite_an_artifact_unless_asked(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Some text. More text.\n")
    argv = [
        "--input",
        str(tmp_path / "in.txt"),
        "--input-format",
        "text",
        "--output",
        str(tmp_path / "out"),
        "--vocab-size",
        "100",
        "--num-shards",
        "1",
    ]
    assert build_shards.main(argv) == 0
    assert build_shards.main(argv) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert build_shards.main(argv + ["--overwrite"]) == 0
    assert verify(str(tmp_path / "out")).ok


def test_write_manifest_writes_tokenizer_unigram_and_manifest_last_and_checks_accounting(tmp_path, small_spec):
    from pipeline.elements import InputSummary
    from pipeline.write.manifest import WriteManifest

    vocab = small_spec.describe()["vocab_size"]
    shard = {
        "index": 0,
        "path": fmt.shard_filename(0, 1),
        "rows": 1,
        "tokens": 5,
        "bytes": 10,
        "sha256": "x",
        "documents": 2,
        "documents_cleaned": 0,
        "duplicate_doc_ids": 0,
        "sentences": 2,
        "sentences_cut": 0,
        "continuation_rows": 0,
        "long_words": 0,
        "spans": dict.fromkeys(fmt.CANDIDATE_KINDS, 0),
        "dropped": dict.fromkeys(fmt.CANDIDATE_KINDS, 0),
        "histogram": [1],
        "unigram_ids": np.array([7], np.int32),
        "unigram_counts": np.array([5], np.int64),
    }
    static = {
        "created_by": {},
        "command": [],
        "options": {},
        "max_seq_len": 34,
        "pack": "doc-sentences",
        "candidates": {"kinds": []},
    }

    def run(read: int):
        with _pipeline() as p:
            results = {
                "input_summaries": p | "S" >> _create([InputSummary("in.jsonl", 10, "abc", read)]),
                "shards": p | "Sh" >> _create([shard]),
                "dead_letters": p
                | "D"
                >> _create(
                    [
                        {
                            "path": "dead_letter/empty_text.jsonl",
                            "reason": "empty_text",
                            "records": 1,
                            "bytes": 3,
                            "sha256": "y",
                        }
                    ]
                ),
            }
            out = results | WriteManifest(str(tmp_path), small_spec, static)
            assert_that(
                out
                | beam.Map(
                    lambda m: (m["counts"]["documents_read"], m["counts"]["documents_written"], m["unigram"]["total"])
                ),
                equal_to([(read, 2, 5)]),
            )

    run(3)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["counts"]["dead_lettered_by_reason"] == {"empty_text": 1}
    assert (tmp_path / "tokenizer.json").read_text() == small_spec.json
    table = ipc.open_file(str(tmp_path / "unigram.arrow")).read_all()
    assert table.num_rows == vocab and table.column("count").to_pylist()[7] == 5
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(Exception, match="documents_read=4 but documents_written=2"):
        run(4)
    assert not (tmp_path / "manifest.json").exists()


def test_help_lists_the_job_options(capsys):
    assert build_shards.main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--input-format", "--train-tokenizer", "--mask-candidates", "--pack", "--num-shards"):
        assert flag in out


def test_manifest_records_the_job_options_and_hides_secrets(tmp_path):
    (tmp_path / "in.txt").write_text("Some text. More text.\n")
    m = build(
        tmp_path / "in.txt",
        tmp_path / "out",
        "--input-format",
        "text",
        "--vocab-size",
        "100",
        "--num-shards",
        "1",
        "--s3_secret_access_key=hunter2",
        "--job_name",
        "unit-test",
    )
    assert m["options"]["num_shards"] == 1 and m["options"]["input_format"] == "text"
    assert "flink_master" not in m["options"] and "job_endpoint" not in m["options"]
    assert m["options"]["beam"]["runner"] == "FnApiRunner" and m["options"]["beam"]["job_name"] == "unit-test"
    assert "hunter2" not in json.dumps(m)
    assert "--s3_secret_access_key=<redacted>" in m["command"]


def test_background_writes_give_the_same_file_and_raise_a_failed_write(tmp_path):
    from pipeline.write.shards import ArrowFileWriter

    schema = fmt.shard_schema(1000)
    other = pa.schema([("x", "int64")])
    batches = [
        pa.RecordBatch.from_pylist(
            [
                {
                    "doc_id": f"d{i}-{j}",
                    "seq_index": j,
                    "input_ids": list(range(i, i + 5)),
                    "word_start": [True] * 5,
                    "sentence_start": [j == 0] + [False] * 4,
                }
                for j in range(3)
            ],
            schema=schema,
        )
        for i in range(7)
    ]
    results = {}
    for background in (False, True):
        writer = ArrowFileWriter(str(tmp_path / f"bg-{background}.arrow"), schema, background=background)
        for batch in batches:
            writer.write(batch)
        results[background] = writer.close()
    assert results[True] == results[False] and results[True][0] > 0  # (bytes, sha256)
    assert (tmp_path / "bg-True.arrow").read_bytes() == (tmp_path / "bg-False.arrow").read_bytes()
    assert ipc.open_file(str(tmp_path / "bg-True.arrow")).read_all().num_rows == 21
    writer = ArrowFileWriter(str(tmp_path / "bad.arrow"), schema, background=True)
    writer.write(batches[0])
    writer.write(pa.RecordBatch.from_pylist([{"x": 1}], schema=other))  # not the file's schema
    with pytest.raises(Exception, match="(?i)schema"):
        for batch in batches:
            writer.write(batch)
        writer.close()
