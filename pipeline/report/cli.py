"""Show an artifact: plots and ``report/index.html``, and a dataset card ``README.md``.

This is the command line of ``.venv/bin/python -m pipeline.report`` (see the package docstring for what it reads and
writes).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pipeline.report.common import DEFAULT_EXAMPLES, DEFAULT_MAX_ROWS, ReportError
from pipeline.report.writer import write_report
from schemas import commands
from schemas import format as fmt


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=commands.module("pipeline.report"), description=__doc__.split("\n\n")[0])
    p.add_argument("artifact", help="artifact directory or URI (gs://, s3://, hdfs://)")
    p.add_argument(
        "--license",
        default=None,
        help="licence of this dataset for the card (a Hugging Face licence id, e.g. cc-by-sa-3.0); default: unknown",
    )
    p.add_argument(
        "--source-license",
        "--source_license",
        dest="source_license",
        default=None,
        help="the licence terms of the sources, as text for the card",
    )
    p.add_argument(
        "--pretty-name",
        "--pretty_name",
        dest="pretty_name",
        default=None,
        help="dataset name (default: the directory name)",
    )
    p.add_argument(
        "--language", default=None, help="ISO 639-1 code for the card (default: from the build's --language)"
    )
    p.add_argument(
        "--max-rows",
        "--max_rows",
        dest="max_rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        help=f"read at most about this many rows for the statistics; larger artifacts are sampled (default {DEFAULT_MAX_ROWS:,})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of the example rows (default 0)")
    p.add_argument(
        "--examples", type=int, default=DEFAULT_EXAMPLES, help=f"example rows to show (default {DEFAULT_EXAMPLES})"
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    return p


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` and write the report; raises FormatError on a missing, incomplete or unreadable artifact."""
    a = build_parser().parse_args(argv)
    progress = (lambda msg: None) if a.quiet else (lambda msg: print(f"report: {msg}", file=sys.stderr, flush=True))
    return write_report(
        a.artifact,
        license=a.license,
        source_license=a.source_license,
        pretty_name=a.pretty_name,
        language=a.language,
        max_rows=a.max_rows,
        seed=a.seed,
        examples=max(0, a.examples),
        progress=progress,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        result = run(argv)
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 1
    except fmt.FormatError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    print(result["index"])
    print(result["card"])
    return 0
