"""verify on hostile and damaged artifacts (issue 21, items 7 and 8): one line per problem naming the file, exit 1
or 2, never a traceback, never a link followed out of the artifact.

One real artifact is built per module (the demo corpus plus a few bad records, so it has dead letters); every
case copies it and damages the copy the way an attacker or a bad disk would. Shards damaged *after* their
manifest checksum was re-computed reach the Arrow reader, which is where tracebacks came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from pipeline import verify as verify_mod
from schemas import format as fmt
from tests.conftest import DEMO_CORPUS, REPO, build

NUM_SHARDS = 2


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo corpus (real prose) plus records that become dead letters: a malformed line, one without text,
    one holding a raw U+2028 (legal inside a JSON string, a line break to ``str.splitlines``)."""
    root = tmp_path_factory.mktemp("hostile")
    corpus = root / "corpus.jsonl"
    bad = [
        b'{"id": "broken", "text": "no closing brace"\n',
        '{"id": "no-text", "title": "a\u2028b"}\n'.encode(),
    ]
    corpus.write_bytes(DEMO_CORPUS.read_bytes() + b"".join(bad))
    out = root / "artifact"
    m = build(
        corpus,
        out,
        "--input-format",
        "jsonl",
        "--train-tokenizer",
        "--vocab-size",
        "2000",
        "--num-shards",
        "2",
        "--max-seq-len",
        "64",
    )
    assert m["counts"]["documents_dead_lettered"] == 2 and len(m["dead_letter"]) == 2
    assert all(s["rows"] > fmt.ROWS_PER_BATCH for s in m["shards"])  # several record batches per shard
    return out


