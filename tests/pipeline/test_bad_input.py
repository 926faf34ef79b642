"""The bad-input corpus of issue 9: records that used to kill a build, smuggled special tokens, output guard
holes, one-line errors. Every case ends in a dead letter with a reason or a one-line error (exit 2), and the
counts add up: documents_read == documents_written + documents_dead_lettered. Issue 21's reader cases (CRLF line
ends, compressed bombs, damaged gzip members and zstd frames, the lock of a failed or killed build) are in
test_bad_input_streams.py."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow.ipc as ipc
import pytest
import zstandard
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline import build_shards, output
from pipeline.elements import DeadLetter, Document, InputSummary, Source
from pipeline.tokenize import tokenizer
from pipeline.tokenize.tokenized_documents import TokenizeDocuments
from pipeline.verify import verify
from tests.conftest import REPO, WIKIPEDIA_SAMPLE, build, wikitext2_articles
from tests.pipeline.test_build_shards import _create
from tests.pipeline.test_readers import read

LONE_SURROGATE = b'{"id":"s1","text":"lone \\ud800 surrogate"}'
DEEP_ALONE = b"[" * 100_000
DEEP_IN_RECORD = b'{"id":"deep","text":"fine text","meta":' + b"[" * 100_000 + b"}"
SPECIALS = "The [MASK] sat on [SEP] the [CLS] mat [PAD] here."


def reasons(records) -> list[str]:
    return [r.reason if isinstance(r, DeadLetter) else "doc" for r in records]


def wikipedia_lines(n: int) -> list[bytes]:
    """The first ``n`` records of the real Wikipedia sample (skips when ../shared is absent)."""
    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE}")
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(f))
        return [line.rstrip(b"\n") for line in itertools.islice(reader, n)]


# -- readers ----------------------------------------------------------------------------------


def test_lone_surrogate_in_text_or_id_is_a_dead_letter_that_can_be_written():
    data = (
        b"\n".join(
            [
                LONE_SURROGATE,
                b'{"id":"\\udc00","text":"fine"}',
                b'{"id":"pair","text":"ok \\ud83d\\ude00 emoji"}',
                b'{"id":"upper","text":"lone \\uDBFF escape written in capitals"}',
            ]
        )
        + b"\n"
    )
    out, _ = read(data, "s.jsonl")
    assert reasons(out) == ["invalid_unicode", "invalid_unicode", "doc", "invalid_unicode"]
    assert out[2].text == "ok \U0001f600 emoji"  # a valid surrogate pair is one character, kept
    for letter in out[:2]:
        line = json.dumps(letter.as_dict(), ensure_ascii=False).encode("utf-8")  # what WriteDeadLetters does
        assert b"\\\\ud" in line or b"\\\\udc00" in line


def test_surrogates_in_wikitext_and_text_files_are_invalid_utf8():
    # UTF-8 bytes of U+D800 (CESU) are not valid UTF-8: the strict decoder rejects the document
    for fmt_name, data in (
        ("text", b"Good para.\n\nBad \xed\xa0\x80 para.\n"),
        ("wikitext", b" = A = \n Good .\n = B = \n Bad \xed\xa0\x80 .\n"),
    ):
        out, _ = read(data, "x.txt", input_format=fmt_name)
        assert reasons(out) == ["doc", "invalid_utf8"]


@pytest.mark.parametrize(
    "line", [DEEP_ALONE, DEEP_IN_RECORD, b'{"id":"d","text":"t","m":' + b'{"a":' * 5000 + b"1" + b"}" * 5001]
)
def test_deeply_nested_json_is_a_dead_letter_not_a_crash(line):
    out, _ = read(line + b"\n" + b'{"id":"after","text":"Still read."}\n', "deep.jsonl", max_record_bytes=1 << 20)
    assert reasons(out) == ["json_too_deep", "doc"]
    assert "deeper than 100" in out[0].detail and out[1].doc_id == "after"


@pytest.mark.parametrize("brackets", ["", "[1] " * 150])  # the second goes through the parse-first depth check
def test_a_number_python_cannot_read_is_a_dead_letter_not_a_crash(brackets):
    """Valid JSON, but json.loads refuses an integer of more than 4,300 digits with a ValueError: the build ended
    with a traceback and exit 1 (found by a review round)."""
    line = b'{"id":"big","text":"t ' + brackets.encode() + b'","n":' + b"9" * 5000 + b"}"
    out, _ = read(line + b"\n" + b'{"id":"after","text":"Still read."}\n', "big.jsonl", max_record_bytes=1 << 20)
    assert reasons(out) == ["malformed_json", "doc"]
    assert "Python cannot read a value of this record" in out[0].detail and "4300 digits" in out[0].detail
    assert out[1].doc_id == "after"


def test_nesting_within_the_limit_and_brackets_inside_strings_are_fine():
    ok = json.dumps({"id": "a", "text": "[" * 5000 + " many brackets in text", "meta": [[[[1]]]]}).encode()
    at_limit = b'{"id":"b","text":"t","m":' + b"[" * 99 + b"]" * 99 + b"}"
    out, _ = read(ok + b"\n" + at_limit + b"\n", "ok.jsonl")
    assert reasons(out) == ["doc", "doc"]


@pytest.mark.parametrize("compress", [lambda d: d, gzip.compress])
def test_utf8_bom_at_file_start_is_skipped_and_counted(compress):
    data = b"\xef\xbb\xbf" + b'{"id":"first","text":"The first record."}\n{"id":"second","text":"Second."}\n'
    out, summary = read(compress(data), "bom.jsonl.gz" if compress is gzip.compress else "bom.jsonl")
    assert reasons(out) == ["doc", "doc"] and out[0].doc_id == "first"
    assert summary.byte_order_mark and summary.as_dict()["byte_order_mark"] is True
    assert out[0].source.byte_offset == 3 and out[1].source.byte_offset == data.index(b'{"id":"second"')
    _, plain = read(data[3:], "nobom.jsonl")
    assert not plain.byte_order_mark


def test_utf8_bom_before_a_wikitext_title_keeps_the_title():
    out, summary = read(b"\xef\xbb\xbf = Title = \n Body text .\n", "w.tokens", input_format="wikitext")
    assert reasons(out) == ["doc"] and out[0].text.startswith("Title") and summary.byte_order_mark


# -- tokenizing -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec():
    texts = ["The cat sat on the mat here. A dog ran in the park."] * 20
    return tokenizer.make_spec(tokenizer.train(texts, vocab_size=120), "trained", False)


def test_text_the_tokenizer_cannot_take_is_a_dead_letter(spec):
    """Second line of defence: a document that reaches TokenizeDocuments with a lone surrogate."""
    src = Source("in.jsonl", 1, 0)
    docs = [Document("bad", "lone \ud800 surrogate", src), Document("good", "The cat sat.", Source("in.jsonl", 2, 40))]
    with TestPipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(docs, reshuffle=False) | TokenizeDocuments(spec, "uint16")
        assert_that(out["documents"] | "Ids" >> beam.Map(lambda d: d.doc_id), equal_to(["good"]), label="written")
        assert_that(
            out["dead_letters"] | "Why" >> beam.Map(lambda d: (d.doc_id, d.reason)),
            equal_to([("bad", "tokenizer_error")]),
            label="dead",
        )


def test_special_token_strings_in_text_are_plain_text(spec):
    tok = spec.load_for_text()
    ids = tok.encode(SPECIALS + " [UNK]", add_special_tokens=False).ids
    special = {spec.load().token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")}
    assert not special & set(ids)
    assert ids[-1] == tok.token_to_id("[UNK]")  # [UNK] (WikiText's <unk>) is still the unknown token
    assert tok.get_vocab() == spec.load().get_vocab()  # same vocabulary and ids
    plain = "The cat sat on the mat here."
    assert tok.encode(plain, add_special_tokens=False).ids == spec.load().encode(plain, add_special_tokens=False).ids


# -- whole builds on real data ----------------------------------------------------------------


def test_bad_records_among_real_wikipedia_articles_are_accounted_for(tmp_path):
    good = wikipedia_lines(12)
    special = json.dumps({"id": "specials", "text": SPECIALS + " Unknown [UNK] stays."}).encode()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\n".join(good[:6] + [LONE_SURROGATE, special]) + b"\n")
    (corpus / "b.jsonl").write_bytes(b"\n".join([DEEP_ALONE, good[6], DEEP_IN_RECORD] + good[7:]) + b"\n")
    m = build(
        str(corpus / "*.jsonl"),
        tmp_path / "out",
        "--train-tokenizer",
        "--vocab-size",
        "2000",
        "--num-shards",
        "3",
        "--max-record-bytes",
        str(1 << 20),
    )
    c = m["counts"]
    assert c["dead_lettered_by_reason"] == {"invalid_unicode": 1, "json_too_deep": 2}
    assert c["documents_read"] == 12 + 4 == c["documents_written"] + c["documents_dead_lettered"]
    assert c["documents_written"] == 13  # 12 articles, the BOM's first record included, and "specials"
    assert c["inputs_with_byte_order_mark"] == 1
    ids = m["tokenizer"]["special_token_ids"]
    rows = [
        r
        for f in sorted((tmp_path / "out" / "shards").glob("*.arrow"))
        for r in ipc.open_file(str(f)).read_all().to_pylist()
    ]
    first_id = json.loads(good[0])["id"]
    assert any(r["doc_id"] == str(first_id) for r in rows)
    smuggled = [r for r in rows if r["doc_id"] == "specials"]
    assert len(smuggled) == 1 and ids["unk"] in smuggled[0]["input_ids"]
    assert not {ids["pad"], ids["cls"], ids["sep"], ids["mask"]} & {i for r in rows for i in r["input_ids"]}
    letters = [
        json.loads(line)
        for f in (tmp_path / "out" / "dead_letter").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert sorted((Path(d["source"]["path"]).name, d["source"]["line"], d["reason"]) for d in letters) == [
        ("a.jsonl", 7, "invalid_unicode"),
        ("b.jsonl", 1, "json_too_deep"),
        ("b.jsonl", 3, "json_too_deep"),
    ]
    report = verify(str(tmp_path / "out"))
    assert report.ok, report.problems
    assert report.checked["tokens checked for special ids"] == c["tokens"] > 0


def test_wikitext_unk_stays_unk_and_literal_specials_are_text(tmp_path):
    path = wikitext2_articles(2, tmp_path)
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(" = = ", " = = [MASK] [SEP] ", 1), encoding="utf-8")
    m = build(
        path,
        tmp_path / "out",
        "--input-format",
        "wikitext",
        "--train-tokenizer",
        "--vocab-size",
        "2000",
        "--num-shards",
        "2",
    )
    ids = m["tokenizer"]["special_token_ids"]
    tokens = [
        i
        for f in sorted((tmp_path / "out" / "shards").glob("*.arrow"))
        for r in ipc.open_file(str(f)).read_all().to_pylist()
        for i in r["input_ids"]
    ]
    assert "<unk>" in text and tokens.count(ids["unk"]) > 0
    assert ids["mask"] not in tokens and ids["sep"] not in tokens
    assert verify(str(tmp_path / "out")).ok


# -- output guard and one-line errors ---------------------------------------------------------


def _small_input(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("Some text. More text.\n\nA second document here.\n")
    return path


def _argv(tmp_path: Path, out: Path) -> list[str]:
    return [
        "--input",
        str(_small_input(tmp_path)),
        "--input-format",
        "text",
        "--output",
        str(out),
        "--vocab-size",
        "100",
        "--num-shards",
        "1",
    ]


def test_output_holding_only_a_subfolder_file_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "shards").mkdir(parents=True)
    (out / "shards" / "precious.txt").write_text("keep me")
    assert build_shards.main(_argv(tmp_path, out)) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "shards/precious.txt" in err and "Traceback" not in err
    assert (out / "shards" / "precious.txt").read_text() == "keep me"
    assert build_shards.main(_argv(tmp_path, out) + ["--overwrite"]) == 0
    assert not (out / "shards" / "precious.txt").exists() and not (out / "_build.lock").exists()
    assert verify(str(out)).ok


def test_two_concurrent_builds_into_one_output_cannot_both_succeed(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipeline.build_shards", *_argv(tmp_path, out)]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert "another build" in loser or "is not empty" in loser
    assert verify(str(out)).ok


def test_a_build_whose_lock_was_taken_over_writes_no_manifest(tmp_path):
    out = tmp_path / "out"
    build_id = output.prepare_output(str(out), overwrite=False)
    assert json.loads((out / "_build.lock").read_text())["build_id"] == build_id
    with pytest.raises(output.OutputError, match="is not empty"):
        output.prepare_output(str(out), overwrite=False)
    other = output.prepare_output(str(out), overwrite=True)  # a later build with --overwrite takes over
    with pytest.raises(output.OutputError, match="belongs to build " + other):
        output.check_lock(str(out), build_id)
    output.check_lock(str(out), other)


def test_leftover_lock_of_a_killed_build_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    output.prepare_output(str(out), overwrite=False)  # a build that was killed before its manifest
    assert build_shards.main(_argv(tmp_path, out)) == 2
    assert "is not empty" in capsys.readouterr().err
    assert build_shards.main(_argv(tmp_path, out) + ["--overwrite"]) == 0


def test_directory_as_input_is_one_line_before_anything_runs(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Text.\n")
    assert build_shards.main(["--input", str(corpus), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option", ["--input", "--output"])
def test_credentials_in_urls_are_refused_and_never_printed(tmp_path, option, capsys):
    url = "s3://AKIAUSER:hunter2secret@bucket/corpus.jsonl"
    argv = (
        ["--input", url, "--output", str(tmp_path / "out")]
        if option == "--input"
        else ["--input", str(_small_input(tmp_path)), "--output", url]
    )
    assert build_shards.main(argv) == 2
    captured = capsys.readouterr()
    assert "hunter2secret" not in captured.err + captured.out
    assert "credentials in a URL" in captured.err and "<redacted>@bucket" in captured.err


def test_only_real_secrets_are_redacted():
    argv = [
        "--input",
        "in.jsonl",
        "--train-tokenizer",
        "--vocab-size",
        "4000",
        "--tokenizer",
        "path/tokenizer.json",
        "--s3_secret_access_key",
        "hunter2",
        "--s3_session_token=tok123",
        "--output",
        "gs://user:pw@bucket/out",
    ]
    assert build_shards.redact_argv(argv) == [
        "--input",
        "in.jsonl",
        "--train-tokenizer",
        "--vocab-size",
        "4000",
        "--tokenizer",
        "path/tokenizer.json",
        "--s3_secret_access_key",
        "<redacted>",
        "--s3_session_token=<redacted>",
        "--output",
        "gs://<redacted>@bucket/out",
    ]


def test_num_shards_far_above_the_documents_warns(tmp_path, caplog):
    m = build(
        _small_input(tmp_path), tmp_path / "out", "--input-format", "text", "--vocab-size", "100", "--num-shards", "64"
    )
    assert m["counts"]["documents_written"] == 2
    warned = [
        r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "shards are empty" in r.getMessage()
    ]
    assert len(warned) == 1 and "62 of 64 shards are empty" in warned[0]


def test_dataset_card_shows_the_vocab_size_and_tokenizer_path(tmp_path):
    """Issue 12: `make demo`'s card read `--train-tokenizer '<redacted>' 4000`; --tokenizer paths are no secret either."""
    m = build(
        _small_input(tmp_path),
        tmp_path / "out",
        "--input-format",
        "text",
        "--train-tokenizer",
        "--vocab-size",
        "100",
        "--num-shards",
        "1",
        "--report",
    )
    assert "--train-tokenizer --vocab-size 100" in " ".join(m["command"]) and "<redacted>" not in json.dumps(m)
    assert "--train-tokenizer --vocab-size 100" in (tmp_path / "out" / "README.md").read_text()
    tokenizer = tmp_path / "out" / "tokenizer.json"
    m2 = build(
        _small_input(tmp_path),
        tmp_path / "out2",
        "--input-format",
        "text",
        "--tokenizer",
        str(tokenizer),
        "--num-shards",
        "1",
    )
    assert m2["command"][m2["command"].index("--tokenizer") + 1] == str(tokenizer)


