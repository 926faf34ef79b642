"""Text -> WordPiece ids with the artifact's tokenizer, and BERT's input assembly for one or two segments.

``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` (token types 0 for [CLS] A [SEP], 1 for B [SEP]), built here
rather than by the tokenizer's post-processor so that heads can append text (SpEx-BERT's choices) and
truncate only what may be cut. Truncation is BERT's longest-first: the longer segment loses its last token
until the pair fits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Piece:
    """Tokens of one text: ids, character offsets into the text, and the word (pre-tokenizer unit) of each."""

    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def cut(self, n: int) -> Piece:
        return Piece(self.text, self.ids[:n], self.offsets[:n], self.word_ids[:n])

    def words(self) -> list[tuple[str, int, int]]:
        """(word, first token, last token + 1) for every word that has tokens, in order."""
        out: list[tuple[str, int, int]] = []
        for i, w in enumerate(self.word_ids):
            if out and self.word_ids[out[-1][1]] == w:
                word, first, _ = out[-1]
                out[-1] = (self.text[self.offsets[first][0] : self.offsets[i][1]], first, i + 1)
            else:
                out.append((self.text[self.offsets[i][0] : self.offsets[i][1]], i, i + 1))
        return out


def encode(tokenizer, text: str) -> Piece:
    enc = tokenizer.encode(text, add_special_tokens=False)
    words = [w if w is not None else -1 for w in enc.word_ids]
    return Piece(text, list(enc.ids), [tuple(o) for o in enc.offsets], words)


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


def special_ids(tokenizer) -> tuple[int, int]:
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise ValueError("the tokenizer has no [CLS] or [SEP] token")
    return cls_id, sep_id


def assemble(tokenizer, a_ids: list[int], b_ids: list[int] | None) -> dict:
    """input_ids and token_type_ids of ``[CLS] A [SEP] (B [SEP])``; A starts at position 1."""
    cls_id, sep_id = special_ids(tokenizer)
    ids = [cls_id] + a_ids + [sep_id]
    types = [0] * len(ids)
    if b_ids is not None:
        ids += b_ids + [sep_id]
        types += [1] * (len(b_ids) + 1)
    return {"input_ids": ids, "token_type_ids": types}
