"""A slice of the Wikipedia sample built with another artifact's tokenizer: the second source of the mixture tests
(tests/trainer/test_mixture.py, tests/e2e/test_mixture_training.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WIKIPEDIA_SAMPLE = REPO.parent / "shared" / "data" / "wikipedia-en-sample" / "pages.jsonl.zst"
WIKIPEDIA_ARTICLES = 120  # ~630 rows of up to 510 tokens, built in seconds


def wikipedia_slice(directory: Path, tokenizer_json: Path, *extra: str) -> Path:
    """Artifact ``directory/artifact`` of the sample's first articles tokenized with ``tokenizer_json``; skips
    when ../shared is absent."""
    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE} (../shared is absent on this machine)")
    import zstandard

    from pipeline import build_shards

    lines = []
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8"):
            lines.append(line)
            if len(lines) == WIKIPEDIA_ARTICLES:
                break
    (directory / "pages.jsonl").write_text("".join(lines), encoding="utf-8")
    out = directory / "artifact"
    build_shards.run(
        ["--input", str(directory / "pages.jsonl"), "--output", str(out), "--runner", "FnApiRunner"]
        + ["--tokenizer", str(tokenizer_json), "--num-shards", "4", *extra]
    )
    return out
