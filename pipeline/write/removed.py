"""WriteRemoved: documents left out as duplicates or contaminated -> ``removed/<reason>.jsonl``, sorted by source
position (as ``dead_letter/``: one file per reason, one result per file for the manifest, written through the same
bounded external sort, ``write_reason_file``)."""

from __future__ import annotations

import apache_beam as beam

from pipeline.elements import RemovedDocument
from pipeline.write.dead_letters import DEFAULT_BUFFER_BYTES, write_reason_file
from schemas import format as fmt


def _sort_key(r: RemovedDocument):
    return (r.source.path, r.source.byte_offset, r.source.line, r.doc_id)


def _write_reason(output: str, reason_and_records, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> dict:
    reason, records = reason_and_records  # the grouped records: read once, lazily, never held whole
    return write_reason_file(output, f"{fmt.REMOVED_DIR}/{reason}.jsonl", reason, records, _sort_key, buffer_bytes)


class WriteRemoved(beam.PTransform):
    """Group removed documents by reason and write one sorted JSONL file per reason (bounded memory:
    ``buffer_bytes``, the job's ``--spill-buffer-mb``); one result per file."""

    def __init__(self, output: str, buffer_bytes: int = DEFAULT_BUFFER_BYTES):
        super().__init__()
        self._output = output
        self._buffer_bytes = buffer_bytes

    def expand(self, removed):
        output, buffer_bytes = self._output, self._buffer_bytes
        return (
            removed
            | "KeyByReason" >> beam.Map(lambda r: (r.reason, r))
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReason" >> beam.Map(lambda group: _write_reason(output, group, buffer_bytes))
        )
