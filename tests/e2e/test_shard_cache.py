"""The loader's node-local shard cache (trainer/data/shard_cache.py) against the real S3 API server (moto on
127.0.0.1, tests/support/object_stores.py): real Arrow shards, the real loader, real processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from schemas import format as fmt
from tests.conftest import REPO
from tests.support.shard_damage import flip_byte_changing_input_ids


@pytest.fixture
def s3(s3_store, monkeypatch):
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    return s3_store


def _batches(where: str, cache_dir: Path | None, **kw):
    from trainer.data import ArtifactStream, DataConfig, open_artifact
    from trainer.masking import MaskingConfig

    cfg = DataConfig(
        artifact=where,
        micro_batch_size=4,
        num_workers=0,
        eval_shards=1,
        num_epochs=1,
        seed=5,
        cache_dir=str(cache_dir) if cache_dir else None,
        **kw,
    )
    stream = ArtifactStream(open_artifact(where), cfg, MaskingConfig(scheme="span", seed=3))
    return [b for chunk in stream for b in chunk], stream


def _same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            assert np.array_equal(x[key].numpy(), y[key].numpy()), key


def _upload(store, artifact: Path) -> str:
    return store.upload_tree(artifact, f"cache-{uuid.uuid4().hex[:8]}")


def _cached(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "shards").glob("*.arrow"))


def test_cached_batches_equal_local_and_the_second_pass_reads_only_the_cache(s3, demo_artifact, tmp_path):
    uri = _upload(s3, demo_artifact)
    local, _ = _batches(str(demo_artifact), None)
    first, stream = _batches(uri, tmp_path / "cache")
    _same(local, first)
    train = stream.blocks.shard_paths
    assert stream.shard_cache.fills == len(train) == 3
    assert len(_cached(tmp_path / "cache")) == 3

    # Second pass: open the stream (manifest and footers come from the bucket), then damage every shard object
    # in the bucket (same size, other token ids): batches still equal the local ones, so they came from the cache.
    from trainer.data import ArtifactStream, DataConfig, open_artifact
    from trainer.masking import MaskingConfig

    cfg = DataConfig(
        artifact=uri,
        micro_batch_size=4,
        num_workers=0,
        eval_shards=1,
        num_epochs=1,
        seed=5,
        cache_dir=str(tmp_path / "cache"),
    )
    second = ArtifactStream(open_artifact(uri), cfg, MaskingConfig(scheme="span", seed=3))
    fs = s3.pyarrow_fs()
    damaged = tmp_path / "damaged"
    shutil.copytree(demo_artifact, damaged)
    for rel in train:
        flip_byte_changing_input_ids(damaged / rel)
        with fs.open_output_stream(f"{uri.split('://', 1)[1]}/{rel}") as out:
            out.write((damaged / rel).read_bytes())
    again = [b for chunk in second for b in chunk]
    _same(local, again)
    assert second.shard_cache.fills == 0


def test_a_warm_cache_needs_only_the_manifest_from_the_bucket(s3, demo_artifact, tmp_path):
    """Shard footers (the index), record batches and unigram counts come from the cache once it is warm: with every
    object but manifest.json deleted from the bucket, a new stream opens and gives the local batches."""
    uri = _upload(s3, demo_artifact)
    local, _ = _batches(str(demo_artifact), None)
    first, stream = _batches(uri, tmp_path / "cache")
    _same(local, first)
    assert stream.shard_cache.fills == 3
    fs, root = s3.pyarrow_fs(), uri.split("://", 1)[1]
    removed = [
        rel
        for rel in (p.relative_to(demo_artifact).as_posix() for p in demo_artifact.rglob("*") if p.is_file())
        if rel != "manifest.json"
    ]
    for rel in removed:
        fs.delete_file(f"{root}/{rel}")
    manifest = json.loads((demo_artifact / "manifest.json").read_text())
    assert "shards/part-00000-of-00004.arrow" in removed and manifest["unigram"]["file"] in removed
    again, warm = _batches(uri, tmp_path / "cache")
    _same(local, again)
    assert warm.shard_cache.fills == 0 and warm.shard_checks == {"size": 0, "hashed": 0, "cached": 0}


def test_a_corrupted_object_is_refused_naming_the_shard_and_never_cached(s3, demo_artifact, tmp_path):
    damaged = tmp_path / "artifact"
    shutil.copytree(demo_artifact, damaged)
    rel = "shards/part-00001-of-00004.arrow"
    flip_byte_changing_input_ids(damaged / rel)
    uri = _upload(s3, damaged)
    with pytest.raises(fmt.FormatError) as err:
        _batches(uri, tmp_path / "cache", read_ahead=0)
    assert f"{uri}/{rel}: sha256" in str(err.value) and "\n" not in str(err.value)
    manifest = json.loads((demo_artifact / "manifest.json").read_text())
    bad_sha = next(s["sha256"] for s in manifest["shards"] if s["path"] == rel)
    names = [p.name for p in (tmp_path / "cache" / "shards").iterdir()]
    assert names, "the cache directory was used"
    assert not any(n.startswith(bad_sha) and n.endswith(".arrow") for n in names)
    assert not any(n.startswith(".fill-") for n in names)


def test_an_object_gone_from_the_bucket_before_its_fill_is_a_format_error_naming_it(s3, demo_artifact, tmp_path):
    from trainer.data import ArtifactStream, DataConfig, open_artifact
    from trainer.masking import MaskingConfig

    uri = _upload(s3, demo_artifact)
    cfg = DataConfig(
        artifact=uri,
        micro_batch_size=4,
        num_workers=0,
        eval_shards=1,
        num_epochs=1,
        seed=5,
        cache_dir=str(tmp_path / "cache"),
        read_ahead=0,
    )
    stream = ArtifactStream(open_artifact(uri), cfg, MaskingConfig(scheme="span", seed=3))  # checks sizes: all there
    for rel in stream.blocks.shard_paths:
        s3.pyarrow_fs().delete_file(f"{uri.split('://', 1)[1]}/{rel}")
    with pytest.raises(fmt.FormatError) as err:
        next(iter(stream))
    message = str(err.value)
    assert message.startswith(f"{uri}/shards/part-0000") and message.endswith(
        ": file listed in the manifest is missing"
    ), message
    assert not _cached(tmp_path / "cache")


def test_the_size_bound_evicts_unheld_shards_and_read_ahead_fills_the_next(s3, demo_artifact, tmp_path):
    from trainer.data import open_artifact
    from trainer.data.shard_cache import ShardCache

    artifact = open_artifact(_upload(s3, demo_artifact))
    shards = artifact.shard_paths
    largest = max(int(s["bytes"]) for s in artifact.manifest["shards"])
    cache = ShardCache(artifact, str(tmp_path / "cache"), max_bytes=largest, read_ahead=1)
    first = cache.acquire(shards[0])
    cache.prefetch([shards[1]])
    cache._pending[shards[1]].result(timeout=60)  # the background fill
    assert Path(cache.local_path(shards[1])).exists() and cache.fills == 2
    assert Path(first).exists(), "a held shard is never evicted"
    cache.release(shards[0])
    for rel in shards[2:]:
        cache.acquire(rel)
        cache.release(rel)
    left = _cached(tmp_path / "cache")
    assert Path(cache.local_path(shards[-1])) in left and len(left) < len(shards)
    assert not Path(cache.local_path(shards[0])).exists() and not Path(cache.local_path(shards[1])).exists()
    assert sum(p.stat().st_size for p in left) <= cache.max_bytes
    assert cache.fills == len(shards) == 4
    cache.close()


_PASS = """
import json, sys
from tests.e2e.test_shard_cache import _batches
batches, stream = _batches(sys.argv[1], sys.argv[2], read_ahead=2)
print(json.dumps({"fills": stream.shard_cache.fills, "ids": [b["input_ids"].tolist() for b in batches]}))
"""


def test_two_processes_sharing_a_cache_fill_each_shard_once(s3, demo_artifact, tmp_path):
    uri = _upload(s3, demo_artifact)
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PASS, uri, str(cache)],
            cwd=REPO,
            text=True,
            env={**s3.child_env(), "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert outs[0]["ids"] == outs[1]["ids"] and len(outs[0]["ids"]) > 0
    assert outs[0]["fills"] + outs[1]["fills"] == 3  # 3 training shards, each downloaded once on the node
    assert len(_cached(cache)) == 3
