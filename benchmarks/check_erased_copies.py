"""Copies with soft hyphens are removed (issue 42's "done when"; not timed): the whole Wikipedia sample plus copies
of 100 of its pages with a soft hyphen (U+00AD) inserted into 5% of their words (of 4 letters or more, after the
second letter), built with ``--dedup exact`` and with ``--dedup near``.

    .venv/bin/python -m benchmarks.check_erased_copies [--copies 100] [--docs N]

Checks and prints: every copy's ids under the artifact's tokenizer (a WordPiece trained by the first build) are its
original's; ``exact`` removes exactly the copies, each naming its original; ``near`` removes the copies and what it
removes from the sample alone (a build of the sample without copies), nothing else. Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sys
import tempfile
from pathlib import Path

import zstandard
from tokenizers import Tokenizer

from pipeline import build_shards

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikipedia-en-sample" / "pages.jsonl.zst"
_WORD = re.compile(r"[^\W\d_]{4,}")


def _build(corpus: Path, out: Path, *extra: str) -> dict:
    argv = ["--input", str(corpus), "--output", str(out), "--runner", "FnApiRunner", "--num-shards", "4", *extra]
    return build_shards.run(argv)


def _removed(out: Path) -> dict[str, str]:
    path = out / "removed" / "duplicate.jsonl"
    if not path.exists():
        return {}
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {r["doc_id"]: r["duplicate_of"]["doc_id"] for r in recs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=100)
    parser.add_argument("--docs", type=int, default=None, help="first N pages of the sample (default: all)")
    args = parser.parse_args(argv)
    with SAMPLE.open("rb") as f:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        pages = [{"id": p["id"], "text": p["text"]} for p in map(json.loads, lines)][: args.docs]
    rng = random.Random(42)
    chosen = sorted(rng.sample(range(len(pages)), args.copies))

    def hyphenated(body: str) -> str:
        return _WORD.sub(lambda m: m[0][:2] + "\u00ad" + m[0][2:] if rng.random() < 0.05 else m[0], body)

    copies = [{"id": f"copy/{pages[i]['id']}", "text": hyphenated(pages[i]["text"])} for i in chosen]
    inserted = sum(c["text"].count("\u00ad") for c in copies)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain, both = root / "sample.jsonl", root / "with_copies.jsonl"
        plain.write_text("".join(json.dumps(p) + "\n" for p in pages), encoding="utf-8")
        both.write_text("".join(json.dumps(p) + "\n" for p in pages + copies), encoding="utf-8")
        m = _build(both, root / "exact", "--train-tokenizer", "--vocab-size", "8000", "--dedup", "exact")
        tok_path = root / "exact" / m["tokenizer"]["file"]
        tok = Tokenizer.from_file(str(tok_path))
        same_ids = sum(
            tok.encode(c["text"], add_special_tokens=False).ids
            == tok.encode(pages[i]["text"], add_special_tokens=False).ids
            for c, i in zip(copies, chosen)
        )
        print(f"{len(pages)} pages, {len(copies)} copies holding {inserted} soft hyphens; {same_ids} copies have "
              f"their original's ids")  # fmt: skip
        ok &= same_ids == len(copies)
        expected = {c["id"]: pages[i]["id"] for c, i in zip(copies, chosen)}
        removed = _removed(root / "exact")
        print(f"exact: {len(removed)} removed, exactly the copies naming their originals: {removed == expected}")
        ok &= removed == expected
        _build(plain, root / "near_plain", "--tokenizer", str(tok_path), "--dedup", "near")
        _build(both, root / "near", "--tokenizer", str(tok_path), "--dedup", "near")
        alone, near = _removed(root / "near_plain"), _removed(root / "near")
        extra = {k: v for k, v in near.items() if k not in expected}
        print(f"near: {len(near)} removed: {sum(near.get(k) == v for k, v in expected.items())} of the copies naming "
              f"their originals, {len(extra)} others, the sample alone removes {len(alone)}: same: {extra == alone}")  # fmt: skip
        ok &= all(near.get(k) == v for k, v in expected.items()) and extra == alone
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
