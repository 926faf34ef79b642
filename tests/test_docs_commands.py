"""The fine-tuning examples of the README and docs/FINETUNING.md name an n-gram dictionary that the same page says how
to build from data a user of this checkout has (``../shared/data``), not one that is not shipped
(``dictionaries/wikitext103`` needs WikiText-103's 540 MB train split)."""

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
