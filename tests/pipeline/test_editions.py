"""Books in several editions (issue 35's Gutenberg-style corpus, from real text): WikiText-2 articles as books, each
edition re-wrapped at its own width between its own Project-Gutenberg-like header and footer, one with 1.5% of its
words respelt, one with its chapters reordered. ``--dedup near`` finds every later edition of a book and no other
book; the similarities are the exact Jaccard; counts add up; verify accepts the artifact."""

from __future__ import annotations

import json
from itertools import combinations

from pipeline import verify
from pipeline.dedup import text
from tests.conftest import build, wikitext2
from tests.support.editions import books, edition

SHINGLE, THRESHOLD = 5, 0.8


def test_later_editions_of_a_book_are_found_and_other_books_are_not(tmp_path, capsys):
    found = [b for b in books(wikitext2("valid")) if sum(len(c.split()) for c in b[1]) >= 1500][:8]  # not pamphlets
    docs = []
    for b, (title, chapters) in enumerate(found):
        docs.append({"id": f"book{b}-ed1", "text": edition(title, chapters, seed=10 * b + 1, width=70)})
        if b < 4:
            docs.append({"id": f"book{b}-ed2", "text": edition(title, chapters, 10 * b + 2, 60, respelt=0.015)})
            docs.append({"id": f"book{b}-ed3", "text": edition(title, chapters, 10 * b + 3, 76, reorder=True)})
    corpus = tmp_path / "editions.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    shingles = {d["id"]: text.shingle_set(text.words(d["text"]), SHINGLE) for d in docs}
    exact = {(a, b): text.jaccard(shingles[a], shingles[b]) for a, b in combinations(sorted(shingles), 2)}
    copies = {b for (a, b), s in exact.items() if s >= THRESHOLD}  # one pass: each with a smaller copy goes
    assert copies == {f"book{b}-ed{e}" for b in range(4) for e in (2, 3)}
    assert max(s for (a, b), s in exact.items() if a[:5] != b[:5]) < 0.1  # other books share only boilerplate
    m = build(corpus, tmp_path / "out", "--train-tokenizer", "--vocab-size", "4000", "--num-shards", "2",
              "--dedup", "near")  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "out/removed/duplicate.jsonl").read_text().splitlines()]
    assert sorted(r["doc_id"] for r in records) == [f"book{b}-ed{e}" for b in range(4) for e in (2, 3)]
    for r in records:
        kept = r["duplicate_of"]["doc_id"]
        assert kept[:5] == r["doc_id"][:5] and kept < r["doc_id"] and r["method"] == "near"
        assert r["similarity"] == round(exact[kept, r["doc_id"]], 6) >= THRESHOLD
    c = m["counts"]
    assert (c["documents_read"], c["documents_duplicate"], c["documents_written"]) == (16, 8, 8)
    assert c["documents_read"] == c["documents_written"] + c["documents_dead_lettered"] + c["documents_duplicate"]
    assert verify.main([str(tmp_path / "out")]) == 0, capsys.readouterr()
