"""The bad-input corpus of issue 21, readers: CRLF line ends, compressed files that expand to GiBs without a
newline, damaged gzip members and zstd frames, and the build lock a failed or killed build leaves. Every case
ends in documents equal to the clean input's, a dead letter with a reason and a position, or a one-line error;
the counts add up: documents_read == documents_written + documents_dead_lettered."""

from __future__ import annotations

import gzip
import json
import os
import resource
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import zstandard

from pipeline.elements import DeadLetter, Document, InputSummary
from pipeline.read.records import DEFAULT_MAX_RECORD_BYTES, ReaderOptions, read_file
from schemas import format as fmt
from tests.conftest import REPO, WIKITEXT2_BUILD, build, wikitext2, wikitext2_articles
from tests.pipeline.test_bad_input import wikipedia_lines
from tests.pipeline.test_readers import read
from tests.pipeline.test_split_ranges import MAX_RECORD, jsonl_corpus, split_read, text_corpus, wikitext_corpus


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def same_name(tmp_path: Path, name: str, data: bytes) -> tuple[Path, Path]:
    """``data`` as ``lf/name`` and its CRLF copy as ``crlf/name`` (ids of text documents hold the file name)."""
    paths = []
    for sub, blob in (("lf", data), ("crlf", crlf(data))):
        (tmp_path / sub).mkdir(exist_ok=True)
        paths.append(tmp_path / sub / name)
        paths[-1].write_bytes(blob)
    return paths[0], paths[1]


def documents(records) -> list[tuple[str, str]]:
    return [(r.doc_id, r.text) for r in records if isinstance(r, Document)]


def reasons(records) -> list[str]:
    return [r.reason if isinstance(r, DeadLetter) else "doc" for r in records if not isinstance(r, InputSummary)]


# -- CRLF line ends ------------------------------------------------------------------------------


@pytest.mark.parametrize("input_format,expected", [("wikitext", 60), ("text", 1000)])
def test_crlf_wikitext2_gives_the_documents_of_lf(tmp_path, input_format, expected):
    """Issue 21.1: with CRLF every article merged into one and kept ` = Title = ` as text, exit 0."""
    lf = wikitext2("valid")
    path = tmp_path / lf.name
    path.write_bytes(crlf(lf.read_bytes()))
    opts = ReaderOptions(input_format=input_format)
    want, got = list(read_file(str(lf), opts)), list(read_file(str(path), opts))
    assert reasons(got) == reasons(want) and set(reasons(want)) == {"doc"}
    assert documents(got) == documents(want) and len(documents(want)) >= expected
    assert got[-1].documents_read == want[-1].documents_read == len(want) - 1
    if input_format == "wikitext":
        assert len(want) - 1 == expected and not any(text.startswith("=") for _, text in documents(got))


@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
def test_crlf_jsonl_gives_the_records_of_lf(suffix):
    lines = wikipedia_lines(40)
    lf = b"\n".join(lines) + b"\n"
    compress = {"": lambda d: d, ".gz": gzip.compress, ".zst": zstandard.ZstdCompressor().compress}[suffix]
    want, _ = read(compress(lf), "w.jsonl" + suffix)
    got, summary = read(compress(crlf(lf)), "w.jsonl" + suffix)
    assert documents(got) == documents(want) and len(documents(want)) == 40 and summary.documents_read == 40
    # previews and byte offsets: the dead letter of a CRLF record holds no \r, and points at the record
    bad = crlf(b'{"id": "x", "text": 5}\n' + lf)
    out, _ = read(bad, "b.jsonl")
    assert out[0].reason == "non_string_text" and "\r" not in out[0].preview
    assert [r.source.byte_offset for r in out[1:3]] == [24, 24 + len(lines[0]) + 2]


