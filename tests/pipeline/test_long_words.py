"""Words longer than a row (issue 23, format 2.0): such a word starts its own row and goes on in marked continuation
rows (``word_start[0]`` and ``sentence_start[0]`` false) instead of dead-lettering its document; ``--long-words
dead-letter`` keeps the rule of format 1.x. On real WikiText-2 and on the embedded demo corpus."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest
from tokenizers import Tokenizer

from pipeline import verify
from pipeline.elements import Document
from pipeline.jobs import JobFailed
from pipeline.read.records import ReaderOptions, read_file
from schemas import format as fmt
from schemas.artifact import Artifact
from tests.conftest import DEMO_CORPUS, WIKIPEDIA_SAMPLE, WIKITEXT2_BUILD, build, wikitext2

# Real words of more WordPieces than the 6 tokens a row of --max-seq-len 8 holds, in the demo corpus's prose.
LONG_WORDS_TEXT = (
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a lung disease. Some people fear long words, a fear called "
    "hippopotomonstrosesquippedaliophobia by those who like irony. The Danube flows through Vienna."
)


def rows_by_doc(artifact: Path) -> dict[str, list[dict]]:
    """Every row of the artifact, per document, in seq_index order."""
    out: dict[str, list[dict]] = {}
    for shard in sorted((artifact / fmt.SHARDS_DIR).glob("*.arrow")):
        for row in ipc.open_file(shard).read_all().to_pylist():
            out.setdefault(row["doc_id"], []).append(row)
    for rows in out.values():
        rows.sort(key=lambda r: r["seq_index"])
    return out


def check_continuations(rows: list[dict], limit: int) -> tuple[int, int]:
    """FORMAT.md's rule on one document's rows, checked directly: each row starting inside a word is marked (no
    sentence start either), follows a full row of its document that lies inside that word, and the word it
    continues has more tokens than a row holds. Returns (continuation rows, long words) seen."""
    continuations = long_words = 0
    run = 0  # tokens of the long word seen so far in the chain of rows
    for i, row in enumerate(rows):
        ws = row["word_start"]
        if ws[0]:
            run = 0
            continue
        continuations += 1
        before = rows[i - 1]
        assert i > 0 and not row["sentence_start"][0]
        assert len(before["input_ids"]) == limit and not any(before["word_start"][1:])
        if before["word_start"][0]:  # the chain starts at the row before: the word starts there
            long_words += 1
            run = limit
        run += len(ws)
        fragment = (ws[1:] + [True]).index(True) + 1  # tokens of the word in this row
        assert run - len(ws) + fragment > limit  # the word is longer than a row
    return continuations, long_words


def _wikitext_docs() -> list[Document]:
    opts = ReaderOptions(input_format="wikitext", wikitext_unk=fmt.SPECIAL_TOKENS["unk"])
    return [d for d in read_file(str(wikitext2("valid")), opts) if isinstance(d, Document)]


@pytest.fixture(scope="module")
def wikitext2_at_8(tmp_path_factory) -> dict[str, Path]:
    """WikiText-2 valid at --max-seq-len 8 (rows of 6 tokens), with each --long-words rule."""
    root = tmp_path_factory.mktemp("long-words")
    out = {}
    for rule in ("split", "dead-letter"):
        out[rule] = root / rule
        build(wikitext2("valid"), out[rule], *WIKITEXT2_BUILD, "--max-seq-len", "8", "--long-words", rule)
    return out


def test_wikitext2_at_max_seq_len_8_keeps_every_document_in_exact_rows(wikitext2_at_8):
    """Format 1.x dead-lettered 4 of the 60 documents (words such as 'cephalothorax': 7 WordPieces); now all are
    written, the rows of each are exactly its tokenization, and verify passes."""
    out = wikitext2_at_8["split"]
    m = json.loads((out / fmt.MANIFEST_FILE).read_text())
    c = m["counts"]
    assert m["format_version"] == fmt.FORMAT_VERSION == "2.2" and m["options"]["long_words"] == "split"
    assert c["documents_read"] == c["documents_written"] == 60 and c["documents_dead_lettered"] == 0
    assert c["long_words"] > 0 and c["continuation_rows"] >= c["long_words"]
    report = verify.verify(str(out))
    assert report.ok, report.problems
    assert report.checked["continuation rows checked"] == c["continuation_rows"]
    tok = Tokenizer.from_str(Artifact.open(str(out)).tokenizer_json())
    by_doc = rows_by_doc(out)
    continuations = long_words = tokens = 0
    for doc in _wikitext_docs():
        rows = by_doc[doc.doc_id]
        ids = [t for r in rows for t in r["input_ids"]]
        assert ids == tok.encode(doc.text, add_special_tokens=False).ids, doc.doc_id
        tokens += len(ids)
        n, w = check_continuations(rows, 6)
        continuations, long_words = continuations + n, long_words + w
    assert tokens == c["tokens"] > 200_000
    assert (continuations, long_words) == (c["continuation_rows"], c["long_words"])


def test_dead_letter_keeps_the_old_rule_and_every_other_document_has_the_same_rows(wikitext2_at_8):
    split, dead = (json.loads((wikitext2_at_8[r] / fmt.MANIFEST_FILE).read_text()) for r in ("split", "dead-letter"))
    c = dead["counts"]
    assert c["dead_lettered_by_reason"] == {"word_too_long": 4} and c["documents_written"] == 56
    assert c["continuation_rows"] == c["long_words"] == 0
    letters = (wikitext2_at_8["dead-letter"] / "dead_letter" / "word_too_long.jsonl").read_text().splitlines()
    assert all("tokens, more than a row holds (6" in json.loads(line)["detail"] for line in letters)
    assert verify.verify(str(wikitext2_at_8["dead-letter"])).ok
    kept, written = rows_by_doc(wikitext2_at_8["split"]), rows_by_doc(wikitext2_at_8["dead-letter"])
    assert len(written) == 56
    for doc_id, rows in written.items():  # packing is unchanged wherever no word is longer than a row
        assert rows == kept[doc_id], doc_id
    dropped = {json.loads(line)["doc_id"] for line in letters}
    assert dropped == set(kept) - set(written)
    # the dead-lettered documents are exactly those holding the long words
    assert {d for d, rows in kept.items() if any(not r["word_start"][0] for r in rows)} == dropped
    assert split["counts"]["long_words"] >= len(dropped)


def test_without_long_words_both_rules_write_the_same_shards(tmp_path):
    """At --max-seq-len 512 WikiText-2 has no word longer than a row: split and dead-letter give identical files
    (and, measured when format 2.0 came, main's files but for the two version stamps in each Arrow file)."""
    digests = []
    for rule in ("split", "dead-letter"):
        build(wikitext2("valid"), tmp_path / rule, *WIKITEXT2_BUILD, "--long-words", rule)
        files = sorted(p for p in (tmp_path / rule).rglob("*") if p.is_file() and p.name != fmt.MANIFEST_FILE)
        digests.append({str(p.relative_to(tmp_path / rule)): hashlib.sha256(p.read_bytes()).digest() for p in files})
        assert json.loads((tmp_path / rule / fmt.MANIFEST_FILE).read_text())["counts"]["continuation_rows"] == 0
    assert len(digests[0]) >= 6 and digests[0] == digests[1]


@pytest.fixture(scope="module")
def long_word_corpus(tmp_path_factory) -> Path:
    """The embedded demo corpus (always available) plus a document of real long words."""
    path = tmp_path_factory.mktemp("long-word-corpus") / "corpus.jsonl"
    extra = json.dumps({"id": "long-words", "title": "Long words", "text": LONG_WORDS_TEXT}) + "\n"
    path.write_text(DEMO_CORPUS.read_text(encoding="utf-8") + extra, encoding="utf-8")
    return path


LONG_WORD_BUILD = ["--input-format", "jsonl", "--train-tokenizer", "--vocab-size", "2000", "--max-seq-len", "8"]


@pytest.mark.parametrize("pack", ["doc-sentences", "full-sentences"])
def test_continuation_rows_are_byte_identical_on_any_worker_count_and_split(long_word_corpus, tmp_path, pack):
    def digests(out: Path) -> dict[str, str]:
        files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != fmt.MANIFEST_FILE)
        return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}

    base = [*LONG_WORD_BUILD, "--pack", pack, "--num-shards", "3"]
    first = build(long_word_corpus, tmp_path / "one", *base)
    assert first["counts"]["long_words"] >= 2 and first["counts"]["continuation_rows"] >= 4
    assert first["counts"]["documents_dead_lettered"] == 0
    assert verify.verify(str(tmp_path / "one")).ok
    build(
        long_word_corpus,
        tmp_path / "two",
        *base,
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        "2",
        "--split-bytes",
        "8192",
        "--encode-cache-mb",
        "0",
    )
    assert digests(tmp_path / "two") == digests(tmp_path / "one")
    if pack == "doc-sentences":
        seen = [check_continuations(rows, 6) for rows in rows_by_doc(tmp_path / "one").values()]
        assert tuple(np.sum(seen, axis=0)) == (first["counts"]["continuation_rows"], first["counts"]["long_words"])


