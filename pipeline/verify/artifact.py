"""Verify an artifact: checksums, counts, schema and version, and the format's invariants.

    .venv/bin/python -m pipeline.verify ARTIFACT            # local path, gs://, s3://, hdfs://
    .venv/bin/python -m pipeline.verify ARTIFACT --quick    # checksums and sizes only, no row-level checks

Exit status 0 when everything holds, 1 with one line per problem otherwise (a truncated shard,
a flipped byte, a missing file, counts that do not add up, an invariant violated, a symbolic link
or special file anywhere in the artifact), 2 when the artifact cannot be opened at all (no manifest:
incomplete; unknown format version; a manifest that is not the format's JSON, or names a path
leaving the artifact). Never a traceback: damaged and hostile files give one line naming the file.
Nothing is opened through a link; files are listed first (``pipeline.verify.tree``), rows checked per batch
(``pipeline.verify.rows``), the removed records read (``pipeline.verify.removed``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from pipeline.verify import removed as verify_removed
from pipeline.verify.rows import check_shard_rows
from pipeline.verify.tree import Listing, list_artifact, shown
from schemas import commands
from schemas import format as fmt
from schemas import invariants as inv
from schemas import manifest as mf
from schemas.artifact import Artifact, malformed
from schemas.integrity import file_sha256
from schemas.tokenizers.families import word_continuing_ids
from schemas.tokenizers.rust_calls import guarded


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


def _check_file(
    art: Artifact, listing: Listing, relative: str, expected_bytes: int | None, expected_sha: str, report: Report
) -> bool:
    """Size and sha256 of one file the manifest names; only a regular file the listing found is opened."""
    if relative not in listing.files:
        if listing.blocked(relative):
            return False  # a link or special file: reported once by the listing
        what = "a directory, not a file" if relative in listing.directories else "missing"
        report.fail(f"{relative}: {what}")
        return False
    if expected_bytes is not None and listing.files[relative] != expected_bytes:
        report.fail(
            f"{relative}: {listing.files[relative]:,} bytes, manifest says {expected_bytes:,} (truncated or appended to)"
        )
        return False
    try:
        nbytes, sha = file_sha256(art.fs, art.path(relative))
    except OSError as e:
        report.fail(f"{relative}: cannot be read: {fmt.one_line(e)}")
        return False
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


def forbidden_special_ids(manifest: dict[str, Any], tokenizer: Tokenizer | None = None) -> np.ndarray:
    """The special ids no row may hold: ``invariants.forbidden_special_ids`` with tokenizer.json's special added
    tokens when it loaded."""
    added = tokenizer.get_added_tokens_decoder().items() if tokenizer is not None else ()
    return inv.forbidden_special_ids(manifest, [i for i, t in added if t.special])


def _check_tokenizer(art: Artifact, listing: Listing, report: Report) -> Tokenizer | None:
    """tokenizer.json against the manifest; the loaded tokenizer when it loads and has the manifest's vocabulary."""
    tok = art.manifest["tokenizer"]
    name = tok["file"]
    if not _check_file(art, listing, name, None, tok["sha256"], report):
        return None
    try:
        text = art.read_bytes(name).decode("utf-8")
        # tokenizers raises a bare Exception for a file it cannot parse, or panics (rust_calls)
        t = guarded(lambda: Tokenizer.from_str(text), ValueError)
    except UnicodeDecodeError as e:
        report.fail(f"{name}: not UTF-8 (byte {e.start}): {fmt.one_line(e)}")
        return None
    except ValueError as e:
        report.fail(f"{name}: not a tokenizers JSON file: {fmt.one_line(e)}")
        return None
    ok = True
    if t.get_vocab_size(with_added_tokens=True) != tok["vocab_size"]:
        report.fail(f"{name}: vocabulary of {t.get_vocab_size()} differs from the manifest's {tok['vocab_size']}")
        ok = False
    for role, token in tok["special_tokens"].items():
        if t.token_to_id(token) != tok["special_token_ids"][role]:
            report.fail(
                f"{name}: {token!r} has id {t.token_to_id(token)}, manifest says {tok['special_token_ids'][role]}"
            )
    return t if ok else None


def _expected_files(m: dict[str, Any]) -> set[str]:
    tok, uni = m["tokenizer"], m["unigram"]
    return (
        {fmt.MANIFEST_FILE, tok["file"], uni["file"]}
        | {s["path"] for s in m["shards"]}
        | {d["path"] for d in m["dead_letter"]}
        | {d["path"] for d in m.get("removed", [])}
    )


def _check_no_stray_files(listing: Listing, m: dict[str, Any], report: Report) -> None:
    """Every regular file under the artifact is one the manifest lists, or the optional report (report/,
    README.md). Links and special files are the listing's problems."""
    expected = _expected_files(m)
    for relative in sorted(listing.files):
        if relative in expected or relative == fmt.CARD_FILE or relative.startswith(fmt.REPORT_DIR + "/"):
            continue
        if relative == fmt.LOCK_FILE:
            report.fail(
                f"{relative}: a build is still writing this artifact, or was killed before finishing (rebuild with --overwrite)"
            )
        else:
            report.fail(f"{shown(relative)}: not in the manifest (left over from another run, or added later)")
    report.count("files listed", len(listing.files))


