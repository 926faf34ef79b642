"""Readers: every record becomes a document or a dead letter with a reason and a position."""

import gzip
import io

import pytest
import zstandard

from pipeline.elements import DeadLetter, Document, InputSummary
from pipeline.read import records, streams, wikitext
from pipeline.read.records import ReaderOptions
from tests.conftest import wikitext2


def read(data: bytes, name: str, **opts):
    out = list(records.read_stream(io.BytesIO(data), f"/data/{name}", ReaderOptions(**opts)))
    summary = out.pop()
    assert isinstance(summary, InputSummary)
    assert summary.documents_read == len(out)
    return out, summary


BAD_JSONL = b"".join(
    [
        b'{"id": "good-1", "text": "A fine sentence. Another one."}\n',
        b"\n",  # blank lines are not records
        b'{"id": "empty", "text": "   \\n "}\n',
        b"{not json\n",
        b'{"id": "num", "text": 42}\n',
        b'{"id": "none"}\n',
        b'{"id": "bad-utf8", "text": "caf\xe9"}\n',
        b'["a", "list"]\n',
        b'{"id": "ctrl", "text": "nul\\u0000 and bell\\u0007 removed"}\n',
        b'{"id": "huge", "text": "' + b"x" * 5000 + b'"}\n',
        b'{"text": "no id, no trailing newline"}',
    ]
)


def test_jsonl_bad_records_get_reasons_and_positions():
    out, summary = read(BAD_JSONL, "bad.jsonl", input_format="jsonl", max_record_bytes=1000)
    kinds = [(r.reason if isinstance(r, DeadLetter) else "doc", r.source.line) for r in out]
    assert kinds == [
        ("doc", 1),
        ("empty_text", 3),
        ("malformed_json", 4),
        ("non_string_text", 5),
        ("missing_text", 6),
        ("invalid_utf8", 7),
        ("malformed_json", 8),
        ("doc", 9),
        ("line_too_long", 10),
        ("doc", 11),
    ]
    docs = [r for r in out if isinstance(r, Document)]
    assert [d.doc_id for d in docs] == ["good-1", "ctrl", "bad.jsonl:11"]
    assert docs[1].text == "nul and bell removed" and docs[1].cleaned
    assert not docs[0].cleaned
    # byte offsets point at the start of each record
    for r in out:
        assert BAD_JSONL[r.source.byte_offset : r.source.byte_offset + 1] in (b"{", b"[")
    assert summary.bytes == len(BAD_JSONL) and not summary.truncated
    huge = next(r for r in out if isinstance(r, DeadLetter) and r.reason == "line_too_long")
    assert "5,0" in huge.detail and huge.preview == ""


def test_enormous_line_is_never_held_in_memory():
    lines = list(streams.iter_lines(iter([b"short\n", b"y" * 300, b"y" * 300, b"\nafter\n"]), max_line_bytes=100))
    assert lines == [(1, 0, b"short", 5), (2, 6, None, 600), (3, 607, b"after", 5)]


def test_lines_split_across_chunks_are_joined():
    chunks = [b"ab", b"c\nd", b"e", b"\n", b"fg"]
    assert [(n, line) for n, _, line, _ in streams.iter_lines(iter(chunks), 100)] == [
        (1, b"abc"),
        (2, b"de"),
        (3, b"fg"),
    ]


