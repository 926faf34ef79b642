r"""Byte-level BPE and Unigram documents through a cache of chunk encodings (the families' fast path).

A chunk here is a run of text that starts at a document's start or at a *cut* and holds everything up to the next
one, whitespace included (these families keep a space with the word after it: ``Ġword``, ``▁word``). A cut is the
start of a run of whitespace that follows a non-space character:

* **byte-level BPE**: a space, tab, line feed or carriage return after a character that is not whitespace
  (Python's ``isspace``, which holds every character the regex's ``\s`` matches). Why the tokens stay the same: in
  the regex ``'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`` a match that holds a
  non-space character never goes on into the whitespace after it (only a leading space is optional), so a match
  starts at the cut; matches are made left to right and look only forward, so from the cut on the text is matched
  as if it started there, and before it as if it ended there (the last character before the cut is no whitespace,
  so no ``(?!\S)`` there looks across). BPE merges never cross a match. No normalizer.
* **Unigram**: a run of the characters the normalizer makes a space (a space; a line feed, tab or carriage return
  where it maps them to one, as ``Nmt`` does: ``_run_characters``) between two printable non-space ASCII characters
  (``!`` .. ``~``), cut at its first character. Why: the accepted normalizers work per character, per
  normalization segment (a space is a starter that neither decomposes nor composes) or on runs of spaces (the
  ``Replace``), and the characters on both sides of the run stay non-space characters, so the normalized text is
  the normalized chunks laid end to end, the run becoming the same run of spaces either way; Metaspace then cuts
  before every ``▁``, and a chunk that starts with ``▁`` gets none prepended. The long-text cut of
  ``schemas/tokenizers/families.py`` is the case of a run of one space.

No cut is next to an added token the text tokenizer matches (neither where an occurrence found in the text ends,
nor, for Unigram, where the run ends and one begins), and none is made when an added token holds whitespace or
strips it (``piece_cuts_allowed``). So a document's tokens are its chunks' tokens, each chunk tokenized alone, and
most chunks of a corpus are repeats (`` the``, `` of``, ``\n\nThe``) that the cache answers.

A missed chunk is tokenized alone by laying the missed chunks end to end where the place they meet is itself a cut
(``_follows``) and starting another input where not (a document's first chunk always starts one, so it is
tokenized as the start of a text, which matters to a Unigram's ``prepend_scheme``).

The cache keeps, per token, its id packed with what the documents need beyond the ids (read from the tokenizer's
word numbers and offsets when a chunk is missed, with the rule of ``word_heads``): whether the token starts one
of the tokenizer's words, and for a word's first token where the word's first non-space character is, in bytes
from the chunk's start. Sentence starts then follow from the Punkt starts without offsets (``word_heads``).

Not applied (documents take the whole-document path, same rows) when an added token holds whitespace or strips
it, when one is matched on normalized text (``str.find`` cannot see where), when a byte-level BPE's vocabulary lacks
one of the 256 byte characters (a byte it lacks becomes the unk token, of any length, or nothing: its tokens'
lengths in bytes are not known, and a long unk and a short one cancel in the lengths' sum), or with
``--encode-cache-mb 0``.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
from tokenizers import Tokenizer
from tokenizers.pre_tokenizers import ByteLevel

from pipeline.tokenize.chunk_cache import ChunkCache, documents_of, shared_cache
from pipeline.tokenize.chunk_keys import LEAD_BYTE, Chunks
from pipeline.tokenize.chunk_table import run_indices
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
_ASCII_SPACES = " \t\n\r"
_BPE_RUN = np.zeros(256, bool)
_BPE_RUN[[ord(c) for c in _ASCII_SPACES]] = True
# The last byte of a character that is not whitespace: printable ASCII, or a UTF-8 continuation byte that ends no
# whitespace character (U+0085 and U+00A0 end in 85 and A0, U+1680 and U+3000 in 80, U+2000..U+200A in 80..8A,
# U+2028, U+2029, U+202F, U+205F in A8, A9, AF, 9F).
_ENDS_NON_SPACE = np.zeros(256, bool)
_ENDS_NON_SPACE[0x21:0x7F] = True
_ENDS_NON_SPACE[0x80:0xC0] = True
_ENDS_NON_SPACE[[*range(0x80, 0x8B), 0x85, 0x9F, 0xA0, 0xA8, 0xA9, 0xAF]] = False
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
        run_chars: str = " ",
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
            byte_classes=False,
        )
        self._glued_tokens = glued
        self._token_bytes = token_bytes  # BPE: each token's length in bytes; None for Unigram
        self._bpe = token_bytes is not None
        self.refused = 0  # batches left to the whole-document path
        self._run_chars = run_chars
        self._run = np.zeros(256, bool)
        self._run[[ord(c) for c in run_chars]] = True

    def encode(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        """Per document: (ids int32, word starts, each sentence's first token), as ``SentenceEncoder.encode``. Raises
        what the tokenizer raises, or ValueError when the tokens of a missed chunk cannot be told apart (counted in
        ``refused``): the batch's documents then take the whole-document path."""
        try:
            return self._encode(texts, sentences)
        except Exception:
            with self._lock:
                self.refused += 1
            raise

    def _encode(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        data, doc_at, sent, glued, per_doc = self._batch(texts, sentences)
        chunks = self._chunks(data, doc_at, glued)
        values, token_at = self._encode_chunks(data, chunks)
        ids = (values >> _ID_SHIFT).astype(np.int32)
        mark = values & _MARK
        counts = np.diff(np.append(token_at, len(ids)))
        head = np.flatnonzero(mark >= 2)
        head_at = np.repeat(chunks.starts, counts)[head] + mark[head] - 2
        doc_token = np.append(token_at, len(ids))[np.searchsorted(chunks.starts, doc_at)]
        return documents_of(ids, mark != 0, doc_token, first_tokens(head, head_at, sent[:, 0], len(ids)), per_doc)

    def _chunks(self, data: bytes, doc_at: np.ndarray, glued: np.ndarray) -> Chunks:
        """The chunks of a batch: cut at every document start and every cut of the module docstring."""
        b = np.frombuffer(data, np.uint8)
        n = len(b)
        edge = np.zeros(n + 1, bool)
        edge[doc_at] = True
        near_token = np.zeros(n + 1, bool)
        near_token[glued[glued <= n]] = True
        cut = edge.copy()
        if n > 1:
            after = np.arange(1, n)
            if self._bpe:
                at = after[_BPE_RUN[b[1:]] & _ENDS_NON_SPACE[b[:-1]]]
                at = at[~near_token[at]]
            else:
                run = self._run[b]
                at = after[run[1:] & ~run[:-1] & _PRINTABLE[b[:-1]]]
                other = np.append(np.flatnonzero(~run), n)
                end = other[np.searchsorted(other, at)]  # where each run ends
                next_edge = doc_at[np.searchsorted(doc_at, at, side="right")]
                ok = (end < next_edge) & _PRINTABLE[b[np.minimum(end, n - 1)]]
                at, end = at[ok], end[ok]
                at = at[~near_token[at] & ~near_token[end]]
            cut[at] = True
        starts = np.flatnonzero(cut[:n])
        ends = np.append(starts[1:], n)
        chunks = Chunks(data, starts, ends, np.zeros(len(starts), bool), self._max_chunk_bytes, self._key_mask)
        chunks.near_token = near_token  # the misses' inputs join chunks only where a cut could be
        return chunks

    def _encode_chunk_pieces(self, data: bytes, chunks: Chunks, pieces: np.ndarray):
        """(values of all pieces, index of each piece's first value, number of values of each), for the chunks
        ``pieces`` (indices into ``chunks``).

        Pieces are laid end to end into inputs, with no separator, wherever the place they meet is itself a cut
        (:meth:`_follow`): the tokenizer then tokenizes each piece as if alone, as in the documents. A piece that
        cannot follow the one before starts an input, as a document's first chunk does. A piece's tokens are those
        from its first character on: for BPE counted in bytes (each token's length is known: ``_token_bytes``),
        for Unigram from the tokens' offsets; either way each piece's first token must start where the piece does
        (for Unigram: in its first run of whitespace), or the batch is refused (ValueError: its documents take the
        whole-document path)."""
        b = chunks.bytes
        begin, end = chunks.starts[pieces], chunks.ends[pieces]
        follows = self._follow(b, chunks, begin, end)
        breaks = np.flatnonzero(~follows)
        lengths = end - begin
        gathered = b[run_indices(begin, lengths)].tobytes()
        piece_byte = np.zeros(len(pieces) + 1, np.int64)
        np.cumsum(lengths, out=piece_byte[1:])
        input_byte = np.append(piece_byte[breaks], piece_byte[-1])
        bounds = input_byte.tolist()
        texts = [gathered[x:y].decode("utf-8") for x, y in zip(bounds[:-1], bounds[1:])]
        encodings = self._tok.encode_batch(texts, add_special_tokens=False)
        n = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        total = int(n.sum())
        ids = np.concatenate([np.array(e.ids, np.int64) for e in encodings]) if total else np.zeros(0, np.int64)
        words = word_numbers(list(itertools.chain.from_iterable(e.word_ids for e in encodings)))
        cps = code_points("".join(texts))
        byte_at = _utf8_offsets(cps)
        lead = np.flatnonzero(np.frombuffer(gathered.translate(LEAD_BYTE), bool))
        piece_begin = np.searchsorted(lead, piece_byte)  # characters
        if self._token_bytes is not None:
            token_bytes = self._token_bytes[ids]
            if int(token_bytes.sum()) != len(gathered):
                raise ValueError("the tokens' lengths do not add up to the text's")
            token_at, begin_at = np.cumsum(token_bytes) - token_bytes, piece_byte[:-1]
            starts = np.searchsorted(byte_at, token_at)  # characters (a word's first token starts at one)
        else:
            starts = np.concatenate([np.array(e.offsets, np.int64).reshape(-1, 2)[:, 0] for e in encodings])
            starts += np.repeat(np.searchsorted(lead, input_byte[:-1]), n)  # from each input's start
            if np.any(starts[1:] < starts[:-1]):
                raise ValueError("the tokens' offsets go backwards")
            token_at, begin_at = starts, piece_begin[:-1]
        first_of_piece = np.searchsorted(token_at, begin_at)
        # an input's first piece has its input's first tokens (a document's first chunk may begin with characters
        # the normalizer removes or makes a prepended ``▁``); every other piece's tokens start inside it: where it
        # does for BPE (bytes are bytes), in its first run of whitespace for Unigram (a collapsed run keeps the
        # offset of one of its characters)
        first_of_piece[breaks] = np.cumsum(n) - n
        joined = np.flatnonzero(follows & (first_of_piece < total))
        at = token_at[first_of_piece[joined]] - begin_at[joined]
        # a Unigram run is ASCII: as many characters as bytes
        slack = 0 if self._bpe else self._run_ends(b, begin[joined], end[joined]) - begin[joined]
        if np.any(at < 0) or np.any(at > slack):
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
        mark[first] = np.where(h >= 0, byte_at[np.maximum(h, 0)] - piece_byte[piece[first]] + 2, 1)
        piece_count = np.diff(np.append(first_of_piece, total))
        return (ids << _ID_SHIFT) | mark, first_of_piece, piece_count

    def _run_ends(self, b: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Where the run of ``_run_chars`` that each chunk ``[begin, end)`` starts with ends (``end`` at most)."""
        other = np.append(np.flatnonzero(~self._run[b]), len(b))
        return np.minimum(other[np.searchsorted(other, begin)], end)

    def _follow(self, b: np.ndarray, chunks: Chunks, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Whether each chunk ``[begin[i], end[i])`` may follow the one before it in one input, where they meet being
        a cut (module docstring); false for the first."""
        out = np.zeros(len(begin), bool)
        if len(begin) < 2:
            return out
        first, last = b[begin[1:]], b[end[:-1] - 1]
        near = chunks.near_token
        if self._bpe:
            out[1:] = _BPE_RUN[first] & _ENDS_NON_SPACE[last] & ~near[begin[1:]]
        else:
            run_end = self._run_ends(b, begin[1:], end[1:])
            ok = (run_end > begin[1:]) & (run_end < end[1:]) & _PRINTABLE[last]
            ok &= _PRINTABLE[b[np.minimum(run_end, len(b) - 1)]] & ~near[begin[1:]] & ~near[run_end]
            out[1:] = ok
        return out


def word_cache_for(tok: Tokenizer, cache_bytes: int, kind: str | None = None, added: list[dict] | None = None):
    """A :class:`WordCache` for ``tok`` (a byte-level BPE or Unigram text tokenizer) shared in the process, or None
    where it does not apply (module docstring). ``kind`` (its family) and ``added`` (its JSON's ``added_tokens``) when
    the caller has them: a tokenizer's JSON takes ~0.1 s to parse."""
    if cache_bytes <= 0:
        return None
    if kind is None:
        try:
            kind = family(tok)
        except ValueError:
            return None
    if kind not in (BYTE_LEVEL_BPE, UNIGRAM):
        return None
    if added is None:
        added = json.loads(tok.to_str()).get("added_tokens") or []
    if not piece_cuts_allowed(added, tok.normalizer):
        return None
    if tok.normalizer is not None and any(t.get("normalized", True) for t in added):
        return None
    if kind == BYTE_LEVEL_BPE and not set(ByteLevel.alphabet()) <= set(tok.get_vocab(with_added_tokens=False)):
        return None
    if getattr(tok.model, "continuing_subword_prefix", None) or getattr(tok.model, "end_of_word_suffix", None):
        return None  # its tokens' strings are longer than their bytes: every batch would be refused
    glued = tuple(str(t.get("content")) for t in added if t.get("content"))
    token_bytes = _token_bytes(tok, added) if kind == BYTE_LEVEL_BPE else None
    run_chars = _run_characters(tok)
    return shared_cache(
        ("words", tok.to_str(), cache_bytes),
        lambda: WordCache(tok, glued, token_bytes, run_chars, max_bytes=cache_bytes, max_chunk_bytes=256),
    )


def _run_characters(tok: Tokenizer) -> str:
    """The ASCII whitespace characters a Unigram's normalizer makes a space: a space, and a tab, line feed or
    carriage return where it maps them to one (``Nmt``); asked of the normalizer itself."""
    normalizer = tok.normalizer
    if normalizer is None:
        return " "
    return "".join(c for c in _ASCII_SPACES if normalizer.normalize_str(f"a{c}b") == "a b")


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
    def for_tokenizer(
        cls, tok, cache_bytes: int, kind: str | None = None, added: list[dict] | None = None
    ) -> WordEncoder | None:
        cache = word_cache_for(tok, cache_bytes, kind, added)
        return cls(cache) if isinstance(cache, WordCache) else None

    def applies(self, text: str, sentences: list[tuple[int, int]]) -> bool:
        return True

    def encode(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        return self.cache.encode(texts, sentences)