@pytest.fixture
def art(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "artifact"
    shutil.copytree(built, copy, symlinks=True)
    return copy


def manifest(root: Path) -> dict[str, Any]:
    return json.loads((root / fmt.MANIFEST_FILE).read_text(encoding="utf-8"))


def write_manifest(root: Path, m: Any) -> None:
    (root / fmt.MANIFEST_FILE).write_text(json.dumps(m), encoding="utf-8")


def reseal(root: Path, relative: str) -> None:
    """Make the manifest's size and sha256 of ``relative`` those of the file as it is now, so the checksum passes
    and the damage reaches the reader."""
    data = (root / relative).read_bytes()
    m = manifest(root)
    entries = [*m["shards"], *m["dead_letter"], m["unigram"], m["tokenizer"]]
    entry = next(e for e in entries if e.get("path", e.get("file")) == relative)
    entry["sha256"] = hashlib.sha256(data).hexdigest()
    if "bytes" in entry:
        entry["bytes"] = len(data)
    write_manifest(root, m)


def run_verify(root: Path) -> tuple[int, str]:
    """verify as the user runs it, in this process: exit code and everything it printed."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = verify_mod.main([str(root)])
        except BaseException as e:  # what the user would see as a traceback
            import traceback

            return -1, "Traceback (most recent call last):\n" + "".join(traceback.format_exception(e))
    return code, out.getvalue() + err.getvalue()


def assert_one_line_naming(code: int, output: str, name: str) -> None:
    assert code in (1, 2), output
    assert "Traceback" not in output, output
    assert any(name in line for line in output.splitlines()), f"no line names {name!r}:\n{output}"


def shard(i: int) -> str:
    return fmt.shard_filename(i, NUM_SHARDS)


# -- crafted manifests ------------------------------------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    """A manifest edit: the key at ``path`` (dots; list indices as numbers) set to ``value``, or deleted (...)."""

    def edit(m: dict[str, Any]) -> Any:
        *parents, last = path.split(".")
        node: Any = m
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if value is ...:
            del node[key]
        else:
            node[key] = value
        return m

    return edit


MANIFEST_EDITS = {
    "documents_read as a string": _set("counts.documents_read", "42"),
    "all counts as strings": lambda m: {**m, "counts": {k: str(v) for k, v in m["counts"].items()}},
    "shards as a dict": lambda m: {**m, "shards": {s["path"]: s for s in m["shards"]}},
    "shard entries as strings": lambda m: {**m, "shards": [s["path"] for s in m["shards"]]},
    "shard rows as a string": _set("shards.0.rows", "128"),
    "shard bytes null": _set("shards.1.bytes", None),
    "no shards key": _set("shards", ...),
    "no tokenizer key": _set("tokenizer", ...),
    "no counts key": _set("counts", ...),
    "no unigram key": _set("unigram", ...),
    "no dead_letter key": _set("dead_letter", ...),
    "no special_token_ids": _set("tokenizer.special_token_ids", ...),
    "special_tokens naming a role without an id": _set("tokenizer.special_tokens.extra", "[EXTRA]"),
    "special id a string": _set("tokenizer.special_token_ids.mask", "4"),
    "tokenizer null": _set("tokenizer", None),
    "counts null": _set("counts", None),
    "rows null": _set("counts.rows", None),
    "huge vocab_size": _set("tokenizer.vocab_size", 10**30),
    "huge shard bytes": _set("shards.0.bytes", 10**40),
    "huge max_row_tokens": _set("max_row_tokens", 10**30),
    "huge special id": _set("tokenizer.special_token_ids.pad", 10**20),
    "huge histogram count": _set("row_length_histogram.counts.0", 10**30),
    "negative rows": _set("shards.0.rows", -1),
    "float tokens": _set("counts.tokens", 1.5),
    "bool rows": _set("shards.0.rows", True),
    "empty histogram": _set("row_length_histogram.counts", []),
    "histogram a string": _set("row_length_histogram", "0,1,2"),
    "unknown pack": _set("pack", "every-other-sentence"),
    "pack a list": _set("pack", ["doc-sentences"]),
    "nested garbage as a path": _set("shards.0.path", {"a": [1, [2, {"b": None}]]}),
    "nested garbage as inputs": _set("inputs", [[[{"documents_read": [1]}]]]),
    "dead-letter reason map of lists": _set("counts.dead_lettered_by_reason", {"malformed_json": [1]}),
    "format_version a number": _set("format_version", 1.0),
    "format_version a list": _set("format_version", ["1", "0"]),
    "shard path ../x": _set("shards.0.path", "../x"),
    "shard path absolute": _set("shards.0.path", "/etc/hostname"),
    "shard path shards/../../x": _set("shards.0.path", "shards/../../x"),
    "tokenizer file ../tokenizer.json": _set("tokenizer.file", "../tokenizer.json"),
    "unigram file absolute": _set("unigram.file", "/etc/hostname"),
    "dead-letter path leaving": _set("dead_letter.0.path", "dead_letter/../../../etc/hostname"),
    "shard path with NUL": _set("shards.0.path", "shards/part\x00.arrow"),
    "shard path empty": _set("shards.0.path", ""),
}


@pytest.mark.parametrize("case", MANIFEST_EDITS)
def test_crafted_manifest_gives_one_line(art: Path, case: str) -> None:
    write_manifest(art, MANIFEST_EDITS[case](manifest(art)))
    code, output = run_verify(art)
    assert_one_line_naming(code, output, fmt.MANIFEST_FILE)


RAW_MANIFESTS = {
    "not JSON": b"this is not JSON\n",
    "empty": b"",
    "a list": b"[1, 2, 3]",
    "null": b"null",
    "a string": b'"manifest"',
    "non-UTF-8": None,  # the real manifest with bytes that are not UTF-8
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "NaN and Infinity": None,
    "a number too big for a float": None,
}


@pytest.mark.parametrize("case", RAW_MANIFESTS)
def test_raw_manifest_bytes_give_one_line(art: Path, case: str) -> None:
    text = (art / fmt.MANIFEST_FILE).read_bytes()
    data = RAW_MANIFESTS[case]
    if case == "non-UTF-8":
        data = text.replace(b'"shards"', b'"sh\xff\xfeards"', 1)
    elif case in ("NaN and Infinity", "a number too big for a float"):
        at = text.index(b'"tokenizer": {')  # options hold a vocab_size too: change the tokenizer's
        tail = text[at:].replace(b'"vocab_size": 2000', b'"vocab_size": 1e400', 1)
        if case == "NaN and Infinity":
            tail = tail.replace(b'"vocab_size": 1e400', b'"vocab_size": Infinity', 1).replace(
                b'"rows": ', b'"rows": NaN, "x": ', 1
            )
        data = text[:at] + tail
        assert data != text
    assert data is not None
    (art / fmt.MANIFEST_FILE).write_bytes(data)
    code, output = run_verify(art)
    assert_one_line_naming(code, output, fmt.MANIFEST_FILE)


def test_a_path_leaving_the_artifact_is_refused_before_it_is_opened(art: Path, tmp_path: Path) -> None:
    """The manifest names ``../x`` with the right size and sha256 of a real shard placed there: it must not be
    read (it would verify), and the message says why."""
    outside = tmp_path / "x"
    shutil.copy(art / shard(0), outside)
    m = manifest(art)
    m["shards"][0]["path"] = "../x"
    write_manifest(art, m)
    (art / shard(0)).unlink()
    code, output = run_verify(art)
    assert_one_line_naming(code, output, "../x")
    assert "leaves the artifact" in output


# -- damaged files whose checksums were re-computed ---------------------------------------------------------------


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def _replace_last(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    at = data.rindex(old)
    path.write_bytes(data[:at] + new + data[at + len(old) :])


SHARD_DAMAGE = {
    "truncated to half": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "only the magic": lambda p: p.write_bytes(b"ARROW1\x00\x00"),
    "empty": lambda p: p.write_bytes(b""),
    "not Arrow at all": lambda p: p.write_bytes(b"hello, world\n" * 100),
    "footer length": lambda p: flip(p, p.stat().st_size - 10, 0x40),
    "footer byte": lambda p: flip(p, p.stat().st_size - 40, 0xFF),
    # ipc.open_file reads the schema in the footer (the copy at the start is the stream's): damage that one
    "a column name in the footer's schema": lambda p: _replace_last(p, b"input_ids", b"input_idz"),
    "a column name not UTF-8 in the footer's schema": lambda p: _replace_last(
        p, b"sentence_start", b"sentence_star\xff"
    ),
    "the format version in the footer's schema": lambda p: _replace_last(p, fmt.FORMAT_VERSION.encode(), b"9.0"),
    "the format version not UTF-8": lambda p: _replace_last(p, fmt.FORMAT_VERSION.encode(), b"\xff.0"),
    "body byte": lambda p: flip(p, p.stat().st_size // 2, 0xFF),
}


@pytest.mark.parametrize("case", SHARD_DAMAGE)
def test_resealed_damaged_shard_gives_one_line(art: Path, case: str) -> None:
    SHARD_DAMAGE[case](art / shard(1))
    reseal(art, shard(1))
    code, output = run_verify(art)
    assert_one_line_naming(code, output, shard(1))


def test_fuzz_resealed_byte_flips_never_give_a_traceback(art: Path) -> None:
    """200 seeded random bit flips across one shard, each with the checksum re-computed: verify reports a problem
    (exit 1, or 2) or, when the flip changed nothing verify can see, passes; it never raises. A flip that only
    changes token ids is caught by unigram.arrow's counts, which name that file rather than the shard."""
    rng = random.Random(21)
    path = art / shard(0)
    original = path.read_bytes()
    original_manifest = (art / fmt.MANIFEST_FILE).read_bytes()
    caught = named = passed = 0
    tracebacks: list[str] = []
    for _ in range(200):
        position = rng.randrange(len(original))
        damaged = bytearray(original)
        damaged[position] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(damaged))
        reseal(art, shard(0))
        code, output = run_verify(art)
        if code == 0:
            passed += 1
        elif code in (1, 2) and "Traceback" not in output:
            caught += 1
            named += shard(0) in output
        else:
            tracebacks.append(f"byte {position}: exit {code}: {output[-2000:]}")
        (art / fmt.MANIFEST_FILE).write_bytes(original_manifest)
    path.write_bytes(original)
    print(f"fuzz: {caught} of 200 flips caught ({named} naming the shard), {passed} passed")
    assert not tracebacks, "\n\n".join(tracebacks[:3])
    assert caught > 100


