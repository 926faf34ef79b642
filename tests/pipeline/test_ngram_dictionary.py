"""The n-gram dictionary job (pipeline.build_ngram_dictionary) and its stages (pipeline.ngrams).

Counts are checked against hand-counted examples and against a brute-force counter written here, independent
of the pipeline's code (no pruning, no runs, no bundles): every window of every non-heading line.
"""

from __future__ import annotations

import collections
import hashlib
import json
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import apache_beam as beam
import pyarrow.ipc as ipc
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import pipeline
from pipeline import build_ngram_dictionary as job
from pipeline import output
from pipeline.ngrams import dictionary_files, frequent_pairs
from pipeline.ngrams.codes import encode_code
from pipeline.ngrams.corpus_summary import CorpusSummary
from pipeline.ngrams.counted_ngrams import CountNgrams, KeepFrequent
from pipeline.ngrams.decoded_ngrams import DecodeNgrams
from pipeline.ngrams.dictionary_files import WriteNgramDictionary
from pipeline.ngrams.frequent_longer_ngrams import FrequentLongerNgrams
from pipeline.ngrams.frequent_ngrams import FrequentNgrams
from pipeline.ngrams.frequent_pairs import FrequentPairs
from pipeline.ngrams.frequent_words import FrequentWords
from pipeline.ngrams.lines import ReadLines
from pipeline.ngrams.rules import NgramRules, is_punctuation, line_runs
from pipeline.ngrams.source_files import SourceFiles
from pipeline.read.wikitext import heading_level
from pipeline.runners.jobs import UsageError
from schemas import ngram_dictionary as ngram_format

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(__file__).resolve().parents[3] / "shared"
WIKITEXT2 = SHARED / "data" / "wikitext-2"
needs_wikitext2 = pytest.mark.skipif(
    not (WIKITEXT2 / "wiki.valid.tokens").exists(), reason="../shared/data/wikitext-2 is not available"
)


# --------------------------------------------------------------------------------------------------
# The reference: brute force, straight from the rules


def _reference_punctuation(token: str) -> bool:
    return token in ("@-@", "@,@", "@.@") or all(unicodedata.category(c)[0] in "PS" for c in token)


def brute_force(lines, *, min_n, max_n, min_count, lowercase=False, drop_punctuation=False) -> dict[str, int]:
    counts = collections.Counter()
    for line in lines:
        if heading_level(line):
            continue
        tokens = line.split()
        for n in range(min_n, max_n + 1):
            for i in range(len(tokens) - n + 1):
                window = tokens[i : i + n]
                if "<unk>" in window:
                    continue
                if drop_punctuation and any(_reference_punctuation(w) for w in window):
                    continue
                key = " ".join(window)
                counts[key.lower() if lowercase else key] += 1
    return {k: v for k, v in counts.items() if v >= min_count}


def dictionary_rows(output: Path) -> list[tuple[str, int, int]]:
    with ipc.open_file(output / ngram_format.ARROW_FILE) as reader:
        table = reader.read_all()
    return list(zip(table["ngram"].to_pylist(), table["n"].to_pylist(), table["count"].to_pylist()))


