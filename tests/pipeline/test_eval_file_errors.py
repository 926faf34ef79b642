"""Evaluation files that cannot be decompressed or decoded (issue 42, item 3): one line naming the file, exit 2, in
``pipeline.contamination`` and in ``build_shards --decontaminate``. A ``.jsonl.gz`` with gzip's header and damaged
deflate data ended both with a ``zlib.error`` traceback and exit 1."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from pipeline import build_shards, contamination
from tests.conftest import DEMO_CORPUS

LINES = "".join(json.dumps({"id": f"e{i}", "text": f"sentence number {i} is here"}) + "\n" for i in range(50)).encode()
GZ = gzip.compress(LINES, mtime=0)
ZST = zstandard.ZstdCompressor().compress(LINES)


def _damaged_deflate() -> bytes:
    data = bytearray(GZ)
    data[10] = 0xFF  # the first deflate block's header: an invalid block type
    return bytes(data)


CASES = {
    "deflate.jsonl.gz": (_damaged_deflate(), "cannot be decompressed"),
    "truncated.jsonl.gz": (GZ[: len(GZ) // 2], "cannot be decompressed"),
    "trailing.jsonl.gz": (GZ + b"garbage", "cannot be decompressed"),
    "garbage.jsonl.zst": (b"\x28\xb5\x2f\xfd" + b"\x00" * 7 + b"garbage", "cannot be decompressed"),
    "truncated.jsonl.zst": (ZST[: len(ZST) // 2], "cannot be decompressed"),
    "latin1.jsonl": ('{"text": "caf\u00e9 au lait"}\n'.encode("latin-1"), "not UTF-8"),
    "latin1.jsonl.gz": (gzip.compress('{"text": "na\u00efve"}\n'.encode("latin-1")), "not UTF-8"),
    "latin1.tsv": ("sentence\ncaf\u00e9\n".encode("latin-1"), "not UTF-8"),
    "latin1.json": ('{"data": [], "v": "\u00e9"}'.encode("latin-1"), "not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_evaluation_file_that_cannot_be_decompressed_or_decoded_is_one_line_and_exit_2(
    tmp_path, capsys, demo_artifact, name
):
    data, message = CASES[name]
    path = tmp_path / name
    path.write_bytes(data)
    code = contamination.main([str(demo_artifact), "--eval", str(path)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert (code, len(lines)) == (2, 1) and "Traceback" not in err, err
    assert lines[0].startswith(f"contamination: error: {path}: ") and message in lines[0]
    code = build_shards.main(["--input", str(DEMO_CORPUS), "--output", str(tmp_path / "out"), "--decontaminate",
                              str(path)])  # fmt: skip
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert (code, len(lines)) == (2, 1) and "Traceback" not in err and not (tmp_path / "out").exists(), err
    assert lines[0].startswith(f"build_shards: error: --decontaminate {path}: ") and message in lines[0]


def test_an_evaluation_file_whose_name_is_not_utf8_is_one_line_and_exit_2(tmp_path, capsys, demo_artifact):
    """Its name travels in the job's records: build_shards --decontaminate ended in Beam's coder with a
    UnicodeEncodeError traceback (exit 1); both commands now refuse it before any work."""
    path = (tmp_path / "bad\udcff.jsonl").as_posix()  # the name b"bad\xff.jsonl" as os.fsdecode gives it
    with open(path.encode("utf-8", "surrogateescape"), "wb") as f:
        f.write(LINES)
    shown = path.replace("\udcff", "\\udcff")  # as Python's stderr shows it (errors="backslashreplace")
    assert contamination.main([str(demo_artifact), "--eval", path]) == 2
    err = capsys.readouterr().err
    assert err == f"contamination: error: {shown}: the file name is not UTF-8: rename the file\n", err
    code = build_shards.main(["--input", str(DEMO_CORPUS), "--output", str(tmp_path / "out"), "--decontaminate", path])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "out").exists(), err
    assert err.endswith(f"build_shards: error: --decontaminate {shown}: the file name is not UTF-8: rename the file\n")
