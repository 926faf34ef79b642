"""A shard that differs from its manifest is refused when it is opened for training, naming it (issue 9, case 4):
size always, sha256 by default (once per node, cached; schemas/integrity.py). Real artifacts (tests/conftest.py)."""

from __future__ import annotations

import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import format as fmt
from schemas import integrity
from schemas.artifact import Artifact
from tests.support.shard_damage import flip_byte_changing_input_ids
from trainer.data import DataConfig, build_train_loader
from trainer.masking import MaskingConfig

REPO = Path(__file__).resolve().parents[2]
MASK = MaskingConfig(scheme="span", seed=0)


def damaged_copy(artifact: Path, dest: Path, shard: int = 0) -> tuple[Path, str]:
    shutil.copytree(artifact, dest)
    rel = Artifact.open(str(dest)).shard_paths[shard]
    flip_byte_changing_input_ids(dest / rel)
    return dest, rel


def cfg(art: Path, **kw) -> DataConfig:
    return DataConfig(**{"artifact": str(art), "micro_batch_size": 2, "num_workers": 0, "num_epochs": 1, **kw})


def test_a_flipped_byte_is_refused_before_training_naming_the_shard(demo_artifact, tmp_path):
    bad, rel = damaged_copy(demo_artifact, tmp_path / "bad")
    for mode in ("once", "always"):
        with pytest.raises(
            integrity.ShardMismatchError, match=rf"{bad}/{rel}: sha256 \w+… differs from the manifest's"
        ):
            build_train_loader(cfg(bad, verify_shards=mode), MASK)
    # The damage is silent otherwise: with the check off the loader reads the changed rows without complaint.
    loader, ds = build_train_loader(cfg(bad, verify_shards="off"), MASK)
    assert ds.shard_checks == {"size": 3, "hashed": 0, "cached": 0}
    expected = len(loader)
    assert sum(1 for _ in loader) == expected > 0


def test_once_hashes_each_shard_once_per_node_and_a_changed_file_again(demo_artifact, tmp_path):
    good = tmp_path / "good"
    shutil.copytree(demo_artifact, good)
    art = Artifact.open(str(good))
    assert art.fingerprint == Artifact.open(str(demo_artifact)).fingerprint  # content, not location
    cache = tmp_path / "cache"
    paths = art.shard_paths

    def check(mode="once"):
        return {
            p: integrity.verify_file(
                art.fs,
                art.path(p),
                art.shard_entry(p),
                art.display(p),
                mode=mode,
                fingerprint=art.fingerprint,
                location=art.display(p),
                cache=str(cache),
            )
            for p in paths
        }

    assert set(check().values()) == {"hashed"} and len(paths) == 4
    assert set(check().values()) == {"cached"}
    assert set(check("always").values()) == {"hashed"}  # always ignores the cache
    flip_byte_changing_input_ids(good / paths[1])  # same size; new modification time: a new file version
    with pytest.raises(integrity.ShardMismatchError, match=paths[1]):
        check()
    with pytest.raises(integrity.ShardMismatchError, match=paths[1]):  # a failure is not cached
        check()


def _check_in_process(artifact: str, start: int, queue) -> None:
    queue.put(Artifact.open(artifact).check_shards(Artifact.open(artifact).shard_paths, "once", start=start))


def test_ranks_of_one_node_hash_each_shard_once_between_them(demo_artifact, tmp_path, shard_check_cache):
    copy = tmp_path / "copy"  # a location no other test has cached
    shutil.copytree(demo_artifact, copy)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_check_in_process, args=(str(copy), rank, queue)) for rank in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert sum(r["hashed"] for r in results) == 4  # every shard hashed exactly once on this "node"
    assert sum(r["cached"] for r in results) == 2 * 4


def test_size_is_checked_on_every_open_even_with_checksums_off(demo_artifact, tmp_path):
    bad = tmp_path / "appended"
    shutil.copytree(demo_artifact, bad)
    rel = Artifact.open(str(bad)).shard_paths[2]
    with open(bad / rel, "ab") as f:
        f.write(b"\0" * 16)  # an Arrow file still reads fine with bytes appended
    with pytest.raises(fmt.FormatError, match=rf"{rel}: [\d,]+ bytes, the manifest says [\d,]+ \(truncated, appended"):
        Artifact.open(str(bad)).open_shard(rel)


def test_pretrain_refuses_a_corrupt_shard_with_one_line_and_exit_2(demo_artifact, tmp_path):
    bad, rel = damaged_copy(demo_artifact, tmp_path / "bad", shard=1)
    cmd = [
        sys.executable,
        str(REPO / "trainer" / "pretrain.py"),
        "--data",
        str(bad),
        "--preset",
        "tiny",
        "--max-steps",
        "2",
        "--warmup-steps",
        "1",
        "--no-progress",
        "--num-workers",
        "0",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    proc = subprocess.run(
        cmd, cwd=REPO, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith(f"pretrain: error: {bad}/{rel}: sha256 ") and "differs from the manifest" in lines[-1]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
