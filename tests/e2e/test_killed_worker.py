"""A Beam worker process killed in the middle of build_shards, on the local runner with two SDK worker processes
(``--direct_running_mode multi_processing``). That runner does not retry a bundle, so the job must fail with one
clear line (exit 1), write no manifest, release its build lock, and leave an output that ``pipeline.verify``
rejects; the rerun the line asks for (``--overwrite``) then gives an artifact that verifies.

The kill is real (SIGKILL to one ``sdk_worker_main`` process while documents are being spilled to sorted runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import DEMO_CORPUS, REPO

pytestmark = pytest.mark.slow


def _corpus(path: Path, copies: int) -> Path:
    """The demo corpus ``copies`` times, with distinct ids."""
    lines = DEMO_CORPUS.read_text(encoding="utf-8").splitlines()
    with path.open("w", encoding="utf-8") as f:
        for c in range(copies):
            for line in lines:
                record = json.loads(line)
                record["id"] = f"{record['id']}-{c}"
                f.write(json.dumps(record) + "\n")
    return path


def _sdk_workers(job: psutil.Process) -> list[psutil.Process]:
    """The job's SDK worker processes (``pipeline.sdk_worker``, which runs Beam's ``sdk_worker_main``)."""
    found = []
    for p in job.children(recursive=True):
        try:
            command, name = " ".join(p.cmdline()), p.name()
        except psutil.Error:  # it ended meanwhile (a zombie, or gone)
            continue
        if ("pipeline.sdk_worker" in command or "sdk_worker_main" in command) and name != "sh":
            found.append(p)
    return found


def _cpu_seconds(p: psutil.Process) -> float:
    try:
        times = p.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def test_a_killed_worker_fails_the_local_job_in_one_line_and_leaves_no_artifact_verify_accepts(tmp_path):
    corpus = _corpus(tmp_path / "in.jsonl", 2)
    out = tmp_path / "out"
    argv = [
        sys.executable, "-m", "pipeline.build_shards", "--input", str(corpus), "--output", str(out),
        "--train-tokenizer", "--vocab-size", "2000", "--num-shards", "4", "--split-bytes", "16384",
        "--mask-candidates", "entities",
    ]  # fmt: skip
    local = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    err = tmp_path / "stderr"
    with err.open("wb") as stderr:
        job = subprocess.Popen(argv + local, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr)
    killed = None
    try:
        deadline = time.monotonic() + 240
        while killed is None and job.poll() is None and time.monotonic() < deadline:
            workers = _sdk_workers(psutil.Process(job.pid))
            # spilling has begun and the worker is at work (a worker killed before it registers with the runner
            # leaves Beam's local runner waiting for it for ever: not the case this test is about)
            busy = [w for w in workers if _cpu_seconds(w) > 2.0]
            if busy and (out / "_tmp").is_dir():
                killed = busy[0]
                killed.kill()
            time.sleep(0.2)
        assert killed is not None, f"no SDK worker to kill before the job ended:\n{err.read_text()[-2000:]}"
        status = job.wait(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    last = err.read_text(errors="replace").strip().splitlines()[-1]
    assert status == 1, err.read_text()[-3000:]
    assert last.startswith("build_shards: error: the runner lost a worker process and the job failed ("), last
    assert "rerun with --overwrite" in last
    assert not (out / "manifest.json").exists() and not (out / "_build.lock").exists()
    verify = subprocess.run([sys.executable, "-m", "pipeline.verify", str(out)], cwd=REPO, capture_output=True)
    assert verify.returncode != 0 and b"no manifest.json" in verify.stdout + verify.stderr

    rerun = subprocess.run(argv + ["--overwrite"], cwd=REPO, capture_output=True)
    assert rerun.returncode == 0, rerun.stderr.decode(errors="replace")[-3000:]
    verify = subprocess.run([sys.executable, "-m", "pipeline.verify", str(out)], cwd=REPO, capture_output=True)
    assert verify.returncode == 0, verify.stdout.decode()[-2000:]
    assert not list(out.rglob("*.tmp-*")) and not (out / "_tmp").exists()
