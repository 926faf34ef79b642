"""A Beam worker process killed in the middle of build_shards, on the local runner with two SDK worker processes
(``--direct_running_mode multi_processing``). That runner does not retry a bundle, so the job must fail with one
clear line (exit 1) within 60 s, write no manifest, release its build lock, and leave an output that
``pipeline.verify`` rejects; the rerun the line asks for (``--overwrite``) then gives the artifact an uninterrupted
build gives, byte for byte.

The kill is real: SIGKILL to one ``pipeline.sdk_worker`` process (the Python process under Beam's ``/bin/sh -c``)
as the workers start, while the input is read and while shards are written (tests/support/killed_workers.py), and,
from inside the worker (the test hook ``SPANPREP_FAULT=kill:STAGE``, pipeline/faults.py), in each stage of a
``--dedup near`` build. Before the fix in ``pipeline/runners/lost_workers.py`` (``end_local_workers``) a kill as the
workers started left the job waiting for ever for the other worker to exit (the ``starting`` case).
The same on Prism, with its SDK worker in the project's worker pool (``EXTERNAL``): before
``pipeline/runners/prism_watch.py`` a kill while writing hung about 1 run in 4 (Prism never failed the job) or
ended with Prism's Go stack trace, and before it watched the worker pool's children, a worker killed as it started
(``SPANPREP_FAULT=kill:start``, before it connected to Prism) failed the job only after Prism's own 60 s wait.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from pipeline import faults
from pipeline.runners import prism
from tests.conftest import REPO
from tests.e2e.test_portability import _build_shards_options, assert_identical
from tests.support import beam_services, killed_workers

pytestmark = pytest.mark.slow

KILL_TO_EXIT_S = 60


def build_argv(corpus: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "pipeline.build_shards", "--input", str(corpus), "--output", str(out),
        "--vocab-size", "2000", "--num-shards", "2", "--split-bytes", "65536", "--dedup", "near",
    ]  # fmt: skip


LOCAL_WORKERS = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


@pytest.fixture(scope="module")
def dedup_corpus(tmp_path_factory) -> Path:
    return killed_workers.corpus(tmp_path_factory.mktemp("killed") / "in.jsonl", 4)


@pytest.fixture(scope="module")
def uninterrupted(dedup_corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "out"
    done = subprocess.run(build_argv(dedup_corpus, out), cwd=REPO, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return out


def assert_failed_in_one_line(ending: killed_workers.Ending, out: Path, job: str = "build_shards") -> None:
    print(f"exit {ending.status}, {ending.seconds_after_kill:.1f} s after the kill: {ending.last_line}")  # -rP
    assert ending.status == 1, ending.stderr[-3000:]
    assert ending.seconds_after_kill < KILL_TO_EXIT_S, ending.seconds_after_kill
    assert ending.last_line.startswith(f"{job}: error: the runner lost a worker process and the job failed ("), (
        ending.stderr[-3000:]
    )
    assert "rerun with --overwrite" in ending.last_line
    assert not (out / "manifest.json").exists() and not (out / "_build.lock").exists()


@pytest.mark.parametrize("phase", killed_workers.PHASES)
def test_a_killed_worker_fails_the_local_job_in_one_line(phase, dedup_corpus, uninterrupted, tmp_path):
    out = tmp_path / "out"
    argv = build_argv(dedup_corpus, out)
    ending = killed_workers.run_and_kill(argv + LOCAL_WORKERS, out, phase, tmp_path / "stderr", min_workers=2)
    assert_failed_in_one_line(ending, out)
    if phase != "writing":
        return
    verify = subprocess.run([sys.executable, "-m", "pipeline.verify", str(out)], cwd=REPO, capture_output=True)
    assert verify.returncode != 0 and b"no manifest.json" in verify.stdout + verify.stderr
    rerun = subprocess.run(argv + ["--overwrite"], cwd=REPO, capture_output=True)
    assert rerun.returncode == 0, rerun.stderr.decode(errors="replace")[-3000:]
    assert not list(out.rglob("*.tmp-*")) and not (out / "_tmp").exists()
    options = _build_shards_options() - {"overwrite", "output"}  # the rerun overwrote, into another directory
    manifest = assert_identical({"uninterrupted": uninterrupted, "rerun": out}, options)
    assert manifest["counts"]["documents_written"] > 0 and manifest["counts"]["documents_duplicate"] > 0


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory):
    """The project's worker pool (EXTERNAL): its process, ``localhost:PORT`` and the log its SDK workers write to."""
    log = tmp_path_factory.mktemp("worker_pool") / "log"
    proc, port = beam_services.start(beam_services.WORKER_POOL, log)
    try:
        yield psutil.Process(proc.pid), f"localhost:{port}", log
    finally:
        beam_services.stop(proc)


