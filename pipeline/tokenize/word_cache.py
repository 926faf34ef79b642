"""Byte-level BPE and Unigram documents through a cache of chunk encodings (the families' fast path).

A chunk here is a run of text that starts at a document's start or at a *cut* and holds everything up to the next
one, whitespace included (these families keep a space with the word after it: ``Ġword``, ``▁word``). A cut is

* a space (U+0020) between two printable non-space ASCII characters (``!`` .. ``~``), in both families;
* for byte-level BPE also a line feed followed by such a character;

and never next to an added token the text tokenizer matches (no cut at either edge of an occurrence found in the
text). These are the cuts ``encodings.text_pieces`` makes in long texts, proved in
``schemas/tokenizers/families.py``: at every one of them the whole text's words end, and the text after it is
tokenized as if it started there. So a document's tokens are its chunks' tokens, each chunk encoded alone, and
most chunks of a corpus are repeats (`` the``, `` of``) that the cache answers.

Encoded alone means: the first chunk of a document, which has no space before it, is tokenized as the start of a
text (a Unigram ``prepend_scheme`` ``first`` gives it its ``▁`` there only: such chunks are encoded as inputs of
their own); every other chunk starts with its cut character and is encoded as a piece of one input, between
cut markers (the tokenizer splits at added tokens first, so each piece is tokenized alone).

The cache keeps, per token, its id packed with what the documents need beyond the ids (read from the tokenizer's
word numbers and offsets when a chunk is missed, with the rule of ``word_heads``): whether the token starts one
of the tokenizer's words, and for a word's first token where the word's first non-space character is, in bytes
from the chunk's start. Sentence starts then follow from the Punkt starts without offsets (``word_heads``).

Not applied (documents take the whole-document path, same rows) when an added token holds whitespace or strips
it, when one is matched on normalized text (``str.find`` cannot see where), or with ``--encode-cache-mb 0``.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
from tokenizers import Tokenizer

from pipeline.tokenize.chunk_cache import ChunkCache, shared_cache
from pipeline.tokenize.chunk_keys import Chunks, byte_positions
from pipeline.tokenize.encodings import word_numbers
from pipeline.tokenize.sentence_encoding import CUT_MARKER
from pipeline.tokenize.word_heads import code_points, first_tokens, heads
from schemas.tokenizers.families import BYTE_LEVEL_BPE, UNIGRAM, family, piece_cuts_allowed

# A cached value: the token's id << 32 | its mark: 0 continues a word, 1 starts a word of whitespace alone,
# 2 + r starts a word whose first non-space character is r bytes into the chunk.
_ID_SHIFT = np.int64(32)
_MARK = np.int64(0xFFFFFFFF)
_PRINTABLE = np.zeros(256, bool)
_PRINTABLE[0x21:0x7F] = True
_UTF8_LENGTH = (0x80, 0x800, 0x10000)


def _utf8_offsets(cps: np.ndarray) -> np.ndarray:
    """The byte offset of each character of a text (by code points), and the text's length in bytes last."""
    size = np.ones(len(cps), np.int64)
    for bound in _UTF8_LENGTH:
        size += cps >= bound
    out = np.zeros(len(cps) + 1, np.int64)
    np.cumsum(size, out=out[1:])
    return out


