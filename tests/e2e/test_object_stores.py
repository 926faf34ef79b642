"""The artifact in a bucket: real S3 (moto_server) and GCS (gcp-storage-emulator) API servers on 127.0.0.1.

Every test runs once per store (fixture ``object_store`` from tests/support/object_stores.py); the store's endpoint
reaches each component the standard way (``AWS_ENDPOINT_URL`` / Beam's ``--s3_*`` options,
``STORAGE_EMULATOR_HOST``, fsspec ``storage_options``). No traffic leaves the loopback interface.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest
from pyarrow.fs import FileSelector

from schemas.artifact import Artifact
from tests.conftest import DEMO_CORPUS, REPO

# The options tests/conftest.py's demo_artifact fixture builds with.
DEMO_BUILD = ["--input-format", "jsonl", "--train-tokenizer", "--vocab-size", "4000", "--num-shards", "4"]


def _prefix(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _run(store, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv],
        env={**store.child_env(), "PYTHONPATH": str(REPO)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _local_rows(artifact: Path) -> int:
    rows = 0
    for shard in sorted((artifact / "shards").glob("*.arrow")):
        with ipc.open_file(shard) as reader:
            rows += reader.read_all().num_rows
    return rows


def _bucket_bytes(store, uri: str) -> bytes:
    with store.pyarrow_fs().open_input_stream(uri.split("://", 1)[1]) as f:
        return f.read()


def test_artifact_reads_identically_from_the_bucket(object_store, demo_artifact):
    uri = object_store.upload_tree(demo_artifact, _prefix("read"))
    local, remote = Artifact.open(str(demo_artifact)), Artifact.open(uri)
    assert remote.manifest == local.manifest
    assert remote.shard_paths == local.shard_paths and len(remote.shard_paths) == 4
    rows = 0
    for rel in remote.shard_paths:
        table = remote.open_shard(rel).read_all()
        assert table.equals(local.open_shard(rel).read_all()), rel
        rows += table.num_rows
    assert rows == local.manifest["counts"]["rows"] == _local_rows(demo_artifact) > 0
    assert remote.tokenizer_json() == local.tokenizer_json()
    assert np.array_equal(remote.unigram_counts(), local.unigram_counts())
    assert remote.unigram_counts().sum() == local.manifest["counts"]["tokens"] > 0


def test_verify_on_the_bucket_passes_then_names_a_corrupted_shard(object_store, demo_artifact):
    uri = object_store.upload_tree(demo_artifact, _prefix("verify"))
    rows = Artifact.open(str(demo_artifact)).manifest["counts"]["rows"]
    ok = _run(object_store, "-m", "pipeline.verify", uri)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"{rows} rows checked" in ok.stdout and "4 shards checksummed" in ok.stdout, ok.stdout

    shard = "shards/part-00001-of-00004.arrow"
    data = bytearray((demo_artifact / shard).read_bytes())
    data[len(data) // 2] ^= 0xFF
    with object_store.pyarrow_fs().open_output_stream(f"{uri.split('://', 1)[1]}/{shard}") as out:
        out.write(bytes(data))
    assert _bucket_bytes(object_store, f"{uri}/{shard}") == bytes(data)
    bad = _run(object_store, "-m", "pipeline.verify", uri)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    problems = [line for line in (bad.stdout + bad.stderr).splitlines() if shard in line]
    assert problems and any("sha256" in line for line in problems), bad.stdout + bad.stderr
    other_shards = [s for s in Artifact.open(str(demo_artifact)).shard_paths if s != shard]
    assert not any(s in bad.stdout + bad.stderr for s in other_shards), bad.stdout + bad.stderr


def test_report_from_the_bucket_equals_the_local_report(object_store, demo_artifact, tmp_path):
    """The pages and card written into the bucket are the local run's, but for where the artifact lives."""
    uri = object_store.upload_tree(demo_artifact, _prefix("report"))
    local = tmp_path / "artifact"
    shutil.copytree(demo_artifact, local)
    for where in (str(local), uri):
        done = _run(object_store, "-m", "pipeline.report", where, "--quiet", "--pretty-name", "demo")
        assert done.returncode == 0, done.stdout + done.stderr
    local_pages = sorted(p.relative_to(local).as_posix() for p in (local / "report").rglob("*") if p.is_file())
    fs, root = object_store.pyarrow_fs(), uri.split("://", 1)[1]
    bucket_pages = sorted(
        i.path[len(root) + 1 :] for i in fs.get_file_info(FileSelector(f"{root}/report", recursive=True)) if i.size
    )
    assert bucket_pages == local_pages and "report/index.html" in local_pages and len(local_pages) > 1
    for rel in ("README.md", "report/index.html"):
        remote = _bucket_bytes(object_store, f"{uri}/{rel}").decode("utf-8")
        assert uri in remote, rel
        assert remote.replace(uri, str(local)) == (local / rel).read_text(encoding="utf-8"), rel


