"""The artifact format is a public contract: these tests pin it exactly."""

import json

import pyarrow as pa
import pytest

from schemas import format as fmt

PINNED_UINT16 = """doc_id: string not null
seq_index: int32 not null
input_ids: list<item: uint16 not null> not null
  child 0, item: uint16 not null
word_start: list<item: bool not null> not null
  child 0, item: bool not null
sentence_start: list<item: bool not null> not null
  child 0, item: bool not null
entity_spans: list<item: struct<start: int32 not null, end: int32 not null, label: string not null> not null> not null
  child 0, item: struct<start: int32 not null, end: int32 not null, label: string not null> not null
      child 0, start: int32 not null
      child 1, end: int32 not null
      child 2, label: string not null
noun_phrase_spans: list<item: struct<start: int32 not null, end: int32 not null> not null> not null
  child 0, item: struct<start: int32 not null, end: int32 not null> not null
      child 0, start: int32 not null
      child 1, end: int32 not null
ngram_spans: list<item: struct<start: int32 not null, end: int32 not null> not null> not null
  child 0, item: struct<start: int32 not null, end: int32 not null> not null
      child 0, start: int32 not null
      child 1, end: int32 not null
-- schema metadata --
spanprep.format: 'spanprep-preprocessed-corpus'
spanprep.format_version: '1.0'"""


def test_shard_schema_is_pinned():
    assert fmt.FORMAT_VERSION == "1.0"
    assert str(fmt.shard_schema(28996)) == PINNED_UINT16


def test_token_ids_are_uint16_up_to_65536_then_int32():
    assert fmt.shard_schema(65536).field("input_ids").type.value_type == pa.uint16()
    big = fmt.shard_schema(65537)
    assert big.field("input_ids").type.value_type == pa.int32()
    assert str(big) == PINNED_UINT16.replace("uint16", "int32")


def test_unigram_schema_is_pinned():
    s = fmt.unigram_schema()
    assert [(f.name, str(f.type), f.nullable) for f in s] == [
        ("token_id", "int32", False),
        ("token", "string", False),
        ("count", "int64", False),
    ]
    assert s.metadata[b"spanprep.format_version"] == b"1.0"


def test_candidate_columns_follow_the_kinds():
    assert fmt.CANDIDATE_KINDS == {"entities": "entity_spans", "noun_phrases": "noun_phrase_spans", "ngrams": "ngram_spans"}


@pytest.mark.parametrize("version", ["1.0", "1.7"])
def test_known_major_versions_are_accepted(version):
    assert fmt.check_format_version(version, "x")[0] == 1


@pytest.mark.parametrize("version", ["2.0", "0.9"])
def test_unknown_major_versions_are_refused_naming_the_file(version):
    with pytest.raises(fmt.FormatError, match=rf"ARTIFACT/manifest.json: format version {version} is not supported"):
        fmt.check_format_version(version, "ARTIFACT/manifest.json")


@pytest.mark.parametrize("version", [None, "one", "1", "1.x"])
def test_missing_or_malformed_versions_are_refused(version):
    with pytest.raises(fmt.FormatError):
        fmt.check_format_version(version, "f")


def test_shard_metadata_without_stamp_is_refused():
    with pytest.raises(fmt.FormatError, match="not a spanprep shard"):
        fmt.check_schema_metadata(pa.schema([pa.field("x", pa.int32())]), "s.arrow")


def test_shard_names_and_assignment_are_stable():
    assert fmt.shard_filename(3, 64) == "shards/part-00003-of-00064.arrow"
    # blake2b-64 of the UTF-8 id, big-endian, modulo the shard count (FORMAT.md)
    import hashlib

    for doc_id in ["a", "wiki.valid.tokens:1", "Ünïcode"]:
        expected = int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "big") % 7
        assert fmt.shard_of(doc_id, 7) == expected


def test_manifest_json_is_canonical():
    text = fmt.dumps_manifest({"b": 1, "a": {"d": 2, "c": "é"}})
    assert text == '{\n  "a": {\n    "c": "é",\n    "d": 2\n  },\n  "b": 1\n}\n'
    assert json.loads(text)["a"]["c"] == "é"