def expected_rows(counts: dict[str, int]) -> list[tuple[str, int, int]]:
    return [(k, k.count(" ") + 1, v) for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def run_job(tmp: Path, inputs, name, *extra) -> Path:
    out = tmp / name
    argv = [a for path in inputs for a in ("--input", str(path))] + ["--output", str(out), *extra]
    job.run(argv)
    return out


def frequent_ngrams(p, paths, rules, **kwargs):
    """FrequentNgrams applied as the job applies it: to the lines (first read) and the paths."""
    paths = p | "Paths" >> beam.Create([str(path) for path in paths])
    lines = paths | "Lines" >> ReadLines(split_bytes=1 << 20, with_filename=True)
    return {"lines": lines, "paths": paths} | FrequentNgrams(rules, **kwargs)


# --------------------------------------------------------------------------------------------------
# A tiny WikiText snippet, counted by hand

SNIPPET = (
    " \n"
    " = Cats = \n"
    " \n"
    " the cat sat on the mat . the cat sat . \n"
    " = = The cat = = \n"
    " the cat <unk> sat on the mat @-@ like rug , the cat \n"
    " on the mat \n"
    " = = = the cat sat = = = \n"
)
# Bigrams and trigrams of SNIPPET, every one of them, counted by hand. Not there: ". the" across lines 4-6,
# "cat on" across lines 6-7, "cat sat" / "cat <unk>" across <unk>, anything from the three headings.
SNIPPET_COUNTS = {
    "the cat": 4,
    "on the": 3,
    "the mat": 3,
    "cat sat": 2,
    "sat on": 2,
    "mat .": 1,
    ". the": 1,
    "sat .": 1,
    "mat @-@": 1,
    "@-@ like": 1,
    "like rug": 1,
    "rug ,": 1,
    ", the": 1,
    "on the mat": 3,
    "the cat sat": 2,
    "sat on the": 2,
    "cat sat on": 1,
    "the mat .": 1,
    "mat . the": 1,
    ". the cat": 1,
    "cat sat .": 1,
    "the mat @-@": 1,
    "mat @-@ like": 1,
    "@-@ like rug": 1,
    "like rug ,": 1,
    "rug , the": 1,
    ", the cat": 1,
}


@pytest.fixture(scope="module")
def snippet_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("snippet") / "snippet.tokens"
    path.write_text(SNIPPET, encoding="utf-8")
    return path


def test_brute_force_counter_agrees_with_the_hand_count():
    assert brute_force(SNIPPET.splitlines(), min_n=2, max_n=3, min_count=1) == SNIPPET_COUNTS


def test_job_on_the_snippet_matches_the_hand_count(snippet_file, tmp_path):
    out = run_job(tmp_path, [snippet_file], "d", "--min-n", "2", "--max-n", "3", "--min-count", "2")
    assert dictionary_rows(out) == [
        ("the cat", 2, 4),
        ("on the", 2, 3),
        ("on the mat", 3, 3),
        ("the mat", 2, 3),
        ("cat sat", 2, 2),
        ("sat on", 2, 2),
        ("sat on the", 3, 2),
        ("the cat sat", 3, 2),
    ]
    manifest = json.loads((out / ngram_format.MANIFEST_FILE).read_text())
    assert manifest["entries_per_n"] == {"2": 5, "3": 3}
    assert manifest["total_entries"] == 8
    assert manifest["corpus"] == {
        "lines": 8,
        "blank_lines": 2,
        "heading_lines": 3,
        "paragraph_lines": 3,
        "undecodable_lines": 0,
        "paragraph_tokens": 11 + 13 + 3,
        "unk_tokens": 1,
    }


def test_threshold_is_inclusive(snippet_file):
    rules = dict(min_n=2, max_n=4)
    for min_count, expected in [
        (4, {"the cat": 4}),
        (3, {"the cat": 4, "on the": 3, "the mat": 3, "on the mat": 3}),
        (5, {}),
    ]:
        with TestPipeline(runner="FnApiRunner") as p:
            got = frequent_ngrams(p, [snippet_file], NgramRules(**rules, min_count=min_count))
            assert_that(got, equal_to(list(expected.items())))


def test_words_only_dictionary(snippet_file):
    with TestPipeline(runner="FnApiRunner") as p:
        got = frequent_ngrams(p, [snippet_file], NgramRules(min_n=1, max_n=1, min_count=4))
        assert_that(got, equal_to([("the", 7), ("cat", 4)]))


def test_four_gram_found_through_its_frequent_three_grams(snippet_file):
    # "sat on the mat" occurs once on line 4 and once on line 6 (after the <unk>): 2; its 3-grams
    # "sat on the" (2) and "on the mat" (3) are frequent, so the apriori pass counts it.
    expected = {
        "the cat": 4,
        "on the": 3,
        "the mat": 3,
        "cat sat": 2,
        "sat on": 2,
        "on the mat": 3,
        "the cat sat": 2,
        "sat on the": 2,
        "sat on the mat": 2,
    }
    for pruning in ("apriori", "none"):
        with TestPipeline(runner="FnApiRunner") as p:
            got = frequent_ngrams(p, [snippet_file], NgramRules(min_n=2, max_n=5, min_count=2), pruning=pruning)
            assert_that(got, equal_to(list(expected.items())))


def test_drop_punctuation_on_the_snippet(snippet_file):
    expected = {k: v for k, v in SNIPPET_COUNTS.items() if k.count(" ") == 1}
    for dropped in ["mat .", ". the", "sat .", "mat @-@", "@-@ like", "rug ,", ", the"]:
        del expected[dropped]
    assert expected == {"the cat": 4, "on the": 3, "the mat": 3, "cat sat": 2, "sat on": 2, "like rug": 1}
    with TestPipeline(runner="FnApiRunner") as p:
        got = frequent_ngrams(p, [snippet_file], NgramRules(min_n=2, max_n=2, min_count=1, drop_punctuation=True))
        assert_that(got, equal_to(list(expected.items())))


def test_compressed_input_gives_the_same_dictionary(snippet_file, tmp_path):
    import gzip

    packed = tmp_path / "snippet.tokens.gz"
    packed.write_bytes(gzip.compress(snippet_file.read_bytes()))
    plain = run_job(tmp_path, [snippet_file], "plain", "--min-count", "2")
    from_gz = run_job(tmp_path, [packed], "gz", "--min-count", "2")
    assert len(dictionary_rows(plain)) == 9  # as in test_four_gram_found_through_its_frequent_three_grams
    assert (from_gz / ngram_format.ARROW_FILE).read_bytes() == (plain / ngram_format.ARROW_FILE).read_bytes()
    manifest = json.loads((from_gz / ngram_format.MANIFEST_FILE).read_text())
    assert manifest["sources"][0]["bytes"] == packed.stat().st_size  # the raw (compressed) file is hashed


def test_lowercase_merges_case_variants(tmp_path):
    path = tmp_path / "cases.tokens"
    path.write_text(" The cat \n the Cat \n THE CAT \n = The Cat = \n", encoding="utf-8")
    for lowercase, expected in [(True, [("the cat", 3)]), (False, [("THE CAT", 1), ("The cat", 1), ("the Cat", 1)])]:
        with TestPipeline(runner="FnApiRunner") as p:
            got = frequent_ngrams(p, [path], NgramRules(min_n=2, max_n=2, min_count=1, lowercase=lowercase))
            assert_that(got, equal_to(expected))


def test_equals_sign_outside_a_heading_is_a_symbol_token(tmp_path):
    # WikiText has table leftovers like " = National record " that are not headings (no closing markup).
    path = tmp_path / "eq.tokens"
    path.write_text(" = National record \n = = Real heading = = \n C = O \n", encoding="utf-8")
    assert heading_level(" = National record ") == 0
    with TestPipeline(runner="FnApiRunner") as p:
        got = frequent_ngrams(p, [path], NgramRules(min_n=2, max_n=3, min_count=1))
        assert_that(
            got,
            equal_to(
                [
                    ("= National", 1),
                    ("National record", 1),
                    ("= National record", 1),
                    ("C =", 1),
                    ("= O", 1),
                    ("C = O", 1),
                ]
            ),
        )


# --------------------------------------------------------------------------------------------------
# Rules, piece by piece


def test_punctuation_definition():
    for token in [
        ",",
        ".",
        '"',
        "(",
        ")",
        ";",
        ":",
        "'",
        "–",
        "—",
        "/",
        "%",
        "$",
        "=",
        "...",
        "°",
        "£",
        "+",
        "@-@",
        "@,@",
        "@.@",
        "&",
        "♭",
        "''",
        "@",
    ]:  # a lone @ is Unicode punctuation (Po)
        assert is_punctuation(token), token
    for token in ["the", "1.5", "U.S.", "½", "'s", "n't", "@x@", "<unk>", "3", "é", "H2O", "-1", "a_b"]:
        assert not is_punctuation(token), token


def test_line_runs_break_at_unk_headings_and_punctuation():
    assert line_runs(" = = Section = = ") == []
    assert line_runs("   ") == []
    assert line_runs(" a b <unk> c d <unk> ") == [["a", "b"], ["c", "d"]]
    assert line_runs(" <unk> <unk> ") == []
    assert line_runs(" a , b @-@ c <unk> d ", drop_punctuation=True) == [["a"], ["b"], ["c"], ["d"]]
    assert line_runs(" A , B ", lowercase=True) == [["a", ",", "b"]]
    assert line_runs(" = National record ") == [["=", "National", "record"]]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(min_n=0), "min_n must be >= 1"),
        (dict(min_n=3, max_n=2), "max_n (2) must be >= min_n (3)"),
        (dict(min_count=0), "min_count must be >= 1"),
        (dict(max_n=101), "max_n must be <= 100"),
    ],
)
def test_rules_refuse_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        NgramRules(**kwargs)


