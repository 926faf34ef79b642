"""The report page and dataset card show what --dedup and --decontaminate left out (issue 35), with the manifest's
figures; an artifact built without them says nothing about them."""

from __future__ import annotations

import json

from pipeline import verify
from pipeline.dedup import text
from pipeline.report import removals
from tests.conftest import DEMO_CORPUS, build


def test_page_and_card_show_duplicates_and_evaluation_overlap(tmp_path, capsys):
    docs = [json.loads(line) for line in DEMO_CORPUS.read_text(encoding="utf-8").splitlines()]
    corpus = tmp_path / "corpus.jsonl"
    copies = [{"id": "zz-copy", "text": docs[1]["text"].upper()}]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs + copies), encoding="utf-8")
    evals = tmp_path / "eval.jsonl"
    passage = " ".join(docs[6]["text"].split()[:20])
    evals.write_text(json.dumps({"id": "e1", "text": passage}) + "\n")
    grams = len(text.words(passage)) - 12  # every 13-gram of the passage is in the corpus
    out = tmp_path / "artifact"
    m = build(corpus, out, "--train-tokenizer", "--vocab-size", "2000", "--num-shards", "2", "--dedup", "exact",
              "--decontaminate", str(evals), "--report")  # fmt: skip
    c = m["counts"]
    assert (c["documents_duplicate"], c["documents_contaminated"]) == (1, 1)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Duplicates and evaluation-set overlap" in card
    assert "Duplicates (`--dedup exact`): 1 documents left out as copies" in card
    assert f"| eval.jsonl | 1 | 1 | 0 | {grams} of {grams} | 1 |" in card and grams > 0
    assert "| `documents_duplicate` | 1 |" in card and "| `documents_contaminated` | 1 |" in card
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert "<h2>Duplicates and evaluation overlap</h2>" in page and "documents left out as duplicates" in page
    assert verify.main([str(out)]) == 0, capsys.readouterr().err


def test_without_dedup_the_card_says_no_deduplication_was_done(demo_artifact):
    m = json.loads((demo_artifact / "manifest.json").read_text())
    assert not removals.checked(m)
    assert removals.dedup_line(m) == "Duplicates: not looked for (`--dedup off`)."