@pytest.mark.parametrize(
    "input_format,data",
    [
        ("text", b"first line\nsecond line\n\nsecond document\n"),
        ("wikitext", b" = Alpha = \n \n Body of alpha .\n \n = = Section = = \n More .\n = Beta = \n Body of beta .\n"),
    ],
)
def test_the_record_limit_counts_a_crlf_line_like_an_lf_line(input_format, data):
    """A CRLF line of exactly --max-record-bytes is not too long, and a document's size does not count the \r."""
    longest = max(len(line) for line in data.split(b"\n"))
    seen = set()
    for limit in range(longest - 1, len(data) + 1):
        want, _ = read(data, "x.tokens", input_format=input_format, max_record_bytes=limit)
        got, _ = read(crlf(data), "x.tokens", input_format=input_format, max_record_bytes=limit)
        assert reasons(got) == reasons(want) and documents(got) == documents(want), limit
        seen.update(reasons(want))
    assert {"doc", "document_too_long"} <= seen  # the boundary was crossed


def test_a_lone_cr_is_not_a_line_end():
    """Line ends are LF and CRLF; a lone CR is text: a line break inside a text document, JSON whitespace
    between tokens, a control character (malformed JSON) inside a JSON string."""
    out, _ = read(b"one\rtwo\r\n\r\nthree\rfour\n\nfive\r", "t.txt", input_format="text")
    assert documents(out) == [("t.txt:1", "one\ntwo"), ("t.txt:2", "three\nfour"), ("t.txt:3", "five")]
    out, _ = read(b" = A = \r\n x .\r y .\r\n = B = \r\n z .\r\n", "w.tokens", input_format="wikitext")
    assert [doc_id for doc_id, _ in documents(out)] == ["w.tokens:1", "w.tokens:2"]
    assert documents(out)[1][1] == "B\n\nz."
    out, _ = read(b'{"id": "a",\r"text": "x"}\r\n{"id": "b", "text": "x\ry"}\r\n', "j.jsonl")
    assert reasons(out) == ["doc", "malformed_json"]


def test_lone_crs_in_text_and_wikitext_files_are_named_in_a_warning(caplog):
    """A file with old Mac (CR-only) line ends reads as one document: not silently."""
    out, _ = read(b"para one\rline two\r\rpara two\r", "mac.txt", input_format="text")
    assert documents(out) == [("mac.txt:1", "para one\nline two\n\npara two")]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "/data/mac.txt: 1 line(s) hold a lone CR (first: line 1)" in warned[0]
    caplog.clear()
    read(crlf(b" = A = \n x .\n"), "w.tokens", input_format="wikitext")
    read(b" = A = \n x \r y .\n z \r.\n", "w.tokens", input_format="wikitext")
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "2 line(s) hold a lone CR (first: line 2)" in warned[0]


CRLF_CORPORA = {"jsonl": jsonl_corpus, "text": text_corpus, "wikitext": wikitext_corpus}


@pytest.mark.parametrize("input_format", sorted(CRLF_CORPORA))
def test_byte_ranges_of_a_crlf_file_read_the_documents_of_the_lf_file(tmp_path, input_format):
    """Issue 21.1 with --split-bytes: a range boundary on every byte of a CRLF file, on the \\r\\n pairs too."""
    data = CRLF_CORPORA[input_format](25)
    lf_path, crlf_path = same_name(tmp_path, f"corpus.{input_format}", data)
    opts = ReaderOptions(input_format=input_format, max_record_bytes=MAX_RECORD)
    want = list(read_file(str(lf_path), opts))
    whole = list(read_file(str(crlf_path), opts))
    assert documents(want) == documents(whole)
    assert reasons(whole) == reasons(want) and len(documents(want)) > 10
    checked = 0
    for split_bytes in (1, 2, 7, 64, 1001):
        got, count = split_read(str(crlf_path), opts, split_bytes)
        assert got == whole, f"split every {split_bytes} bytes"
        checked += count
    assert checked > len(crlf(data))
    # lone CRs (not line ends) inside lines, before CRLFs and after them: ranges still read what a whole read does
    lone = tmp_path / f"lone.{input_format}"
    lone.write_bytes(
        crlf(data).replace(b" the ", b" the\r").replace(b"\r\n", b"\r\r\n", 3).replace(b"\n ", b"\n\r ", 3)
    )
    assert lone.read_bytes().count(b"\r") - lone.read_bytes().count(b"\r\n") > 10
    whole = list(read_file(str(lone), opts))
    assert len(documents(whole)) > 5
    for split_bytes in (1, 3, 64, 1001):
        assert split_read(str(lone), opts, split_bytes)[0] == whole, f"lone CRs, split every {split_bytes} bytes"


