"""A worker killed in the middle of writing a file, as Spark and Flink kill an executor or a TaskManager and retry
its bundle elsewhere: no partial file under a final name, and the job's last step removes what the killed writer
left behind, so the retried job's artifact holds exactly the files of a run that nothing interrupted.

The kill is real: a separate Python process runs the project's writer and SIGKILLs itself in the middle.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from pipeline.elements import DeadLetter, InputSummary, RemovedDocument, Source, TokenizedDocument
from pipeline.tokenize import tokenizer
from pipeline.write.dead_letters import WriteDeadLetters
from pipeline.write.manifest import WriteManifest
from pipeline.write.removed import WriteRemoved
from pipeline.write.shards import ShardSpec, WriteShards
from schemas import format as fmt
from tests.conftest import REPO

# Starts the project's writer on PATH, writes part of the file, then dies as a killed worker does (no cleanup).
_KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa
    kind, path = sys.argv[1], sys.argv[2]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if kind == "arrow":
        from pipeline.write.shards import ArrowFileWriter
        schema = pa.schema([("x", pa.int64())])
        writer = ArrowFileWriter(path, schema)
        writer.write(pa.record_batch([pa.array(range(200_000))], schema=schema))
        writer._raw.flush()
        die()
    else:
        from pipeline.ngrams.dictionary_files import ARROW_BATCH_ROWS, write_lines

        def lines():
            for i in range(ARROW_BATCH_ROWS + 1):
                yield f"line {i}\\n"
            die()

        write_lines(path, lines(), "text/plain")
    """
)


def _killed_writer(kind: str, path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, kind, str(path)], cwd=REPO, capture_output=True, timeout=120
    )
    assert done.returncode == -9, done.stderr.decode(errors="replace")[-2000:]


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


def test_a_dictionary_file_killed_mid_write_is_never_under_its_final_name(tmp_path):
    from pipeline.files import remove_abandoned_temporaries

    target = tmp_path / "ngrams.tsv"
    _killed_writer("lines", target)
    assert not target.exists(), "a killed writer left a partial file under the final name"
    left = _leftovers(tmp_path)
    assert len(left) == 1 and left[0].startswith(".ngrams.tsv.tmp-") and (tmp_path / left[0]).stat().st_size > 0
    assert remove_abandoned_temporaries(str(tmp_path)) == left
    assert list(tmp_path.iterdir()) == []


def _create(items, label):
    return label >> (beam.Create(range(len(items))) | beam.Map(lambda i: items[i]).with_output_types(typing.Any))


def _write_artifact(out: Path, spec, build_id: str | None = None) -> None:
    """The writing half of build_shards (shards, dead letters, then manifest) on a few documents."""
    docs = [
        TokenizedDocument(
            f"d{i}",
            "in.jsonl",
            i + 1,
            100 * i,
            np.arange(4, 30, dtype=np.uint16),
            np.ones(26, bool),
            np.eye(1, 26, 0, dtype=bool)[0],
        )
        for i in range(6)
    ]
    letters = [DeadLetter("empty_text", "blank", Source("in.jsonl", 7, 600))]
    copy = {"method": "exact", "duplicate_of": {"doc_id": "d0", "source": Source("in.jsonl", 1, 0).as_dict()}}
    removed = [RemovedDocument("duplicate", "d9", Source("in.jsonl", 8, 700), {**copy, "similarity": 1.0})]
    shard_spec = ShardSpec(
        str(out),
        num_shards=2,
        vocab_size=spec.describe()["vocab_size"],
        max_row_tokens=10,
        pack="doc-sentences",
        separator_id=3,
    )
    static = {"created_by": {}, "command": [], "options": {}, "max_seq_len": 12, "pack": "doc-sentences",
              "candidates": {"kinds": []}, "build_id": build_id}  # fmt: skip
    with TestPipeline(runner="FnApiRunner") as p:
        results = {
            "input_summaries": p | _create([InputSummary("in.jsonl", 800, "abc", 8)], "Inputs"),
            "shards": p | _create(docs, "Docs") | WriteShards(shard_spec),
            "dead_letters": p | _create(letters, "Letters") | WriteDeadLetters(str(out)),
            "removed": p | _create(removed, "Removed") | WriteRemoved(str(out)),
        }
        results | WriteManifest(str(out), spec, static)


@pytest.fixture(scope="module")
def spec():
    texts = ["The cat sat on the mat. It was warm.", "Dr. Smith went to Washington. He stayed for 3.5 days!"] * 20
    return tokenizer.make_spec(tokenizer.train(texts, vocab_size=200), "trained")


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != fmt.MANIFEST_FILE
    }


