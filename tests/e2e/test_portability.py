"""Portability: both Beam jobs through Beam's job API (PortableRunner -> a job service), the API that the Flink,
Spark and Dataflow runners use, give byte-identical output to the local FnApiRunner.

A local job service (``apache_beam.runners.portability.local_job_service_main``) is started on a free port for
the module and stopped at the end, whatever happens. Each job then runs three times on the same input into the
same output path:

- ``FnApiRunner``: the reference;
- ``PortableRunner --environment_type LOOPBACK``: the pipeline is serialised to a protobuf, submitted to the job
  service, and its transforms run in an SDK worker the job service reaches back in this process;
- ``PortableRunner --environment_type EXTERNAL``: the same, but the SDK worker is a fresh Python process started
  by a Beam worker pool (``apache_beam.runners.worker.worker_pool_main``, what the SDK container runs with
  ``--worker_pool`` beside a Flink task manager or Spark executor). Nothing of the launching process reaches it
  but the serialised pipeline, so state kept in the launching process (module globals, caches, files opened
  at construction) would show here.

Every file except ``manifest.json`` must have the same sha256; the manifests must be equal except for the fields
that name the run itself (``created_at``, ``build_id``, ``command``, the Beam options).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import DEMO_CORPUS, wikitext2_articles
from tests.support import beam_services

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------------------------------------
# Services: started by the test, stopped at the end even on failure (tests/support/beam_services.py)


@pytest.fixture(scope="module")
def job_endpoint(tmp_path_factory):
    with beam_services.running(beam_services.JOB_SERVICE, tmp_path_factory.mktemp("job_service") / "log") as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory):
    with beam_services.running(beam_services.WORKER_POOL, tmp_path_factory.mktemp("worker_pool") / "log") as pool:
        yield pool


@pytest.fixture(scope="module")
def environments(job_endpoint, worker_pool) -> dict[str, list[str]]:
    """Runner options of each run; the first is the reference."""
    portable = ["--runner", "PortableRunner", "--job_endpoint", job_endpoint]
    return {
        "FnApiRunner": ["--runner", "FnApiRunner"],
        "LOOPBACK": portable + ["--environment_type", "LOOPBACK"],
        "EXTERNAL": portable + ["--environment_type", "EXTERNAL", "--environment_config", worker_pool],
    }


# ---------------------------------------------------------------------------------------------------------
# Inputs


@pytest.fixture(scope="module")
def wikitext_articles(tmp_path_factory) -> Path:
    """The first three articles of WikiText-2's validation split, as a .tokens file."""
    return wikitext2_articles(3, tmp_path_factory.mktemp("wikitext"))


BAD_RECORDS = [
    b'{"id": "bad-json", "text": "unterminated\n',
    b'{"id": "no-text"}\n',
    b'{"id": "empty", "text": "   "}\n',
    b'{"id": "number", "text": 42}\n',
    b'{"id": "bad-utf8", "text": "caf\xe9"}\n',
    b'{"id": "no-tokens", "text": "\\u200b\\u200b"}\n',
]


@pytest.fixture(scope="module")
def bad_records(tmp_path_factory) -> Path:
    """Rejected records of several kinds, dead-lettered by the reader and by the tokenizer stage."""
    path = tmp_path_factory.mktemp("bad") / "bad.jsonl"
    path.write_bytes(b"".join(BAD_RECORDS))
    return path


# ---------------------------------------------------------------------------------------------------------
# Running and comparing


def run_everywhere(job, base_argv: list[str], output: Path, environments: dict[str, list[str]]) -> dict[str, Path]:
    """Run ``job.run(argv)`` once per environment into the same ``output`` path; return where each result went."""
    results = {}
    for name, runner_argv in environments.items():
        job.run(base_argv + ["--output", str(output)] + runner_argv)
        kept = output.parent / f"{output.name}.{name}"
        shutil.move(output, kept)
        results[name] = kept
    return results


def file_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def _job_option_names(options_class) -> set[str]:
    import argparse

    parser = argparse.ArgumentParser(conflict_handler="resolve")
    options_class._add_argparse_args(parser)
    return {a.dest for a in parser._actions if a.dest != "help"}


def comparable_manifest(manifest: dict, job_options: set[str]) -> dict:
    """The manifest without what names the run: when, the command line, the runner and the other Beam options."""
    m = {k: v for k, v in manifest.items() if k not in ("created_at", "build_id", "command")}
    m["options"] = {k: v for k, v in manifest["options"].items() if k in job_options}
    return m