def test_long_texts_encoded_in_pieces_give_the_tokens_of_the_whole_text(tmp_path):
    """A huge record is encoded piece by piece (bounded memory); on real text the result is the whole encoding's."""
    from pipeline.tokenize.encodings import Encoded, text_pieces

    text = wikitext2_articles(3, tmp_path).read_text(encoding="utf-8")
    spec = tokenizer.make_spec(tokenizer.train([text], vocab_size=1000), "trained", False)
    tok = spec.load_for_text()
    pieces = text_pieces(text, 5000)
    assert len(pieces) > 5 and pieces[0][0] == 0 and pieces[-1][1] == len(text)
    assert all(b - a <= 5000 for a, b in pieces) and all(text[a] in "\n " for a, _ in pieces[1:])
    whole = Encoded.of(tok.encode(text, add_special_tokens=False))
    parts = Encoded.concatenate([Encoded.of(tok.encode(text[a:b], add_special_tokens=False), a) for a, b in pieces])
    assert len(whole.ids) > 5_000
    assert np.array_equal(whole.ids, parts.ids) and np.array_equal(whole.offsets, parts.offsets)
    assert np.array_equal(np.diff(whole.words) != 0, np.diff(parts.words) != 0)  # the same word starts
    assert text_pieces("x" * 50, 10) == [(0, 50)]  # no whitespace: left whole


