"""Evaluation text written otherwise than the corpus writes it (issue 35; review D6): Penn-Treebank-tokenized sets
(SST-2) must still be found in a corpus holding their sentences as people write them, and so must text in scripts
written without spaces (review D11)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline import contamination
from pipeline.dedup import overlap, text
from pipeline.dedup.eval_sets import read_eval_file, undo_ptb
from tests.conftest import DEMO_CORPUS, SHARED_DATA, build

SST2_DEV = SHARED_DATA / "finetune" / "glue_sst2" / "dev.tsv"


def _natural(sentence: str) -> str:
    """An SST-2 sentence (lower-cased, PTB-tokenized) as a review would print it: contractions and clitics attached
    with a typographic apostrophe, quotes curly, punctuation attached, a capital first letter."""
    s = re.sub(r" (?=(?:n't|'s|'re|'ll|'ve|'m|'d)\b)", "", " " + sentence.strip() + " ")
    s = re.sub(r"(?<=\w)'(?=\w)", "\u2019", s)
    s = re.sub(r"`` ?", "\u201c", s)
    s = re.sub(r" ?''", "\u201d", s)
    s = re.sub(r" ([,.;:!?%)])", r"\1", s)
    s = re.sub(r"([($]) ", r"\1", s).strip()
    return s[:1].upper() + s[1:]


def _sst2_with_nt() -> list[tuple[str, str]]:
    """(example id, sentence) of the SST-2 dev sentences with a PTB ``n't`` and at least 13 words once undone."""
    if not SST2_DEV.exists():
        pytest.skip(f"real data not available: {SST2_DEV}")
    lines = SST2_DEV.read_text(encoding="utf-8").splitlines()
    picked = [(f"line {n}", line.split("\t")[0]) for n, line in enumerate(lines[1:], 2) if " n't " in line]
    return [(i, s) for i, s in picked if len(text.words(undo_ptb(s))) >= 13]


def test_ptb_splits_other_than_nt_and_brackets_already_give_the_corpus_words():
    """Apostrophes, quotes and brackets separate words, so only `` n't``, the bracket tokens and ``gon na``-like
    splits need undoing (eval_sets.undo_ptb); the natural forms below are what a corpus holds."""
    same = [
        ("john 's car , they 're here , we 'll see , i 've , i 'm , he 'd", "John's car, they're here, we'll see, I've, I'm, he'd"),
        ("`` a title '' -- said he ...", "\u201cA title\u201d\u2014said he\u2026"),
        ("it 's `` great ''", 'It\u2019s "great"'),
        ("( maybe twice )", "(maybe twice)"),
    ]  # fmt: skip
    for ptb, natural in same:
        assert text.words(ptb) == text.words(natural) == text.words(undo_ptb(ptb))
    changed = [
        ("it does n't work", "It doesn't work"),
        ("i ca n't and wo n't , ai n't", "I can\u2019t and won\u2019t, ain\u2019t"),
        ("-lrb- -lsb- x -rsb- -rrb- -LCB- y -RCB-", "([x]) {y}"),
        ("we 're gon na , wan na , got ta", "we're gonna, wanna, gotta"),
    ]
    for ptb, natural in changed:
        assert text.words(ptb) != text.words(natural)
        assert text.words(undo_ptb(ptb)) == text.words(natural), ptb
    for natural in ("It doesn't work (really) \u2014 gone, na\u00efve", "Tan't"):
        assert undo_ptb(natural) == natural  # natural text is left as written


def test_sst2_sentences_written_naturally_in_a_corpus_document_are_found():
    """Every 13-gram of an SST-2 dev sentence with ``n't`` is found in a document holding it as people write it
    (before undo_ptb, no 13-gram across a negated verb could match, and short ones none at all)."""
    picked = _sst2_with_nt()
    assert len(picked) > 30
    examples = read_eval_file(str(SST2_DEV))
    index = overlap.OverlapIndex([overlap.EvalSet.build(str(SST2_DEV), examples, 13)], 13)
    document = "Reviews of the season. " + " ".join(_natural(s) for _, s in picked) + " More to follow."
    assert "n't" not in document and " \u2019" not in document
    index.scan("reviews", document)
    report = index.report()[str(SST2_DEV)]
    found = {h["id"]: h["fraction"] for h in report["contaminated_examples"]}
    assert {i: found.get(i) for i, _ in picked} == {i: 1.0 for i, _ in picked}
    assert report["documents"] == ["reviews"]


def test_build_decontaminate_finds_sst2_sentences_written_naturally(tmp_path: Path):
    picked = _sst2_with_nt()[:12]
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\n" + "".join(f"{s}\t1\n" for _, s in picked), encoding="utf-8")
    docs = [json.loads(line) for line in DEMO_CORPUS.read_text(encoding="utf-8").splitlines()][:8]
    docs.insert(3, {"id": "reviews", "text": "What the critics said. " + " ".join(_natural(s) for _, s in picked)})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    m = build(corpus, tmp_path / "out", "--train-tokenizer", "--vocab-size", "1000", "--num-shards", "1",
              "--decontaminate", str(dev))  # fmt: skip
    assert m["counts"]["documents_contaminated"] == 1
    assert m["contamination"]["files"][str(dev)]["examples_contaminated"] == len(picked)
    record = json.loads((tmp_path / "out" / "removed" / "contaminated.jsonl").read_text())
    assert record["doc_id"] == "reviews"


def test_a_japanese_or_chinese_sentence_copied_into_a_corpus_document_is_found(tmp_path: Path):
    """Han and kana have no spaces: with a whole sentence one word, a 13-gram was 13 sentences and nothing was ever
    found (review D11). Each character is a word now, so a copied sentence is found and a different one is not."""
    tokyo = ("東京は日本の首都であり、世界有数の大都市である。江戸時代には江戸と呼ばれ、徳川幕府が置かれていた。"
             "明治維新の後、天皇が京都から移り住み、東京と改称された。現在では政治、経済、文化の中心地である。")  # fmt: skip
    yangtze = "长江是亚洲第一长河，也是世界第三长河。它发源于青藏高原，流经十一个省级行政区，最后注入东海。"
    evals = [
        {"id": "ja-copied", "text": "江戸時代には江戸と呼ばれ、徳川幕府が置かれていた。"},
        {"id": "zh-copied", "text": "它发源于青藏高原，流经十一个省级行政区"},
        {"id": "ja-other", "text": "富士山は静岡県と山梨県にまたがる活火山である。"},
        # 11 words in common with tokyo (明治維新の後 天皇が京都): no 13-gram
        {"id": "ja-11-shared", "text": "明治維新の後、天皇が京都で暮らしたという説は誤りである。"},
    ]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in evals), encoding="utf-8")
    index = overlap.OverlapIndex(contamination.load_eval_sets([str(path)], 13), 13)
    index.scan("tokyo", "Tokyo (東京) in Japanese: " + tokyo)
    index.scan("yangtze", yangtze)
    index.scan("unrelated", "The Yangtze is the longest river in Asia.")
    report = index.report()[str(path)]
    assert report["contaminated_examples"] == [
        {"id": "ja-copied", "fraction": 1.0},
        {"id": "zh-copied", "fraction": 1.0},
    ]
    assert report["documents"] == ["tokyo", "yangtze"] and report["examples_too_short"] == 0