def assert_identical(results: dict[str, Path], job_options: set[str]) -> dict:
    reference_name, reference = next(iter(results.items()))
    expected_files = file_digests(reference)
    expected_manifest = json.loads((reference / "manifest.json").read_text())
    for name, root in results.items():
        if name == reference_name:
            continue
        files = file_digests(root)
        assert sorted(files) == sorted(expected_files), f"{name}: other files than {reference_name}"
        differ = [f for f in files if files[f] != expected_files[f]]
        assert not differ, f"{name}: not byte-identical to {reference_name}: {differ}"
        manifest = json.loads((root / "manifest.json").read_text())
        assert comparable_manifest(manifest, job_options) == comparable_manifest(expected_manifest, job_options), name
    return expected_manifest


# ---------------------------------------------------------------------------------------------------------
# The jobs


def _build_shards_options() -> set[str]:
    from pipeline.build_shards import BuildShardsOptions

    return _job_option_names(BuildShardsOptions)


def test_build_shards_with_candidates_on_wikitext_is_identical_on_the_portable_runner(
    wikitext_articles, environments, tmp_path
):
    from pipeline import build_shards

    argv = [
        "--input",
        str(wikitext_articles),
        "--input-format",
        "wikitext",
        "--train-tokenizer",
        "--vocab-size",
        "2000",
        "--num-shards",
        "3",
        "--mask-candidates",
        "entities,noun_phrases",
    ]
    results = run_everywhere(build_shards, argv, tmp_path / "artifact", environments)
    manifest = assert_identical(results, _build_shards_options())
    c = manifest["counts"]
    assert c["documents_read"] == c["documents_written"] == 3 and c["rows"] > 3
    assert manifest["candidates"]["spans"]["entities"] > 0 and manifest["candidates"]["spans"]["noun_phrases"] > 0
    assert len(list((results["EXTERNAL"] / "shards").glob("*.arrow"))) == 3


def test_build_shards_on_the_demo_corpus_with_bad_records_is_identical_on_the_portable_runner(
    bad_records, environments, tmp_path
):
    from pipeline import build_shards

    # --split-bytes: the demo corpus (151 kB) is read as 10 byte ranges, the bad records as one file
    argv = [
        "--input",
        str(DEMO_CORPUS),
        "--input",
        str(bad_records),
        "--input-format",
        "jsonl",
        "--train-tokenizer",
        "--vocab-size",
        "3000",
        "--num-shards",
        "4",
        "--mask-candidates",
        "entities,noun_phrases",
        "--split-bytes",
        "16384",
    ]
    results = run_everywhere(build_shards, argv, tmp_path / "artifact", environments)
    manifest = assert_identical(results, _build_shards_options())
    c = manifest["counts"]
    assert c["documents_written"] == 40
    assert c["documents_dead_lettered"] == len(BAD_RECORDS)
    assert set(c["dead_lettered_by_reason"]) == {
        "malformed_json",
        "missing_text",
        "empty_text",
        "non_string_text",
        "invalid_utf8",
        "no_tokens",
    }
    assert len(list((results["LOOPBACK"] / "dead_letter").glob("*.jsonl"))) == len(BAD_RECORDS)
    assert manifest["candidates"]["spans"]["entities"] > 0 and manifest["candidates"]["spans"]["noun_phrases"] > 0


def test_build_ngram_dictionary_is_identical_on_the_portable_runner(wikitext_articles, environments, tmp_path):
    from pipeline import build_ngram_dictionary

    corpus = tmp_path / "wiki.tokens"
    corpus.write_bytes(wikitext_articles.read_bytes() + b" caf\xe9 au lait \n")  # one undecodable line
    argv = ["--input", str(corpus), "--min-count", "2"]
    results = run_everywhere(build_ngram_dictionary, argv, tmp_path / "dictionary", environments)
    manifest = assert_identical(results, _job_option_names(build_ngram_dictionary.NgramDictionaryOptions))
    assert manifest["total_entries"] > 100 and all(manifest["entries_per_n"][n] > 0 for n in ("2", "3", "4", "5"))
    assert manifest["corpus"]["undecodable_lines"] == 1
    dead = (results["EXTERNAL"] / "dead_letter.jsonl").read_text().splitlines()
    assert len(dead) == 1 and "UTF-8" in json.loads(dead[0])["reason"]