TOKENIZER_DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 3]),
    "garbled": lambda p: p.write_bytes(random.Random(1).randbytes(p.stat().st_size)),
    "invalid UTF-8": lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()),
    "an empty object": lambda p: p.write_text("{}"),
    "a list": lambda p: p.write_text("[1, 2]"),
    "[MASK] missing from the vocabulary": lambda p: p.write_text(p.read_text().replace('"[MASK]":4,', "", 1)),
    "special ids not the manifest's": lambda p: p.write_text(
        p.read_text().replace('"[MASK]":4,', '"[MASK]":5,', 1).replace('"content":"[MASK]"', '"content":"[MAZK]"', 1)
    ),
}


@pytest.mark.parametrize("case", TOKENIZER_DAMAGE)
def test_resealed_damaged_tokenizer_gives_one_line(art: Path, case: str) -> None:
    before = (art / fmt.TOKENIZER_FILE).read_bytes()
    TOKENIZER_DAMAGE[case](art / fmt.TOKENIZER_FILE)
    assert (art / fmt.TOKENIZER_FILE).read_bytes() != before
    reseal(art, fmt.TOKENIZER_FILE)
    code, output = run_verify(art)
    assert_one_line_naming(code, output, fmt.TOKENIZER_FILE)


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def _rewrite_unigram(root: Path, edit: Callable[[pa.Table], pa.Table]) -> None:
    path = root / fmt.UNIGRAM_FILE
    table = edit(ipc.open_file(str(path)).read_all())
    with ipc.new_file(str(path), table.schema) as w:
        w.write_table(table)


