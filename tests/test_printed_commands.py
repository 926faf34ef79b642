"""No printed or documented command starts with a bare ``python`` or ``deepspeed``: outside an activated venv they
run another interpreter (DEDUP.md's ``python -m pipeline.contamination`` ended in ``ModuleNotFoundError:
apache_beam``). Checked: README, CONTRIBUTING, docs/*.md and the format's and dictionaries' pages; every job's
``--help``; every string in the jobs' code (their hints, dataset card and docstrings: the hints made by
``schemas.commands`` name the interpreter and never match)."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from tests.conftest import REPO

# A command word: at the start of a line (after spaces, a prompt, VAR=value assignments), of an inline code span or
# of argparse's usage line, followed by an argument. "the `deepspeed` launcher" or "DeepSpeed's" are no commands.
BARE = re.compile(
    r"(?:^|`|\$ |[;&|] |usage: )\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(python3?|deepspeed)(?= +[-\w./$'\"])", re.M
)
PAGES = ["README.md", "CONTRIBUTING.md", "schemas/FORMAT.md", "dictionaries/README.md"]
# Strings that show the bare form on purpose: what goes wrong with it.
EXPLAINS_THE_BARE_FORM = {"schemas/commands.py", "pipeline/runners/worker_pool.py"}
JOBS = [
    "pipeline.build_shards",
    "pipeline.build_ngram_dictionary",
    "pipeline.contamination",
    "pipeline.verify",
    "pipeline.report.cli",
    "pipeline.demo",
    "pipeline.worker_pool",
    "trainer.export",
    "trainer.plot",
    "trainer.preview_masking",
    "trainer.pretrain",
    "trainer.finetune",
]


def bare_commands(text: str) -> list[str]:
    return [text[m.start() : m.start() + 80].strip() for m in BARE.finditer(text)]


def test_the_pattern_finds_bare_commands_and_only_them():
    assert bare_commands("run\n    python -m pipeline.verify X\n") == ["python -m pipeline.verify X"]
    assert bare_commands("see (`python -m\npipeline.verify`)") == ["`python -m\npipeline.verify`)"]
    assert bare_commands("OMP_NUM_THREADS=1 deepspeed --num_gpus 2 trainer/pretrain.py")
    assert bare_commands("$ python3 trainer/pretrain.py")
    assert bare_commands("usage: python -m pipeline.worker_pool [-h]")
    for fine in ("    .venv/bin/python -m pipeline.verify X", "OMP_NUM_THREADS=1 .venv/bin/deepspeed --num_gpus 2",
                 "the `deepspeed` launcher", "DeepSpeed's python process", "`deepspeed.init_distributed()`"):  # fmt: skip
        assert bare_commands(fine) == [], fine


def test_no_page_shows_a_bare_command():
    pages = [REPO / p for p in PAGES] + sorted((REPO / "docs").glob("*.md"))
    found = {p.relative_to(REPO).as_posix(): bare_commands(p.read_text(encoding="utf-8")) for p in pages}
    assert {page: hits for page, hits in found.items() if hits} == {}
    assert sum(p.read_text(encoding="utf-8").count(".venv/bin/") for p in pages) > 50  # the commands are there


def test_no_string_in_the_jobs_code_shows_a_bare_command():
    checked, found = 0, {}
    for path in sorted([*(REPO / "pipeline").rglob("*.py"), *(REPO / "trainer").rglob("*.py"), *(REPO / "schemas").rglob("*.py")]):  # fmt: skip
        rel = path.relative_to(REPO).as_posix()
        if rel in EXPLAINS_THE_BARE_FORM:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                checked += 1
                if hits := bare_commands(node.value):
                    found[f"{rel}:{node.lineno}"] = hits
    assert found == {}
    assert checked > 1000


@pytest.mark.parametrize("job", JOBS)
def test_no_help_shows_a_bare_command(job, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    main = getattr(importlib.import_module(job), "main", None) or importlib.import_module(job).run
    try:
        code = main(["--help"])
    except SystemExit as e:
        code = e.code
    assert code in (0, None)
    shown = capsys.readouterr().out
    assert "usage:" in shown and bare_commands(shown) == []