# --------------------------------------------------------------------------------------------------
# Composites: TestPipeline + assert_that


def test_keep_frequent_keeps_exactly_the_threshold():
    with TestPipeline(runner="FnApiRunner") as p:
        got = p | beam.Create([("a b", 10), ("b c", 11), ("c d", 12), ("d e", 1)]) | KeepFrequent(11)
        assert_that(got, equal_to([("b c", 11), ("c d", 12)]))


def test_count_ngrams_counts_every_ngram_as_strings(snippet_file):
    expected = {k: v for k, v in SNIPPET_COUNTS.items() if k.count(" ") == 2}
    with TestPipeline(runner="FnApiRunner") as p:
        lines = p | beam.Create([str(snippet_file)]) | ReadLines(split_bytes=1 << 20, with_filename=True)
        got = lines | CountNgrams(
            rules=NgramRules(min_n=3, max_n=3, min_count=1),
            lengths=[3],
            max_keys_per_bundle=3,  # flush partial counts often: the sums must still be exact
        )
        assert_that(got, equal_to(list(expected.items())))


SNIPPET_WORDS = sorted(["cat", "mat", "on", "sat", "the"])  # ids 0..4: cat, mat, on, sat, the


def _table(n, keys, counts):
    import numpy as np

    blob = "\n".join(keys).encode() if n == 1 else np.array(keys, "<i8").tobytes()
    return n, 0, blob, np.array(counts, "<i8").tobytes()


