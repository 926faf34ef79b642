"""Documented commands run on what a user of this checkout has. The fine-tuning examples of the README and
docs/FINETUNING.md name an n-gram dictionary that the same page says how to build from data at hand
(``../shared/data``), not one that is not shipped (``dictionaries/wikitext103`` needs WikiText-103's 540 MB train
split); the README's first build command runs as printed on ``../shared/data``."""

from __future__ import annotations

import glob
import re
import shlex

import pytest

from tests.conftest import REPO, SHARED_DATA

PAGES = ["README.md", "docs/FINETUNING.md"]


def _commands(text: str) -> list[list[str]]:
    """Shell commands of the page's bash blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]
    return [c for c in commands if c]


@pytest.mark.parametrize("page", PAGES)
def test_every_dictionary_an_example_uses_is_built_on_the_page_from_data_at_hand(page):
    if not SHARED_DATA.exists():
        pytest.skip(f"real data not available: {SHARED_DATA}")
    commands = _commands((REPO / page).read_text(encoding="utf-8"))
    used = {c[c.index("--ngram-dictionary") + 1] for c in commands if "--ngram-dictionary" in c}
    built: dict[str, list[str]] = {}
    for c in commands:
        if "pipeline.build_ngram_dictionary" in c and "--output" in c:
            built.setdefault(c[c.index("--output") + 1], []).extend(c[i + 1] for i, a in enumerate(c) if a == "--input")
    assert used, f"{page}: no fine-tuning example with --ngram-dictionary"
    for path in used:
        inputs = [p for pattern in built.get(path, []) for p in glob.glob(str(REPO / pattern))]
        assert inputs, f"{page}: --ngram-dictionary {path} is not built on the page from files that exist here"


def test_the_readmes_first_build_command_runs_as_printed_on_data_at_hand(tmp_path, monkeypatch):
    """Issue 45, item 4: the README's first build command names files this checkout has (``../shared/data``),
    nothing to fill in, no tokenizer file the user lacks and no more local workers than 2 cores run well; run as
    printed from the checkout's root (the output aside, which goes to a temporary directory), it builds an artifact
    that verifies."""
    if not (REPO.parent / "shared" / "data").exists():
        pytest.skip(f"real data not available: {REPO.parent / 'shared' / 'data'}")
    from pipeline import build_shards
    from pipeline.verify import verify

    first = next(c for c in _commands((REPO / "README.md").read_text(encoding="utf-8")) if "pipeline.build_shards" in c)
    assert first[:3] == [".venv/bin/python", "-m", "pipeline.build_shards"], first
    args = first[3:]
    inputs = [args[i + 1] for i, a in enumerate(args) if a == "--input"]
    assert inputs and all(glob.glob(str(REPO / pattern)) for pattern in inputs), inputs
    assert not {"--tokenizer", "--vocab", "--tokenizer-from"} & set(args), args
    assert int(dict(zip(args, args[1:], strict=False)).get("--direct_num_workers", "1")) <= 2, args
    assert not [a for a in args if re.search(r"[<>]|\.\.\.|YOUR|PATH|CORPUS", a)], args
    out = tmp_path / args[args.index("--output") + 1]
    args[args.index("--output") + 1] = str(out)
    monkeypatch.chdir(REPO)
    assert build_shards.main(args) == 0
    report = verify(str(out))
    assert report.ok and sum(report.checked.values()) > 0, report.problems
