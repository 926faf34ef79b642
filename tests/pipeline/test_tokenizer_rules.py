"""The tokenizer side of issue 21 on real text: the job never writes rows its own verify rejects (words longer
than a row, special ids from literal text, tokenizers it cannot handle), and sentence starts stay exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import verify
from schemas.artifact import Artifact
from tests.conftest import WIKITEXT2_BUILD, build, wikitext2


@pytest.mark.parametrize("pack", ["doc-sentences", "full-sentences"])
def test_a_word_longer_than_a_row_dead_letters_its_document_and_the_artifact_verifies(tmp_path, pack):
    out = tmp_path / "a"
    manifest = build(wikitext2("valid"), out, *WIKITEXT2_BUILD, "--max-seq-len", "8", "--pack", pack)
    c = manifest["counts"]
    # WikiText-2's 'cephalothorax' alone is 7 WordPieces of this vocabulary: more than the 6 a row holds
    assert c["dead_lettered_by_reason"].get("word_too_long", 0) > 0
    assert c["documents_read"] == c["documents_written"] + c["documents_dead_lettered"]
    report = verify.verify(str(out))
    assert report.ok, report.problems
    assert report.checked["rows checked"] > 0
    letters = [json.loads(line) for line in (out / "dead_letter" / "word_too_long.jsonl").read_text().splitlines()]
    assert len(letters) == c["dead_lettered_by_reason"]["word_too_long"]
    assert all("tokens, more than a row holds (6" in d["detail"] for d in letters)
    # every written row starts at a word start, and no written word is longer than a row
    art = Artifact.open(str(out))
    words = 0
    for entry in art.manifest["shards"]:
        table = art.open_shard(entry["path"]).read_all()
        for ws in table.column("word_start").to_pylist():
            assert ws[0]
            starts = np.flatnonzero(np.append(ws, True))
            assert np.diff(starts).max() <= 6
            words += len(starts) - 1
    assert words > 10_000