def test_frequent_words_pairs_and_longer_stages_on_the_snippet(snippet_file):
    rules = NgramRules(min_n=1, max_n=3, min_count=2)
    with TestPipeline(runner="FnApiRunner") as p:
        paths = p | beam.Create([str(snippet_file)])
        lines = paths | ReadLines(split_bytes=1 << 20, with_filename=True)
        word_tables = lines | "Words" >> FrequentWords(rules=rules, max_keys_per_bundle=2)
        pair_tables, chunks = paths | "Pairs" >> FrequentPairs(
            rules=rules, word_tables=word_tables, split_bytes=1 << 20, max_keys_per_bundle=2
        )
        triple_tables, _ = chunks | "Triples" >> FrequentLongerNgrams(
            n=3, min_count=2, shorter_tables=pair_tables, max_keys_per_bundle=2, pass_on=True
        )
        tables = (word_tables, pair_tables, triple_tables) | beam.Flatten()
        assert_that(
            tables | DecodeNgrams(min_n=1),
            equal_to(
                [
                    ("the", 7),
                    ("cat", 4),
                    ("on", 3),
                    ("mat", 3),
                    ("sat", 3),
                    (".", 2),  # words: counted by hand
                    ("the cat", 4),
                    ("on the", 3),
                    ("the mat", 3),
                    ("cat sat", 2),
                    ("sat on", 2),
                    ("on the mat", 3),
                    ("the cat sat", 2),
                    ("sat on the", 2),
                ]
            ),
        )


def test_longer_stage_counts_only_candidates_whose_shorter_ngrams_are_frequent(snippet_file):
    # Given words and only four "frequent" pairs, the 3-gram stage counts a 3-gram only if both of its pairs
    # are among them: "the cat sat" (the cat, cat sat) and "on the mat" (on the, the mat); not "sat on the".
    ids = {w: i for i, w in enumerate(SNIPPET_WORDS)}
    pairs = sorted(
        encode_code(ids[a], ids[b]) for a, b in [("the", "cat"), ("cat", "sat"), ("on", "the"), ("the", "mat")]
    )
    rules = NgramRules(min_n=3, max_n=3, min_count=1)
    with TestPipeline(runner="FnApiRunner") as p:
        paths = p | beam.Create([str(snippet_file)])
        word_tables = p | "Words" >> beam.Create([_table(1, SNIPPET_WORDS, [1] * 5)])
        pair_tables = p | "PairTables" >> beam.Create([_table(2, pairs, [1] * 4)])
        _, chunks = paths | FrequentPairs(
            rules=rules, word_tables=word_tables, split_bytes=1 << 20, max_keys_per_bundle=100
        )
        triple_tables, _ = chunks | FrequentLongerNgrams(
            n=3, min_count=1, shorter_tables=pair_tables, max_keys_per_bundle=100, pass_on=False
        )
        tables = (word_tables, pair_tables, triple_tables) | beam.Flatten()
        assert_that(tables | DecodeNgrams(min_n=3), equal_to([("the cat sat", 2), ("on the mat", 3)]))