def _ids(table: pa.Table, change: Callable[[list[int]], list[int]]) -> pa.Table:
    ids = change(table.column("token_id").to_pylist())
    return table.set_column(0, table.schema.field(0), pa.array(ids, pa.int32()))


UNIGRAM_DAMAGE: dict[str, Callable[[Path], None]] = {
    "an id beyond the vocabulary": lambda r: _rewrite_unigram(r, lambda t: _ids(t, lambda i: [*i[:-1], 10**6])),
    "a negative id": lambda r: _rewrite_unigram(r, lambda t: _ids(t, lambda i: [-3, *i[1:]])),
    "ids out of order": lambda r: _rewrite_unigram(r, lambda t: _ids(t, lambda i: [i[1], i[0], *i[2:]])),
    "columns renamed": lambda r: _rewrite_unigram(
        r, lambda t: t.rename_columns(["id", "token", "n"]).replace_schema_metadata(t.schema.metadata)
    ),
    "count as strings": lambda r: _rewrite_unigram(
        r,
        lambda t: pa.table(
            [t.column(0), t.column(1), t.column(2).cast(pa.string())],
            schema=pa.schema([*list(t.schema)[:2], pa.field("count", pa.string(), nullable=False)], t.schema.metadata),
        ),
    ),
    "no metadata": lambda r: _rewrite_unigram(r, lambda t: t.replace_schema_metadata(None)),
    "metadata not UTF-8": lambda r: _rewrite_unigram(
        r,
        lambda t: t.replace_schema_metadata(
            {**t.schema.metadata, fmt.META_FORMAT_VERSION: b"\xff" + fmt.FORMAT_VERSION.encode()}
        ),
    ),
    "truncated": lambda r: _truncate(r / fmt.UNIGRAM_FILE, 200),
    "flipped footer": lambda r: flip(r / fmt.UNIGRAM_FILE, (r / fmt.UNIGRAM_FILE).stat().st_size - 30, 0xFF),
}


