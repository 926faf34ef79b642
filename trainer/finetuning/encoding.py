"""Text -> token ids with the checkpoint's tokenizer, and BERT's input assembly for one or two segments.

``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` (token types 0 for [CLS] A [SEP], 1 for B [SEP]), built here
rather than by the tokenizer's post-processor so that heads can append text (SpEx-BERT's choices) and
truncate only what may be cut. Truncation is BERT's longest-first: the longer segment loses its last token
until the pair fits.

Special tokens are read by role, never by name: [CLS], [SEP] and [PAD] here mean the tokens that play those
roles (BERT's ``[CLS] [SEP] [PAD]``, RoBERTa's ``<s> </s> <pad>``; :class:`ModelTokenizer`). Words and answer
characters come from the tokenizer's offsets and word ids, never from a token's spelling (``##``, ``Ġ``, ``▁``):
a token's characters are its offsets less the whitespace (and invisible Cc/Cf characters, which a SentencePiece
normalizer makes spaces) at either end (a byte-level BPE or Metaspace token carries the space before its word; a
token of whitespace only covers no characters), and a word is a run of
tokens of one pre-tokenizer word (``Encoding.word_ids``) whose characters join (:func:`word_units`).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from tokenizers import Encoding, Tokenizer

from schemas.tokenizers.families import TokenizerError, special_roles
from schemas.tokenizers.families import text_tokenizer as families_text_tokenizer


@dataclass(frozen=True)
class ModelTokenizer:
    """The tokenizer a model carries, for text, and the id of each special role (pad, unk, cls, sep, mask)."""

    tokenizer: Tokenizer  # special tokens written in the text are text (:func:`text_tokenizer`)
    ids: Mapping[str, int]  # role -> id

    @classmethod
    def of(cls, tokenizer: Tokenizer, named: Mapping[str, str] | None = None) -> ModelTokenizer:
        """Roles as ``named`` (role -> token) says, the others from the known sets of names
        (``schemas.tokenizers.families.special_roles``); a ValueError in one line when a role has no token."""
        try:
            roles = special_roles(tokenizer, named)
        except TokenizerError as e:
            raise ValueError(str(e)) from None
        ids = {role: tokenizer.token_to_id(token) for role, token in roles.items()}
        return cls(text_tokenizer(tokenizer, roles), {role: i for role, i in ids.items() if i is not None})

    @property
    def cls_id(self) -> int:
        return self.ids["cls"]

    @property
    def sep_id(self) -> int:
        return self.ids["sep"]

    @property
    def pad_id(self) -> int:
        return self.ids["pad"]

    def encode(self, text: str) -> Encoding:
        """The tokens of ``text`` without special tokens added."""
        return self.tokenizer.encode(text, add_special_tokens=False)


def text_tokenizer(tokenizer: Tokenizer, roles: Mapping[str, str]) -> Tokenizer:
    """``tokenizer`` with the special tokens written in a text read as text (``<s>``, ``</s>``, ``[SEP]``, ``[MASK]``
    in a sentence are split like other text), as pre-training's rows were made: the rule of
    ``families.text_config``, which ``TokenizerSpec.load_for_text`` uses too. Same ids: a tokenizer whose special
    tokens are not in its model's vocabulary (their ids would be gone) is kept as it is."""
    try:
        unmatched = families_text_tokenizer(json.loads(tokenizer.to_str()), roles)
    except TokenizerError as e:
        raise ValueError(str(e)) from None
    ids = [tokenizer.token_to_id(token) for token in roles.values()]
    if any(i is None or unmatched.id_to_token(i) is None for i in ids):
        return tokenizer
    return unmatched


def _blank(c: str) -> bool:
    """Whitespace, or an invisible control or format character (Unicode Cc, Cf: U+200B..U+200F, U+FEFF, a soft
    hyphen): SentencePiece's Nmt normalizer makes several of them spaces, BERT's drops them; none is a word's."""
    return c.isspace() or unicodedata.category(c) in ("Cc", "Cf")


