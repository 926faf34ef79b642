"""Training from a bucket and exporting into one: `deepspeed trainer/pretrain.py --data s3://...` (2 CPU ranks,
tiny preset) trains and resumes with the losses of the same runs on the local artifact; a damaged shard in the
bucket is refused naming it; `python -m trainer.export --out s3://...` / `gs://...` writes the local export's bytes.

The DeepSpeed runs use the S3 server only (moto_server; four 2-rank launches take minutes on 2 cores): the GCS
reads they depend on are those of tests/e2e/test_object_stores.py's trainer-stream test, run against both stores, and
the damaged-shard refusal runs `trainer/pretrain.py` against both.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_object_stores import _bucket_bytes, _prefix, _run
from test_pretrain import COMMON, launcher

from schemas.artifact import Artifact
from tests.support.pretrain_runs import DEEPSPEED, PRETRAIN, TIMEOUT, ds_config, metric, run_env
from tests.support.shard_damage import flip_byte_changing_input_ids

pytestmark = pytest.mark.slow

FIRST, MORE = 4, 6  # train to step FIRST, then resume to step MORE
HF_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


def _options(max_steps: int) -> list[str]:
    args = list(COMMON)
    args[args.index("--max-steps") + 1] = str(max_steps)
    args[args.index("--eval-every") + 1] = "0"
    return args


def _train(store, data: str, run_dir: Path, tmp: Path, max_steps: int, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        *launcher(2),
        "--deepspeed_config",
        str(ds_config(tmp, 1)),
        "--data",
        data,
        "--output-dir",
        str(run_dir),
        "--save-every",
        str(FIRST),
        *_options(max_steps),
        *extra,
    ]
    proc = subprocess.run(
        cmd, cwd=PRETRAIN.parents[1], env={**run_env(), **store.env}, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@pytest.fixture(scope="module")
def runs(s3_store, demo_artifact, tmp_path_factory) -> dict[str, Path]:
    """The same two-phase run (train to FIRST, resume to MORE) on the local artifact and on its copy in S3."""
    assert DEEPSPEED.exists()
    tmp = tmp_path_factory.mktemp("bucket_training")
    uri = s3_store.upload_tree(demo_artifact, _prefix("training"))
    out = {}
    for name, data in (("local", str(demo_artifact)), ("bucket", uri)):
        run_dir = tmp / name
        first = _train(s3_store, data, run_dir, tmp, FIRST)
        assert f"done: {FIRST} steps" in first.stdout, first.stdout[-2000:]
        resumed = _train(s3_store, data, run_dir, tmp, MORE, "--resume")
        assert f"at step {FIRST}" in resumed.stdout and f"done: {MORE} steps" in resumed.stdout, resumed.stdout[-2000:]
        out[name] = run_dir
    return out


def test_training_from_the_bucket_and_resuming_gives_the_local_losses(runs):
    local, bucket = metric(runs["local"], "train_loss"), metric(runs["bucket"], "train_loss")
    assert sorted(bucket) == list(range(1, MORE + 1)) == sorted(local)
    assert [bucket[s] for s in sorted(bucket)] == pytest.approx([local[s] for s in sorted(local)], rel=1e-6, abs=0)
    assert len(set(local.values())) > 1  # real, changing losses


def test_pretrain_refuses_a_damaged_shard_in_the_bucket_naming_it(object_store, demo_artifact, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(demo_artifact, damaged)
    rel = Artifact.open(str(damaged)).shard_paths[1]
    flip_byte_changing_input_ids(damaged / rel)
    uri = object_store.upload_tree(damaged, _prefix("damaged"))
    done = _run(
        object_store,
        str(PRETRAIN),
        "--data",
        uri,
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
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"pretrain: error: {uri}/{rel}: sha256 ") and "differs from the manifest" in last, (
        done.stderr[-3000:]
    )
    others = [s for s in Artifact.open(str(damaged)).shard_paths if s != rel]
    assert not any(s in done.stderr for s in others)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("workers", [0, 1])
def test_a_damaged_shard_found_by_a_cache_fill_during_training_stops_with_one_line(
    s3_store, demo_artifact, tmp_path, workers
):
    """With --cache-dir the start-up check is by size only; the sha256 check of the fill, in the training loop (in
    a DataLoader worker with --num-workers 1), must end the run with exit 2 and one line naming the shard."""
    damaged = tmp_path / "damaged"
    shutil.copytree(demo_artifact, damaged)
    shards = Artifact.open(str(damaged)).shard_paths
    for rel in shards[:-1]:  # every training shard (the last one is held out)
        flip_byte_changing_input_ids(damaged / rel)
    uri = s3_store.upload_tree(damaged, _prefix("damaged-fill"))
    done = _run(
        s3_store,
        str(PRETRAIN),
        "--data",
        uri,
        "--preset",
        "tiny",
        "--max-steps",
        "2",
        "--warmup-steps",
        "1",
        "--no-progress",
        "--num-workers",
        str(workers),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--read-ahead",
        "0",
        "--output-dir",
        str(tmp_path / "run"),
        timeout=300,
    )  # it hung at exit with a worker before the fix
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, done.stderr[-3000:]
    named = [rel for rel in shards[:-1] if errors[0].startswith(f"pretrain: error: {uri}/{rel}: sha256 ")]
    assert len(named) == 1 and "differs from the manifest" in errors[0], errors
    assert not list((tmp_path / "cache" / "shards").glob("*.arrow")), "a damaged shard is never cached"
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_export_into_the_bucket_equals_the_local_export_and_loads_in_transformers(object_store, runs, tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch

    checkpoints = str(runs["local"] / "checkpoints")
    local, remote = tmp_path / "local", object_store.uri(_prefix("export"), "model")
    for out in (str(local), remote):
        done = _run(object_store, "-m", "trainer.export", checkpoints, "--out", out)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert f"(step {MORE}," in done.stdout and out in done.stdout, done.stdout
    assert not (Path(PRETRAIN.parents[1]) / f"{object_store.scheme}:").exists()  # no local "s3:/..." directory
    downloaded = tmp_path / "downloaded"
    downloaded.mkdir()
    for name in HF_FILES:
        data = _bucket_bytes(object_store, f"{remote}/{name}")
        assert data == (local / name).read_bytes() and len(data) > 0, name
        (downloaded / name).write_bytes(data)
    model = transformers.BertForMaskedLM.from_pretrained(str(downloaded)).eval()
    reference = transformers.BertForMaskedLM.from_pretrained(str(local)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(downloaded))
    enc = tokenizer(["The river flows north through the old town ."], return_tensors="pt")
    assert enc["input_ids"].shape[1] > 2
    with torch.no_grad():
        assert torch.equal(model(**enc).logits, reference(**enc).logits)
