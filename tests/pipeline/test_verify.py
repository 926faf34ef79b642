"""verify catches every kind of damage: truncation, a flipped byte, a missing file, no manifest, unknown version."""

import json
import shutil

import pytest

from pipeline import verify as verify_mod
from schemas import format as fmt


@pytest.fixture
def artifact(demo_artifact, tmp_path):
    copy = tmp_path / "artifact"
    shutil.copytree(demo_artifact, copy)
    return copy


def run_verify(path, capsys):
    code = verify_mod.main([str(path)])
    return code, capsys.readouterr()


def test_intact_artifact_verifies_and_says_what_it_checked(artifact, capsys):
    code, out = run_verify(artifact, capsys)
    assert code == 0, out.err
    report = verify_mod.verify(str(artifact))
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert report.checked["rows checked"] == manifest["counts"]["rows"] > 0
    assert report.checked["shards checksummed"] == 4


def test_truncated_shard(artifact, capsys):
    shard = artifact / fmt.shard_filename(1, 4)
    shard.write_bytes(shard.read_bytes()[:-100])
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "part-00001-of-00004.arrow" in out.err and "truncated" in out.err


def test_flipped_byte(artifact, capsys):
    shard = artifact / fmt.shard_filename(2, 4)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "part-00002-of-00004.arrow: sha256" in out.err


def test_missing_shard_and_missing_tokenizer(artifact, capsys):
    (artifact / fmt.shard_filename(0, 4)).unlink()
    (artifact / "tokenizer.json").unlink()
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "part-00000-of-00004.arrow: missing" in out.err and "tokenizer.json: missing" in out.err


def test_leftover_file_in_shards(artifact, capsys):
    shutil.copy(artifact / fmt.shard_filename(0, 4), artifact / "shards" / "part-00000-of-00008.arrow")
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "not in the manifest" in out.err


def test_incomplete_artifact_without_manifest(artifact, capsys):
    (artifact / "manifest.json").unlink()
    code, out = run_verify(artifact, capsys)
    assert code == 2 and "incomplete artifact" in out.err and "Traceback" not in out.err


def test_unknown_format_version(artifact, capsys):
    m = json.loads((artifact / "manifest.json").read_text())
    future = f"{max(fmt.SUPPORTED_MAJOR_VERSIONS) + 1}.0"  # a major version no reader knows yet
    m["format_version"] = future
    (artifact / "manifest.json").write_text(json.dumps(m))
    code, out = run_verify(artifact, capsys)
    assert code == 2 and f"format version {future} is not supported" in out.err


def test_counts_that_do_not_add_up(artifact, capsys):
    m = json.loads((artifact / "manifest.json").read_text())
    m["counts"]["documents_written"] -= 1
    (artifact / "manifest.json").write_text(json.dumps(m))
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "documents_read" in out.err


def test_consistently_rewritten_shard_still_fails_the_row_invariants(artifact, capsys):
    """A shard replaced by a well-formed file with different rows, checksums updated: rows/counts catch it."""
    import hashlib

    import pyarrow.ipc as ipc

    shard = artifact / fmt.shard_filename(3, 4)
    table = ipc.open_file(str(shard)).read_all()
    table = table.slice(0, max(table.num_rows - 1, 0))
    with ipc.new_file(str(shard), table.schema) as w:
        w.write_table(table)
    m = json.loads((artifact / "manifest.json").read_text())
    data = shard.read_bytes()
    m["shards"][3]["bytes"] = len(data)
    m["shards"][3]["sha256"] = hashlib.sha256(data).hexdigest()
    (artifact / "manifest.json").write_text(json.dumps(m))
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "part-00003-of-00004.arrow" in out.err and "manifest says" in out.err


def test_irregular_record_batches_are_reported(artifact, capsys):
    """Readers locate rows by batch arithmetic: a shard re-batched into two short batches must fail."""
    import hashlib

    import pyarrow.ipc as ipc

    m = json.loads((artifact / "manifest.json").read_text())
    index = max(range(4), key=lambda i: m["shards"][i]["rows"])
    rows = m["shards"][index]["rows"]
    assert 2 <= rows
    shard = artifact / fmt.shard_filename(index, 4)
    table = ipc.open_file(str(shard)).read_all()
    with ipc.new_file(str(shard), table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table, max_chunksize=-(-rows // 2))
    data = shard.read_bytes()
    m["shards"][index].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (artifact / "manifest.json").write_text(json.dumps(m))
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "must hold exactly 128" in out.err


@pytest.mark.parametrize(
    "stray", ["dead_letter/extra.jsonl", "notes/precious.txt", "stray.bin", ".manifest.json.tmp-0123"]
)
def test_stray_files_anywhere_in_the_artifact(artifact, capsys, stray):
    (artifact / stray).parent.mkdir(parents=True, exist_ok=True)
    (artifact / stray).write_text("{}\n")
    code, out = run_verify(artifact, capsys)
    assert code == 1 and f"{stray}: not in the manifest" in out.err


def test_report_and_dataset_card_are_not_stray(artifact, capsys):
    (artifact / "report").mkdir(exist_ok=True)
    (artifact / "report" / "index.html").write_text("<html></html>")
    (artifact / "README.md").write_text("# card\n")
    code, out = run_verify(artifact, capsys)
    assert code == 0, out.err
    assert verify_mod.verify(str(artifact)).checked["files listed"] >= 4 + 3 + 2


def test_leftover_build_lock_is_reported(artifact, capsys):
    (artifact / fmt.LOCK_FILE).write_text('{"build_id": "x"}')
    code, out = run_verify(artifact, capsys)
    assert code == 1 and "still writing this artifact, or was killed" in out.err


def test_special_token_ids_inside_rows_are_reported(artifact, capsys):
    """A row holding [MASK] (what literal "[MASK]" text gave before issue 9), checksums made consistent."""
    import hashlib

    import pyarrow as pa
    import pyarrow.ipc as ipc

    m = json.loads((artifact / "manifest.json").read_text())
    mask = m["tokenizer"]["special_token_ids"]["mask"]
    index = max(range(4), key=lambda i: m["shards"][i]["rows"])
    shard = artifact / fmt.shard_filename(index, 4)
    table = ipc.open_file(str(shard)).read_all()
    rows = table.column("input_ids").to_pylist()
    rows[0][0] = mask
    table = table.set_column(
        table.schema.get_field_index("input_ids"),
        table.schema.field("input_ids"),
        pa.array(rows, table.schema.field("input_ids").type),
    )
    with ipc.new_file(str(shard), table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table, max_chunksize=fmt.ROWS_PER_BATCH)
    data = shard.read_bytes()
    m["shards"][index].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (artifact / "manifest.json").write_text(json.dumps(m))
    code, out = run_verify(artifact, capsys)
    assert code == 1 and f"special token id(s) [{mask}] inside rows" in out.err
