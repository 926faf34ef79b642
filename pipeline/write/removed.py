"""WriteRemoved: documents left out as duplicates or contaminated -> ``removed/<reason>.jsonl``, sorted by source
position (as ``dead_letter/``: one file per reason, one result per file for the manifest)."""

from __future__ import annotations

import apache_beam as beam

from pipeline.elements import RemovedDocument
from pipeline.write.dead_letters import write_reason_file
from schemas import format as fmt


def _sort_key(r: RemovedDocument):
    return (r.source.path, r.source.byte_offset, r.source.line, r.doc_id)


def _write_reason(output: str, reason_and_records):
    reason, records = reason_and_records
    records = sorted(records, key=_sort_key)
    return write_reason_file(output, f"{fmt.REMOVED_DIR}/{reason}.jsonl", reason, records)


class WriteRemoved(beam.PTransform):
    """Group removed documents by reason and write one sorted JSONL file per reason; one result per file."""

    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, removed):
        output = self._output
        return (
            removed
            | "KeyByReason" >> beam.Map(lambda r: (r.reason, r))
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReason" >> beam.Map(lambda group: _write_reason(output, group))
        )