def _shards_and_tokenizer(out: Path) -> dict[str, bytes]:
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / fmt.SHARDS_DIR).glob("*.arrow"))}
    files.update({name: (out / name).read_bytes() for name in (fmt.UNIGRAM_FILE, fmt.TOKENIZER_FILE)})
    return files


@pytest.mark.slow
def test_a_crlf_copy_of_wikitext2_builds_the_same_shards(tmp_path, wikitext2_artifact):
    """Byte for byte: the shards, unigram.arrow and the trained tokenizer of a CRLF copy of WikiText-2, read as
    byte ranges, equal those of the original; and a text-format CRLF file's equal its LF file's."""
    path = tmp_path / "wiki.valid.tokens"
    path.write_bytes(crlf(wikitext2("valid").read_bytes()))
    m = build(path, tmp_path / "crlf", *WIKITEXT2_BUILD, "--split-bytes", "65536")
    want = json.loads((wikitext2_artifact / fmt.MANIFEST_FILE).read_text())
    assert m["counts"] == want["counts"] and m["counts"]["documents_written"] == 60
    a, b = _shards_and_tokenizer(wikitext2_artifact), _shards_and_tokenizer(tmp_path / "crlf")
    assert sorted(a) == sorted(b) and len(a) == 6
    assert [name for name in a if a[name] != b[name]] == []

    lf_text, crlf_text = same_name(tmp_path, "articles.txt", wikitext2_articles(4, tmp_path).read_bytes())
    tok = ["--input-format", "text", "--tokenizer", str(wikitext2_artifact / fmt.TOKENIZER_FILE), "--num-shards", "2"]
    m1 = build(lf_text, tmp_path / "text_lf", *tok)
    m2 = build(crlf_text, tmp_path / "text_crlf", *tok, "--split-bytes", "4096")
    assert m1["counts"] == m2["counts"] and m1["counts"]["documents_written"] > 20
    a, b = _shards_and_tokenizer(tmp_path / "text_lf"), _shards_and_tokenizer(tmp_path / "text_crlf")
    assert [name for name in a if a[name] != b[name]] == [] and len(a) == 4


# -- compressed files that expand to GiBs without a newline --------------------------------------

GIB = 1 << 30


