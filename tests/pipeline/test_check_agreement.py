"""The build-time check finds everything the standalone check finds (issue 42, item 2), case by case: one artifact of
real Wikipedia text planted with each case, one evaluation file per case, the build's figure (``--decontaminate``,
the manifest) beside the standalone check's (``pipeline.contamination`` on the artifact's rows).

Before: a corpus passage holding U+200B inside a word was kept and not counted by the build (its rule split the
word; the rows, decoded, have no U+200B) while the standalone check found it; and a passage whose words hold ``_``
was found by the build but not by the standalone check (a WordPiece row decodes ``pattern_sh`` as ``pattern _ sh``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import contamination
from tests.conftest import build
from tests.pipeline.test_contamination import RUNIC, _pages, _wordpiece_json

INVISIBLE = {"soft-hyphen": "\u00ad", "zero-width-space": "\u200b", "zero-width-joiner": "\u200d", "bom": "\ufeff"}
# case -> (the build finds it, the standalone check finds it)
EXPECTED = {
    **{f"corpus-{name}": (True, True) for name in INVISIBLE},
    **{f"eval-{name}": (True, True) for name in INVISIBLE},
    "underscores": (True, True),
    "unknown-word": (True, False),  # the rows hold [UNK] where the word was: the standalone check can find less
    "twins": (False, False),  # two adjacent documents sharing an id: no n-gram spans them, in either check
}


def _inside(words: list[str], ch: str) -> str:
    return " ".join(w[:2] + ch + w[2:] if len(w) > 3 else w for w in words)


def _cases(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    pages = _pages({"Page/Apollo_12.md", "Page/Ames,_Iowa.md"})
    words = [w for w in next(p for p in pages if p["id"] == "Page/Apollo_12.md")["text"].split() if w.isalpha()]
    passages = iter(words[i : i + 15] for i in range(0, len(words) - 15, 16))
    docs = [{"id": "Page/Ames,_Iowa.md", "text": next(p for p in pages if p["id"] != "Page/Apollo_12.md")["text"]}]
    evals: dict[str, str] = {}
    for name, ch in INVISIBLE.items():
        w = next(passages)
        docs.append({"id": f"corpus-{name}", "text": f"It said {_inside(w, ch)}."})
        evals[f"corpus-{name}"] = " ".join(w)
        w = next(passages)
        docs.append({"id": f"eval-{name}", "text": f"It said {' '.join(w)}."})
        evals[f"eval-{name}"] = _inside(w, ch)
    w, joined = next(passages) + next(passages), []
    for i, word in enumerate(w):  # every sixth word joined to the one before by "_": each 13-gram spans one
        joined[-1:] = [f"{joined[-1]}_{word}"] if i % 6 == 5 else [*joined[-1:], word]
    template = f"pattern_sh = _2_white_stripes {' '.join(joined)}"
    docs.append({"id": "underscores", "text": f"Template text: {template}"})
    evals["underscores"] = template
    w = next(passages)
    docs.append({"id": "unknown-word", "text": " ".join(w[:7] + [RUNIC] + w[7:])})
    evals["unknown-word"] = " ".join(w[:7] + [RUNIC] + w[7:])
    c, d = next(passages)[:7], next(passages)[:7]
    docs += [{"id": "twins", "text": f"First of two. {' '.join(c)}"}, {"id": "twins", "text": f"{' '.join(d)}. Two."}]
    evals["twins"] = " ".join(c + d)
    assert set(evals) == set(EXPECTED)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    files = {}
    for case, body in evals.items():
        files[case] = tmp_path / f"{case}.jsonl"
        files[case].write_text(json.dumps({"id": case, "text": body}) + "\n", encoding="utf-8")
    return corpus, files


@pytest.fixture(scope="module")
def wordpiece_json() -> str:
    """A lowercase WordPiece trained on WikiText-2 valid and a line with an underscore (which WikiText lacks: an
    unknown ``_`` would be the unknown-word case); runic letters stay unknown."""
    return _wordpiece_json()


@pytest.mark.parametrize("pack", ["doc-sentences", "full-sentences"])
def test_the_build_finds_every_case_the_standalone_check_finds(tmp_path, pack, wordpiece_json):
    corpus, files = _cases(tmp_path)
    (tmp_path / "tokenizer.json").write_text(wordpiece_json, encoding="utf-8")
    argv = ["--tokenizer", str(tmp_path / "tokenizer.json"), "--num-shards", "1", "--pack", pack]
    argv += ["--drop-contaminated", "none", *(a for f in files.values() for a in ("--decontaminate", str(f)))]
    m = build(corpus, tmp_path / "artifact", *argv)
    report = contamination.check(str(tmp_path / "artifact"), [str(f) for f in files.values()])
    found = {
        case: (
            m["contamination"]["files"][str(f)]["examples_contaminated"] == 1,
            report[str(f)]["examples_contaminated"] == 1,
        )
        for case, f in files.items()
    }
    assert found == EXPECTED
    assert all(build_found or not alone for build_found, alone in found.values())  # the relation DEDUP.md states