def test_corpus_summary_counts_lines_and_dead_letters_undecodable_ones(tmp_path):
    path = tmp_path / "bad.tokens"
    path.write_bytes(b" = Title = \n \n a b <unk> c \n caf\xe9 au lait \n d e \n")
    with TestPipeline(runner="FnApiRunner") as p:
        lines = p | beam.Create([str(path)]) | ReadLines(split_bytes=1 << 20, with_filename=True)
        summary, dead_letters = lines | CorpusSummary()
        assert_that(
            summary,
            equal_to(
                [
                    {
                        "lines": 5,
                        "blank_lines": 1,
                        "heading_lines": 1,
                        "paragraph_lines": 2,
                        "undecodable_lines": 1,
                        "paragraph_tokens": 6,
                        "unk_tokens": 1,
                    }
                ]
            ),
            label="summary",
        )
        assert_that(
            dead_letters,
            equal_to(
                [
                    {
                        "source": str(path),
                        "reason": "not UTF-8: invalid continuation byte at byte 4",
                        "line": " caf\\xe9 au lait ",
                    }
                ]
            ),
            label="dead_letters",
        )


def test_source_files_hash_the_raw_bytes(snippet_file):
    data = snippet_file.read_bytes()
    with TestPipeline(runner="FnApiRunner") as p:
        got = p | beam.Create([str(snippet_file)]) | SourceFiles()
        assert_that(
            got, equal_to([{"path": str(snippet_file), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}])
        )


def test_write_ngram_dictionary_writes_sorted_files_and_manifest_last(tmp_path, monkeypatch):
    monkeypatch.setattr(
        dictionary_files, "ARROW_BATCH_ROWS", 2
    )  # several record batches and TSV blocks (in-process runner)
    out = tmp_path / "dict"
    rules = NgramRules(min_n=2, max_n=3, min_count=2)
    with TestPipeline(runner="FnApiRunner") as p:
        entries = p | "Entries" >> beam.Create([("b c", 2), ("a b c", 7), ("a b", 7), ("é f", 3), ("z y", 3)])
        sources = p | "Sources" >> beam.Create([{"path": "x", "bytes": 1, "sha256": "0" * 64}])
        summary = p | "Summary" >> beam.Create([{"lines": 1}])
        dead = p | "Dead" >> beam.Create([])
        manifests = (entries, sources, summary, dead) | dictionary_files.WriteNgramDictionary(
            output=str(out), options={"min_count": 2}, rules=rules
        )
        assert_that(
            manifests | beam.Map(lambda m: (m["total_entries"], m["entries_per_n"])), equal_to([(5, {"2": 4, "3": 1})])
        )
    assert dictionary_rows(out) == [("a b", 2, 7), ("a b c", 3, 7), ("z y", 2, 3), ("é f", 2, 3), ("b c", 2, 2)]
    assert (out / ngram_format.TSV_FILE).read_text(encoding="utf-8") == (
        "ngram\tn\tcount\na b\t2\t7\na b c\t3\t7\nz y\t2\t3\né f\t2\t3\nb c\t2\t2\n"
    )
    manifest = json.loads((out / ngram_format.MANIFEST_FILE).read_text())
    for name in (ngram_format.ARROW_FILE, ngram_format.TSV_FILE, ngram_format.DEAD_LETTER_FILE):
        data = (out / name).read_bytes()
        assert manifest["files"][name] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # the file written last is the manifest
    assert (
        max((out / n).stat().st_mtime_ns for n in manifest["files"])
        <= (out / ngram_format.MANIFEST_FILE).stat().st_mtime_ns
    )


