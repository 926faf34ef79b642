"""Runner start-up problems end both jobs with one ``<job>: error:`` line and exit status 2 (pipeline/runners/runner_checks.py),
before anything is read, trained or claimed: run as a user runs them, ``python -m pipeline.<job>``, from a shell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DEMO_CORPUS, REPO, free_port
from tests.support import beam_services

JOBS = ("build_shards", "build_ngram_dictionary")


def run_job(job: str, tmp_path: Path, *runner_argv: str, env: dict[str, str] | None = None) -> str:
    """Run the job; assert exit 2, one error line on stderr and no output claimed; return the line."""
    output = tmp_path / f"out-{job}"
    proc = subprocess.run(
        [sys.executable, "-m", f"pipeline.{job}", "--input", str(DEMO_CORPUS), "--output", str(output), *runner_argv],
        cwd=REPO,
        env={**beam_services.checkout_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, (job, proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith(f"{job}: error: "), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not output.exists(), "the output was claimed before the runner was checked"
    return lines[0]


@pytest.mark.parametrize("job", JOBS)
def test_an_unknown_runner_name(job, tmp_path):
    line = run_job(job, tmp_path, "--runner", "FlinRunner")
    assert "--runner FlinRunner: unknown runner; choose one of" in line and "FlinkRunner" in line


@pytest.mark.parametrize("job", JOBS)
def test_a_job_endpoint_nothing_listens_on(job, tmp_path):
    port = free_port()  # bound and released: nothing listens there
    line = run_job(job, tmp_path, "--runner", "PortableRunner", "--job_endpoint", f"localhost:{port}")
    assert f"--job_endpoint localhost:{port}: nothing accepts connections there (Connection refused)" in line
    assert "local_job_service_main" in line


def test_the_portable_runner_without_a_job_endpoint(tmp_path):
    line = run_job("build_shards", tmp_path, "--runner", "PortableRunner")
    assert "--runner PortableRunner needs --job_endpoint HOST:PORT" in line


@pytest.mark.parametrize(
    ("job", "runner", "flag"),
    [
        ("build_shards", "FlinkRunner", "--flink_job_server_jar"),
        ("build_ngram_dictionary", "SparkRunner", "--spark_job_server_jar"),
    ],
)
def test_a_job_server_jar_that_cannot_be_downloaded(job, runner, flag, tmp_path):
    # No network for the download, whatever this machine has: every HTTPS request goes to a proxy that is not there.
    # An empty jar cache, so that Beam has to fetch the jar.
    proxy = {"https_proxy": f"http://127.0.0.1:{free_port()}", "HTTPS_PROXY": "", "no_proxy": ""}
    cache = tmp_path / "jars"
    line = run_job(job, tmp_path, "--runner", runner, "--jar_cache_dir", str(cache), env=proxy)
    assert f"--runner {runner} starts Beam's Java job server, whose jar https://" in line
    assert "cannot be downloaded here" in line and f"pass {flag} PATH" in line and "--job_endpoint" in line
    assert not any(cache.glob("*.jar"))


def test_a_prism_binary_that_cannot_be_downloaded(tmp_path):
    # No download, no binary in Beam's cache (HOME) and none that `make prism` built (an empty SPANPREP_PRISM_CACHE).
    proxy = {"https_proxy": f"http://127.0.0.1:{free_port()}", "HTTPS_PROXY": "", "no_proxy": "", "HOME": str(tmp_path)}
    proxy["SPANPREP_PRISM_CACHE"] = str(tmp_path / "prism")
    line = run_job("build_ngram_dictionary", tmp_path, "--runner", "PrismRunner", env=proxy)
    assert "--runner PrismRunner starts Beam's Prism runner, whose binary cannot be fetched here: https://" in line
    assert "--prism_location PATH" in line and f"`make prism` (into {tmp_path / 'prism'}/v" in line


def test_a_missing_job_server_jar_file(tmp_path):
    line = run_job(
        "build_shards", tmp_path, "--runner", "FlinkRunner", "--flink_job_server_jar", str(tmp_path / "x.jar")
    )
    assert f"--flink_job_server_jar {tmp_path / 'x.jar'}: no such file" in line


@pytest.mark.slow
def test_an_external_worker_pool_that_is_not_there(tmp_path):
    # A real job service, so that only the worker pool is missing. Without the check, Beam's job service fails
    # the job with a 150-line gRPC traceback ("failed to connect to all addresses").
    pool_port = free_port()
    with beam_services.running(beam_services.JOB_SERVICE, tmp_path / "job_service.log") as endpoint:
        for job in JOBS:
            line = run_job(
                job,
                tmp_path,
                "--runner",
                "PortableRunner",
                "--job_endpoint",
                endpoint,
                "--environment_type",
                "EXTERNAL",
                "--environment_config",
                f"localhost:{pool_port}",
            )
            assert f"--environment_config localhost:{pool_port}: nothing accepts connections there" in line
            assert f"python -m pipeline.worker_pool --service_port {pool_port}" in line  # this venv's python


def test_a_remote_runners_worker_pool_is_not_checked_from_here():
    # localhost:50000 of a Flink task manager's worker pool sidecar is not this machine's: nothing to check here.
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.runners import runner_checks

    options = PipelineOptions(
        [
            "--runner",
            "FlinkRunner",
            "--job_endpoint",
            "flink-jobserver.example:8099",
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            "localhost:50000",
        ]
    )
    assert not runner_checks._runs_workers_here("flink-jobserver.example:8099", "FlinkRunner", options)
    assert runner_checks._runs_workers_here(f"localhost:{free_port()}", "PortableRunner", options)
