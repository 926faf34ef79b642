"""Both Beam jobs on Beam's Prism runner (``--runner PrismRunner``: Beam's portable runner written in Go, with its own
job service, fusion, bundle scheduling and SDK worker management) give byte-identical output to the FnApiRunner.

Prism's binary is the one ``make prism`` builds (``make test`` builds it first); the jobs find it themselves
(``pipeline/runners/prism.py``) where Beam cannot download its own. Each job runs with SDK workers in the launching process
(``LOOPBACK``) and in the project's worker pool (``EXTERNAL``, ``pipeline.worker_pool``; Prism asks the pool for one
SDK worker per environment, whatever ``--sdk_worker_parallelism`` says). The suite's time is short, so the option
sets are combined into three builds: one n-gram dictionary; one ``build_shards`` with a trained tokenizer, two files
(the demo corpus split into byte ranges, and bad records), ``--dedup near --decontaminate``, spaCy and n-gram
candidates (the n-grams of that dictionary); and one with ``--tokenizer-from`` (that build's tokenizer, exported as a
Hugging Face directory). Every file but ``manifest.json`` must have the same sha256, and the manifests must be equal
but for the build id, the time and the runner's options (tests/e2e/test_portability.py). A worker killed under
Prism: tests/e2e/test_killed_worker.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.runners import prism
from tests.conftest import DEMO_CORPUS, wikitext2_articles
from tests.e2e.test_portability import (
    BAD_RECORDS,
    _build_shards_options,
    _job_option_names,
    assert_identical,
    run_everywhere,
)
from tests.support import beam_services

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def environments(tmp_path_factory) -> dict[str, list[str]]:
    """Runner options of each run; the first is the reference."""
    assert prism.built_binary() is not None, f"no Prism binary at {prism.checkout_binary()}: run `make prism`"
    log = tmp_path_factory.mktemp("worker_pool") / "log"
    with beam_services.running(beam_services.WORKER_POOL, log) as pool:
        on_prism = ["--runner", "PrismRunner"]
        yield {
            "FnApiRunner": ["--runner", "FnApiRunner"],
            "Prism LOOPBACK": on_prism + ["--environment_type", "LOOPBACK"],
            "Prism EXTERNAL": on_prism + ["--environment_type", "EXTERNAL", "--environment_config", pool],
        }


@pytest.fixture(scope="module")
def dictionaries(environments, tmp_path_factory) -> dict[str, Path]:
    from pipeline import build_ngram_dictionary

    directory = tmp_path_factory.mktemp("dictionary")
    corpus = directory / "wiki.tokens"
    corpus.write_bytes(wikitext2_articles(3, directory).read_bytes() + b" caf\xe9 au lait \n")  # one undecodable line
    argv = ["--input", str(corpus), "--min-count", "2"]
    return run_everywhere(build_ngram_dictionary, argv, directory / "out", environments)


def test_build_ngram_dictionary_is_identical_on_prism(dictionaries):
    from pipeline import build_ngram_dictionary

    manifest = assert_identical(dictionaries, _job_option_names(build_ngram_dictionary.NgramDictionaryOptions))
    assert manifest["total_entries"] > 100 and manifest["corpus"]["undecodable_lines"] == 1


@pytest.fixture(scope="module")
def artifacts(environments, dictionaries, tmp_path_factory) -> dict[str, Path]:
    from pipeline import build_shards

    directory = tmp_path_factory.mktemp("artifact")
    bad = directory / "bad.jsonl"
    bad.write_bytes(b"".join(BAD_RECORDS))
    copy = directory / "copy.jsonl"  # near-duplicates of 5 demo documents (one word changed), left out by --dedup
    lines = DEMO_CORPUS.read_text(encoding="utf-8").splitlines()[:5]
    copy.write_text("".join(_changed_copy(json.loads(line)) for line in lines), encoding="utf-8")
    evals = directory / "eval.jsonl"  # shares 20 words with the demo corpus's 8th document
    words = json.loads(DEMO_CORPUS.read_text(encoding="utf-8").splitlines()[7])["text"].split()
    evals.write_text(json.dumps({"id": "ex-copied", "text": " ".join(words[10:30])}) + "\n", encoding="utf-8")
    argv = [
        "--input", str(DEMO_CORPUS), "--input", str(bad), "--input", str(copy), "--split-bytes", "16384",
        "--train-tokenizer", "--vocab-size", "3000", "--num-shards", "3",
        "--dedup", "near", "--decontaminate", str(evals),
        "--mask-candidates", "entities,noun_phrases,ngrams", "--ngram-dictionary", str(dictionaries["FnApiRunner"]),
    ]  # fmt: skip
    return run_everywhere(build_shards, argv, directory / "out", environments)


def _changed_copy(record: dict) -> str:
    words = record["text"].split(" ")
    words[len(words) // 2] = "changed"
    return json.dumps({"id": record["id"] + "-copy", "text": " ".join(words)}) + "\n"


def test_build_shards_with_every_option_set_is_identical_on_prism(artifacts):
    manifest = assert_identical(artifacts, _build_shards_options())
    c = manifest["counts"]
    assert c["documents_read"] == 40 + len(BAD_RECORDS) + 5 and c["documents_dead_lettered"] == len(BAD_RECORDS)
    assert c["documents_duplicate"] == 5 and c["documents_contaminated"] == 1, c
    assert c["documents_written"] == 39
    spans = manifest["candidates"]["spans"]
    assert spans["entities"] > 0 and spans["noun_phrases"] > 0 and spans["ngrams"] > 0, spans
    assert len(list((artifacts["Prism EXTERNAL"] / "shards").glob("*.arrow"))) == 3


def test_build_shards_with_tokenizer_from_is_identical_on_prism(artifacts, environments, tmp_path):
    from pipeline import build_shards
    from schemas.artifact import Artifact
    from trainer.export import write_tokenizer_files

    art = Artifact.open(str(artifacts["FnApiRunner"]))
    directory = tmp_path / "tokenizer"
    directory.mkdir()
    write_tokenizer_files(art.tokenizer_json(), art.manifest["tokenizer"], 512, str(directory))
    argv = ["--input", str(DEMO_CORPUS), "--tokenizer-from", str(directory), "--num-shards", "2"]
    results = run_everywhere(build_shards, argv, tmp_path / "out", environments)
    manifest = assert_identical(results, _build_shards_options())
    assert manifest["counts"]["documents_written"] == 40 and manifest["tokenizer"]["vocab_size"] == 3000
