"""WikiText line format (Merity et al., 2016): headings, and undoing its tokenization.

A WikiText file is a sequence of lines. ``" = Title = "`` (a level-1 heading) starts an article,
``" = = Section = = "`` is a level-2 heading (deeper levels add ``=``), every other non-blank line
is one paragraph, words and punctuation separated by single spaces, with ``@-@``, ``@,@`` and
``@.@`` marking a hyphen, thousands separator and decimal point that were split off, and
``<unk>`` standing for rare words (only in the ``.tokens`` variant).

Used by the shard job's WikiText reader and by the n-gram dictionary job.
"""

from __future__ import annotations

import re

UNK = "<unk>"

_HEADING = re.compile(r"^ *(=(?: =)*) (?!=)(.*?) \1 *$")
# Split-punctuation markers: " @-@ " -> "-", " @,@ " -> ",", " @.@ " -> ".".
_AT_MARKERS = re.compile(r" ?@([-,.])@ ?")
# No space before closing punctuation and clitics.
_SPACE_BEFORE = re.compile(r" (?=[.,;:!?%)\]}]|'s\b|'S\b|n't\b|'t\b|'re\b|'ve\b|'ll\b|'d\b|'m\b)")
# No space after opening brackets.
_SPACE_AFTER_OPEN = re.compile(r"([(\[{]) ")
_MULTISPACE = re.compile(r" {2,}")


def heading_level(line: str) -> int:
    """1 for ``" = Title = "``, 2 for ``" = = Section = = "``, ...; 0 if the line is not a heading."""
    m = _HEADING.match(line.rstrip("\r\n"))
    if not m:
        return 0
    return m.group(1).count("=")


def heading_text(line: str) -> str:
    """The title of a heading line, still in WikiText tokenization (``" = = A , B = = "`` -> ``"A , B"``)."""
    m = _HEADING.match(line.rstrip("\r\n"))
    if not m:
        raise ValueError(f"not a WikiText heading: {line!r}")
    return m.group(2).strip()


def is_blank(line: str) -> bool:
    return not line.strip()


def _fix_double_quotes(text: str) -> str:
    # WikiText writes quotes as separate tokens: `he said " hello " .` Pair them left to right:
    # an opening quote loses the space after it, a closing one the space before it.
    parts = text.split(' " ')
    if len(parts) == 1:
        return text
    out = [parts[0]]
    opening = True
    for part in parts[1:]:
        out.append(' "' if opening else '" ')
        out.append(part)
        opening = not opening
    return "".join(out)


def detokenize(text: str, unk: str | None = UNK) -> str:
    """Undo WikiText's tokenization of one paragraph or heading.

    ``unk``: what replaces ``<unk>``: the string to substitute (e.g. the tokenizer's ``[UNK]``),
    or ``None`` to drop it. The rules, applied in order:

    1. ``" @-@ "`` -> ``"-"``, ``" @,@ "`` -> ``","``, ``" @.@ "`` -> ``"."``;
    2. double quotes paired left to right: ``' " a b " '`` -> ``' "a b" '``;
    3. no space before ``. , ; : ! ? % ) ] }`` and the clitics ``'s n't 't 're 've 'll 'd 'm``;
    4. no space after ``( [ {``; runs of spaces collapsed; leading/trailing space removed.
    """
    if unk is None:
        text = text.replace(UNK, " ")
    elif unk != UNK:
        text = text.replace(UNK, unk)
    text = " " + text.strip() + " "
    text = _AT_MARKERS.sub(r"\1", text)
    text = _fix_double_quotes(text)
    text = _SPACE_BEFORE.sub("", text)
    text = _SPACE_AFTER_OPEN.sub(r"\1", text)
    text = _MULTISPACE.sub(" ", text)
    return text.strip()