# --------------------------------------------------------------------------------------------------
# The job against brute force on random WikiText-like input


def _random_wikitext(rng: random.Random, lines: int) -> str:
    vocab = [
        "the",
        "The",
        "cat",
        "sat",
        "on",
        "mat",
        "a",
        "dog",
        ",",
        ".",
        "@-@",
        "@,@",
        "1",
        "000",
        "<unk>",
        "(",
        ")",
        "é",
        "–",
    ]
    weights = [9, 3, 6, 5, 5, 4, 5, 3, 5, 4, 2, 1, 2, 2, 2, 1, 1, 1, 1]
    out = []
    for _ in range(lines):
        r = rng.random()
        if r < 0.1:
            out.append(" ")
        elif r < 0.2:
            level = rng.randint(1, 3)
            markup = " ".join(["="] * level)
            out.append(f" {markup} {' '.join(rng.choices(vocab[:8], k=rng.randint(1, 3)))} {markup} ")
        else:
            out.append(" " + " ".join(rng.choices(vocab, weights, k=rng.randint(1, 40))) + " ")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def random_corpus(tmp_path_factory) -> list[Path]:
    rng = random.Random(20240601)
    root = tmp_path_factory.mktemp("random")
    paths = []
    for i in range(3):
        path = root / f"part{i}.tokens"
        path.write_text(_random_wikitext(rng, 300), encoding="utf-8")
        paths.append(path)
    return paths


def _corpus_lines(paths) -> list[str]:
    return [line for path in paths for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    "options",
    [
        dict(min_n=2, max_n=5, min_count=5),
        dict(min_n=1, max_n=4, min_count=3, lowercase=True, drop_punctuation=True),
        dict(min_n=2, max_n=5, min_count=2, pruning="none"),
    ],
    ids=["apriori", "lowercase-drop-punctuation", "no-pruning"],
)
def test_job_equals_brute_force_on_random_input(random_corpus, tmp_path, monkeypatch, options):
    monkeypatch.setattr(frequent_pairs, "CHUNK_TOKENS", 37)  # many id chunks per bundle (in-process runner)
    options = dict(options)
    pruning = options.pop("pruning", "apriori")
    argv = [
        "--min-n",
        str(options["min_n"]),
        "--max-n",
        str(options["max_n"]),
        "--min-count",
        str(options["min_count"]),
        "--pruning",
        pruning,
        "--split-mb",
        "0.001",
        "--max-keys-per-bundle",
        "50",
    ]  # ~1 kB byte ranges, frequent flushes
    if options.get("lowercase"):
        argv.append("--lowercase")
    if options.get("drop_punctuation"):
        argv.append("--drop-punctuation")
    out = run_job(tmp_path, random_corpus, "d", *argv)
    expected = brute_force(_corpus_lines(random_corpus), **options)
    rows = dictionary_rows(out)
    assert len(expected) > 0
    for n in range(options["min_n"], options["max_n"]):
        assert any(k.count(" ") + 1 == n for k in expected), f"the random input has no frequent {n}-gram"
    assert rows == expected_rows(expected)


def test_job_is_deterministic_across_runs_and_worker_counts(random_corpus, tmp_path):
    common = ["--min-count", "3", "--split-mb", "0.002"]
    first = run_job(tmp_path, random_corpus, "first", *common)
    second = run_job(tmp_path, random_corpus, "second", *common)
    multi = run_job(
        tmp_path,
        random_corpus,
        "multi",
        *common,
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        "2",
    )
    assert len(dictionary_rows(first)) > 0
    for name in (ngram_format.ARROW_FILE, ngram_format.TSV_FILE, ngram_format.MANIFEST_FILE):
        reference = (first / name).read_bytes()
        assert (second / name).read_bytes() == reference, name
        assert (multi / name).read_bytes() == reference, name