@pytest.mark.parametrize("compress", [gzip.compress, lambda d: zstandard.ZstdCompressor().compress(d)])
def test_multi_member_compressed_streams_are_read_whole(compress):
    part = b"".join(b'{"id": "%d", "text": "t %d"}\n' % (i, i) for i in range(1000))
    data = compress(part) + compress(part.replace(b'"id": "', b'"id": "b'))
    name = "x.jsonl.gz" if data[:2] == b"\x1f\x8b" else "x.jsonl.zst"
    out, summary = read(data, name)
    assert len(out) == 2000 and all(isinstance(r, Document) for r in out)
    assert summary.bytes == len(data)


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_truncated_compressed_input_dead_letters_the_rest_and_says_how_far(suffix):
    import random

    rnd = random.Random(0)
    part = b"".join(
        b'{"id": "%d", "text": "%s"}\n'
        % (i, " ".join(rnd.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(30)).encode())
        for i in range(4000)
    )
    full = gzip.compress(part) if suffix == ".gz" else zstandard.ZstdCompressor().compress(part)
    cut = full[: len(full) // 2]
    out, summary = read(cut, "c.jsonl" + suffix)
    assert summary.truncated and summary.bytes == len(cut)
    *docs, last = out
    assert 0 < len(docs) < 4000 and all(isinstance(d, Document) for d in docs)
    assert isinstance(last, DeadLetter) and last.reason == "truncated_input"
    assert f"{len(cut):,} compressed bytes" in last.detail
    assert last.source.line == len(docs) + 1


def test_corrupt_compressed_input_is_a_dead_letter_not_a_crash():
    out, summary = read(b"this is not zstd at all" * 10, "c.jsonl.zst")
    assert [r.reason for r in out] == ["corrupt_input"] and summary.truncated


WT = """ 
 = Alpha Beta = 
 
 The <unk> of Alpha , known as " A " , is 1 @,@ 000 @.@ 5 km @-@ long ( about ) . It isn 't big . 
 
 = = History = = 
 
 Second paragraph . 
 
 = Gamma = 
 
 Only line . 
"""


def test_wikitext_documents_headings_and_detokenization():
    out, _ = read(WT.encode(), "w.tokens", input_format="wikitext", wikitext_unk="[UNK]")
    assert [d.doc_id for d in out] == ["w.tokens:1", "w.tokens:2"]
    assert out[0].text == (
        'Alpha Beta\n\nThe [UNK] of Alpha, known as "A", is 1,000.5 km-long (about). It isn\'t big.\n\nHistory\n\nSecond paragraph.'
    )
    assert out[0].source.line == 2
    dropped, _ = read(WT.encode(), "w.tokens", input_format="wikitext", wikitext_headings="drop", wikitext_unk=None)
    assert dropped[0].text.startswith("The of Alpha") and "History" not in dropped[0].text
    assert dropped[1].text == "Only line."


def test_wikitext_raw_files_are_not_detokenized_by_default():
    out, _ = read(WT.encode(), "w.raw", input_format="wikitext")
    assert 'known as " A " , is 1 @,@ 000' in out[0].text


def test_wikitext_heading_levels():
    assert wikitext.heading_level(" = A = \n") == 1
    assert wikitext.heading_level(" = = A b = = ") == 2
    assert wikitext.heading_level(" = = = A = = = ") == 3
    assert wikitext.heading_level(" A = b = c ") == 0
    assert wikitext.heading_text(" = = A , b = = ") == "A , b"


def test_text_format_splits_documents_on_blank_lines():
    data = b"first doc line one\nline two\n\n\nsecond doc\n   \nthird\xff doc\n\nfourth"
    out, _ = read(data, "t.txt", input_format="text")
    assert [(type(r).__name__, r.doc_id) for r in out] == [
        ("Document", "t.txt:1"),
        ("Document", "t.txt:2"),
        ("DeadLetter", "t.txt:3"),
        ("Document", "t.txt:4"),
    ]
    assert out[0].text == "first doc line one\nline two"
    assert out[2].reason == "invalid_utf8" and out[2].source.line == 7


def test_document_larger_than_the_limit_is_dead_lettered_whole():
    data = ("\n".join(["word " * 50] * 10) + "\n\nsmall doc").encode()
    out, _ = read(data, "t.txt", input_format="text", max_record_bytes=1000)
    assert [getattr(r, "reason", "doc") for r in out] == ["document_too_long", "doc"]


@pytest.mark.parametrize("split,expected", [("valid", 60), ("test", 62)])
def test_real_wikitext2_article_counts(split, expected):
    path = wikitext2(split)
    out = list(records.read_file(str(path), ReaderOptions(input_format="wikitext")))
    summary = out.pop()
    assert len(out) == expected == summary.documents_read
    assert all(isinstance(d, Document) and d.text.strip() for d in out)
    assert (
        summary.sha256
        == {
            "valid": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
            "test": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
        }[split]
    )
    assert not any("@-@" in d.text or " , " in d.text for d in out)