@pytest.mark.parametrize("case", UNIGRAM_DAMAGE)
def test_resealed_damaged_unigram_gives_one_line(art: Path, case: str) -> None:
    UNIGRAM_DAMAGE[case](art)
    reseal(art, fmt.UNIGRAM_FILE)
    code, output = run_verify(art)
    assert_one_line_naming(code, output, fmt.UNIGRAM_FILE)


DEAD_LETTER_DAMAGE = {
    "invalid UTF-8": lambda p: p.write_bytes(p.read_bytes() + b'{"reason": "\xff"}\n'),
    "invalid JSON": lambda p: p.write_bytes(p.read_bytes() + b"{not json\n"),
    "a JSON list": lambda p: p.write_bytes(p.read_bytes() + b"[1, 2]\n"),
    "no reason": lambda p: p.write_bytes(p.read_bytes() + b'{"detail": "x"}\n'),
    "reason an object": lambda p: p.write_bytes(p.read_bytes() + b'{"reason": {"a": 1}}\n'),
    "deeply nested": lambda p: p.write_bytes(p.read_bytes() + b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    "binary garbage": lambda p: p.write_bytes(random.Random(2).randbytes(4096)),
}


@pytest.mark.parametrize("case", DEAD_LETTER_DAMAGE)
def test_resealed_damaged_dead_letter_gives_one_line(art: Path, case: str) -> None:
    relative = manifest(art)["dead_letter"][0]["path"]
    DEAD_LETTER_DAMAGE[case](art / relative)
    reseal(art, relative)
    code, output = run_verify(art)
    assert_one_line_naming(code, output, relative)


def test_dead_letter_holding_a_line_separator_verifies(art: Path) -> None:
    """A rejected record's preview may hold U+2028 (written raw: ensure_ascii=False); JSON Lines split at \\n only."""
    letters = "".join(p.read_text(encoding="utf-8") for p in (art / "dead_letter").glob("*.jsonl"))
    assert "\u2028" in letters
    code, output = run_verify(art)
    assert code == 0, output


# -- links and special files: never followed ----------------------------------------------------------------------


def test_intact_copy_verifies(art: Path) -> None:
    code, output = run_verify(art)
    assert code == 0, output


def test_link_to_root_in_dead_letter_is_reported_not_walked(art: Path) -> None:
    """The case of issue 21: ``dead_letter/root -> /`` made verify walk /proc for 83 s, then a traceback. As the user
    runs it, in a subprocess."""
    os.symlink("/", art / "dead_letter" / "root")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.verify", str(art)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if "dead_letter/root" in line]
    assert len(lines) == 1 and "symbolic link" in lines[0], output


def _link_shard_elsewhere(root: Path, tmp: Path) -> str:
    target = tmp / "elsewhere.arrow"
    shutil.move(root / shard(0), target)
    os.symlink(target, root / shard(0))
    return shard(0)


def _link_shards_dir(root: Path, tmp: Path) -> str:
    shutil.move(root / "shards", tmp / "real-shards")
    os.symlink(tmp / "real-shards", root / "shards")
    return "shards"


def _link_manifest(root: Path, tmp: Path) -> str:
    shutil.move(root / fmt.MANIFEST_FILE, tmp / "m.json")
    os.symlink(tmp / "m.json", root / fmt.MANIFEST_FILE)
    return fmt.MANIFEST_FILE


def _tokenizer_to_dev_zero(root: Path, tmp: Path) -> str:
    (root / fmt.TOKENIZER_FILE).unlink()
    os.symlink("/dev/zero", root / fmt.TOKENIZER_FILE)
    return fmt.TOKENIZER_FILE


def _dangling_link(root: Path, tmp: Path) -> str:
    os.symlink(tmp / "does-not-exist", root / "dead_letter" / "gone.jsonl")
    return "dead_letter/gone.jsonl"


def _link_loop(root: Path, tmp: Path) -> str:
    os.symlink("..", root / "shards" / "up")
    return "shards/up"


def _fifo_as_dead_letter(root: Path, tmp: Path) -> str:
    relative = manifest(root)["dead_letter"][0]["path"]
    (root / relative).unlink()
    os.mkfifo(root / relative)
    return relative


LINKS = {
    "a shard linked to a file outside": _link_shard_elsewhere,
    "the shards directory a link": _link_shards_dir,
    "manifest.json a link": _link_manifest,
    "tokenizer.json a link to /dev/zero": _tokenizer_to_dev_zero,
    "a dangling link": _dangling_link,
    "a link loop": _link_loop,
    "a named pipe as a dead-letter file": _fifo_as_dead_letter,
}


@pytest.mark.parametrize("case", LINKS)
def test_links_and_special_files_are_reported_not_followed(art: Path, tmp_path: Path, case: str) -> None:
    relative = LINKS[case](art, tmp_path)
    code, output = run_verify(art)
    assert code == 1, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if f"{relative}:" in line]
    assert lines, output
    assert "symbolic link" in lines[0] or "not a regular file" in lines[0], output


