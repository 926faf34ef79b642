"""Damage a shard the way an attacker or a bad disk would, for tests of who notices."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc


def _batches(data: bytes) -> list[pa.RecordBatch]:
    reader = ipc.open_file(pa.BufferReader(data))
    out = []
    for b in range(reader.num_record_batches):
        batch = reader.get_batch(b)
        batch.validate(full=True)
        out.append(batch)
    return out


def _only_token_values_differ(a: list[pa.RecordBatch], b: list[pa.RecordBatch], vocab_size: int) -> bool:
    changed = False
    for x, y in zip(a, b):
        for name in x.schema.names:
            if name != "input_ids" and not x.column(name).equals(y.column(name)):
                return False
        ids_x, ids_y = x.column("input_ids"), y.column("input_ids")
        if not ids_x.offsets.equals(ids_y.offsets) or (
            len(ids_y.values) and max(ids_y.values.to_pylist()) >= vocab_size
        ):
            return False
        changed |= not ids_x.values.equals(ids_y.values)
    return changed


def flip_byte_changing_input_ids(shard: Path, vocab_size: int = 4000) -> int:
    """Flip one bit of one byte of ``shard`` such that the file still reads and validates as Arrow, every row
    keeps its length and every other column its values, and some token ids change to other valid ids: silent
    corruption that only a checksum can notice. Returns the byte's offset."""
    data = Path(shard).read_bytes()
    original = _batches(data)
    for pos in range(len(data) // 8, len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0x01
        try:
            got = _batches(bytes(damaged))
        except Exception:
            continue
        if _only_token_values_differ(original, got, vocab_size):
            Path(shard).write_bytes(bytes(damaged))
            return pos
    raise AssertionError(f"{shard}: no single flipped byte keeps the file readable and changes input_ids")


def rewrite_token(artifact: Path, shard: int, row: int, position: int, token_id: int) -> str:
    """Set token ``position`` of row ``row`` (of the shard) of shard number ``shard`` to ``token_id`` and record the
    rewritten file's size and sha256 in the manifest, as a build that wrote such a row would have: a consistent
    artifact whose checksums match, with one row holding ``token_id``. Returns the shard's relative path."""
    import hashlib
    import json

    import numpy as np

    artifact = Path(artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    entry = manifest["shards"][shard]
    path = artifact / entry["path"]
    reader = ipc.open_file(pa.BufferReader(path.read_bytes()))
    rpb = int(manifest.get("rows_per_batch", 128))
    batches = [reader.get_batch(b) for b in range(reader.num_record_batches)]
    b, r = divmod(row, rpb)
    ids = batches[b].column("input_ids")
    values = ids.values.to_numpy(zero_copy_only=False).copy()
    start = int(ids.offsets[r].as_py()) - int(ids.offsets[0].as_py())
    assert position < int(ids.offsets[r + 1].as_py()) - int(ids.offsets[r].as_py())
    values[start + position] = token_id
    offsets = pa.array(np.asarray(ids.offsets) - int(ids.offsets[0].as_py()), pa.int32())
    new_ids = pa.ListArray.from_arrays(offsets, pa.array(values, ids.type.value_type), type=ids.type)
    columns = [new_ids if name == "input_ids" else batches[b].column(name) for name in batches[b].schema.names]
    batches[b] = pa.RecordBatch.from_arrays(columns, schema=reader.schema)
    with ipc.new_file(str(path), reader.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        for batch in batches:
            w.write_batch(batch)
    data = path.read_bytes()
    entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (artifact / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return entry["path"]
