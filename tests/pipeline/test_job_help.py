"""The jobs' ``--help`` shows each option's default (``pipeline.runners.jobs.HelpFormatter``)."""

from __future__ import annotations

import argparse

import pytest


def _blocks(text: str) -> dict[str, str]:
    """Option name -> its entry in the help (from its line to the next option's)."""
    blocks: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  -") and not line.startswith("   "):
            name = stripped.split()[0].rstrip(",")
            blocks[name] = ""
        if name is not None:
            blocks[name] += stripped + " "
    return blocks


def _build_shards_parser() -> argparse.ArgumentParser:
    from pipeline import build_shards

    return build_shards._job_parser()


def _ngram_parser() -> argparse.ArgumentParser:
    from pipeline.build_ngram_dictionary import NgramDictionaryOptions
    from pipeline.runners.jobs import HelpFormatter

    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    NgramDictionaryOptions._add_argparse_args(parser)
    return parser


@pytest.mark.parametrize("make_parser", [_build_shards_parser, _ngram_parser])
def test_help_gives_every_default(make_parser, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: no value cut by a line break
    parser = make_parser()
    blocks = _blocks(parser.format_help())
    checked = 0
    for action in parser._actions:
        if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
            continue
        entry = blocks[action.option_strings[0]]
        assert "default" in entry.lower(), entry
        checked += 1
    assert checked > 0


def test_build_shards_help_names_the_number_of_shards_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    from pipeline import build_shards
    from pipeline.build_shards_options import BuildShardsOptions
    from pipeline.shard_sizing import DEFAULT_SHARD_MB

    assert build_shards.main(["--help"]) == 0
    blocks = _blocks(capsys.readouterr().out)
    # neither --num-shards nor --shard-size-mb: shards of about DEFAULT_SHARD_MB MB (issue 43)
    assert BuildShardsOptions([]).view_as(BuildShardsOptions).num_shards is None
    assert f"(neither: shards of about {DEFAULT_SHARD_MB} MB" in blocks["--num-shards"]
    assert f"(default when neither is given: {DEFAULT_SHARD_MB})" in blocks["--shard-size-mb"]


@pytest.mark.parametrize("job", ["build_shards", "build_ngram_dictionary"])
def test_help_lists_the_progress_and_log_options(job, capsys, monkeypatch):
    import importlib

    from pipeline.progress import DEFAULT_SECONDS

    monkeypatch.setenv("COLUMNS", "1000")
    module = importlib.import_module(f"pipeline.{job}")
    try:
        assert module.main(["--help"]) == 0
    except SystemExit as e:  # build_ngram_dictionary's --help ends in SystemExit(0)
        assert e.code == 0
    blocks = _blocks(capsys.readouterr().out)
    assert (
        "progress line" in blocks["--progress-seconds"]
        and f"(default: {DEFAULT_SECONDS})" in blocks["--progress-seconds"]
    )
    assert "log level" in blocks["--log-level"]
