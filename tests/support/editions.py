"""Gutenberg-style "editions" of real text (issue 35): a WikiText-2 article is a book; an edition is its body
re-wrapped at another line width between a Project-Gutenberg-like header and footer of its own, optionally with a
fraction of its words respelt (a modernised spelling) or its chapters (the article's ``= =`` sections) reordered.
Deterministic: every choice comes from a seeded ``random.Random``."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

HEADERS = [
    "The Project Gutenberg EBook of {title}\n\nThis eBook is for the use of anyone anywhere at no cost and with almost "
    "no restrictions whatsoever. You may copy it, give it away or re-use it under the terms of the Project Gutenberg "
    "License included with this eBook or online at www.gutenberg.org\n\nRelease Date: {date} [EBook #{number}]\n\n"
    "*** START OF THIS PROJECT GUTENBERG EBOOK ***\n\nProduced by {producer}\n\n",
    "Project Gutenberg's {title}, a new edition\n\nCopyright laws are changing all over the world. Be sure to check "
    "the copyright laws for your country before downloading or redistributing this or any other Project Gutenberg "
    "eBook.\n\nPosting Date: {date} [Etext #{number}]\n\n*END THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*\n\n",
]
FOOTERS = [
    "\n\nEnd of the Project Gutenberg EBook of {title}\n\n*** END OF THIS PROJECT GUTENBERG EBOOK ***\n\nUpdated "
    "editions will replace the previous one--the old editions will be renamed.\n",
    "\n\nEnd of Project Gutenberg's Etext of {title}. Corrected by {producer}. Most people start at our Web site "
    "which has the main PG search facility.\n",
]


def books(tokens_file: Path) -> list[tuple[str, list[str]]]:
    """(title, chapters) per article of a WikiText ``.tokens`` file; a chapter is a ``= =`` section, joined into
    one paragraph string per section (its lines, WikiText's ``@-@`` marks undone)."""
    out: list[tuple[str, list[str]]] = []
    for line in tokens_file.read_text(encoding="utf-8").splitlines():
        text = line.strip().replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
        if line.startswith(" = ") and not line.startswith(" = = "):
            out.append((text.strip("= "), []))
        elif line.startswith(" = = ") and out:
            out[-1][1].append("")
        elif text and out:
            if not out[-1][1]:
                out[-1][1].append("")
            out[-1][1][-1] += text + " "
    return [(title, [c for c in chapters if c.strip()]) for title, chapters in out if chapters]


def respell(word: str) -> str:
    """A spelling modernised: -our -> -or, -ise -> -ize, a doubled letter single, else an older -e added."""
    for old, new in (("our", "or"), ("ise", "ize"), ("ll", "l"), ("tt", "t")):
        if old in word:
            return word.replace(old, new, 1)
    return word + "e"


def edition(title: str, chapters: list[str], seed: int, width: int, respelt: float = 0.0,
            reorder: bool = False) -> str:  # fmt: skip
    rng = random.Random(seed)
    chapters = list(chapters)
    if reorder:
        rng.shuffle(chapters)
    body = []
    for chapter in chapters:
        words = chapter.split()
        for i in range(len(words)):
            if rng.random() < respelt and words[i].isalpha():
                words[i] = respell(words[i])
        body.append(textwrap.fill(" ".join(words), width=width))
    meta = {"title": title, "date": f"{rng.choice(['May', 'June', 'July'])} {rng.randint(1, 28)}, {rng.randint(1996, 2012)}",
            "number": rng.randint(1000, 40000), "producer": rng.choice(["Judy Boss", "David Widger", "an anonymous volunteer"])}  # fmt: skip
    header, footer = rng.choice(HEADERS), rng.choice(FOOTERS)
    return header.format(**meta) + "\n\n".join(body) + footer.format(**meta)