def test_writers_killed_mid_file_then_retried_leave_the_artifact_of_an_uninterrupted_run(tmp_path, spec):
    clean = tmp_path / "clean"
    for sub in ("", fmt.SHARDS_DIR, fmt.DEAD_LETTER_DIR, fmt.REMOVED_DIR):
        (clean / sub).mkdir(exist_ok=True)
    _write_artifact(clean, spec)

    retried = tmp_path / "retried"
    for sub in ("", fmt.SHARDS_DIR, fmt.DEAD_LETTER_DIR, fmt.REMOVED_DIR):
        (retried / sub).mkdir(exist_ok=True)
    # The first attempts of a shard writer, the dead-letter writer and the removed/ file's (the copy of its sorted
    # parts, which are in _tmp/ and go with it) die mid-file ...
    for path in (
        fmt.shard_filename(0, 2),
        f"{fmt.DEAD_LETTER_DIR}/empty_text.jsonl",
        f"{fmt.REMOVED_DIR}/duplicate.jsonl",
    ):
        _killed_writer("arrow", retried / path)
    for directory in (fmt.SHARDS_DIR, fmt.DEAD_LETTER_DIR, fmt.REMOVED_DIR):
        assert len(_leftovers(retried / directory)) == 1
    assert not (retried / fmt.shard_filename(0, 2)).exists()
    # ... and the runner retries their bundles: the whole write runs again.
    _write_artifact(retried, spec)

    files = _files(retried)
    assert [f for f in files if ".tmp-" in f] == [], "the killed writers' files are still in the artifact"
    assert files == _files(clean) and len(files) >= 6 and f"{fmt.REMOVED_DIR}/duplicate.jsonl" in files


_DUPLICATE_WRITER = textwrap.dedent(
    """
    import sys
    from pipeline.files import atomic_write
    for _ in range(int(sys.argv[2])):
        atomic_write(sys.argv[1], b"the same bytes from every attempt\\n" * 100)
    """
)


def test_two_attempts_writing_the_same_file_at_once_both_succeed(tmp_path):
    """A runner's speculative copy of a bundle, or a worker presumed dead that still runs, writes the same file
    as the attempt that replaced it, at the same time: neither may fail, and one whole file must remain."""
    target = tmp_path / "part-00000-of-00001.arrow"
    attempts = [
        subprocess.Popen(
            [sys.executable, "-c", _DUPLICATE_WRITER, str(target), "1500"], cwd=REPO, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    errors = [a.communicate(timeout=120)[1].decode(errors="replace") for a in attempts]
    assert [a.returncode for a in attempts] == [0, 0], errors
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    assert target.read_bytes() == b"the same bytes from every attempt\n" * 100


def test_a_retried_last_step_of_build_shards_accepts_its_own_finished_manifest(tmp_path, spec):
    """The worker that wrote the manifest and released the lock is lost before the runner hears it finish; the
    runner retries the step, which must find its own build's manifest and succeed, not fail on the released lock."""
    from pipeline.output import prepare_output

    out = tmp_path / "artifact"
    build_id = prepare_output(str(out), overwrite=False)
    _write_artifact(out, spec, build_id)
    manifest = (out / fmt.MANIFEST_FILE).read_bytes()
    assert not (out / fmt.LOCK_FILE).exists() and b'"build_id": "' + build_id.encode() in manifest
    _write_artifact(out, spec, build_id)  # the retry
    assert (out / fmt.MANIFEST_FILE).read_bytes() == manifest
    assert not (out / fmt.LOCK_FILE).exists()


def test_a_retried_last_step_of_the_ngram_dictionary_accepts_its_own_finished_manifest(tmp_path):
    from pipeline.ngrams.dictionary_files import WriteNgramDictionary
    from pipeline.ngrams.rules import NgramRules
    from pipeline.output import prepare_output
    from schemas.ngram_dictionary import MANIFEST_FILE

    out = tmp_path / "dictionary"
    build_id = prepare_output(str(out), overwrite=False, subdirs=())

    def write() -> None:
        with TestPipeline(runner="FnApiRunner") as p:
            entries = p | _create([("new york", 12), ("of the", 30)], "Entries")
            sources = p | _create([{"path": "in.tokens", "bytes": 10, "sha256": "abc"}], "Sources")
            summary = p | _create([{"lines": 3, "undecodable_lines": 0}], "Summary")
            dead = p | _create([], "Dead")
            rules = NgramRules(min_count=11)
            _ = (entries, sources, summary, dead) | WriteNgramDictionary(
                output=str(out), options={}, rules=rules, build_id=build_id
            )

    write()
    manifest = (out / MANIFEST_FILE).read_bytes()
    assert not (out / fmt.LOCK_FILE).exists() and b"new york" not in manifest and len(manifest) > 100
    write()  # the retry
    assert (out / MANIFEST_FILE).read_bytes() == manifest