def test_write_manifest_refuses_when_another_build_holds_the_lock(tmp_path, spec):
    """The loser of two concurrent builds: its lock was taken over, so it writes no manifest and fails."""
    from pipeline.write.manifest import WriteManifest
    from schemas import format as fmt

    out = tmp_path / "out"
    mine = output.prepare_output(str(out), overwrite=False)
    theirs = output.prepare_output(str(out), overwrite=True)
    shard = {
        "index": 0,
        "path": fmt.shard_filename(0, 1),
        "rows": 1,
        "tokens": 5,
        "bytes": 10,
        "sha256": "x",
        "documents": 1,
        "documents_cleaned": 0,
        "duplicate_doc_ids": 0,
        "sentences": 1,
        "sentences_cut": 0,
        "continuation_rows": 0,
        "long_words": 0,
        "spans": dict.fromkeys(fmt.CANDIDATE_KINDS, 0),
        "dropped": dict.fromkeys(fmt.CANDIDATE_KINDS, 0),
        "histogram": [1],
        "unigram_ids": np.array([7], np.int32),
        "unigram_counts": np.array([5], np.int64),
    }
    static = {
        "created_by": {},
        "command": [],
        "options": {},
        "max_seq_len": 34,
        "pack": "doc-sentences",
        "candidates": {"kinds": []},
    }

    def run(build_id):
        with TestPipeline(runner="FnApiRunner") as p:
            results = {
                "input_summaries": p | "S" >> _create([InputSummary("in.jsonl", 10, "abc", 1)]),
                "shards": p | "Sh" >> _create([shard]),
                "dead_letters": p | "D" >> _create([]),
            }
            _ = results | WriteManifest(str(out), spec, {**static, "build_id": build_id})

    with pytest.raises(output.OutputError, match=f"belongs to build {theirs}"):
        run(mine)
    assert not (out / "manifest.json").exists()
    run(theirs)
    assert json.loads((out / "manifest.json").read_text())["build_id"] == theirs and not (out / "_build.lock").exists()


