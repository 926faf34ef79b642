"""Verify an artifact: checksums, counts, schema and version, and the format's invariants.

    python -m pipeline.verify ARTIFACT            # local path, gs://, s3://, hdfs://
    python -m pipeline.verify ARTIFACT --quick    # checksums and sizes only, no row-level checks

Exit status 0 when everything holds, 1 with one line per problem otherwise (a truncated shard,
a flipped byte, a missing file, counts that do not add up, an invariant violated), 2 when the
artifact cannot be opened at all (no manifest: incomplete; unknown format version).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
from tokenizers import Tokenizer

from schemas import format as fmt
from schemas import invariants as inv
from schemas.artifact import Artifact
from schemas.integrity import file_sha256


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    def fail(self, message: str) -> None:
        self.problems.append(message)

    def count(self, what: str, n: int = 1) -> None:
        self.checked[what] = self.checked.get(what, 0) + n

    @property
    def ok(self) -> bool:
        return not self.problems


def _check_file(art: Artifact, relative: str, expected_bytes: int | None, expected_sha: str, report: Report) -> bool:
    if art.fs.get_file_info(art.path(relative)).type != pafs.FileType.File:
        report.fail(f"{relative}: missing")
        return False
    nbytes, sha = file_sha256(art.fs, art.path(relative))
    report.count("files checksummed")
    if expected_bytes is not None and nbytes != expected_bytes:
        report.fail(f"{relative}: {nbytes:,} bytes, manifest says {expected_bytes:,} (truncated or appended to)")
        return False
    if sha != expected_sha:
        report.fail(
            f"{relative}: sha256 {sha} differs from the manifest's {expected_sha} (the file was modified or corrupted)"
        )
        return False
    return True


def _list_parts(batch: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
    arr = batch.column(name)
    offsets = arr.offsets.to_numpy()
    return offsets, arr.values.to_numpy(zero_copy_only=False)


# Special tokens a row may hold: [UNK] stands for unknown text (WikiText's <unk>); full-sentences packing
# puts [SEP] between documents. Everything else ([PAD], [CLS], [MASK], [SEP] otherwise) is the trainer's.
ALLOWED_SPECIAL = {"doc-sentences": ("unk",), "full-sentences": ("unk", "sep")}


def forbidden_special_ids(manifest: dict) -> list[int]:
    allowed = ALLOWED_SPECIAL.get(manifest["pack"], ("unk",))
    return sorted(
        i for name, i in manifest["tokenizer"]["special_token_ids"].items() if name not in allowed and i is not None
    )


def _expected_files(m: dict) -> set[str]:
    tok, uni = m["tokenizer"], m["unigram"]
    return (
        {fmt.MANIFEST_FILE, tok["file"], uni["file"]}
        | {s["path"] for s in m["shards"]}
        | {d["path"] for d in m["dead_letter"]}
    )


def _check_no_stray_files(art: Artifact, m: dict, report: Report) -> None:
    """Every file under the artifact is one the manifest lists, or the optional report (report/, README.md)."""
    expected = _expected_files(m)
    root = art.path("").rstrip("/")
    try:
        infos = art.fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except FileNotFoundError:
        return
    n = 0
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        n += 1
        relative = info.path[len(root) + 1 :]
        if relative in expected or relative == fmt.CARD_FILE or relative.startswith(fmt.REPORT_DIR + "/"):
            continue
        if relative == fmt.LOCK_FILE:
            report.fail(
                f"{relative}: a build is still writing this artifact, or was killed before finishing (rebuild with --overwrite)"
            )
        else:
            report.fail(f"{relative}: not in the manifest (left over from another run, or added later)")
    report.count("files listed", n)


def _check_shard_rows(
    art: Artifact, index: int, entry: dict, report: Report, totals: dict, unigram: np.ndarray
) -> None:
    m = art.manifest
    relative = entry["path"]
    limit = m["max_row_tokens"]
    num_shards = len(m["shards"])
    vocab = art.vocab_size
    try:
        reader = art.open_shard(relative)
    except fmt.FormatError as e:
        report.fail(str(e))
        return
    rows = tokens = 0
    prev_doc: str | None = None
    prev_seq = -1
    doc_sentences = m["pack"] == "doc-sentences"
    forbidden = np.array(forbidden_special_ids(m), dtype=np.int64)
    for b in range(reader.num_record_batches):
        try:
            batch = reader.get_batch(b)
        except (pa.ArrowInvalid, OSError) as e:
            report.fail(f"{relative}: record batch {b} unreadable: {e}")
            return
        where = f"{relative} batch {b}"
        last = b == reader.num_record_batches - 1
        if (
            batch.num_rows > fmt.ROWS_PER_BATCH
            or batch.num_rows == 0
            or (not last and batch.num_rows != fmt.ROWS_PER_BATCH)
        ):
            report.fail(
                f"{where}: {batch.num_rows} rows; every batch but a shard's last must hold exactly {fmt.ROWS_PER_BATCH}"
            )
        offsets, ids = _list_parts(batch, "input_ids")
        lengths = np.diff(offsets)
        rows += batch.num_rows
        tokens += int(lengths.sum())
        report.count("rows checked", batch.num_rows)
        bad_length = inv.empty_rows(lengths) | inv.rows_too_long(lengths, limit)
        if bad_length.any():
            report.fail(f"{where}: row lengths outside 1..{limit}: {sorted(set(lengths[bad_length].tolist()))[:5]}")
        top = inv.token_id_beyond_vocab(ids, vocab)
        if top is not None:
            report.fail(f"{where}: token id {top} >= vocabulary size {vocab}")
        smuggled = np.isin(ids, forbidden)
        report.count("tokens checked for special ids", int(ids.size))
        if smuggled.any():
            found = sorted(set(ids[smuggled].tolist()))
            report.fail(
                f"{where}: {int(smuggled.sum())} special token id(s) {found} inside rows (rows hold text only; FORMAT.md)"
            )
        unigram += np.bincount(ids.astype(np.int64), minlength=vocab)[:vocab]
        for col in ("word_start", "sentence_start"):
            o2, flags = _list_parts(batch, col)
            if not inv.flags_align(offsets, o2):
                report.fail(f"{where}: {col} lengths differ from input_ids lengths")
                continue
            firsts = flags[offsets[:-1][lengths > 0]]
            if col == "word_start" and not firsts.all():
                report.fail(f"{where}: {int((~firsts).sum())} row(s) do not start at a word start")
        _, word_start = _list_parts(batch, "word_start")
        for kind, col in fmt.CANDIDATE_KINDS.items():
            arr = batch.column(col)
            span_offsets = arr.offsets.to_numpy()
            starts = arr.values.field("start").to_numpy()
            ends = arr.values.field("end").to_numpy()
            if not starts.size:
                continue
            report.count(f"{kind} spans checked", int(starts.size))
            row_of = np.repeat(np.arange(batch.num_rows), np.diff(span_offsets))
            bad = inv.spans_outside_rows(starts, ends, row_of, lengths)
            if bad.any():
                report.fail(f"{where}: {int(bad.sum())} {kind} span(s) outside their row")
                continue
            base = offsets[row_of]
            at_end = ends == lengths[row_of]
            ok_start = word_start[base + starts]
            ok_end = at_end | word_start[np.minimum(base + ends, len(word_start) - 1)]
            if not (ok_start & ok_end).all():
                report.fail(f"{where}: {int((~(ok_start & ok_end)).sum())} {kind} span(s) not on word boundaries")
        doc_ids = batch.column("doc_id").to_pylist()
        seqs = batch.column("seq_index").to_numpy()
        for doc_id, seq in zip(doc_ids, seqs.tolist()):
            if fmt.shard_of(doc_id, num_shards) != index:
                report.fail(f"{where}: document {doc_id!r} does not belong in shard {index}")
                return
            if prev_doc is not None and doc_id < prev_doc:
                report.fail(f"{where}: rows not sorted by doc_id ({prev_doc!r} before {doc_id!r})")
                return
            if doc_sentences:
                if doc_id != prev_doc or seq == 0:
                    if seq != 0:
                        report.fail(f"{where}: document {doc_id!r} starts at seq_index {seq}, not 0")
                        return
                    totals["documents"] += 1
                elif seq != prev_seq + 1:
                    report.fail(f"{where}: document {doc_id!r}: seq_index {seq} follows {prev_seq}")
                    return
            prev_doc, prev_seq = doc_id, seq
        hist_idx = (lengths[lengths > 0] - 1) // fmt.HISTOGRAM_BIN_WIDTH
        np.add.at(totals["histogram"], np.minimum(hist_idx, len(totals["histogram"]) - 1), 1)
    if rows != entry["rows"]:
        report.fail(f"{relative}: {rows:,} rows, manifest says {entry['rows']:,}")
    if tokens != entry["tokens"]:
        report.fail(f"{relative}: {tokens:,} tokens, manifest says {entry['tokens']:,}")
    totals["rows"] += rows
    totals["tokens"] += tokens


def verify(uri: str, quick: bool = False) -> Report:
    """Check everything the manifest promises. Raises FormatError if the artifact cannot be opened."""
    art = Artifact.open(uri)
    m = art.manifest
    report = Report()
    tok = m["tokenizer"]
    if _check_file(art, tok["file"], None, tok["sha256"], report):
        t = Tokenizer.from_str(art.tokenizer_json())
        if t.get_vocab_size(with_added_tokens=True) != tok["vocab_size"]:
            report.fail(
                f"{tok['file']}: vocabulary of {t.get_vocab_size()} differs from the manifest's {tok['vocab_size']}"
            )
        for name, token in tok["special_tokens"].items():
            if t.token_to_id(token) != tok["special_token_ids"][name]:
                report.fail(
                    f"{tok['file']}: {token} has id {t.token_to_id(token)}, manifest says {tok['special_token_ids'][name]}"
                )
    uni = m["unigram"]
    unigram_ok = _check_file(art, uni["file"], uni.get("bytes"), uni["sha256"], report)

    expected_names = {s["path"] for s in m["shards"]}
    if len(expected_names) != len(m["shards"]):
        report.fail("manifest lists a shard twice")
    _check_no_stray_files(art, m, report)
    for i, entry in enumerate(m["shards"]):
        if entry["path"] != fmt.shard_filename(i, len(m["shards"])):
            report.fail(f"{entry['path']}: manifest entry {i} should be {fmt.shard_filename(i, len(m['shards']))}")
    good_shards = [i for i, s in enumerate(m["shards"]) if _check_file(art, s["path"], s["bytes"], s["sha256"], report)]
    report.count("shards checksummed", len(good_shards))

    for d in m["dead_letter"]:
        if _check_file(art, d["path"], d["bytes"], d["sha256"], report):
            lines = art.read_bytes(d["path"]).decode("utf-8").splitlines()
            if len(lines) != d["records"]:
                report.fail(f"{d['path']}: {len(lines)} records, manifest says {d['records']}")
            reasons = {json.loads(line)["reason"] for line in lines}
            report.count("dead letters checked", len(lines))
            if reasons and reasons != {d["path"].rsplit("/", 1)[1].removesuffix(".jsonl")}:
                report.fail(f"{d['path']}: holds reasons {sorted(reasons)}")

    c = m["counts"]
    if c["documents_read"] != c["documents_written"] + c["documents_dead_lettered"]:
        report.fail(
            f"counts: documents_read {c['documents_read']:,} != documents_written {c['documents_written']:,} + documents_dead_lettered {c['documents_dead_lettered']:,}"
        )
    if sum(c["dead_lettered_by_reason"].values()) != c["documents_dead_lettered"]:
        report.fail("counts: dead_lettered_by_reason does not add up to documents_dead_lettered")
    if sum(d["records"] for d in m["dead_letter"]) != c["documents_dead_lettered"]:
        report.fail("counts: dead-letter files hold a different number of records than documents_dead_lettered")
    if sum(i["documents_read"] for i in m["inputs"]) != c["documents_read"]:
        report.fail("counts: inputs' documents_read do not add up to documents_read")
    if sum(s["rows"] for s in m["shards"]) != c["rows"] or sum(s["tokens"] for s in m["shards"]) != c["tokens"]:
        report.fail("counts: shard rows/tokens do not add up to the totals")

    if quick or len(good_shards) != len(m["shards"]):
        if not quick:
            report.fail("row-level checks skipped: fix the shards above first")
        return report

    totals: dict[str, Any] = {
        "rows": 0,
        "tokens": 0,
        "documents": 0,
        "histogram": np.zeros(len(m["row_length_histogram"]["counts"]), np.int64),
    }
    unigram = np.zeros(art.vocab_size, dtype=np.int64)
    for i in good_shards:
        _check_shard_rows(art, i, m["shards"][i], report, totals, unigram)
    if m["pack"] == "doc-sentences" and totals["documents"] != c["documents_written"]:
        report.fail(
            f"counts: shards hold {totals['documents']:,} documents, manifest says documents_written {c['documents_written']:,}"
        )
    if totals["histogram"].tolist() != list(m["row_length_histogram"]["counts"]):
        report.fail("row_length_histogram differs from the row lengths in the shards")
    if unigram_ok:
        try:
            counts = art.unigram_counts()
            if not np.array_equal(counts, unigram):
                report.fail(
                    f"{uni['file']}: counts differ from the tokens in the shards at {int((counts != unigram).sum())} ids"
                )
            if int(counts.sum()) != uni["total"]:
                report.fail(f"{uni['file']}: total {int(counts.sum())} != manifest {uni['total']}")
        except (fmt.FormatError, pa.ArrowInvalid) as e:
            report.fail(f"{uni['file']}: {e}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", help="artifact directory or URI")
    parser.add_argument("--quick", action="store_true", help="checksums, sizes and counts only")
    args = parser.parse_args(argv)
    try:
        report = verify(args.artifact, quick=args.quick)
    except fmt.FormatError as e:
        print(f"verify: {e}", file=sys.stderr)
        return 2
    checked = ", ".join(f"{v:,} {k}" for k, v in report.checked.items())
    if report.ok:
        print(f"OK {args.artifact}: {checked}")
        return 0
    for p in report.problems:
        print(f"FAIL {args.artifact}: {p}", file=sys.stderr)
    print(f"{len(report.problems)} problem(s); checked {checked}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    from pipeline.quick_exit import quick_exit

    quick_exit(main())