class WordCache(ChunkCache):
    """The chunk cache for byte-level BPE and Unigram; see the module docstring."""

    def __init__(
        self,
        tok,
        glued: tuple[str, ...],
        token_bytes: np.ndarray | None,
        *,
        max_bytes: int,
        max_chunk_bytes: int = 64,
        key_mask: int = (1 << 64) - 1,
    ):
        super().__init__(
            tok,
            CUT_MARKER,
            -1,
            np.zeros(1, bool),
            max_bytes=max_bytes,
            max_chunk_bytes=max_chunk_bytes,
            punctuation_cuts=False,
            key_mask=key_mask,
            values=np.int64,
        )
        self._glued_tokens = glued
        self._punctuation_ids = None
        self._token_bytes = token_bytes  # BPE: each token's length in bytes; None for Unigram
        self._line_feeds = token_bytes is not None  # BPE's cuts at line feeds

    def encode(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        """Per document: (ids int32, word starts, each sentence's first token), as ``SentenceEncoder.encode``."""
        big = "".join(texts)
        data = big.encode("utf-8")
        char_at = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)), out=char_at[1:])
        per_doc = np.fromiter(map(len, sentences), np.int64, len(sentences))
        firsts = itertools.chain.from_iterable((s for s, _ in sent) for sent in sentences)
        sent = np.fromiter(firsts, np.int64, int(per_doc.sum()))
        sent += np.repeat(char_at[:-1], per_doc)
        glued = self._glued(big)
        doc_at = char_at
        if len(data) != len(big):  # not ASCII: character positions to byte positions
            doc_at, sent, glued = (byte_positions(data, x) for x in (char_at, sent, glued))
        chunks = self._chunks(data, doc_at, glued)
        values, token_at = self._encode_chunks(data, chunks)
        ids = (values >> _ID_SHIFT).astype(np.int32)
        mark = values & _MARK
        counts = np.diff(np.append(token_at, len(ids)))
        head = np.flatnonzero(mark >= 2)
        head_at = np.repeat(chunks.starts, counts)[head] + mark[head] - 2
        doc_token = np.append(token_at, len(ids))[np.searchsorted(chunks.starts, doc_at)]
        first_token = first_tokens(head, head_at, sent, len(ids))
        first_token -= np.repeat(doc_token[:-1], per_doc)
        sent_at = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(per_doc, out=sent_at[1:])
        word_start = mark != 0
        bounds = doc_token.tolist()
        return [
            (ids[a:z], word_start[a:z], first_token[s:e])
            for a, z, s, e in zip(bounds[:-1], bounds[1:], sent_at[:-1].tolist(), sent_at[1:].tolist())
        ]

    def _chunks(self, data: bytes, doc_at: np.ndarray, glued: np.ndarray) -> Chunks:
        b = np.frombuffer(data, np.uint8)
        n = len(b)
        printable = _PRINTABLE[b]
        edge = np.zeros(n + 1, bool)
        edge[doc_at] = True
        near_token = np.zeros(n + 1, bool)
        near_token[glued[glued <= n]] = True
        cut = edge.copy()
        inner = np.arange(1, n - 1) if n > 2 else np.zeros(0, np.int64)
        at = inner[b[inner] == 0x20]
        at = at[printable[at - 1] & printable[at + 1]]
        if self._line_feeds:
            feeds = inner[b[inner] == 0x0A]
            at = np.concatenate([at, feeds[printable[feeds + 1]]])
        at = at[~edge[at + 1] & ~near_token[at] & ~near_token[at + 1]]
        cut[at] = True
        starts = np.flatnonzero(cut[:n])
        ends = np.append(starts[1:], n)
        return Chunks(data, starts, ends, np.zeros(len(starts), bool), self._max_chunk_bytes, self._key_mask)

    def _encode_pieces(self, pieces: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values of all pieces, index of each piece's first value, number of values of each).

        Pieces are laid end to end into inputs, with no separator, wherever the place they meet is itself a cut
        (:meth:`_follows`): the tokenizer then tokenizes each piece as if alone, as in the documents. A piece that
        cannot follow the one before starts an input, as a document's first chunk does. A piece's tokens are those
        from its first character on: for BPE counted in bytes (each token's length is known: ``_token_bytes``),
        for Unigram from the tokens' offsets; either way each piece's first token must start exactly where the
        piece does, or the batch is refused (ValueError: its documents take the whole-document path)."""
        breaks = [0] + [i for i in range(1, len(pieces)) if not self._follows(pieces[i - 1], pieces[i])]
        texts = ["".join(pieces[a:b]) for a, b in zip(breaks, breaks[1:] + [len(pieces)])]
        encodings = self._tok.encode_batch(texts, add_special_tokens=False)
        n = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        total = int(n.sum())
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int64, total)
        words = word_numbers(list(itertools.chain.from_iterable(e.word_ids for e in encodings)))
        starts = np.fromiter((a for e in encodings for a, _ in e.offsets), np.int64, total)  # from each input's start
        input_at = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)), out=input_at[1:])
        starts += np.repeat(input_at[:-1], n)
        big = "".join(texts)
        cps = code_points(big)
        byte_at = _utf8_offsets(cps)
        piece_begin = np.zeros(len(pieces) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, pieces), np.int64, len(pieces)), out=piece_begin[1:])
        if self._token_bytes is not None:
            token_bytes = self._token_bytes[ids]
            if int(token_bytes.sum()) != int(byte_at[-1]):
                raise ValueError("the tokens' lengths do not add up to the text's")
            token_at, begin_at = np.cumsum(token_bytes) - token_bytes, byte_at[piece_begin[:-1]]
        else:
            if np.any(starts[1:] < starts[:-1]):
                raise ValueError("the tokens' offsets go backwards")
            token_at, begin_at = starts, piece_begin[:-1]
        first_of_piece = np.searchsorted(token_at, begin_at)
        # an input's first piece has its input's first tokens (a document's first chunk may begin with characters
        # the normalizer removes or makes a prepended ``▁``); every other piece's first token starts where it does
        input_first = np.zeros(len(pieces), bool)
        input_first[breaks] = True
        first_of_piece[input_first] = np.cumsum(n) - n
        joined = np.flatnonzero(~input_first & (first_of_piece < total))
        if np.any(token_at[first_of_piece[joined]] != begin_at[joined]):
            raise ValueError("a piece's first token does not start where the piece does")
        piece = np.searchsorted(first_of_piece, np.arange(total), side="right") - 1
        word_start = np.ones(total, bool)
        word_start[1:] = (words[1:] != words[:-1]) | (piece[1:] != piece[:-1])
        first = np.flatnonzero(word_start)
        begins = starts[first]
        ends = np.append(begins[1:], 0)
        last = np.append(piece[first][1:] != piece[first][:-1], True)
        ends[last] = piece_begin[1:][piece[first][last]]
        h = heads(cps, begins, ends)
        mark = np.zeros(total, np.int64)
        mark[first] = np.where(h >= 0, byte_at[np.maximum(h, 0)] - byte_at[piece_begin[piece[first]]] + 2, 1)
        piece_count = np.diff(np.append(first_of_piece, total))
        return (ids << _ID_SHIFT) | mark, first_of_piece, piece_count

    def _follows(self, before: str, piece: str) -> bool:
        """Whether ``piece`` may follow ``before`` in one input, the place they meet being a cut (module docstring):
        a space between printable ASCII characters, or for BPE a line feed before one; no added token next to it."""
        if len(piece) < 2 or not before or not "!" <= piece[1] <= "~":
            return False
        if piece[0] == " ":
            if not "!" <= before[-1] <= "~":
                return False
        elif not (self._line_feeds and piece[0] == "\n"):
            return False
        return not (
            self._glued_tokens and (before.endswith(self._glued_tokens) or piece.startswith(self._glued_tokens, 1))
        )


def word_cache_for(tok: Tokenizer, cache_bytes: int):
    """A :class:`WordCache` for ``tok`` (a byte-level BPE or Unigram text tokenizer) shared in the process, or None
    where it does not apply (module docstring)."""
    if cache_bytes <= 0:
        return None
    try:
        kind = family(tok)
    except ValueError:
        return None
    if kind not in (BYTE_LEVEL_BPE, UNIGRAM):
        return None
    config = json.loads(tok.to_str())
    added = config.get("added_tokens") or []
    if not piece_cuts_allowed(added, tok.normalizer):
        return None
    if tok.normalizer is not None and any(t.get("normalized", True) for t in added):
        return None
    glued = tuple(str(t.get("content")) for t in added if t.get("content"))
    token_bytes = _token_bytes(tok, added) if kind == BYTE_LEVEL_BPE else None
    return shared_cache(
        ("words", tok.to_str(), cache_bytes), lambda: WordCache(tok, glued, token_bytes, max_bytes=cache_bytes)
    )


def _token_bytes(tok: Tokenizer, added: list[dict]) -> np.ndarray:
    """Each id's length in bytes of text: a byte-level token is written one character per byte; an added token
    covers its content. (``_piece_values`` checks the lengths add up to each input's, and refuses it if not.)"""
    size = tok.get_vocab_size(with_added_tokens=True)
    lengths = np.zeros(size, np.int64)
    for token, i in tok.get_vocab(with_added_tokens=False).items():
        if 0 <= i < size:
            lengths[i] = len(token)
    for t in added:
        if isinstance(t.get("id"), int) and 0 <= t["id"] < size:
            lengths[t["id"]] = len(str(t.get("content", "")).encode("utf-8"))
    return lengths


class WordEncoder:
    """The fast path of byte-level BPE and Unigram documents, as ``SentenceEncoder`` is WordPiece's."""

    def __init__(self, cache: WordCache):
        self.cache = cache

    @classmethod
    def for_tokenizer(cls, tok, cache_bytes: int) -> WordEncoder | None:
        cache = word_cache_for(tok, cache_bytes)
        return cls(cache) if isinstance(cache, WordCache) else None

    def applies(self, text: str, sentences: list[tuple[int, int]]) -> bool:
        return True

    def encode(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        return self.cache.encode(texts, sentences)
