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
