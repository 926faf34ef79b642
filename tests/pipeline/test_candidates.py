"""Mask candidates in the shard job: spaCy entities and noun phrases, dictionary n-grams, aligned to tokens."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow.ipc as ipc
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.candidates import spacy_spans
from pipeline.candidates.mask_candidates import FindMaskCandidates
from pipeline.elements import Document, Source
from pipeline.read import records
from pipeline.read.records import ReaderOptions
from pipeline.verify import verify
from schemas.artifact import Artifact
from tests.conftest import build, wikitext2_articles

MODEL = spacy_spans.default_spacy_model()


@pytest.fixture(scope="module")
def nlp():
    import spacy

    return spacy.load(MODEL)


@pytest.fixture(scope="module")
def wikitext_subset(tmp_path_factory) -> Path:
    """The first 6 articles of WikiText-2's validation split (real text, small enough for spaCy in CI)."""
    return wikitext2_articles(6, tmp_path_factory.mktemp("wt"))


@pytest.fixture(scope="module")
def candidates_artifact(wikitext_subset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cand") / "artifact"
    build(
        wikitext_subset,
        out,
        "--input-format",
        "wikitext",
        "--train-tokenizer",
        "--vocab-size",
        "4000",
        "--num-shards",
        "2",
        "--mask-candidates",
        "entities,noun_phrases",
        "--spacy-model",
        MODEL,
    )
    return out


def _doc_rows(artifact: Path) -> dict[str, list[dict]]:
    by_doc: dict[str, list[dict]] = {}
    for shard in sorted(glob.glob(str(artifact / "shards" / "*.arrow"))):
        for row in ipc.open_file(shard).read_all().to_pylist():
            by_doc.setdefault(row["doc_id"], []).append(row)
    return by_doc


def _expected_token_spans(char_spans, offsets, word_ids):
    """Independent alignment: tokens overlapping each character span, widened to whole words."""
    out = []
    for start, end, label in char_spans:
        toks = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
        if not toks:
            continue
        first, last = toks[0], toks[-1]
        while first > 0 and word_ids[first - 1] == word_ids[first]:
            first -= 1
        while last + 1 < len(word_ids) and word_ids[last + 1] == word_ids[last]:
            last += 1
        out.append((first, last + 1, label))
    return sorted(set(out))


def _check_against_spacy(artifact: Path, nlp, kind: str, column: str) -> int:
    from tokenizers import Tokenizer

    art = Artifact.open(str(artifact))
    tok = Tokenizer.from_str(art.tokenizer_json())
    opts = ReaderOptions(input_format="wikitext", wikitext_unk="[UNK]")
    docs = [d for d in records.read_file(art.manifest["inputs"][0]["path"], opts) if isinstance(d, Document)]
    by_doc = _doc_rows(artifact)
    checked = 0
    for d in docs:
        sp = nlp(d.text)
        if kind == "entities":
            chars = [
                (e.start_char, e.end_char, e.label_)
                for e in sp.ents
                if e.label_ not in spacy_spans.NUMERIC_ENTITY_LABELS
            ]
        else:
            chars = [(c.start_char, c.end_char, None) for c in sp.noun_chunks]
        enc = tok.encode(d.text, add_special_tokens=False)
        expected = _expected_token_spans(chars, enc.offsets, enc.word_ids)
        rows = by_doc[d.doc_id]
        bounds = np.cumsum([0] + [len(r["input_ids"]) for r in rows])
        inside = [
            (s, e, lab)
            for s, e, lab in expected
            if any(bounds[i] <= s and e <= bounds[i + 1] for i in range(len(rows)))
        ]
        stored = sorted(
            (int(bounds[i]) + span["start"], int(bounds[i]) + span["end"], span.get("label"))
            for i, r in enumerate(rows)
            for span in r[column]
        )
        assert stored == inside, d.doc_id
        checked += len(stored)
    return checked


def test_entity_spans_equal_spacy_run_directly_on_the_same_text(candidates_artifact, nlp):
    checked = _check_against_spacy(candidates_artifact, nlp, "entities", "entity_spans")
    assert checked > 100


def test_noun_phrase_spans_equal_spacy_noun_chunks(candidates_artifact, nlp):
    checked = _check_against_spacy(candidates_artifact, nlp, "noun_phrases", "noun_phrase_spans")
    assert checked > 500


def test_no_numerical_entity_labels_and_the_manifest_names_the_model(candidates_artifact):
    labels = [s["label"] for rows in _doc_rows(candidates_artifact).values() for r in rows for s in r["entity_spans"]]
    assert len(labels) > 100
    assert not set(labels) & spacy_spans.NUMERIC_ENTITY_LABELS
    assert {"PERSON", "GPE"} <= set(labels)
    m = Artifact.open(str(candidates_artifact)).manifest
    assert m["candidates"]["kinds"] == ["entities", "noun_phrases"]
    assert m["candidates"]["spacy_model"]["name"] == MODEL and m["candidates"]["spacy_model"]["version"] == "3.8.0"
    assert m["candidates"]["spans"]["entities"] == len(labels)
    report = verify(str(candidates_artifact))
    assert report.ok, report.problems
    assert report.checked["entities spans checked"] == len(labels)


def test_without_candidates_the_columns_are_empty_and_spacy_is_not_loaded(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from tests.conftest import build; "
        f"build({str(Path(__file__).parents[2] / 'pipeline/data/demo_corpus.jsonl')!r}, {str(tmp_path / 'a')!r}, '--vocab-size', '1000', '--num-shards', '1'); "
        "assert 'spacy' not in sys.modules, 'spaCy was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2], capture_output=True)
    rows = ipc.open_file(str(tmp_path / "a" / "shards" / "part-00000-of-00001.arrow")).read_all()
    assert rows.num_rows > 0
    for column in ("entity_spans", "noun_phrase_spans", "ngram_spans"):
        assert sum(len(v) for v in rows.column(column).to_pylist()) == 0


def test_long_documents_are_annotated_in_pieces_without_losing_text(nlp):
    paragraphs = [
        "Angela Merkel met Emmanuel Macron in Berlin.",
        "The Rhine flows through Germany and the Netherlands.",
        "Apple opened an office in Lisbon.",
    ]
    text = "\n\n".join(paragraphs)
    starts = spacy_spans.split_text(text, max_chars=60)
    assert starts[0] == 0 and len(starts) == 3
    assert "".join(text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])) == text
    pieced = spacy_spans.annotate(nlp, [text], ("entities",), "spacy", None, max_chars=60, batch_size=4)[0][0]
    offset, expected = 0, []
    for p in paragraphs:
        expected += [
            (offset + e.start_char, offset + e.end_char)
            for e in nlp(p).ents
            if e.label_ not in spacy_spans.NUMERIC_ENTITY_LABELS
        ]
        offset += len(p) + 2
    assert list(zip(pieced.starts, pieced.ends)) == expected and len(expected) >= 5
    assert [text[s:e] for s, e in expected][:2] == ["Angela Merkel", "Emmanuel Macron"]