# Not "starting" (the worker kills itself as it starts instead, below: the test's own kill cannot aim before the
# worker has connected to Prism), nor "dedup": Prism keeps its workers' log lines, so the test cannot see the
# input's first read end (the dedup stages are killed from inside, below).
@pytest.mark.parametrize("phase", ["reading", "writing"])
def test_a_killed_worker_fails_the_job_on_prism_in_one_line(phase, dedup_corpus, uninterrupted, worker_pool, tmp_path):
    """Prism's SDK worker (started by the worker pool, EXTERNAL) SIGKILLed: Prism fails the job ("SDK worker
    disconnected"), or the launcher does when Prism does not (pipeline/runners/prism_watch.py), in one line, exit 1,
    no manifest, lock released."""
    assert prism.built_binary() is not None, f"no Prism binary at {prism.checkout_binary()}: run `make prism`"
    pool, address, log = worker_pool
    out = tmp_path / "out"
    argv = build_argv(dedup_corpus, out)
    on_prism = ["--runner", "PrismRunner", "--environment_type", "EXTERNAL", "--environment_config", address]
    ending = killed_workers.run_and_kill(argv + on_prism, out, phase, tmp_path / "stderr", pool, log)
    assert_failed_in_one_line(ending, out)
    assert "SDK worker" in ending.last_line
    assert not re.search(r"goroutine \d+ \[", ending.stderr), ending.stderr[-3000:]  # Prism's Go stack traces
    if phase != "writing":
        return
    rerun = subprocess.run(argv + on_prism + ["--overwrite"], cwd=REPO, capture_output=True)
    assert rerun.returncode == 0, rerun.stderr.decode(errors="replace")[-3000:]
    options = _build_shards_options() - {"overwrite", "output"}
    manifest = assert_identical({"uninterrupted": uninterrupted, "rerun on Prism": out}, options)
    assert manifest["counts"]["documents_written"] > 0 and manifest["counts"]["documents_duplicate"] > 0


@pytest.fixture(scope="module")
def stages_corpus(tmp_path_factory) -> Path:
    """The demo corpus three times: an exact copy and a near copy of each document (every dedup stage has work)."""
    return killed_workers.corpus(tmp_path_factory.mktemp("stages") / "in.jsonl", 3, near=True, documents=10)


@pytest.mark.parametrize("stage", faults.STAGES)
def test_a_worker_killed_in_each_dedup_stage_fails_the_local_job_in_one_line(stage, stages_corpus, tmp_path):
    """An SDK worker process SIGKILLs itself as it reaches ``stage`` (``SPANPREP_FAULT=kill:STAGE``)."""
    out = tmp_path / "out"
    argv = build_argv(stages_corpus, out) + LOCAL_WORKERS
    assert_failed_in_one_line(killed_workers.run_killing_itself(argv, stage, tmp_path / "stderr"), out)


def _killing_itself_on_prism(stage: str, corpus: Path, tmp_path: Path) -> tuple[killed_workers.Ending, Path, str]:
    """A build on Prism whose worker pool was started with ``SPANPREP_FAULT=kill:STAGE``: how it ended, its output,
    and the pool's log."""
    assert prism.built_binary() is not None, f"no Prism binary at {prism.checkout_binary()}: run `make prism`"
    log = tmp_path / "pool.log"
    pool, port = beam_services.start(
        beam_services.WORKER_POOL, log, env={**beam_services.checkout_env(), faults.ENV: f"kill:{stage}"}
    )
    out = tmp_path / "out"
    argv = build_argv(corpus, out) + ["--runner", "PrismRunner", "--environment_type", "EXTERNAL"]
    try:
        ending = killed_workers.run_killing_itself(
            argv + ["--environment_config", f"localhost:{port}"], stage, tmp_path / "stderr", log
        )
    finally:
        beam_services.stop(pool)
    assert_failed_in_one_line(ending, out)
    assert "SDK worker" in ending.last_line
    assert not re.search(r"goroutine \d+ \[", ending.stderr), ending.stderr[-3000:]  # Prism's Go stack traces
    return ending, out, log.read_text(errors="replace")


@pytest.mark.parametrize("stage", faults.STAGES)
def test_a_worker_killed_in_each_dedup_stage_fails_the_job_on_prism_in_one_line(stage, stages_corpus, tmp_path):
    """The same with Prism's worker, from a worker pool started with ``SPANPREP_FAULT=kill:STAGE``."""
    _killing_itself_on_prism(stage, stages_corpus, tmp_path)


KILL_AS_IT_STARTS_TO_EXIT_S = 30  # Prism v2.77.0's own wait for a worker that never connected is 60 s


def test_a_worker_killed_as_it_starts_fails_the_job_on_prism_in_one_line(stages_corpus, tmp_path):
    """Prism's worker SIGKILLs itself as it starts (``SPANPREP_FAULT=kill:start``), before it has connected to
    Prism: nothing connected to Prism ends, and Prism fails the job only after 60 s ("didn't get control
    connection"). The launcher watches the worker pool's child processes too (pipeline/runners/prism_watch.py): the
    job fails 10 s after the loss, in one line naming the worker."""
    ending, _, pool_log = _killing_itself_on_prism(faults.START, stages_corpus, tmp_path)
    assert ending.seconds_after_kill < KILL_AS_IT_STARTS_TO_EXIT_S, ending.seconds_after_kill
    (pid,) = re.findall(rf"{faults.ENV}: SIGKILL of SDK worker pid (\d+) as it starts", pool_log)
    assert re.search(
        rf"\(the SDK worker process {pid} started by the worker pool at localhost:\d+ ended", ending.last_line
    ), ending.last_line
