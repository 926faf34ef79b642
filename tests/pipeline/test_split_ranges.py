"""One big uncompressed file read as byte ranges (pipeline/read/ranges.py, issue 11): the records of a
whole-file read, whatever the split, and byte-identical artifacts whatever the split and worker count."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.elements import DeadLetter, Document, InputSummary
from pipeline.read import ranges
from pipeline.read.records import ReaderOptions, read_file
from pipeline.runners.jobs import UsageError
from pipeline.tokenize import tokenizer
from tests.conftest import WIKITEXT2_BUILD, build, wikitext2

MAX_RECORD = 3000  # --max-record-bytes of every case here: the long lines and documents below exceed it
WORDS = (
    "the cat sat on a mat while Dr. Smith went to Washington and stayed for 3.5 days in May "
    "rain fell over hills rivers bridges towns music history science"
).split()
MANIFEST_FIELDS_THAT_DIFFER = ("build_id", "created_at", "command", "options")


def _sentence(rnd: random.Random) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 14))).capitalize() + "."


def jsonl_corpus(n: int, seed: int = 0) -> bytes:
    """A UTF-8 byte order mark, then records of every kind: good, without id (named by line number),
    malformed, not UTF-8, too long, empty, lone surrogate, CRLF, and blank lines between them."""
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        text = " ".join(_sentence(rnd) for _ in range(rnd.randint(1, 6)))
        kind = i % 11
        if kind == 1:
            lines.append(json.dumps({"text": text}).encode())  # id from the line number
        elif kind == 3:
            lines.append(b'{"id": "broken%d", "text": "%s' % (i, text.encode()))
        elif kind == 5:
            lines.append(b'{"id": "latin%d", "text": "caf\xe9 %s"}' % (i, text.encode()))
        elif kind == 7:
            lines.append(json.dumps({"id": f"long{i}", "text": text * (MAX_RECORD // len(text) + 1)}).encode())
        elif kind == 8:
            lines.append(b"")
            lines.append(b'{"id": "empty%d", "text": "  "}\r' % i)
        elif kind == 9:
            lines.append(b'{"id": "lone%d", "text": "\\ud800 %s"}' % (i, text.encode()))
        else:
            lines.append(json.dumps({"id": f"doc{i}", "text": text}).encode())
    return b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n"


def text_corpus(n: int, seed: int = 1) -> bytes:
    """Paragraphs of 1-8 lines between 1-3 blank (or whitespace-only) lines, some with a line that is not
    UTF-8, too long, or CRLF-terminated, one paragraph longer than the limit, no final newline."""
    rnd = random.Random(seed)
    out = [b"   \n"]  # a blank line first
    for i in range(n):
        para = [_sentence(rnd).encode() for _ in range(rnd.randint(1, 8))]
        if i % 9 == 2:
            para[rnd.randrange(len(para))] = b"bad \xff byte"
        if i % 13 == 4:
            para.insert(0, b"y" * (MAX_RECORD + 10))
        if i % 7 == 3:
            para = [p + b"\r" for p in para]
        if i == n // 2:
            para = [b" ".join(_sentence(rnd).encode() for _ in range(8))] * 12  # a document over the limit
        out.append(b"\n".join(para) + b"\n")
        out.append(rnd.choice([b"\n", b"\n\n", b" \t\n", b"\n\n\n"]))
    return b"".join(out).rstrip(b"\n")


def wikitext_corpus(n: int, seed: int = 2) -> bytes:
    """WikiText with a preamble before the first title (a document of its own), blank lines, sections,
    lines that are not UTF-8 or too long (the article becomes a dead letter), and a byte order mark."""
    rnd = random.Random(seed)
    out = [b"\xef\xbb\xbf \n", b" Preamble text before any title .\n", b" \n"]
    for i in range(n):
        out.append(b" = Article %d = \n \n" % i)
        for s in range(rnd.randint(0, 3)):
            if s:
                out.append(b" = = Section %d = = \n \n" % s)
            for _ in range(rnd.randint(1, 3)):
                line = " ".join(_sentence(rnd) for _ in range(rnd.randint(1, 4))).encode()
                if rnd.random() < 0.05:
                    line = b"bad \xc3\x28 utf8 " + line
                elif rnd.random() < 0.03:
                    line = b"z" * (MAX_RECORD + 1)
                out.append(b" " + line + b" \n \n")
    return b"".join(out)


CORPORA = {"jsonl": jsonl_corpus, "text": text_corpus, "wikitext": wikitext_corpus}


def split_read(path: str, opts: ReaderOptions, split_bytes: int) -> tuple[list, int]:
    """What ReadDocuments does, in one process and with the scans in a scrambled order: records of
    every range in order, then the combined InputSummary; and how many ranges there were."""
    items = ranges.plan_file(path, FileSystems.match([path])[0].metadata_list[0].size_in_bytes, split_bytes)
    if isinstance(items[0], ranges.WholeFile):
        return list(read_file(path, opts)), 1
    scans = [ranges.scan_range(r, opts) for r in items if isinstance(r, ranges.Range)]
    random.Random(split_bytes).shuffle(scans)
    out, parts = [], [ranges.hash_file(path)]
    reads = ranges.plan_reads(path, scans)
    for r in reads:
        recs = list(ranges.read_range(r, opts))
        parts.append(recs.pop())
        out += recs
    return out + [ranges.combine_summaries(path, parts)], len(reads)


@pytest.mark.parametrize("input_format", sorted(CORPORA))
def test_byte_ranges_read_exactly_the_records_of_a_whole_file_read(tmp_path, input_format):
    """Every split size from one byte up: a range boundary lands on every byte of the file, inside every
    kind of bad record, inside the byte order mark, on every line start, in every multi-line document."""
    data = CORPORA[input_format](40)
    path = tmp_path / f"corpus.{input_format}"
    path.write_bytes(data)
    opts = ReaderOptions(input_format=input_format, max_record_bytes=MAX_RECORD)
    whole = list(read_file(str(path), opts))
    summary = whole[-1]
    assert isinstance(summary, InputSummary) and summary.byte_order_mark == data.startswith(b"\xef\xbb\xbf")
    reasons = {r.reason for r in whole if isinstance(r, DeadLetter)}
    assert {"invalid_utf8", "line_too_long"} <= reasons and sum(isinstance(r, Document) for r in whole) > 20
    checked = 0
    for split_bytes in (1, 5, 17, 64, 333, 1000, len(data) // 2, len(data) - 1):
        got, count = split_read(str(path), opts, split_bytes)
        assert count == -(-len(data) // split_bytes) > 1
        assert got == whole, f"split every {split_bytes} bytes"
        checked += count
    assert checked > len(data)


def test_a_file_is_split_only_when_plain_and_larger_than_split_bytes():
    assert ranges.plan_file("a.jsonl", 100, 0) == [ranges.WholeFile("a.jsonl")]
    assert ranges.plan_file("a.jsonl", 100, 100) == [ranges.WholeFile("a.jsonl")]
    assert ranges.plan_file("a.jsonl.gz", 10**9, 100) == [ranges.WholeFile("a.jsonl.gz")]
    assert ranges.plan_file("a.jsonl.zst", 10**9, 100) == [ranges.WholeFile("a.jsonl.zst")]
    plan = ranges.plan_file("a.txt", 301, 100)
    assert plan[0] == ranges.FileHash("a.txt")
    assert [(r.start, r.end) for r in plan[1:]] == [(0, 75), (75, 150), (150, 225), (225, 301)]


# -- whole builds (FnApiRunner) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    rnd = random.Random(3)
    texts = [" ".join(_sentence(rnd) for _ in range(5)) for _ in range(200)]
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(tokenizer.make_spec(tokenizer.train(texts, vocab_size=300), "trained").json)
    return path


def artifact_files(out: Path) -> dict[str, bytes]:
    """Every file of an artifact, the manifest without the fields that differ between two identical builds."""
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = json.loads(files.pop("manifest.json"))
    assert (
        manifest["counts"]["documents_read"]
        == manifest["counts"]["documents_written"] + manifest["counts"]["documents_dead_lettered"]
    )
    for field in MANIFEST_FIELDS_THAT_DIFFER:
        manifest.pop(field)
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def assert_same_artifact(a: Path, b: Path) -> dict[str, bytes]:
    fa, fb = artifact_files(a), artifact_files(b)
    assert sorted(fa) == sorted(fb)
    differ = [name for name in fa if fa[name] != fb[name]]
    assert not differ, f"differ: {differ}"
    assert sum(name.startswith("shards/") for name in fa) > 1 and "unigram.arrow" in fa
    return fa


@pytest.mark.parametrize("input_format", sorted(CORPORA))
def test_split_build_is_byte_identical_to_a_whole_file_build(tmp_path, tokenizer_file, input_format, caplog):
    data = CORPORA[input_format](400)
    path = tmp_path / f"corpus.{input_format}"
    path.write_bytes(data)
    opts = [
        "--input-format",
        input_format,
        "--tokenizer",
        str(tokenizer_file),
        "--num-shards",
        "3",
        "--max-record-bytes",
        str(MAX_RECORD),
    ]
    build(path, tmp_path / "whole", *opts, "--split-bytes", "0")
    with caplog.at_level(logging.DEBUG, logger="pipeline.read.documents"):
        build(path, tmp_path / "split", *opts, "--split-bytes", "4096")
    range_reads = [r for r in caplog.records if r.getMessage().startswith(f"reading {path} from byte")]
    assert len(range_reads) == -(-len(data) // 4096) >= 10  # the build did read the file as ranges
    files = assert_same_artifact(tmp_path / "whole", tmp_path / "split")
    assert sum(name.startswith("dead_letter/") for name in files) > 1
    manifest = json.loads(files["manifest.json"])
    assert manifest["inputs"][0]["byte_order_mark"] == data.startswith(b"\xef\xbb\xbf")
    assert manifest["counts"]["documents_written"] > 100 and manifest["counts"]["documents_dead_lettered"] > 5
    # the ids are the whole-file reader's (shard placement follows them), dead letters name the same lines
    read = [
        r
        for r in read_file(str(path), ReaderOptions(input_format=input_format, max_record_bytes=MAX_RECORD))
        if not isinstance(r, InputSummary)
    ]
    letters = [
        json.loads(line)
        for name, blob in files.items()
        if name.startswith("dead_letter/")
        for line in blob.splitlines()
    ]
    assert sorted((d["doc_id"], d["source"]["line"], d["source"]["byte_offset"]) for d in letters) == sorted(
        (r.doc_id, r.source.line, r.source.byte_offset) for r in read if isinstance(r, DeadLetter)
    )


@pytest.mark.parametrize("case", ["synthetic-jsonl", "wikitext2"])
def test_two_workers_on_a_split_file_equal_one_worker_on_the_whole_file(tmp_path, tokenizer_file, case, request):
    if case == "wikitext2":  # real text; the session's WikiText-2 artifact is the whole-file, in-process build
        path, opts, split_bytes = wikitext2("valid"), list(WIKITEXT2_BUILD), 65536
        one = request.getfixturevalue("wikitext2_artifact")
    else:
        path, split_bytes, one = tmp_path / "corpus.jsonl", 4096, tmp_path / "one"
        path.write_bytes(jsonl_corpus(400))
        opts = [
            "--input-format",
            "jsonl",
            "--tokenizer",
            str(tokenizer_file),
            "--num-shards",
            "3",
            "--max-record-bytes",
            str(MAX_RECORD),
        ]
        build(path, one, *opts, "--split-bytes", "0")
    assert len(ranges.plan_file(str(path), path.stat().st_size, split_bytes)) > 10
    build(
        path,
        tmp_path / "two",
        *opts,
        "--split-bytes",
        str(split_bytes),
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        "2",
    )
    files = assert_same_artifact(one, tmp_path / "two")
    assert json.loads(files["manifest.json"])["counts"]["documents_written"] > 50


def test_split_bytes_below_the_minimum_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--split-bytes must be 0"):
        build(tmp_path / "x.jsonl", tmp_path / "out", "--split-bytes", "100")


def test_ranges_of_a_file_in_s3_read_the_records_of_a_whole_file_read(s3_store, tmp_path, monkeypatch):
    """Ranged reads go through Beam's FileSystems (seek, read): the same on s3:// as on local disk."""
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    FileSystems.set_options(PipelineOptions(s3_store.beam_args))
    data = wikitext_corpus(60)
    uri = s3_store.uri("split-ranges", "corpus.tokens")
    with s3_store.pyarrow_fs().open_output_stream(uri.split("://", 1)[1]) as out:
        out.write(data)
    local = tmp_path / "corpus.tokens"
    local.write_bytes(data)
    opts = ReaderOptions(input_format="wikitext", max_record_bytes=MAX_RECORD)
    whole = list(read_file(str(local), opts))
    got, count = split_read(uri, opts, 4096)
    assert count > 5 and len(got) == len(whole) > 60
    for remote, here in zip(got, whole):  # equal but for the path
        assert type(remote) is type(here)
        if isinstance(here, InputSummary):
            assert (remote.bytes, remote.sha256, remote.documents_read, remote.byte_order_mark) == (
                here.bytes,
                here.sha256,
                here.documents_read,
                here.byte_order_mark,
            )
        else:
            assert (remote.doc_id, remote.source.line, remote.source.byte_offset) == (
                here.doc_id,
                here.source.line,
                here.source.byte_offset,
            )
            assert remote == (Document if isinstance(here, Document) else DeadLetter)(
                **{**here.__dict__, "source": remote.source}
            )