def _check_dead_letters(
    art: Artifact, listing: Listing, report: Report, key: str = "dead_letter"
) -> list[tuple[str, int, dict]]:
    """Each dead-letter file (with ``key="removed"``: each file of removed documents, format 2.1): JSON Lines (split
    at \\n only: a preview may hold U+2028), one object per record with a string ``reason``, all of the file's
    reason; a removed document's record also says what the build records (``verify_removed``). Returns the removed
    files' records that passed those checks, (file, line, record), for the checks across files and rows."""
    seen: dict[tuple, str] = {}  # removed documents' sources, across the removed files
    valid: list[tuple[str, int, dict]] = []
    for d in art.manifest.get(key, []):
        path = d["path"]
        if not _check_file(art, listing, path, d["bytes"], d["sha256"], report):
            continue
        lines = art.read_bytes(path).split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        if len(lines) != d["records"]:
            report.fail(f"{path}: {len(lines)} records, manifest says {d['records']}")
        reasons: set[str] = set()
        bad: list[str] = []
        parsed: list[tuple[int, dict]] = []
        for n, raw in enumerate(lines, 1):
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                bad.append(f"line {n}: not UTF-8 (byte {e.start})")
                continue
            except (ValueError, RecursionError) as e:
                bad.append(f"line {n}: not JSON ({fmt.one_line(e, 100)})")
                continue
            if not isinstance(record, dict) or not isinstance(record.get("reason"), str):
                bad.append(f"line {n}: not a dead-letter record (a JSON object with a string reason)")
                continue
            reasons.add(record["reason"])
            parsed.append((n, record))
        report.count("dead letters checked" if key == "dead_letter" else "removed documents checked", len(lines))
        if bad:
            more = f" (and {len(bad) - 1} more bad line(s))" if len(bad) > 1 else ""
            report.fail(f"{path} {bad[0]}{more}")
        if reasons and reasons != {path.rsplit("/", 1)[-1].removesuffix(".jsonl")}:
            report.fail(f"{path}: holds reasons {sorted(reasons)[:5]}")
        elif key == "removed":
            for line in verify_removed.file_problems(path, parsed, art.manifest, seen):
                report.fail(line)
            reason = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
            valid += [(path, n, r) for n, r in parsed if not verify_removed.record_problem(r, reason, art.manifest)]
    return valid


def _check_counts(m: dict[str, Any], report: Report) -> None:
    c = m["counts"]
    if c["documents_written"] == 0:  # an artifact without rows is a failed build, not a dataset
        reasons = ", ".join(f"{k}: {v:,}" for k, v in sorted(c["dead_lettered_by_reason"].items()))
        report.fail(
            f"counts: no document written ({c['documents_read']:,} read, {c['documents_dead_lettered']:,} "
            f"dead-lettered{': ' + reasons if reasons else ''}): the artifact holds no rows"
        )
    removed = {k: c.get(k, 0) for k in ("documents_duplicate", "documents_contaminated")}
    if c["documents_read"] != c["documents_written"] + c["documents_dead_lettered"] + sum(removed.values()):
        report.fail(
            f"counts: documents_read {c['documents_read']:,} != documents_written {c['documents_written']:,} + documents_dead_lettered {c['documents_dead_lettered']:,}"
            + "".join(f" + {k} {v:,}" for k, v in removed.items())
        )
    by_reason = {d["path"].rsplit("/", 1)[-1].removesuffix(".jsonl"): d["records"] for d in m.get("removed", [])}
    for d in m.get("removed", []):
        reason = d["path"].rsplit("/", 1)[-1].removesuffix(".jsonl")
        if reason not in verify_removed.REASONS or d["path"] != f"{fmt.REMOVED_DIR}/{reason}.jsonl":
            report.fail(
                f"{d['path']}: not a removed-documents file of the format ({fmt.REMOVED_DIR}/duplicate.jsonl, "
                f"{fmt.REMOVED_DIR}/contaminated.jsonl): its {d['records']:,} record(s) are in no count"
            )
    for reason in ("duplicate", "contaminated"):
        if by_reason.get(reason, 0) != removed[f"documents_{reason}"]:
            report.fail(
                f"counts: {fmt.REMOVED_DIR}/{reason}.jsonl holds {by_reason.get(reason, 0):,} records, "
                f"documents_{reason} is {removed[f'documents_{reason}']:,}"
            )
    if sum(c["dead_lettered_by_reason"].values()) != c["documents_dead_lettered"]:
        report.fail("counts: dead_lettered_by_reason does not add up to documents_dead_lettered")
    if sum(d["records"] for d in m["dead_letter"]) != c["documents_dead_lettered"]:
        report.fail("counts: dead-letter files hold a different number of records than documents_dead_lettered")
    if sum(i["documents_read"] for i in m["inputs"]) != c["documents_read"]:
        report.fail("counts: inputs' documents_read do not add up to documents_read")
    if sum(s["rows"] for s in m["shards"]) != c["rows"] or sum(s["tokens"] for s in m["shards"]) != c["tokens"]:
        report.fail("counts: shard rows/tokens do not add up to the totals")