def test_the_report_page_shows_the_long_words_and_the_counts_add_up(long_word_corpus, tmp_path):
    out = tmp_path / "a"
    m = build(long_word_corpus, out, *LONG_WORD_BUILD, "--num-shards", "2", "--report")
    c = m["counts"]
    assert c["documents_read"] == c["documents_written"] + c["documents_dead_lettered"] == 41
    assert c["documents_dead_lettered"] == 0 and c["long_words"] > 0
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    for label, key in (("words longer than a row", "long_words"), ("their continuation rows", "continuation_rows")):
        assert f'<td>{label}</td><td class="n">{c[key]:,}</td>' in page
        assert f"| `{key}` | {c[key]:,} |" in (out / fmt.CARD_FILE).read_text(encoding="utf-8")
    assert verify.verify(str(out)).ok


def _wikipedia_articles_with_long_words(tok: Tokenizer, limit: int) -> list[dict]:
    """The Wikipedia sample's articles holding a word of more than ``limit`` tokens. Only articles with a run of at
    least 128 non-space or whitespace characters are encoded: a byte-level BPE word is such a run (plus at most one
    space before it) and each token covers at least one UTF-8 byte, at most 4 per character, so a word of more than
    510 tokens needs at least 128 characters in a run; the others cannot hold one."""
    import io

    import zstandard

    run = re.compile(r"\S{128,}|\s{128,}")
    found = []
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        for line in reader:
            record = json.loads(line)
            if not run.search(record["text"]):
                continue
            _, per_word = np.unique(tok.encode(record["text"], add_special_tokens=False).word_ids, return_counts=True)
            if per_word.max() > limit:
                found.append(record)
    return found


