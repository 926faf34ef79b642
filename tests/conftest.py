"""Shared fixtures: real corpora from ../shared/data (skipped when absent) and artifacts built from them."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

# Fixtures s3_store / gcs_store / object_store: real S3 and GCS API servers on loopback.
pytest_plugins = ["tests.support.object_stores"]

REPO = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout; SPANPREP_SHARED_DATA names it for a checkout elsewhere (a git worktree)
SHARED_DATA = Path(os.environ.get("SPANPREP_SHARED_DATA") or REPO.parent / "shared" / "data")
WIKITEXT2 = SHARED_DATA / "wikitext-2"
WIKIPEDIA_SAMPLE = SHARED_DATA / "wikipedia-en-sample" / "pages.jsonl.zst"
DEMO_CORPUS = REPO / "pipeline" / "data" / "demo_corpus.jsonl"

# Options every test artifact shares; tests compare against runs with these.
WIKITEXT2_BUILD = ["--input-format", "wikitext", "--train-tokenizer", "--vocab-size", "8000", "--num-shards", "4"]


def wikitext2(split: str = "valid") -> Path:
    path = WIKITEXT2 / f"wiki.{split}.tokens"
    if not path.exists():
        pytest.skip(f"real data not available: {path} (../shared is absent on this machine)")
    return path


def wikitext2_articles(n: int, directory: Path, split: str = "valid") -> Path:
    """The first ``n`` articles of a WikiText-2 split as a ``.tokens`` file in ``directory`` (real text,
    small enough for spaCy in CI); skips when ../shared is absent."""
    lines = wikitext2(split).read_text(encoding="utf-8").splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(" = ") and not line.startswith(" = = ")]
    assert len(starts) > n
    path = Path(directory) / f"wiki.{split}.first{n}.tokens"
    path.write_text("".join(lines[: starts[n]]), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(inputs, output: Path, *extra: str) -> dict:
    from pipeline import build_shards

    argv = []
    for p in [inputs] if isinstance(inputs, (str, Path)) else inputs:
        argv += ["--input", str(p)]
    return build_shards.run(argv + ["--output", str(output), "--runner", "FnApiRunner", *extra])


@pytest.fixture(scope="session")
def wikitext2_artifact(tmp_path_factory) -> Path:
    """Artifact of WikiText-2's validation split (60 articles): 8k cased WordPiece, 4 shards."""
    out = tmp_path_factory.mktemp("wikitext2") / "artifact"
    build(wikitext2("valid"), out, *WIKITEXT2_BUILD)
    return out


@pytest.fixture(scope="session")
def demo_artifact(tmp_path_factory) -> Path:
    """Artifact of the embedded demo corpus (always available): 4k cased WordPiece, 4 shards."""
    out = tmp_path_factory.mktemp("demo") / "artifact"
    build(DEMO_CORPUS, out, "--input-format", "jsonl", "--train-tokenizer", "--vocab-size", "4000", "--num-shards", "4")
    return out


@pytest.fixture(scope="session", autouse=True)
def shard_check_cache(tmp_path_factory):
    """Markers of verified shards (schemas/integrity.py) go to a directory of this session, not ~/.cache;
    subprocesses inherit it."""
    import os

    path = tmp_path_factory.mktemp("spanprep_cache")
    saved = os.environ.get("SPANPREP_CACHE_DIR")
    os.environ["SPANPREP_CACHE_DIR"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("SPANPREP_CACHE_DIR", None)
    else:
        os.environ["SPANPREP_CACHE_DIR"] = saved


@pytest.fixture
def main_in_process(monkeypatch, capsys):
    """Call pretrain.main in this process (the errors come before any process group exists)."""
    from trainer import pretrain

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")  # restored afterwards; main only fills in missing ones
        monkeypatch.delenv(key)

    def call(*argv: str) -> tuple[int, str]:
        code = pretrain.main(list(argv))
        err = capsys.readouterr().err
        return code, err

    return call


# What trainer.engine.distributed fills in for a one-process run that reaches the process group in this process;
# with the suite split over processes (pytest-xdist) a later test in the same process saw them (the Slurm script's
# test read a MASTER_PORT left by another test as the user's own).
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def launcher_variables_stay_as_they_were():
    before = {key: os.environ.get(key) for key in LAUNCHER_VARIABLES}
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