def test_manifest_describes_sources_options_and_entries(random_corpus, tmp_path):
    out = run_job(tmp_path, random_corpus, "d", "--min-count", "4")
    manifest = json.loads((out / ngram_format.MANIFEST_FILE).read_text())
    assert manifest["format"] == "spanprep-ngram-dictionary" and manifest["format_version"] == 1
    assert manifest["created_by"]["version"] == pipeline.__version__
    assert manifest["options"] == {
        "input": [str(p) for p in random_corpus],
        "min_n": 2,
        "max_n": 5,
        "min_count": 4,
        "lowercase": False,
        "drop_punctuation": False,
        "pruning": "apriori",
        "split_mb": None,
        "max_keys_per_bundle": 1000000,
        "split_bytes": 1 << 20,  # automatic: input size / 64, at least 1 MiB
    }
    assert manifest["sources"] == [
        {"path": str(p), "bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in sorted(random_corpus)
    ]
    rows = dictionary_rows(out)
    per_n = collections.Counter(str(n) for _, n, _ in rows)
    assert manifest["entries_per_n"] == {str(n): per_n[str(n)] for n in range(2, 6)}
    assert manifest["total_entries"] == len(rows) > 0
    lines = _corpus_lines(random_corpus)
    assert manifest["corpus"]["lines"] == len(lines)
    assert manifest["corpus"]["heading_lines"] == sum(1 for line in lines if heading_level(line))
    tsv = (out / ngram_format.TSV_FILE).read_text(encoding="utf-8").splitlines()
    assert tsv[0] == "ngram\tn\tcount"
    assert [tuple(r.split("\t")) for r in tsv[1:]] == [(g, str(n), str(c)) for g, n, c in rows]


# --------------------------------------------------------------------------------------------------
# Errors: one line, no traceback


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--output", "OUT"], "error: --input is required"),
        (["--input", "MISSING"], "error: --output is required"),
        (["--input", "MISSING", "--output", "OUT"], "build_ngram_dictionary: error: --input MISSING: no file matches"),
        (["--input", "SNIPPET", "--output", "OUT", "--min-n", "0"], "error: --min-n must be >= 1"),
        (
            ["--input", "SNIPPET", "--output", "OUT", "--min-n", "3", "--max-n", "2"],
            "error: --max-n (2) must be >= --min-n (3)",
        ),
        (["--input", "SNIPPET", "--output", "OUT", "--min-count", "0"], "error: --min-count must be >= 1"),
        (["--input", "SNIPPET", "--output", "OUT", "--min-cout", "3"], "error: unknown option(s): --min-cout"),
        (["--input", "SNIPPET", "--output", "OUT", "--split-mb", "0"], "error: --split-mb must be > 0"),
        (["--input", "DIR", "--output", "OUT"], "error: --input DIR: is a directory"),
    ],
)
def test_bad_options_and_input_give_one_clear_error(snippet_file, tmp_path, capsys, argv, message):
    replace = {
        "MISSING": str(tmp_path / "missing*.tokens"),
        "OUT": str(tmp_path / "out"),
        "SNIPPET": str(snippet_file),
        "DIR": str(tmp_path),
    }
    argv = [replace.get(a, a) for a in argv]
    message = message.replace("MISSING", replace["MISSING"]).replace("DIR", replace["DIR"])
    assert job.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "build_ngram_dictionary: error: " in err and "Traceback" not in err
    assert not (tmp_path / "out" / ngram_format.MANIFEST_FILE).exists()