def test_split_text_cuts_at_whitespace_when_a_paragraph_is_too_long():
    text = "word " * 50
    starts = spacy_spans.split_text(text, max_chars=32)
    assert all(b - a <= 32 for a, b in zip(starts, starts[1:] + [len(text)]))
    assert all(text[s - 1] == " " for s in starts[1:])


def test_nltk_chunker_over_spacy_tags(nlp):
    chunker = spacy_spans.Chunker(spacy_spans.NLTK_NP_GRAMMAR)
    doc = nlp("The quick brown fox jumped over the lazy dog's old kennel near 3 large rivers.")
    chunks = [doc.text[s:e] for s, e in chunker.chunks(doc)]
    assert chunks == ["The quick brown fox", "the lazy dog's old kennel", "3 large rivers"]


def test_find_mask_candidates_composite(nlp):
    docs = [
        Document("a", "Barack Obama visited Paris in 2015.", Source("f", 1, 0)),
        Document("b", "No names here, only 42 cats.", Source("f", 2, 40)),
    ]
    with TestPipeline(runner="FnApiRunner") as p:
        found = (
            p | beam.Create([0, 1]) | beam.Map(lambda i: docs[i]) | FindMaskCandidates(None, ["entities"], batch_size=2)
        )
        out = found["documents"] | beam.Map(
            lambda a: (
                a.document.doc_id,
                [(a.document.text[s:e], lab) for cs in a.spans for s, e, lab in zip(cs.starts, cs.ends, cs.labels)],
            )
        )
        assert_that(out, equal_to([("a", [("Barack Obama", "PERSON"), ("Paris", "GPE")]), ("b", [])]), label="spans")
        # the worker resolved the default model itself and says which one it used
        models = found["models"] | beam.Map(lambda m: (json.loads(m)["name"], json.loads(m)["version"]))
        assert_that(models, equal_to([(MODEL, "3.8.0")]), label="models")


def test_ngram_spans_are_the_segmenters_multiword_segments(tmp_path, wikitext_subset):
    from pipeline import build_ngram_dictionary
    from schemas.segmenter import Segmenter

    build_ngram_dictionary.run(
        [
            "--input",
            str(wikitext_subset),
            "--output",
            str(tmp_path / "dict"),
            "--min-count",
            "3",
            "--runner",
            "FnApiRunner",
        ]
    )
    seg = Segmenter.from_dictionary(str(tmp_path / "dict"))
    assert len(seg) > 50
    out = tmp_path / "a"
    build(
        wikitext_subset,
        out,
        "--input-format",
        "wikitext",
        "--vocab-size",
        "4000",
        "--num-shards",
        "2",
        "--mask-candidates",
        "ngrams",
        "--ngram-dictionary",
        str(tmp_path / "dict"),
    )
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    checked = 0
    for rows in _doc_rows(out).values():
        for r in rows:
            spans = [(s["start"], s["end"]) for s in r["ngram_spans"]]
            assert spans == sorted(spans) and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no overlap
            ws = r["word_start"]
            for s, e in spans:
                words = []
                for i in range(s, e):
                    piece = tok.id_to_token(r["input_ids"][i])
                    if ws[i]:
                        words.append(piece)
                    else:
                        words[-1] += piece.removeprefix("##")
                # a multi-word segment on its own is one dictionary entry
                assert len(words) >= 2 and words in seg, words
                checked += 1
    assert checked > 20
    m = Artifact.open(str(out)).manifest
    assert m["candidates"]["ngram_dictionary"]["segmenter_entries"] == len(seg)
    assert (
        m["candidates"]["ngram_dictionary"]["entries"]
        == ipc.open_file(str(tmp_path / "dict" / "ngrams.arrow")).read_all().num_rows
    )
    assert verify(str(out)).ok
