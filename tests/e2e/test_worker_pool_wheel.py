"""Beam workers from the installed wheel, as on a Flink/Spark cluster: both jobs through ``PortableRunner`` and the
local job service with ``--environment_type EXTERNAL``, their SDK workers started by a Beam worker pool that runs in
a fresh virtual environment holding spanprep's wheel and no path to this checkout. The output must be
byte-identical to the local FnApiRunner's (every file but the manifest, which must be equal but for the fields that
name the run: tests/e2e/test_portability.py's comparison).

The environment, offline: the wheel is built from a copy of the sources (``pip wheel --no-deps
--no-build-isolation``); the virtual environment is made with the project environment's python (``python -m venv --without-pip``: venv
bases it on the interpreter that environment was made from, not on the environment), gets the project environment's site-packages (the dependencies: Beam, spaCy and
its model, the punkt model, tokenizers, ...) as a plain path in a ``.pth`` file, which adds the directory without
running the ``.pth`` files in it (so not the editable install's finder that points at a checkout), and then the
wheel (``pip --python VENV install --no-deps``). The worker pool runs from a directory outside the checkout, without
PYTHONPATH (it is the wheel's ``pipeline.worker_pool``, which starts each SDK worker on its own interpreter); the
test checks that ``import pipeline`` there resolves into the venv's site-packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_portability import _build_shards_options, _job_option_names, assert_identical, run_everywhere

from tests.conftest import DEMO_CORPUS, REPO
from tests.support import beam_services

pytestmark = pytest.mark.slow

PACKAGE_SOURCES = ("pyproject.toml", "README.md", "pipeline", "trainer", "schemas")


def _checked(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """(the venv's python, the environment to run it in, a working directory outside the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGE_SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=ignore)
        else:
            shutil.copy(source, src / name)
    dist = tmp / "dist"
    _checked([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
              str(dist), str(src)], cwd=tmp)  # fmt: skip
    (wheel,) = dist.glob("spanprep-*.whl")

    venv = tmp / "venv"
    _checked([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    site = Path(
        _checked([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site / "_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _checked([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    workdir = tmp / "work"
    workdir.mkdir()
    where = _checked(
        [str(python), "-c", "import sys, pipeline, trainer, schemas, pipeline.tokenize.sentences as s; "
         "print(pipeline.__file__, trainer.__file__, schemas.__file__); "
         "print(any('editable' in type(f).__name__.lower() or 'editable' in str(f) for f in sys.meta_path))"],
        cwd=workdir, env=env,
    ).stdout.split()  # fmt: skip
    assert all(Path(p).is_relative_to(site) for p in where[:3]), where  # the wheel's modules, not the checkout's
    assert where[3] == "False"  # the project environment's editable finder is not installed
    return python, env, workdir


@pytest.fixture(scope="module")
def environments(wheel_venv, tmp_path_factory):
    python, env, workdir = wheel_venv
    logs = tmp_path_factory.mktemp("services")
    pool_proc, pool_port = beam_services.start(
        beam_services.WORKER_POOL, logs / "worker_pool.log", python=str(python), env=env, cwd=workdir
    )
    try:
        # the pool (and the SDK workers it starts on its interpreter, in its directory) is the venv's python,
        # outside the checkout, without PYTHONPATH
        proc = Path(f"/proc/{pool_proc.pid}")
        assert (proc / "cmdline").read_bytes().split(b"\0")[0] == str(python).encode()
        assert Path(os.readlink(proc / "cwd")) == workdir and not workdir.is_relative_to(REPO)
        assert not any(v.startswith(b"PYTHONPATH=") for v in (proc / "environ").read_bytes().split(b"\0"))
        with beam_services.running(beam_services.JOB_SERVICE, logs / "job_service.log") as endpoint:
            yield {
                "FnApiRunner": ["--runner", "FnApiRunner"],
                "EXTERNAL": ["--runner", "PortableRunner", "--job_endpoint", endpoint, "--environment_type",
                             "EXTERNAL", "--environment_config", f"localhost:{pool_port}"],
            }  # fmt: skip
    finally:
        beam_services.stop(pool_proc)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    """The demo corpus's first 12 documents (spaCy runs on all of them)."""
    path = tmp_path_factory.mktemp("corpus") / "demo12.jsonl"
    path.write_text("".join(DEMO_CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)[:12]), encoding="utf-8")
    return path


def test_build_shards_with_candidates_and_a_trained_tokenizer_then_with_tokenizer(environments, small_corpus, tmp_path):
    from pipeline import build_shards

    argv = ["--input", str(small_corpus), "--train-tokenizer", "--vocab-size", "1500", "--num-shards", "2",
            "--mask-candidates", "entities,noun_phrases"]  # fmt: skip
    results = run_everywhere(build_shards, argv, tmp_path / "trained", environments)
    manifest = assert_identical(results, _build_shards_options())
    assert manifest["counts"]["documents_written"] == 12
    assert manifest["candidates"]["spans"]["entities"] > 0 and manifest["candidates"]["spans"]["noun_phrases"] > 0

    # no candidates, the tokenizer of that artifact, the whole demo corpus read as byte ranges
    tokenizer = results["FnApiRunner"] / "tokenizer.json"
    argv = ["--input", str(DEMO_CORPUS), "--tokenizer", str(tokenizer), "--num-shards", "3", "--split-bytes", "16384"]
    results = run_everywhere(build_shards, argv, tmp_path / "given", environments)
    manifest = assert_identical(results, _build_shards_options())
    assert manifest["counts"]["documents_written"] == 40 and manifest["tokenizer"]["source"] == "file"


def test_build_ngram_dictionary(environments, tmp_path):
    from pipeline import build_ngram_dictionary

    corpus = tmp_path / "demo.tokens"
    texts = [json.loads(line)["text"] for line in DEMO_CORPUS.read_text(encoding="utf-8").splitlines()]
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    argv = ["--input", str(corpus), "--min-count", "3"]
    results = run_everywhere(build_ngram_dictionary, argv, tmp_path / "dictionary", environments)
    manifest = assert_identical(results, _job_option_names(build_ngram_dictionary.NgramDictionaryOptions))
    assert manifest["total_entries"] > 50 and manifest["entries_per_n"]["2"] > 0