def test_files_listed_by_the_launcher_are_read_as_when_matched_at_run_time(tmp_path, tokenizer_file, monkeypatch):
    import zstandard

    from pipeline.read.documents import ReadDocuments

    corpus = tmp_path / "in"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"part-{i}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl_corpus(60, seed=10 + i)))
    (corpus / "plain.jsonl").write_bytes(jsonl_corpus(40, seed=20))
    # two patterns matching the same file: read once either way
    inputs = [str(corpus / "*.jsonl*"), str(corpus / "plain.jsonl")]
    opts = [
        "--input-format",
        "jsonl",
        "--tokenizer",
        str(tokenizer_file),
        "--num-shards",
        "3",
        "--max-record-bytes",
        str(MAX_RECORD),
    ]
    listed = []
    read_listed = ReadDocuments._read_listed_files
    monkeypatch.setattr(
        ReadDocuments, "_read_listed_files", lambda self, pbegin: listed.append(1) or read_listed(self, pbegin)
    )
    build(inputs, tmp_path / "listed", *opts)
    assert listed == [1]
    monkeypatch.setattr(ReadDocuments, "LISTED_FILES_MAX", 0)  # more files than may be listed: matched at run time
    build(inputs, tmp_path / "matched", *opts)
    assert listed == [1]
    files = assert_same_artifact(tmp_path / "listed", tmp_path / "matched")
    manifest = json.loads(files["manifest.json"])
    assert len(manifest["inputs"]) == 4 and manifest["counts"]["documents_dead_lettered"] > 10
    assert manifest["counts"]["documents_read"] == sum(i["documents_read"] for i in manifest["inputs"]) > 200
