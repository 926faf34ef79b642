"""GLUE-style TSV files -> examples, with every rejected row counted and kept (nothing dropped silently).

A file is read with the layout its task declares (``trainer.finetuning.tasks``): tab-separated, no quoting
(GLUE's convention: quotes are text), the exact declared header when the task has one (otherwise the file
is refused with one clear line), and ``num_columns`` columns per row. Files are UTF-8; a UTF-8 byte order mark
at the start is skipped (GLUE's MRPC files have one; any TSV may), a UTF-16 one is refused with one line, and a
line that is not UTF-8 is a bad row (``not_utf8``). A row with another number of columns,
a label outside the task's label set, an unparsable or out-of-range score, or an empty text is a *bad row*:
it is not used, and :class:`BadRows` records it (file, line, reason, the row's start), so the run reports
``read == used + bad`` per file.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field

from trainer.finetuning.tasks import Task


class DataError(ValueError):
    """A data file cannot be used at all (missing, wrong header, not the declared format)."""


@dataclass
class Example:
    """One GLUE example: ``label`` is the class id (classification) or the score (regression)."""

    uid: str
    text_a: str
    text_b: str | None
    label: int | float


@dataclass
class BadRows:
    """Rejected input rows of one split: counts by reason and the records (for RUN_DIR/bad_rows.jsonl)."""

    read: int = 0
    used: int = 0
    records: list[dict] = field(default_factory=list)

    def add(self, source: str, line: int | str, reason: str, detail: str = "", *, kept: bool = False) -> None:
        """``kept``: the row is still used (a dev question that is scored although it has a problem)."""
        record: dict = {"source": source, "line": line, "reason": reason, "detail": detail[:200]}
        if kept:
            record["kept"] = True
        self.records.append(record)

    @property
    def bad(self) -> int:
        """Rows not used (``read == used + bad``); ``kept`` records are used and counted in ``flagged``."""
        return sum(not r.get("kept") for r in self.records)

    @property
    def flagged(self) -> int:
        return sum(bool(r.get("kept")) for r in self.records)

    def summary(self) -> dict:
        return {
            "read": self.read,
            "used": self.used,
            "bad": self.bad,
            "by_reason": dict(sorted(Counter(r["reason"] for r in self.records if not r.get("kept")).items())),
            **(
                {
                    "used_with_problems": dict(
                        sorted(Counter(r["reason"] for r in self.records if r.get("kept")).items())
                    )
                }
                if self.flagged
                else {}
            ),
        }

    def check(self) -> None:
        if self.read != self.used + self.bad:
            raise AssertionError(f"row accounting broken: read {self.read} != used {self.used} + bad {self.bad}")


def read_tsv(task: Task, path: str, split: str) -> tuple[list[Example], BadRows]:
    """All good rows of ``path`` as examples (file order) and the bad ones."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file ({task.name} {split} split)")
    bad = BadRows()
    examples: list[Example] = []
    label_ids = {name: i for i, name in enumerate(task.labels)}
    lines = _lines(path)
    start = 0
    if task.header is not None:
        if not lines or lines[0] is None:
            raise DataError(f"{path}:1: no header line (not UTF-8 or an empty file); {task.name} declares one")
        got = tuple(lines[0].rstrip("\r").split("\t"))
        if got != task.header:
            raise DataError(f"{path}:1: header {list(got)} is not {task.name}'s declared header {list(task.header)}")
        start = 1
    for number, raw in enumerate(lines[start:], start=start + 1):
        bad.read += 1
        if raw is None:
            bad.add(path, number, "not_utf8", "the line is not valid UTF-8")
            continue
        row = raw.rstrip("\r").split("\t")
        if len(row) != task.num_columns:
            bad.add(path, number, "wrong_column_count", f"{len(row)} columns, expected {task.num_columns}: {raw}")
            continue
        text_a = row[task.text_a].strip()
        text_b = row[task.text_b].strip() if task.text_b is not None else None
        if not text_a or (task.text_b is not None and not text_b):
            bad.add(path, number, "empty_text", raw)
            continue
        value = row[task.label].strip()
        if task.kind == "classification":
            if value not in label_ids:
                bad.add(path, number, "unknown_label", f"{value!r} not in {list(task.labels)}")
                continue
            label: int | float = label_ids[value]
        else:
            try:
                label = float(value)
            except ValueError:
                bad.add(path, number, "bad_score", f"{value!r} is not a number")
                continue
            lo, hi = task.value_range or (float("-inf"), float("inf"))
            if not lo <= label <= hi:
                bad.add(path, number, "score_out_of_range", f"{label} not in [{lo}, {hi}]")
                continue
        examples.append(Example(uid=f"{split}-{number}", text_a=text_a, text_b=text_b, label=label))
        bad.used += 1
    bad.check()
    return examples, bad


UTF8_BOM = b"\xef\xbb\xbf"
OTHER_BOMS = {b"\xff\xfe": "UTF-16 little-endian", b"\xfe\xff": "UTF-16 big-endian"}


def _lines(path: str) -> list[str | None]:
    """The file's lines without their "\\n" (a final newline ends the last line); None for a line that is not
    UTF-8. A UTF-8 byte order mark at the start is skipped (GLUE's MRPC files have one); a UTF-16 one is refused."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    for bom, name in OTHER_BOMS.items():
        if data.startswith(bom):
            raise DataError(f"{path}:1: starts with a {name} byte order mark; save the file as UTF-8")
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()  # the final newline
    out: list[str | None] = []
    for line in raw:
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(None)
    return out


def write_bad_rows(path: str, splits: dict[str, BadRows]) -> None:
    """All bad rows of all splits, one JSON record a line (an empty file when there are none)."""
    with open(path, "w", encoding="utf-8") as f:
        for split, bad in splits.items():
            for record in bad.records:
                f.write(json.dumps({"split": split, **record}, ensure_ascii=False, sort_keys=True) + "\n")
