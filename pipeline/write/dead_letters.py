"""WriteDeadLetters: rejected records -> ``dead_letter/<reason>.jsonl``, sorted by source position."""

from __future__ import annotations

import hashlib
import json

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipeline.elements import DeadLetter
from pipeline.files import atomic_write
from schemas import format as fmt


def write_reason_file(output: str, relative: str, reason: str, records: list) -> dict:
    """``records`` (in their order) as one JSON object a line at ``output/relative``, written atomically; the file's
    entry for the manifest (path, reason, records, bytes, sha256). Dead letters and removed documents alike."""
    data = "".join(json.dumps(r.as_dict(), ensure_ascii=False, sort_keys=True) + "\n" for r in records).encode("utf-8")
    atomic_write(f"{output}/{relative}", data)
    return {
        "path": relative,
        "reason": reason,
        "records": len(records),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _sort_key(d: DeadLetter):
    return (d.source.path, d.source.byte_offset, d.source.line, d.reason, d.doc_id or "", d.detail)


class _WriteReasonFn(beam.DoFn):
    def __init__(self, output: str):
        self._output = output
        self._records = Metrics.counter("dead_letter", "records")

    def process(self, reason_and_letters):
        reason, letters = reason_and_letters
        letters = sorted(letters, key=_sort_key)
        self._records.inc(len(letters))
        yield write_reason_file(self._output, f"{fmt.DEAD_LETTER_DIR}/{reason}.jsonl", reason, letters)


class WriteDeadLetters(beam.PTransform):
    """Group dead letters by reason and write one sorted JSONL file per reason; one result per file."""

    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, dead_letters):
        return (
            dead_letters
            | "KeyByReason" >> beam.Map(lambda d: (d.reason, d))
            | "GroupByReason" >> beam.GroupByKey()
            | "WriteReason" >> beam.ParDo(_WriteReasonFn(self._output))
        )