@pytest.mark.slow
def test_wikipedia_articles_with_500_token_words_are_kept_with_byte_level_bpe(tmp_path):
    """RoBERTa's tokenizer family on real web text: markdown table borders are single byte-level BPE words of 524 to
    971 tokens. Format 1.x dead-lettered these 17 of the sample's 4,576 articles; now they are written, exactly."""
    from tests.pipeline.test_byte_level_bpe import ROBERTA, roberta_tokenizer

    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE}")
    tok = Tokenizer.from_str(roberta_tokenizer())
    articles = _wikipedia_articles_with_long_words(tok, fmt.max_row_tokens(512))
    assert len(articles) == 17
    corpus = tmp_path / "long.jsonl"
    corpus.write_text("".join(json.dumps(a) + "\n" for a in articles), encoding="utf-8")
    (tmp_path / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
    common = ["--input-format", "jsonl", "--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "2"]
    with pytest.raises(JobFailed, match=r"all 17 documents were dead-lettered \(word_too_long: 17;"):
        build(corpus, tmp_path / "old", *common, "--long-words", "dead-letter")  # wrote no document: exit 1
    old = json.loads((tmp_path / "old" / fmt.MANIFEST_FILE).read_text(encoding="utf-8"))["counts"]
    assert old["dead_lettered_by_reason"] == {"word_too_long": 17} and old["documents_written"] == 0
    m = build(corpus, tmp_path / "new", *common)
    assert m["tokenizer"]["special_tokens"] == ROBERTA
    c = m["counts"]
    assert c["documents_written"] == 17 and c["documents_dead_lettered"] == 0
    assert c["long_words"] >= 17 and c["continuation_rows"] >= c["long_words"]
    report = verify.verify(str(tmp_path / "new"))
    assert report.ok, report.problems
    assert report.checked["continuation rows checked"] == c["continuation_rows"]
    by_doc = rows_by_doc(tmp_path / "new")
    continuations = 0
    for doc in (d for d in read_file(str(corpus), ReaderOptions()) if isinstance(d, Document)):
        rows = by_doc[doc.doc_id]
        assert [t for r in rows for t in r["input_ids"]] == tok.encode(doc.text, add_special_tokens=False).ids
        continuations += check_continuations(rows, fmt.max_row_tokens(512))[0]
    assert continuations == c["continuation_rows"]


def test_candidate_spans_across_continuation_rows_are_dropped_and_counted(tmp_path):
    """N-gram candidates on WikiText-2 at --max-seq-len 8: every document is written, and the spans found are the same
    as at 512 (they do not depend on the rows): kept + dropped at a row boundary add up to the same total, and every
    kept span lies on word boundaries of its row (verify), also in continuation rows."""
    from pipeline import build_ngram_dictionary

    dictionary = tmp_path / "dict"
    build_ngram_dictionary.run(["--input", str(wikitext2("valid")), "--output", str(dictionary)])
    totals = {}
    for seq in ("8", "512"):
        out = tmp_path / seq
        m = build(
            wikitext2("valid"),
            out,
            *WIKITEXT2_BUILD,
            "--max-seq-len",
            seq,
            "--mask-candidates",
            "ngrams",
            "--ngram-dictionary",
            str(dictionary),
        )
        assert m["counts"]["documents_written"] == 60
        report = verify.verify(str(out))
        assert report.ok, report.problems
        cand = m["candidates"]
        totals[seq] = (cand["spans"]["ngrams"], cand["dropped_at_row_boundary"]["ngrams"], m["counts"])
    kept8, dropped8, counts8 = totals["8"]
    kept512, dropped512, _ = totals["512"]
    assert counts8["continuation_rows"] > 0 and dropped8 > dropped512 and kept8 > 1000
    assert kept8 + dropped8 == kept512 + dropped512


@pytest.mark.slow
@pytest.mark.parametrize("family", ["byte_level_bpe", "unigram"])
def test_every_family_keeps_words_longer_than_a_row_in_exact_rows(tmp_path, family):
    """RoBERTa's byte-level BPE and a SentencePiece-style Unigram (Metaspace), trained here on WikiText-2, at rows of 6
    tokens: the 1.x rule dead-letters documents, the 2.0 rule writes them all in exact rows that verify."""
    from tests.pipeline.test_byte_level_bpe import roberta_tokenizer
    from tests.pipeline.test_unigram import ROBERTA
    from tests.pipeline.test_unigram import _train as unigram_tokenizer

    config = roberta_tokenizer() if family == "byte_level_bpe" else unigram_tokenizer(ROBERTA)
    (tmp_path / "tokenizer.json").write_text(config, encoding="utf-8")
    common = ["--input-format", "wikitext", "--tokenizer", str(tmp_path / "tokenizer.json"), "--max-seq-len", "8"]
    old = build(wikitext2("valid"), tmp_path / "old", *common, "--long-words", "dead-letter")["counts"]
    assert old["dead_lettered_by_reason"]["word_too_long"] > 0
    c = build(wikitext2("valid"), tmp_path / "new", *common)["counts"]
    assert c["documents_written"] == 60 and c["documents_dead_lettered"] == 0 and c["long_words"] > 0
    report = verify.verify(str(tmp_path / "new"))
    assert report.ok, report.problems
    tok = Tokenizer.from_str(Artifact.open(str(tmp_path / "new")).tokenizer_json())
    by_doc = rows_by_doc(tmp_path / "new")
    opts = ReaderOptions(input_format="wikitext", wikitext_unk="<unk>")
    seen = np.zeros(2, np.int64)
    for doc in (d for d in read_file(str(wikitext2("valid")), opts) if isinstance(d, Document)):
        rows = by_doc[doc.doc_id]
        assert [t for r in rows for t in r["input_ids"]] == tok.encode(doc.text, add_special_tokens=False).ids
        seen += check_continuations(rows, 6)
    assert tuple(seen) == (c["continuation_rows"], c["long_words"])
    print(
        f"{family}: 1.x rule {old['documents_dead_lettered']} dead letters; 2.0: {c['long_words']} long words, {c['continuation_rows']} continuation rows"
    )