def test_a_non_empty_output_is_refused_before_any_input_is_read(tmp_path, capsys):
    """Without --overwrite the refusal comes before the input is matched or a tokenizer trained on it (it came after
    the training: 26 s on 20 MB of Wikipedia)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert build_shards.main(_argv(tmp_path, out)) == 2
    err = capsys.readouterr().err
    assert "exists and is not empty" in err and "notes.txt" in err, err
    assert "input file(s) matched" not in err and "training a" not in err, err
    assert (out / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("input_format, glob", [("wikitext", "wiki.*.tokens"), ("text", "*.txt"), ("jsonl", "*.jsonl")])
def test_the_directory_hint_follows_the_input_format(input_format, glob, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    argv = ["--input", str(corpus), "--input-format", input_format, "--output", str(tmp_path / "out")]
    assert build_shards.main(argv) == 2
    assert f"give its files, e.g. --input '{corpus}/{glob}'" in capsys.readouterr().err


def test_a_trained_vocabulary_smaller_than_asked_says_why(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Some text. More text.\n\nOther words here.\n")
    argv = ["--input", str(tmp_path / "in.txt"), "--input-format", "text", "--output", str(tmp_path / "out"),
            "--vocab-size", "500", "--num-shards", "1"]  # fmt: skip
    assert build_shards.main(argv) == 0
    line = next(line for line in capsys.readouterr().err.splitlines() if "trained a WordPiece vocabulary of" in line)
    size = int(line.split("vocabulary of ")[1].split()[0])
    assert size < 500 and "(fewer than --vocab-size 500: the input has no more pieces that occur at least twice" in line