def zstd_bomb(path: Path, size: int, after: list[bytes]) -> Path:
    """One zstd frame of ``size`` bytes of ``a`` (no newline, ~32 KB per GiB), then a frame of ``after``."""
    block = b"a" * (64 << 20)
    obj = zstandard.ZstdCompressor(level=1).compressobj()
    parts = [obj.compress(b'{"id": "bomb", "text": "')]
    parts += [obj.compress(block) for _ in range(size // len(block))]
    parts.append(obj.flush())
    path.write_bytes(b"".join(parts) + zstandard.ZstdCompressor().compress(b"\n" + b"\n".join(after) + b"\n"))
    return path


def gzip_bomb(path: Path, size: int, after: list[bytes]) -> Path:
    """One gzip member of ``size`` bytes of ``a`` (no newline, ~1 MB per GiB: deflate's limit is ~1032:1), then
    a member of ``after``. Built from one compressed 64 MiB block repeated (a full flush makes blocks
    independent), with the CRC32 and length the data has."""
    block = b"a" * (64 << 20)
    obj = zlib.compressobj(6, zlib.DEFLATED, -15)
    head = obj.compress(b'{"id": "bomb", "text": "') + obj.flush(zlib.Z_FULL_FLUSH)
    body = obj.compress(block) + obj.flush(zlib.Z_FULL_FLUSH)
    tail = obj.flush()
    n = size // len(block)
    crc = zlib.crc32(b'{"id": "bomb", "text": "')
    for _ in range(n):
        crc = zlib.crc32(block, crc)
    length = 24 + n * len(block)
    member = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + head + body * n + tail
    member += struct.pack("<II", crc, length & 0xFFFFFFFF)
    path.write_bytes(member + gzip.compress(b"\n" + b"\n".join(after) + b"\n"))
    return path


def build_in_subprocess(argv: list[str], tmp_path: Path) -> tuple[int, str, int]:
    """Run build_shards in a child process: (exit status, stderr, peak RSS in bytes). The child's address space
    is capped at 4 GiB, so that a regression fails this test instead of the machine."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))

    err = tmp_path / "stderr.txt"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.build_shards", *argv],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=cap,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err.read_text(errors="replace"), usage.ru_maxrss * 1024


@pytest.mark.slow
@pytest.mark.parametrize("kind,size", [("zst", 4 * GIB), ("gz", GIB)])
def test_a_compressed_bomb_is_one_dead_letter_in_bounded_memory(tmp_path, kind, size, wikitext2_artifact):
    """Issue 21.4: a 128 KB .jsonl.zst expanding to 4 GiB without a newline ended in MemoryError, exit 1."""
    after = wikipedia_lines(3)
    bomb = (zstd_bomb if kind == "zst" else gzip_bomb)(tmp_path / f"bomb.jsonl.{kind}", size, after)
    assert bomb.stat().st_size < (300_000 if kind == "zst" else 1_200_000)
    out = tmp_path / "out"
    tok = str(wikitext2_artifact / fmt.TOKENIZER_FILE)
    code, err, peak = build_in_subprocess(
        ["--input", str(bomb), "--output", str(out), "--tokenizer", tok, "--num-shards", "1"], tmp_path
    )
    assert code == 0, err[-2000:]
    assert peak < GIB, f"peak RSS {peak / 2**20:.0f} MiB"
    m = json.loads((out / fmt.MANIFEST_FILE).read_text())
    c = m["counts"]
    assert c["documents_read"] == 4 == c["documents_written"] + c["documents_dead_lettered"]
    assert c["dead_lettered_by_reason"] == {"line_too_long": 1} and c["documents_written"] == 3
    letter = json.loads((out / "dead_letter" / "line_too_long.jsonl").read_text())
    assert letter["source"]["line"] == 1 and letter["source"]["byte_offset"] == 0
    assert f"record of {24 + size:,} bytes exceeds --max-record-bytes={DEFAULT_MAX_RECORD_BYTES:,}" in letter["detail"]
    assert not (out / fmt.LOCK_FILE).exists()


# -- damaged gzip members and zstd frames --------------------------------------------------------


def flipped(data: bytes, at: int) -> bytes:
    damaged = bytearray(data)
    damaged[at] ^= 0x10
    return bytes(damaged)


def real_records(n: int, cut: int = 2000) -> list[bytes]:
    """``n`` real Wikipedia records, each cut to at most ``cut`` characters of text (small members, many records)."""
    out = []
    for line in wikipedia_lines(n):
        obj = json.loads(line)
        out.append(json.dumps({"id": obj["id"], "text": obj["text"][:cut]}).encode())
    return out


def member_bytes(records: list[bytes]) -> bytes:
    return b"\n".join(records) + b"\n"


@pytest.mark.parametrize("where", ["header", "deflate-start", "deflate-middle", "deflate-end", "crc", "length"])
def test_a_bit_flip_in_a_single_gzip_member_keeps_nothing_of_it(where):
    """Issue 21.5, the rule: a member's records are used only once the member decoded whole and its CRC32 and
    length checked out; a flip that zlib only notices at the CRC gives lines that look fine (some parse)."""
    records = real_records(1200, cut=10**9)
    data = gzip.compress(member_bytes(records), mtime=0)
    assert len(data) > 3 << 19  # read in several chunks: the records before the damage were emitted before
    at = {
        "header": 3,
        "deflate-start": 844,
        "deflate-middle": len(data) // 2,
        "deflate-end": len(data) - 40,
        "crc": len(data) - 7,
        "length": len(data) - 2,
    }[where]
    out, summary = read(flipped(data, at), "w.jsonl.gz")
    assert reasons(out) == ["corrupt_input"] and summary.truncated and summary.documents_read == 1
    letter = out[0]
    assert letter.source.line == 1 and letter.source.byte_offset == 0
    assert "gzip member 1 (from compressed byte 0) is corrupt" in letter.detail
    assert "0 records before line 1" in letter.detail and "nothing of it or after it is used" in letter.detail
    assert summary.bytes == len(data) and summary.sha256 == __import__("hashlib").sha256(flipped(data, at)).hexdigest()


def test_a_flip_that_only_the_crc_catches_would_have_given_wrong_records():
    """Why the rule: decoding the damaged member as far as zlib goes gives records that differ from the input
    and still parse, so emitting lines before the CRC check would train on them."""
    records = real_records(300)
    data = gzip.compress(member_bytes(records), mtime=0)
    wrong = 0
    for at in range(len(data) // 3, len(data) // 3 + 200):
        obj = zlib.decompressobj(wbits=31)
        text = b""
        try:
            for i in range(0, len(data), 4096):
                text += obj.decompress(flipped(data, at)[i : i + 4096])
        except zlib.error:
            pass
        got = text.split(b"\n")[:-1]
        wrong += sum(1 for a, b in zip(got, records) if a != b and _parses(a))
        out, _ = read(flipped(data, at), "w.jsonl.gz")
        assert reasons(out) == ["corrupt_input"]
    assert wrong > 0


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("member,where", [(2, "start"), (2, "middle"), (2, "trailer"), (3, "trailer")])
def test_a_damaged_member_keeps_every_record_of_the_members_before_it(suffix, member, where):
    """Three members/frames of 100 records: the records of the members before the damaged one are kept, whole
    and exact; one dead letter says where reading stopped: line, decompressed byte, compressed byte, records."""
    records = real_records(300)
    if suffix == ".gz":
        parts = [gzip.compress(member_bytes(records[i : i + 100]), mtime=0) for i in (0, 100, 200)]
    else:  # zstd frames with a content checksum (the zstd command line writes one; python-zstandard on request)
        zc = zstandard.ZstdCompressor(write_checksum=True)
        parts = [zc.compress(member_bytes(records[i : i + 100])) for i in (0, 100, 200)]
    start = sum(len(p) for p in parts[: member - 1])
    size = len(parts[member - 1])
    at = start + {"start": 20, "middle": size // 2, "trailer": size - 3}[where]
    data = b"".join(parts)
    out, summary = read(flipped(data, at), "m.jsonl" + suffix)
    kept = 100 * (member - 1)
    assert reasons(out) == ["doc"] * kept + ["corrupt_input"]
    assert documents(out[:-1]) == [(str(json.loads(r)["id"]), json.loads(r)["text"]) for r in records[:kept]]
    letter = out[-1]
    assert letter.source.line == kept + 1 and letter.source.byte_offset == len(member_bytes(records[:kept]))
    kind = "gzip member" if suffix == ".gz" else "zstd frame"
    assert f"{kind} {member} (from compressed byte {start:,}) is corrupt" in letter.detail
    assert f"{kept:,} records before line {kept + 1}" in letter.detail
    assert summary.documents_read == kept + 1 == len(out) and summary.bytes == len(data)


def test_a_zstd_frame_without_checksum_is_kept_unless_it_fails_to_decode():
    """zstd frames need not carry a checksum (python-zstandard writes none by default, nor does the Wikipedia
    sample): such a frame is used when it decodes; one that fails to decode is dropped with the frames after it."""
    records = real_records(200)
    zc = zstandard.ZstdCompressor()
    parts = [zc.compress(member_bytes(records[i : i + 100])) for i in (0, 100)]
    assert not zstandard.get_frame_parameters(parts[0]).has_checksum
    data = b"".join(parts)
    out, _ = read(flipped(data, len(parts[0]) + 1), "z.jsonl.zst")  # the second frame's magic number
    assert reasons(out) == ["doc"] * 100 + ["corrupt_input"] and "zstd frame 2" in out[-1].detail


def test_the_wikipedia_sample_is_one_zstd_frame_without_checksum():
    """What the real sample's writer produced (FORMAT.md says what that means for damage)."""
    from tests.conftest import WIKIPEDIA_SAMPLE

    wikipedia_lines(1)  # skips without ../shared
    head = WIKIPEDIA_SAMPLE.read_bytes()[:18]
    params = zstandard.get_frame_parameters(head)
    assert not params.has_checksum and params.content_size == zstandard.CONTENTSIZE_UNKNOWN


# -- the build lock after a failed or killed build -----------------------------------------------


def error_line(stderr: str) -> str:
    """The one error line of a job's stderr (its progress lines aside); fails unless there is exactly one."""
    lines = [line for line in stderr.splitlines() if line.startswith("build_shards: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _text_argv(tmp_path: Path, out: Path) -> list[str]:
    path = tmp_path / "in.txt"
    path.write_text("Some text. More text.\n\nA second document here.\n")
    return ["--input", str(path), "--input-format", "text", "--output", str(out), "--vocab-size", "100"]


def test_a_build_that_fails_releases_its_lock(tmp_path, monkeypatch, capsys):
    """Issue 21.4: the MemoryError build left _build.lock behind. Any failure inside the pipeline releases it."""
    from pipeline import build_shards
    from pipeline.write import manifest

    def fail(*args, **kwargs):
        raise RuntimeError("disk on fire")

    out = tmp_path / "out"
    argv = _text_argv(tmp_path, out) + ["--num-shards", "1"]
    monkeypatch.setattr(manifest, "build_manifest", fail)
    with pytest.raises(Exception, match="disk on fire"):
        build_shards.run(argv)
    assert out.exists() and not (out / fmt.LOCK_FILE).exists()
    monkeypatch.undo()
    capsys.readouterr()
    assert build_shards.main(argv) == 2  # the partial output is still there: refused in one line, no lock named
    err = error_line(capsys.readouterr().err)
    assert "is not empty" in err and "--overwrite" in err and fmt.LOCK_FILE not in err
    assert build_shards.main(argv + ["--overwrite"]) == 0 and not (out / fmt.LOCK_FILE).exists()


def test_the_lock_of_a_killed_build_says_whose_it_is_and_how_to_clear_it(tmp_path, capsys, wikitext2_artifact):
    import signal
    import time

    from pipeline import build_shards

    out = tmp_path / "out"
    tok = str(wikitext2_artifact / fmt.TOKENIZER_FILE)
    argv = ["--input", str(wikitext2("valid")), "--input-format", "wikitext", "--output", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.build_shards", *argv, "--tokenizer", tok],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    deadline = time.monotonic() + 300
    while not (out / fmt.LOCK_FILE).exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lock = json.loads((out / fmt.LOCK_FILE).read_text())
    assert lock["pid"] == proc.pid
    assert build_shards.main([*argv, "--tokenizer", tok]) == 2
    err = error_line(capsys.readouterr().err)
    assert f"holds {fmt.LOCK_FILE}, the lock of build {lock['build_id']}" in err
    assert f"by process {proc.pid}, which no longer runs" in err and "pass --overwrite" in err
    assert build_shards.main([*argv, "--tokenizer", tok, "--overwrite", "--num-shards", "2"]) == 0
    assert not (out / fmt.LOCK_FILE).exists()


def test_a_wikitext_heading_with_its_crlf_is_a_heading():
    """For readers that hand over lines with their line end (the n-gram job's line reader, callers of wikitext.py)."""
    from pipeline.read import wikitext

    assert wikitext.heading_level(" = Title = \r\n") == 1 and wikitext.heading_level(" = = Section = = \r") == 2
    assert wikitext.heading_text(" = A , b = \r\n") == "A , b" and wikitext.heading_level(" A = b \r\n") == 0


def test_a_damaged_compressed_file_in_s3_is_read_as_on_local_disk(s3_store, tmp_path, monkeypatch):
    """The second pass over a compressed file seeks back to its start: through Beam's FileSystems on s3:// too."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    FileSystems.set_options(PipelineOptions(s3_store.beam_args))
    records = real_records(60)
    parts = [gzip.compress(member_bytes(records[i : i + 30]), mtime=0) for i in (0, 30)]
    data = flipped(b"".join(parts), len(parts[0]) + len(parts[1]) // 2)
    uri = s3_store.uri("damaged", "m.jsonl.gz")
    with s3_store.pyarrow_fs().open_output_stream(uri.split("://", 1)[1], compression=None) as out:
        out.write(data)  # (pyarrow would gzip it once more by its name)
    local = tmp_path / "m.jsonl.gz"
    local.write_bytes(data)
    here, remote = list(read_file(str(local), ReaderOptions())), list(read_file(uri, ReaderOptions()))
    assert reasons(remote) == reasons(here) == ["doc"] * 30 + ["corrupt_input"]
    assert documents(remote) == documents(here)
    assert (remote[-1].sha256, remote[-1].bytes, remote[-1].documents_read) == (here[-1].sha256, len(data), 31)