def token_chars(text: str, offsets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each token's characters in ``text``: its offsets less whitespace and invisible characters (:func:`_blank`) at
    either end; (s, s) for a token of those only (it covers no character)."""
    out = []
    for s, e in offsets:
        while s < e and _blank(text[s]):
            s += 1
        while e > s and _blank(text[e - 1]):
            e -= 1
        out.append((s, e))
    return out


def _joins(c: str) -> bool:
    """A letter, number, mark or symbol (not punctuation, space or a control character): two such characters
    side by side in one pre-tokenizer word are one word's (BERT's ``£30m`` is one word)."""
    return unicodedata.category(c)[0] in "LNMS"


def word_units(text: str, chars: list[tuple[int, int]], pre_words: list[int | None]) -> list[int]:
    """Per token, its word (numbered from 0; -1 for a token without characters): consecutive tokens of one
    pre-tokenizer word whose characters join, i.e. the next starts inside the previous (one character split into
    bytes), or after it with no whitespace between and :func:`_joins` characters on both sides. So a word is what
    BERT's pre-tokenizer gives (each punctuation mark alone; WordPiece's words are unchanged) for every family: a
    byte-level BPE word's leading space is not in it, and a Metaspace word (split at spaces only) ``Coleman,`` is
    ``Coleman`` and ``,``."""
    units: list[int] = []
    n, prev = -1, -1  # the last word number, the last token with characters
    for i, (s, e) in enumerate(chars):
        if e <= s:
            units.append(-1)
            continue
        same_word = prev >= 0 and pre_words[i] is not None and pre_words[i] == pre_words[prev]
        p_end = chars[prev][1] if prev >= 0 else 0
        joined = s < p_end or (
            _joins(text[p_end - 1]) and _joins(text[s]) and not any(c.isspace() for c in text[p_end:s])
        )
        if not (same_word and joined):
            n += 1
        units.append(n)
        prev = i
    return units


@dataclass
class Piece:
    """Tokens of one text: ids, characters in the text (:func:`token_chars`), and the word of each
    (:func:`word_units`; -1 for a token without characters)."""

    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def cut(self, n: int) -> Piece:
        return Piece(self.text, self.ids[:n], self.offsets[:n], self.word_ids[:n])

    def words(self) -> list[tuple[str, int, int]]:
        """(word, first token, last token + 1) for every word, in order: the word's text is from its first
        token's first character to its last token's last one; tokens without characters (a byte-level BPE ``Ċ``
        or ``Ġ`` alone) are in no word."""
        out: list[tuple[str, int, int]] = []
        for i, w in enumerate(self.word_ids):
            if w == -1:
                continue
            if out and self.word_ids[out[-1][1]] == w:
                _, first, _ = out[-1]
                out[-1] = (self.text[self.offsets[first][0] : self.offsets[i][1]], first, i + 1)
            else:
                out.append((self.text[self.offsets[i][0] : self.offsets[i][1]], i, i + 1))
        return out

    def word_chars(self) -> list[tuple[int, int] | None]:
        """Per token, the characters of its word; None for a token without characters."""
        spans: dict[int, tuple[int, int]] = {}
        for w, (s, e) in zip(self.word_ids, self.offsets):
            if w != -1:
                spans[w] = (spans[w][0], e) if w in spans else (s, e)
        return [spans[w] if w != -1 else None for w in self.word_ids]


def encode(tokenizer: ModelTokenizer, text: str) -> Piece:
    enc = tokenizer.encode(text)
    chars = token_chars(text, [(s, e) for s, e in enc.offsets])
    return Piece(text, list(enc.ids), chars, word_units(text, chars, list(enc.word_ids)))


def truncate_pair(a: Piece, b: Piece | None, budget: int) -> tuple[Piece, Piece | None]:
    """Longest-first truncation of A (and B) to at most ``budget`` tokens in total."""
    if budget < 1:
        raise ValueError(f"no room for text: {budget} tokens left")
    la, lb = len(a), len(b) if b is not None else 0
    while la + lb > budget:
        if la >= lb:
            la -= 1
        else:
            lb -= 1
    return a.cut(la), (b.cut(lb) if b is not None else None)


def assemble(tokenizer: ModelTokenizer, a_ids: list[int], b_ids: list[int] | None) -> dict:
    """input_ids and token_type_ids of ``[CLS] A [SEP] (B [SEP])`` (the cls and sep roles' ids); A starts at
    position 1."""
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    ids = [cls_id] + a_ids + [sep_id]
    types = [0] * len(ids)
    if b_ids is not None:
        ids += b_ids + [sep_id]
        types += [1] * (len(b_ids) + 1)
    return {"input_ids": ids, "token_type_ids": types}
