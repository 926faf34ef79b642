"""The artifact reader every consumer shares (``schemas/artifact.py``: the trainer, pipeline.report, verify) refuses a
hostile or damaged artifact with one FormatError line naming the file (issue 21, item 8), before using a value."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from schemas import format as fmt
from schemas.artifact import Artifact


@pytest.fixture
def art(demo_artifact: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "artifact"
    shutil.copytree(demo_artifact, copy)
    return copy


def _edit_manifest(root: Path, **changes: Any) -> None:
    m = json.loads((root / fmt.MANIFEST_FILE).read_text())
    m.update(changes)
    (root / fmt.MANIFEST_FILE).write_text(json.dumps(m))


def _one_line(e: pytest.ExceptionInfo[fmt.FormatError]) -> str:
    message = str(e.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../x", "leaves the artifact"),
        ("shards/../../x", "leaves the artifact"),
        ("/etc/hostname", "leaves the artifact"),
        ("shards//part.arrow", "not a plain relative path"),
        ("shards/./part.arrow", "not a plain relative path"),
        ("", "an empty path"),
    ],
)
def test_paths_leaving_the_artifact_are_refused_before_opening(art: Path, path: str, why: str) -> None:
    a = Artifact.open(str(art))
    with pytest.raises(fmt.FormatError) as e:
        a.read_bytes(path)
    assert why in _one_line(e)
    assert a.read_bytes(fmt.TOKENIZER_FILE) == (art / fmt.TOKENIZER_FILE).read_bytes()


def test_a_manifest_naming_a_shard_outside_is_refused_at_open(art: Path, tmp_path: Path) -> None:
    m = json.loads((art / fmt.MANIFEST_FILE).read_text())
    m["shards"][0]["path"] = "../x"
    (art / fmt.MANIFEST_FILE).write_text(json.dumps(m))
    shutil.copy(art / fmt.shard_filename(0, 4), tmp_path / "x")
    with pytest.raises(fmt.FormatError) as e:
        Artifact.open(str(art))
    assert "manifest.json: shards[0].path: '../x' leaves the artifact" in _one_line(e)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"shards": {"a": 1}}, "shards: expected a list, got an object"),
        ({"shards": [{"path": "shards/p.arrow", "rows": "12"}]}, "shards[0].rows: expected an integer"),
        ({"tokenizer": None}, "tokenizer: expected an object, got null"),
        ({"tokenizer": {"file": "tokenizer.json", "vocab_size": 10**30, "special_token_ids": {}}}, "out of range"),
        ({"unigram": []}, "unigram: expected an object, got a list"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_refused_at_open(art: Path, changes: dict[str, Any], expected: str) -> None:
    _edit_manifest(art, **changes)
    with pytest.raises(fmt.FormatError) as e:
        Artifact.open(str(art))
    message = _one_line(e)
    assert message.startswith(f"{art}/manifest.json: ") and expected in message


def test_a_deeply_nested_manifest_is_refused(art: Path) -> None:
    (art / fmt.MANIFEST_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(fmt.FormatError) as e:
        Artifact.open(str(art))
    assert "manifest.json: not a manifest (JSON nested too deeply)" in _one_line(e)


def _rewrite_unigram(root: Path, ids: list[int]) -> bytes:
    path = root / fmt.UNIGRAM_FILE
    table = ipc.open_file(str(path)).read_all()
    table = table.set_column(0, table.schema.field(0), pa.array(ids, pa.int32()))
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("where", ["last", "first"])
def test_unigram_ids_outside_the_vocabulary_are_refused(art: Path, where: str) -> None:
    """An id beyond the vocabulary raised IndexError in the trainer; a negative one silently counted for another id."""
    a = Artifact.open(str(art))
    ids = list(range(a.vocab_size))
    if where == "last":
        ids[-1] = a.vocab_size + 7
    else:
        ids[0] = -3
    data = _rewrite_unigram(art, ids)
    with pytest.raises(fmt.FormatError) as e:
        a.unigram_counts(data)
    message = _one_line(e)
    assert fmt.UNIGRAM_FILE in message and "the rows are the ids 0.." in message


def test_a_shard_of_another_schema_gives_one_line(art: Path) -> None:
    rel = fmt.shard_filename(0, 4)
    table = ipc.open_file(str(art / rel)).read_all()
    table = table.rename_columns([*table.column_names[:-1], "ngrams"]).replace_schema_metadata(table.schema.metadata)
    with ipc.new_file(str(art / rel), table.schema) as w:
        w.write_table(table)
    data = (art / rel).read_bytes()
    m = json.loads((art / fmt.MANIFEST_FILE).read_text())
    m["shards"][0].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (art / fmt.MANIFEST_FILE).write_text(json.dumps(m))
    with pytest.raises(fmt.FormatError) as e:
        Artifact.open(str(art)).open_shard(rel)
    assert _one_line(e).endswith("missing column(s) ngram_spans; unexpected column(s) ngrams")