@pytest.mark.parametrize(
    "argv,word",
    [
        (["--input", "SNIPPET", "--output", "OUT", "foo"], "foo"),
        (["--input", "SNIPPET", "SNIPPET2", "--output", "OUT", "--min-count", "2"], "SNIPPET2"),
    ],
)
def test_a_stray_word_is_refused_in_one_line_before_any_work(snippet_file, tmp_path, capsys, argv, word):
    """Beam's options ignore a word that is no option's value (a second file after --input among them): the job
    refuses it, naming it, before it claims the output."""
    second = tmp_path / "second.tokens"
    second.write_bytes(snippet_file.read_bytes())
    replace = {"OUT": str(tmp_path / "out"), "SNIPPET": str(snippet_file), "SNIPPET2": str(second)}
    word = replace.get(word, word)
    assert job.main([replace.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"build_ngram_dictionary: error: stray word(s) on the command line: {word} ("), err
    assert not (tmp_path / "out").exists()


def test_existing_dictionary_needs_overwrite(snippet_file, tmp_path, capsys):
    out = run_job(tmp_path, [snippet_file], "d", "--min-count", "2")
    with pytest.raises(UsageError, match="exists and is not empty .*pass --overwrite"):
        run_job(tmp_path, [snippet_file], "d", "--min-count", "3")
    assert dictionary_rows(out)[-1][2] == 2  # untouched
    run_job(tmp_path, [snippet_file], "d", "--min-count", "3", "--overwrite")
    assert [c for _, _, c in dictionary_rows(out)] == [4, 3, 3, 3]


def test_the_dictionary_job_shares_the_artifact_jobs_output_guard_and_build_lock(snippet_file, tmp_path):
    """Any file in --output (not only a manifest) needs --overwrite; a finished build leaves no lock; a build whose
    lock another build took over writes no manifest."""
    out = tmp_path / "d"
    out.mkdir()
    (out / "stray.txt").write_text("x")
    with pytest.raises(UsageError, match="exists and is not empty"):
        run_job(tmp_path, [snippet_file], "d", "--min-count", "2")
    run_job(tmp_path, [snippet_file], "d", "--min-count", "2", "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["dead_letter.jsonl", "manifest.json", "ngrams.arrow", "ngrams.tsv"]

    mine = output.prepare_output(str(out), overwrite=True, subdirs=())
    theirs = output.prepare_output(str(out), overwrite=True, subdirs=())
    rules = NgramRules(min_n=2, max_n=2, min_count=1)
    with pytest.raises(output.OutputError, match=f"belongs to build {theirs}"):
        with TestPipeline(runner="FnApiRunner") as p:
            _ = (
                p | "N" >> beam.Create([("a b", 1)]),
                p | "S" >> beam.Create([]),
                p | "C" >> beam.Create([{}]),
                p | "D" >> beam.Create([]),
            ) | WriteNgramDictionary(output=str(out), options={}, rules=rules, build_id=mine)
    assert not (out / ngram_format.MANIFEST_FILE).exists()


def test_command_line_error_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.build_ngram_dictionary",
            "--input",
            str(tmp_path / "nope.tokens"),
            "--output",
            str(tmp_path / "out"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"build_ngram_dictionary: error: --input {tmp_path / 'nope.tokens'}: no file matches\n"
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------------------------------
# Real data: WikiText-2


@needs_wikitext2
def test_wikitext2_dictionary_equals_brute_force(tmp_path):
    files = [WIKITEXT2 / "wiki.valid.tokens", WIKITEXT2 / "wiki.test.tokens"]
    out = run_job(tmp_path, files, "wikitext2")
    rows = dictionary_rows(out)
    assert len(rows) > 0
    assert all(count >= 11 for _, _, count in rows)
    assert all(2 <= n <= 5 and n == g.count(" ") + 1 for g, n, _ in rows)
    assert rows == sorted(rows, key=lambda r: (-r[2], r[0]))
    assert {n for _, n, _ in rows} == {2, 3, 4, 5}
    assert not any("<unk>" in g.split(" ") for g, _, _ in rows)
    assert rows == expected_rows(brute_force(_corpus_lines(files), min_n=2, max_n=5, min_count=11))
    manifest = json.loads((out / ngram_format.MANIFEST_FILE).read_text())
    published = {
        "wiki.valid.tokens": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
        "wiki.test.tokens": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    }
    assert {Path(s["path"]).name: s["sha256"] for s in manifest["sources"]} == published
    assert manifest["corpus"]["undecodable_lines"] == 0
    assert manifest["corpus"]["heading_lines"] > 0


@needs_wikitext2
def test_wikitext2_lowercase_without_punctuation_equals_brute_force(tmp_path):
    files = [WIKITEXT2 / "wiki.valid.tokens"]
    out = run_job(tmp_path, files, "lc", "--lowercase", "--drop-punctuation", "--min-count", "5")
    rows = dictionary_rows(out)
    assert len(rows) > 0
    assert all(g == g.lower() and not any(is_punctuation(w) for w in g.split(" ")) for g, _, _ in rows)
    expected = brute_force(_corpus_lines(files), min_n=2, max_n=5, min_count=5, lowercase=True, drop_punctuation=True)
    assert rows == expected_rows(expected)