def _open(uri: str, listing: Listing, report: Report) -> Artifact | None:
    """The artifact, its manifest's shape checked; None when its manifest.json is a link or special file (reported
    by the listing). Raises FormatError when it cannot be opened (unless links were found: then one more line)."""
    if listing.blocked(fmt.MANIFEST_FILE):
        report.fail(f"{fmt.MANIFEST_FILE}: not read (see above); nothing else was checked")
        return None
    try:
        art = Artifact.open(uri)
        problems = mf.manifest_problems(art.manifest)
        if problems:
            raise fmt.FormatError(malformed(art.display(fmt.MANIFEST_FILE), problems))
    except fmt.FormatError as e:
        if report.ok:
            raise
        report.fail(str(e))
        return None
    return art


def verify(uri: str, quick: bool = False) -> Report:
    """Check everything the manifest promises. Raises FormatError if the artifact cannot be opened."""
    report = Report()
    fs, root = fmt.split_uri(uri.rstrip("/"))
    listing = list_artifact(fs, root)
    for problem in listing.problems():
        report.fail(problem)
    art = _open(uri, listing, report)
    if art is None:
        return report
    m = art.manifest
    tokenizer = _check_tokenizer(art, listing, report)
    uni = m["unigram"]
    unigram_ok = _check_file(art, listing, uni["file"], uni.get("bytes"), uni["sha256"], report)

    expected_names = {s["path"] for s in m["shards"]}
    if len(expected_names) != len(m["shards"]):
        report.fail("manifest lists a shard twice")
    _check_no_stray_files(listing, m, report)
    for i, entry in enumerate(m["shards"]):
        if entry["path"] != fmt.shard_filename(i, len(m["shards"])):
            report.fail(f"{entry['path']}: manifest entry {i} should be {fmt.shard_filename(i, len(m['shards']))}")
    good_shards = [
        i for i, s in enumerate(m["shards"]) if _check_file(art, listing, s["path"], s["bytes"], s["sha256"], report)
    ]
    report.count("shards checksummed", len(good_shards))
    _check_dead_letters(art, listing, report)
    removed = _check_dead_letters(art, listing, report, "removed")
    for line in verify_removed.named_problems(removed) + verify_removed.input_problems(removed, m.get("inputs")):
        report.fail(line)
    _check_counts(m, report)

    if quick or len(good_shards) != len(m["shards"]) or tokenizer is None:
        if not quick:
            fix = "the shards" if len(good_shards) != len(m["shards"]) else m["tokenizer"]["file"]
            report.fail(f"row-level checks skipped: fix {fix} above first")
        return report

    bins = fmt.histogram_bins(m["max_row_tokens"])
    if len(m["row_length_histogram"]["counts"]) != bins:
        report.fail(
            f"{fmt.MANIFEST_FILE}: row_length_histogram has {len(m['row_length_histogram']['counts'])} bins, "
            f"{bins} expected for max_row_tokens {m['max_row_tokens']}"
        )
    totals: dict[str, Any] = {"rows": 0, "tokens": 0, "documents": 0, "histogram": np.zeros(bins, np.int64)}
    totals["watched"], totals["watched_in_rows"] = verify_removed.watched_ids(removed), set()
    unigram = np.zeros(art.vocab_size, dtype=np.int64)
    forbidden = forbidden_special_ids(m, tokenizer)
    continuing = word_continuing_ids(tokenizer)
    complete = [check_shard_rows(art, i, forbidden, report, totals, unigram, continuing) for i in good_shards]
    c = m["counts"]
    if all(complete):  # else the shard's line says why its rows are not all counted
        if m["pack"] == "doc-sentences" and totals["documents"] != c["documents_written"]:
            report.fail(
                f"counts: shards hold {totals['documents']:,} documents, manifest says documents_written {c['documents_written']:,}"
            )
        if "continuation_rows" in c and totals.get("continuation_rows", 0) != c["continuation_rows"]:
            report.fail(
                f"counts: shards hold {totals.get('continuation_rows', 0):,} continuation rows, manifest says "
                f"continuation_rows {c['continuation_rows']:,}"
            )
        if totals["histogram"].tolist() != list(m["row_length_histogram"]["counts"]):
            report.fail("row_length_histogram differs from the row lengths in the shards")
        doc_sentences = m["pack"] == "doc-sentences"
        for line in verify_removed.row_problems(removed, totals["watched_in_rows"], doc_sentences):
            report.fail(line)
    if unigram_ok:
        try:
            counts = art.unigram_counts()
        except fmt.FormatError as e:
            report.fail(str(e))
            return report
        if all(complete) and not np.array_equal(counts, unigram):
            report.fail(
                f"{uni['file']}: counts differ from the tokens in the shards at {int((counts != unigram).sum())} ids"
            )
        if int(counts.sum()) != uni["total"]:
            report.fail(f"{uni['file']}: total {int(counts.sum())} != manifest {uni['total']}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=commands.module("pipeline.verify"), description=__doc__.split("\n\n")[0])
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
