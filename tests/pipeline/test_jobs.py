"""pipeline/runners/jobs.py: the one convention of the two Beam jobs; importing ``pipeline`` itself does nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.portability.api import beam_fn_api_pb2

from pipeline.runners import jobs
from pipeline.runners.sdk_worker import STATE_SAMPLING_MS
from pipeline.runners.worker_pool import sdk_worker_command
from tests.conftest import REPO


def test_importing_the_package_has_no_side_effects():
    code = (
        "import logging, sys; import pipeline; root = logging.getLogger(); "
        "print(len(root.filters), len(root.handlers), 'apache_beam' in sys.modules, pipeline.__version__ != '')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.split() == ["0", "0", "False", "True"]
    assert proc.stderr == ""


def test_jobs_run_without_pandas_and_pandas_still_imports_after(tmp_path):
    # pandas is installed here (Hugging Face datasets); the jobs neither import it (Beam and pyarrow would) nor need it
    code = (
        "import sys; from pipeline import build_shards; from tests.conftest import DEMO_CORPUS; "
        "print('pandas' in sys.modules, 'apache_beam.typehints.pandas_type_compatibility' in sys.modules); "
        f"code = build_shards.main(['--input', str(DEMO_CORPUS), '--output', {str(tmp_path / 'out')!r}, "
        "'--train-tokenizer', '--vocab-size', '500', '--num-shards', '2']); "
        "print(code, 'pandas' in sys.modules); "
        "import pandas; print(pandas.DataFrame({'a': [1, 2]})['a'].sum())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    assert proc.stdout.splitlines()[0] == "False False"
    assert proc.stdout.splitlines()[-2:] == ["0 False", "3"]
    assert (tmp_path / "out" / "manifest.json").exists()


def test_the_local_runners_worker_process_imports_beam_without_pandas():
    """pipeline.sdk_worker (the FnApiRunner's worker processes) imported pandas with Beam, 0.3 s in every worker; the
    real Beam worker entry point runs here until it asks for its runner's endpoint, which a test process lacks."""
    code = (
        "import sys; from pipeline.runners import sdk_worker\n"
        "try:\n    sdk_worker.main()\nexcept KeyError as e:\n    print(e)\n"
        "print('apache_beam.runners.worker.sdk_worker_main' in sys.modules, 'pandas' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["'CONTROL_API_SERVICE_DESCRIPTOR'", "True", "False"], proc.stdout + proc.stderr


def test_the_local_runners_worker_process_skips_the_interpreter_teardown_once_its_harness_returns():
    """The FnApiRunner waits for its worker processes one after another; a worker whose harness had returned then
    tore its interpreter down (Beam's modules, 0.3-0.5 s each here). Beam's harness is replaced by one that logs,
    prints and leaves an object only the teardown deletes: exit 0, output and log flushed, atexit run, no teardown."""
    code = (
        "import atexit, logging, sys\n"
        "from apache_beam.runners.worker import sdk_worker_main\n"
        "class Teardown:\n"
        "    def __del__(self):\n"
        "        print('torn down', flush=True)\n"
        "def harness(argv):\n"
        "    global kept_until_teardown\n"
        "    kept_until_teardown = Teardown()\n"
        "    atexit.register(lambda: print('atexit ran', end=' '))\n"
        "    logging.getLogger('pipeline.test').warning('harness done')\n"
        "    print('output', end=' ')\n"
        "sdk_worker_main.main = harness\n"
        "from pipeline.runners import sdk_worker\n"
        "sdk_worker.main()\n"
        "print('not reached')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "output atexit ran "
    assert "WARNING pipeline.test: harness done" in proc.stderr


def test_bundles_sample_their_state_at_the_short_period_in_every_kind_of_job_process():
    """A bundle ends once Beam's state-sampling thread wakes up: up to its period, 200 ms by default (0.2 s of a
    whole-sample build). The launcher (in-process runner), a local worker process and a worker of the pool that
    serves Spark and Flink each make their bundles' samplers with the short period; Beam's harnesses are replaced
    by ones that report the period of a sampler made as a bundle makes it."""
    sampler = (
        "from apache_beam.runners.worker import statesampler\n"
        "from apache_beam.utils.counters import CounterFactory\n"
        "def period(*args, **kwargs):\n"
        "    print(statesampler.StateSampler('step', CounterFactory()).sampling_period_ms, end=' ')\n"
    )
    pool = sdk_worker_command(
        beam_fn_api_pb2.StartWorkerRequest(worker_id="w1", control_endpoint={"url": "localhost:1"}), 0, 0
    )[-1]
    code = (
        sampler + "period()\n"  # Beam alone
        "from apache_beam.runners.worker import sdk_worker_main\n"
        "sdk_worker_main.main = period\n"
        "from pipeline.runners import sdk_worker\n"
        "import pipeline.runners.jobs\n"
        "period()\n"  # the launcher
        "statesampler.StateSampler.__init__.__defaults__ = (200,)\n"
        "from apache_beam.runners.worker import sdk_worker as harness\n"
        "harness.SdkHarness = lambda *a, **k: type('H', (), {'run': period})()\n"
        f"exec({pool!r})\n"  # a worker of pipeline.worker_pool
        "statesampler.StateSampler.__init__.__defaults__ = (200,)\n"
        "sdk_worker.main()\n"  # a local worker process; it ends the process
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["200", str(STATE_SAMPLING_MS), str(STATE_SAMPLING_MS), str(STATE_SAMPLING_MS)]


def test_both_jobs_report_a_user_error_as_one_line_and_exit_2(tmp_path):
    for job in ("build_shards", "build_ngram_dictionary"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                f"pipeline.{job}",
                "--input",
                str(tmp_path / "missing*"),
                "--output",
                str(tmp_path / "out"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, job
        assert proc.stderr == f"{job}: error: --input {tmp_path / 'missing*'}: no file matches\n", (
            job
        )  # Beam's import warning hidden
        assert not (tmp_path / "out").exists(), job


def test_an_input_file_whose_name_is_not_utf8_is_refused_in_one_line(tmp_path):
    """Records and dead letters name their file in UTF-8 JSON: such a file ended the job in Beam's coder, a
    UnicodeEncodeError traceback (exit 1) after the job had started; now it is refused before any work."""
    (tmp_path / "good.jsonl").write_text('{"id": "a", "text": "b"}\n', encoding="utf-8")
    bad = os.fsencode(tmp_path) + b"/bad\xff.jsonl"
    Path(bad.decode("utf-8", "surrogateescape")).write_bytes(b'{"id": "a", "text": "b"}\n')
    with pytest.raises(jobs.UsageError) as refused:
        jobs.match_inputs([str(tmp_path / "*.jsonl")])
    name = os.fsdecode(bad)
    assert str(refused.value) == f"--input {tmp_path / '*.jsonl'}: the file name {name!r} is not UTF-8: rename the file"
    assert jobs.match_inputs([str(tmp_path / "g*.jsonl")]) == [(str(tmp_path / "good.jsonl"), 25)]


def _record_cache_size(path: str) -> None:
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    Path(path).write_text(str(worker_handlers.STATE_CACHE_SIZE_MB))


def test_the_in_process_runners_state_cache_follows_max_cache_memory_usage_mb(tmp_path):
    """0 (Beam's default for its worker processes) unless the option is given; Beam's own 100 MB is put back after
    the job. The cache weighed each per-document side-input lookup of --dedup (pipeline/runners/state_cache.py)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    from pipeline.runners import jobs

    before = worker_handlers.STATE_CACHE_SIZE_MB
    for argv, expected in (([], 0), (["--max_cache_memory_usage_mb", "7"], 7)):
        seen = tmp_path / f"seen-{expected}"
        options = PipelineOptions(["--runner", "FnApiRunner", *argv])
        jobs.run_pipeline(options, lambda p, seen=seen: p | beam.Create([str(seen)]) | beam.Map(_record_cache_size))
        assert seen.read_text() == str(expected)
        assert worker_handlers.STATE_CACHE_SIZE_MB == before