def test_datasets_load_dataset_reads_the_shards_from_the_bucket(object_store, demo_artifact, tmp_path):
    uri = object_store.upload_tree(demo_artifact, _prefix("hf"))
    script = (
        "import json, sys, datasets\n"
        "d = datasets.load_dataset('arrow', data_files=sys.argv[1], storage_options=json.loads(sys.argv[2]), "
        "split='train', cache_dir=sys.argv[3])\n"
        "print(json.dumps({'rows': d.num_rows, 'tokens': sum(len(x) for x in d['input_ids']), "
        "'doc_ids': sorted(set(d['doc_id']))}))\n"
    )
    done = _run(
        object_store,
        "-c",
        script,
        f"{uri}/shards/*.arrow",
        json.dumps(object_store.storage_options),
        str(tmp_path / "hf"),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    manifest = Artifact.open(str(demo_artifact)).manifest
    assert got["rows"] == manifest["counts"]["rows"] > 0
    assert got["tokens"] == manifest["counts"]["tokens"]
    assert len(got["doc_ids"]) == manifest["counts"]["documents_written"] > 0


def test_trainer_stream_from_the_bucket_equals_the_local_one(object_store, demo_artifact):
    from trainer.data import ArtifactStream, DataConfig, open_artifact
    from trainer.masking import MaskingConfig

    uri = object_store.upload_tree(demo_artifact, _prefix("train"))

    def batches(where: str) -> list[dict]:
        cfg = DataConfig(artifact=where, micro_batch_size=4, num_workers=0, eval_shards=1, num_epochs=1, seed=5)
        stream = ArtifactStream(open_artifact(where), cfg, MaskingConfig(scheme="span", seed=3))
        return [b for chunk in stream for b in chunk]

    local, remote = batches(str(demo_artifact)), batches(uri)
    assert len(remote) == len(local) > 0
    for a, b in zip(local, remote):
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(a[key].numpy(), b[key].numpy()), key


@pytest.mark.slow
def test_build_shards_from_bucket_to_bucket_matches_the_local_build(object_store, demo_artifact):
    """Input read from the bucket, artifact written to it (FnApiRunner, 2 worker processes): every file but
    the manifest byte-identical to the local build with the same options."""
    fs = object_store.pyarrow_fs()
    prefix = _prefix("build")
    with fs.open_output_stream(f"{object_store.bucket}/{prefix}/in/{DEMO_CORPUS.name}") as out:
        out.write(DEMO_CORPUS.read_bytes())
    output = object_store.uri(prefix, "artifact")
    done = _run(
        object_store,
        "-m",
        "pipeline.build_shards",
        "--input",
        object_store.uri(prefix, "in", DEMO_CORPUS.name),
        "--output",
        output,
        "--runner",
        "FnApiRunner",
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        "2",
        *DEMO_BUILD,
        *object_store.beam_args,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    local = Artifact.open(str(demo_artifact))
    remote = Artifact.open(output)
    assert remote.manifest["shards"] == local.manifest["shards"]
    assert remote.manifest["counts"] == local.manifest["counts"]
    files = sorted(p.relative_to(demo_artifact).as_posix() for p in demo_artifact.rglob("*") if p.is_file())
    compared = [rel for rel in files if rel != "manifest.json"]
    assert len(compared) >= 6
    for rel in compared:
        assert remote.read_bytes(rel) == (demo_artifact / rel).read_bytes(), rel


# -- writing into a bucket: the n-gram dictionary, publishing semantics ------------------------------------
SNIPPET = (
    " = Cats = \n the cat sat on the mat . the cat sat . \n the cat <unk> sat on the mat , the cat \n on the mat \n"
)


def test_ngram_dictionary_built_into_the_bucket_equals_the_local_build(object_store, tmp_path):
    """Input in the bucket, dictionary written to it: the same bytes as a local build. Its dead_letter.jsonl is
    empty, which S3 refused through Beam's multipart upload (MalformedXML) before pipeline/files.py's create."""
    from schemas import ngram_dictionary as nd

    (tmp_path / "snippet.tokens").write_text(SNIPPET, encoding="utf-8")
    prefix = _prefix("ngrams")
    remote_in = object_store.upload_tree(tmp_path, f"{prefix}/in") + "/snippet.tokens"
    options = ["--min-n", "2", "--max-n", "3", "--min-count", "2"]
    local = tmp_path / "dictionary"
    for source, out in (
        (str(tmp_path / "snippet.tokens"), str(local)),
        (remote_in, object_store.uri(prefix, "dictionary")),
    ):
        done = _run(
            object_store,
            "-m",
            "pipeline.build_ngram_dictionary",
            "--input",
            source,
            "--output",
            out,
            *options,
            *object_store.beam_args,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    remote = object_store.uri(prefix, "dictionary")
    for name in (nd.ARROW_FILE, nd.TSV_FILE, nd.DEAD_LETTER_FILE):
        assert _bucket_bytes(object_store, f"{remote}/{name}") == (local / name).read_bytes(), name
    assert (local / nd.DEAD_LETTER_FILE).read_bytes() == b""
    local_manifest = json.loads((local / nd.MANIFEST_FILE).read_text())
    remote_manifest = json.loads(_bucket_bytes(object_store, f"{remote}/{nd.MANIFEST_FILE}"))
    assert local_manifest["total_entries"] == 8
    for key in ("files", "total_entries", "entries_per_n", "corpus", "rules"):
        assert remote_manifest[key] == local_manifest[key], key


def test_a_build_into_a_bucket_prefix_holding_files_refuses_without_overwrite(object_store):
    prefix = _prefix("occupied")
    with object_store.pyarrow_fs().open_output_stream(f"{object_store.bucket}/{prefix}/out/notes.txt") as out:
        out.write(b"someone else's file\n")
    with object_store.pyarrow_fs().open_output_stream(f"{object_store.bucket}/{prefix}/in/{DEMO_CORPUS.name}") as out:
        out.write(DEMO_CORPUS.read_bytes())
    done = _run(
        object_store,
        "-m",
        "pipeline.build_shards",
        "--input",
        object_store.uri(prefix, "in", DEMO_CORPUS.name),
        "--output",
        object_store.uri(prefix, "out"),
        *DEMO_BUILD,
        *object_store.beam_args,
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    # One error line, the last thing printed (the rest is logging: Beam's GCS credential retries, INFO lines).
    errors = [line for line in done.stderr.splitlines() if line.startswith("build_shards: error:")]
    assert len(errors) == 1 and done.stderr.strip().splitlines()[-1] == errors[0], done.stderr[-3000:]
    assert "notes.txt" in errors[0] and "--overwrite" in errors[0], errors
    assert _bucket_bytes(object_store, object_store.uri(prefix, "out", "notes.txt")) == b"someone else's file\n"
    fs = object_store.pyarrow_fs()
    names = [
        i.path for i in fs.get_file_info(FileSelector(f"{object_store.bucket}/{prefix}/out", recursive=True)) if i.size
    ]
    assert names == [f"{object_store.bucket}/{prefix}/out/notes.txt"], names


def test_the_build_lock_in_a_bucket_is_created_exclusively(object_store, monkeypatch):
    """Two builds that both found the prefix empty (the race check-then-create leaves) cannot both take the lock:
    the upload carries the store's precondition (S3 If-None-Match: *, GCS ifGenerationMatch=0)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline import output

    if object_store.scheme == "gs":
        pytest.skip(
            "gcp-storage-emulator ignores ifGenerationMatch=0 (a second upload replaces the object), so "
            "exclusive creation cannot be shown against it"
        )
    FileSystems.set_options(PipelineOptions(object_store.beam_args))
    lock = object_store.uri(_prefix("lock"), "_build.lock")
    monkeypatch.setattr(
        FileSystems, "exists", staticmethod(lambda path: False)
    )  # both builds checked before either wrote
    assert output._create_exclusively(lock, b'{"build_id": "first"}') is True
    assert output._create_exclusively(lock, b'{"build_id": "second"}') is False
    assert _bucket_bytes(object_store, lock) == b'{"build_id": "first"}'


@pytest.mark.slow
def test_two_concurrent_builds_into_one_s3_prefix_cannot_both_succeed(s3_store, demo_artifact, monkeypatch):
    """Started together: one build writes the artifact, the other stops with one line and exit 2 (the prefix was
    taken: its lock or its files), and what is left verifies. S3 only: on gcp-storage-emulator, which ignores
    ifGenerationMatch, the lock is check-then-create, and each gs:// build spends ~30 s on Beam's credential retries."""
    for key, value in s3_store.env.items():  # in-process readers find the store the standard way
        monkeypatch.setenv(key, value)
    prefix = _prefix("concurrent")
    with s3_store.pyarrow_fs().open_output_stream(f"{s3_store.bucket}/{prefix}/in/{DEMO_CORPUS.name}") as out:
        out.write(DEMO_CORPUS.read_bytes())
    output = s3_store.uri(prefix, "out")
    argv = [
        sys.executable,
        "-m",
        "pipeline.build_shards",
        "--input",
        s3_store.uri(prefix, "in", DEMO_CORPUS.name),
        "--output",
        output,
        *DEMO_BUILD,
        *s3_store.beam_args,
    ]
    env = {**s3_store.child_env(), "PYTHONPATH": str(REPO)}
    builds = [
        subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(b.returncode, err) for b in builds for _, err in [b.communicate(timeout=600)]]
    assert sorted(code for code, _ in results) == [0, 2], [err[-2000:] for _, err in results]
    refused = next(err for code, err in results if code == 2)
    last = refused.strip().splitlines()[-1]
    assert last.startswith(f"build_shards: error: --output {output}") and "--overwrite" in last, refused[-2000:]
    verify = _run(s3_store, "-m", "pipeline.verify", output)
    rows = Artifact.open(str(demo_artifact)).manifest["counts"]["rows"]
    assert verify.returncode == 0 and f"{rows} rows checked" in verify.stdout and rows > 0, (
        verify.stdout + verify.stderr
    )
    assert Artifact.open(output).manifest["shards"] == Artifact.open(str(demo_artifact)).manifest["shards"]


def test_beam_finds_the_emulator_credentials_at_once(gcs_store, monkeypatch):
    """Beam's GcsIO retries google.auth.default 4 times with backoff (~30 s per process) while it raises; with the
    store's environment it returns usable credentials at the first call, and the client they make reaches the
    emulator (it ignores the token)."""
    import google.auth
    from apache_beam.io.gcp import gcsio
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

    for key, value in gcs_store.env.items():
        monkeypatch.setenv(key, value)
    options = PipelineOptions(gcs_store.beam_args)
    credentials, _ = google.auth.default(scopes=options.view_as(GoogleCloudOptions).gcp_oauth_scopes)
    assert credentials.valid  # a token that needs no refresh: nothing asks a token server
    client = gcsio.create_storage_client(options)
    assert client.lookup_bucket(gcs_store.bucket) is not None
