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
spanprep.format_version: '{version}'""".replace("{version}", fmt.FORMAT_VERSION)


def test_shard_schema_is_pinned():
    # 2.0: continuation rows; 2.1: removed/ and the dedup counts in the manifest; 2.2: NLTK's Punkt sentences and
    # the word rule that deletes erased characters named in dedup/contamination.normalisation (FORMAT.md, "Changes in 2.x")
    assert fmt.FORMAT_VERSION == "2.2"
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
    assert s.metadata[b"spanprep.format_version"] == fmt.FORMAT_VERSION.encode()


def test_candidate_columns_follow_the_kinds():
    assert fmt.CANDIDATE_KINDS == {
        "entities": "entity_spans",
        "noun_phrases": "noun_phrase_spans",
        "ngrams": "ngram_spans",
    }


@pytest.mark.parametrize("version", ["1.0", "1.7", "2.0", "2.3"])
def test_known_major_versions_are_accepted(version):
    """Readers keep reading 1.x artifacts after 2.0 (the same columns; only what word_start[0] may be changed)."""
    assert fmt.check_format_version(version, "x")[0] == int(version[0])
    assert fmt.continuation_rows_allowed(version) == (version >= "2")


@pytest.mark.parametrize("version", ["3.0", "0.9"])
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


# ---------------------------------------------------------------------------------------------
# The n-gram dictionary format (schemas/NGRAM_DICTIONARY.md) and the special positions of a row
# ---------------------------------------------------------------------------------------------
PINNED_NGRAM_DICTIONARY = """ngram: string not null
n: int8 not null
count: int64 not null
-- schema metadata --
format: 'spanprep-ngram-dictionary'
format_version: '1'"""


def test_ngram_dictionary_schema_and_files_are_pinned():
    from schemas import ngram_dictionary as nd

    assert nd.ARROW_SCHEMA.to_string() == PINNED_NGRAM_DICTIONARY
    assert (nd.FORMAT, nd.FORMAT_VERSION, nd.KNOWN_FORMAT_VERSIONS) == ("spanprep-ngram-dictionary", 1, (1,))
    assert (nd.ARROW_FILE, nd.TSV_FILE, nd.DEAD_LETTER_FILE, nd.MANIFEST_FILE) == (
        "ngrams.arrow",
        "ngrams.tsv",
        "dead_letter.jsonl",
        "manifest.json",
    )
    assert nd.COLUMNS == tuple(nd.ARROW_SCHEMA.names)


def test_special_tokens_and_the_two_special_positions():
    assert fmt.SPECIAL_TOKENS == {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    assert fmt.SPECIAL_POSITIONS == 2 and fmt.max_row_tokens(512) == 510


def _write_ngram_dictionary(path, manifest: dict) -> bytes:
    import pyarrow.ipc as ipc

    from schemas import ngram_dictionary as nd

    path.mkdir()
    table = pa.table(
        {
            "ngram": ["of the", "New York City"],
            "n": pa.array([2, 3], pa.int8()),
            "count": pa.array([40, 12], pa.int64()),
        },
        schema=nd.ARROW_SCHEMA,
    )
    with ipc.new_file(str(path / nd.ARROW_FILE), nd.ARROW_SCHEMA) as w:
        w.write_table(table)
    (path / nd.MANIFEST_FILE).write_text(json.dumps(manifest))
    return (path / nd.ARROW_FILE).read_bytes()


def test_the_ngram_dictionary_reader_reads_and_refuses(tmp_path):
    import hashlib

    from schemas.ngram_dictionary import NgramDictionary

    good = {"format": "spanprep-ngram-dictionary", "format_version": 1, "options": {"lowercase": True}}
    raw = _write_ngram_dictionary(tmp_path / "good", good)
    d = NgramDictionary.open(str(tmp_path / "good"))
    assert d.manifest == good and d.lowercase is True
    assert d.read_table().to_pylist() == [
        {"ngram": "of the", "n": 2, "count": 40},
        {"ngram": "New York City", "n": 3, "count": 12},
    ]
    assert d.arrow_sha256() == hashlib.sha256(raw).hexdigest()
    with pytest.raises(ValueError, match=r"nowhere: not a complete n-gram dictionary \(no manifest.json"):
        NgramDictionary.open(str(tmp_path / "nowhere"))
    _write_ngram_dictionary(tmp_path / "other", {**good, "format": "something-else"})
    with pytest.raises(ValueError, match="other: not an n-gram dictionary"):
        NgramDictionary.open(str(tmp_path / "other"))
    _write_ngram_dictionary(tmp_path / "future", {**good, "format_version": 2})
    with pytest.raises(ValueError, match="future: n-gram dictionary format version 2 is not one this code reads"):
        NgramDictionary.open(str(tmp_path / "future"))


def test_manifest_of_2_1_adds_removed_documents_and_2_0_manifests_still_pass(demo_artifact):
    """2.1 adds counts.documents_duplicate, counts.documents_contaminated and removed[]; a 2.0 manifest has none."""
    from schemas.manifest import manifest_problems

    m = json.loads((demo_artifact / "manifest.json").read_text())
    assert m["removed"] == [] and (m["counts"]["documents_duplicate"], m["counts"]["documents_contaminated"]) == (0, 0)
    assert manifest_problems(m) == []
    old = {k: v for k, v in m.items() if k not in ("removed", "dedup")}
    old["counts"] = {k: v for k, v in m["counts"].items() if k not in ("documents_duplicate", "documents_contaminated")}
    assert manifest_problems(old) == []
    bad = {**m, "counts": {**m["counts"], "documents_duplicate": -1}, "removed": [{"path": "../x"}]}
    problems = manifest_problems(bad)
    assert any(p.startswith("counts.documents_duplicate:") for p in problems)
    assert any(p.startswith("removed[0].path:") for p in problems)