# -- special tokens in rows (FORMAT.md: rows hold [UNK], and [SEP] only between documents of full-sentences) -------


def test_rows_holding_another_special_added_token_are_reported(art: Path) -> None:
    """tokenizer.json may mark more added tokens special than the manifest's five roles; no row may hold any of them.
    Here a word the rows hold is made a special added token (same id, same vocabulary size) and resealed."""
    config = json.loads((art / fmt.TOKENIZER_FILE).read_text(encoding="utf-8"))
    word = "river"
    wid = config["model"]["vocab"][word]
    config["added_tokens"].append(
        {"id": wid, "content": word, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
    )
    (art / fmt.TOKENIZER_FILE).write_text(json.dumps(config), encoding="utf-8")
    reseal(art, fmt.TOKENIZER_FILE)
    rows = [i for p in sorted((art / "shards").glob("*.arrow")) for i in ipc.open_file(str(p)).read_all()["input_ids"]]
    assert any(wid in r.as_py() for r in rows)
    code, output = run_verify(art)
    assert code == 1, output
    assert f"special token id(s) [{wid}] inside rows" in output


@pytest.mark.parametrize("pack", ["doc-sentences", "full-sentences"])
def test_allowed_special_ids_follow_the_packing(art: Path, pack: str) -> None:
    """[SEP] in a row is a document separator under full-sentences packing only; [UNK] is always allowed."""
    from schemas import invariants as inv

    m = manifest(art)
    m["pack"] = pack
    ids = m["tokenizer"]["special_token_ids"]
    forbidden = set(inv.forbidden_special_ids(m).tolist())
    assert ids["unk"] not in forbidden and {ids["pad"], ids["cls"], ids["mask"]} <= forbidden
    assert (ids["sep"] in forbidden) == (pack == "doc-sentences")


@pytest.mark.parametrize("case", ["a manifest naming ../x", "a resealed shard with a flipped body byte"])
def test_as_the_user_runs_it(art: Path, case: str) -> None:
    """``python -m pipeline.verify DIR`` in a subprocess: the exit code and the one line the user sees."""
    if case == "a manifest naming ../x":
        write_manifest(art, _set("shards.0.path", "../x")(manifest(art)))
        name, expected = fmt.MANIFEST_FILE, 2
    else:
        SHARD_DAMAGE["body byte"](art / shard(1))
        reseal(art, shard(1))
        name, expected = shard(1), 1
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.verify", str(art)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == expected, proc.stdout + proc.stderr
    assert_one_line_naming(proc.returncode, proc.stdout + proc.stderr, name)
