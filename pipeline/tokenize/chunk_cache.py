"""Encode documents through a cache of chunk encodings, its work done with numpy a batch at a time.

A chunk is a run of text between ASCII whitespace characters (space, tab, line feed, carriage return),
cut also at every sentence and document edge and where ASCII punctuation meets other characters
(``word``, ``),`` and ``(`` are three chunks of ``word),(``). The tokenizers that
``sentence_encoding.SentenceEncoder`` accepts split their input at every whitespace character (the
normalizer maps it to a space, the pre-tokenizer splits there) and isolate every punctuation character,
so each chunk is tokenized independently of its neighbours: a document's ids are its chunks' ids, each
chunk encoded alone. Exceptions are glued back: an added token written in the text that holds
punctuation (``[UNK]``) or matches only as a single word stays one chunk with its neighbouring
characters, and when such a token is matched on normalized text (which ``str.find`` cannot see) chunks
end at whitespace only (``_byte_classes``). A corpus has
few distinct chunks (the 4,576-article Wikipedia sample: 6.7 M chunks, 1.7 M of them punctuation runs,
224 k distinct among the others), and the tokenizer costs about 2 us per chunk; the cache answers the
repeats for a fraction of that.

Per batch of documents:

1. the batch's UTF-8 bytes are cut into chunks (byte classes, sentence and document edges);
2. runs of punctuation take their ids from a per-character table (each character is its own word);
3. every other chunk's bytes are read as little-endian 8-byte words (one unaligned view of the buffer)
   and hashed into a 64-bit key, looked up in ``chunk_table.ChunkTable``; a hit is accepted only when the
   stored chunk's length and every one of its words equal the chunk's, so a hash collision costs a miss,
   never a wrong token: the output is exactly the tokenizer's, whatever the keys;
4. the distinct missed chunks of the batch go to the tokenizer in one input, joined with the sentence
   encoder's cut marker (the tokenizer splits at added tokens before normalizing, so each piece is
   encoded alone), and are added to the cache;
5. the ids of every chunk are gathered into the documents' id arrays; a sentence starts at the first
   token of its first chunk.

The cache holds chunks of at most ``max_chunk_bytes`` (longer ones, rare outside punctuation runs, are
encoded every time) within ``max_bytes`` of arrays; when it is full it is emptied and fills again with
what comes next, so memory stays bounded on any corpus. What it holds never changes the output, only the
time. Thread-safe: lookups and insertions hold a lock; the tokenizer calls and the per-batch arrays do not.
"""

from __future__ import annotations

import itertools
import json
import string
import threading
import weakref
from collections.abc import Callable

import numpy as np

from pipeline.tokenize.chunk_keys import Chunks, byte_positions
from pipeline.tokenize.chunk_table import ChunkTable, exclusive_cumsum, run_indices

_SEPARATOR = np.zeros(256, dtype=bool)
_SEPARATOR[[9, 10, 13, 32]] = True  # \t \n \r and space: whitespace to BERT's normalizer and pre-tokenizer


def _wordpiece_chunks(
    data: bytes,
    cuts: np.ndarray,
    glued: np.ndarray,
    classes: bytes,
    direct: bool,
    max_chunk_bytes: int,
    key_mask: np.uint64,
) -> Chunks:
    """The chunks of one batch of documents for WordPiece.

    ``classes`` (a ``bytes.translate`` table) maps each byte value to 0 (separator), 1 (ASCII punctuation) or 2
    (anything else); a chunk
    ends wherever the class changes, except at the ``glued`` positions (around added tokens written in the
    text), and at every ``cut``; separators belong to no chunk. With ``direct`` true, runs of punctuation alone
    (no glued token in them) are marked ``direct``: their ids are their bytes' (one token per character), no cache
    needed."""
    n = len(data)
    cls = np.frombuffer(data.translate(classes), np.uint8)  # a 256-byte table: far faster than a numpy gather
    separator = cls == 0
    boundary = np.ones(n + 1, bool)  # a chunk may start or end at position p (between bytes p - 1 and p)
    np.not_equal(cls[1:], cls[:-1], out=boundary[1:n])
    glued = glued[(glued > 0) & (glued < n)]
    boundary[glued] = separator[glued - 1] | separator[glued]
    boundary[cuts] = True
    inside = ~separator
    starts = np.flatnonzero(boundary[:n] & inside)
    ends = np.flatnonzero(boundary[1:] & inside) + 1
    is_direct = np.zeros(len(starts), bool)
    if direct:
        is_direct = cls[starts] == 1
        mixed = glued[~boundary[glued] & (cls[glued - 1] != cls[glued])]  # a class change inside a chunk
        is_direct[np.searchsorted(starts, mixed, side="right") - 1] = False
    return Chunks(data, starts, ends, is_direct, max_chunk_bytes, key_mask)


_ASCII_PUNCTUATION = [c for c in range(128) if chr(c) in string.punctuation]


def _punctuation_ids(tok, classes: np.ndarray, glued: tuple[str, ...]) -> np.ndarray | None:
    """The id of each ASCII punctuation character (by byte value), or None when a run of them cannot be encoded
    character by character: no chunk ends at punctuation, or an added token is made of punctuation alone.
    The pre-tokenizer isolates every punctuation character, so a run's ids are its characters' ids, each
    encoded alone (asked of the tokenizer here: its id, or the unknown token)."""
    if not (classes == 1).any() or any(all(c in string.punctuation for c in token) for token in glued):
        return None
    ids = np.zeros(256, np.int32)
    for c in _ASCII_PUNCTUATION:
        one = tok.encode(chr(c), add_special_tokens=False).ids
        if len(one) != 1:
            return None
        ids[c] = one[0]
    return ids


def _byte_classes(tok, marker: str, punctuation_cuts: bool) -> tuple[np.ndarray, tuple[str, ...]]:
    """The byte classes of ``_wordpiece_chunks`` and the added tokens to glue.

    An added token matters to cuts at punctuation when it could match across one, or when its match depends on
    its neighbours: it holds ASCII punctuation (``[UNK]``; for a normalized token, its normalized form, since
    it is matched on normalized text, where e.g. U+037E becomes ``;``), or it is ``single_word`` (matched
    only between non-word characters, and ``_`` is punctuation to the pre-tokenizer but a word character to
    that test). Such tokens matched on the text as written (``normalized`` false) are found with ``str.find``
    and glued: no chunk ends inside them or next to them. One matched on normalized text could match where
    ``find`` does not look, so with one of those chunks end at whitespace only."""
    classes = np.full(256, 2, np.uint8)
    classes[_SEPARATOR] = 0
    normalizer = tok.normalizer
    glued = []
    for added in json.loads(tok.to_str()).get("added_tokens") or []:
        content = added.get("content", "")
        normalized = added.get("normalized", True)
        matched = normalizer.normalize_str(content) if normalized and normalizer is not None else content
        if content == marker or not (added.get("single_word") or any(c in string.punctuation for c in matched)):
            continue
        if normalized:
            return classes, ()
        glued.append(content)
    if punctuation_cuts:
        classes[_ASCII_PUNCTUATION] = 1
    return classes, tuple(glued)


def documents_of(ids: np.ndarray, word_start: np.ndarray, doc_token: np.ndarray, first_token: np.ndarray, per_doc):
    """The batch's arrays cut per document: (ids, word starts, each sentence's first token from the document's)."""
    first_token = first_token - np.repeat(doc_token[:-1], per_doc)
    sent_at = np.zeros(len(per_doc) + 1, np.int64)
    np.cumsum(per_doc, out=sent_at[1:])
    bounds = doc_token.tolist()
    return [
        (ids[a:z], word_start[a:z], first_token[s:e])
        for a, z, s, e in zip(bounds[:-1], bounds[1:], sent_at[:-1].tolist(), sent_at[1:].tolist())
    ]


_SHARED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared_cache(key, make: Callable[[], ChunkCache]) -> ChunkCache:
    """One cache per key in the process while anything holds it: Beam runs a DoFn instance per thread, and
    the threads of a worker process share one cache (and its memory) per tokenizer."""
    with _SHARED_LOCK:
        cache = _SHARED.get(key)
        if cache is None:
            cache = _SHARED[key] = make()
        return cache


class ChunkCache:
    """Encodes batches of documents chunk by chunk through the cache; see the module docstring."""

    def __init__(
        self,
        marked,
        marker: str,
        marker_id: int,
        continuation: np.ndarray,
        *,
        max_bytes: int = 64 << 20,
        max_chunk_bytes: int = 64,
        punctuation_cuts: bool = True,
        key_mask: int = (1 << 64) - 1,
        values=np.int32,
        byte_classes: bool = True,
    ):
        if max_bytes < 1 or max_chunk_bytes < 1:
            raise ValueError("max_bytes and max_chunk_bytes must be positive")
        self._tok = marked
        self._marker = marker
        self._marker_id = marker_id
        self._continuation = continuation
        self._max_bytes = max_bytes
        self._max_chunk_bytes = max_chunk_bytes
        self._key_mask = np.uint64(key_mask)  # tests narrow the keys to force collisions
        self._classes = np.full(256, 2, np.uint8)
        self._glued_tokens: tuple[str, ...] = ()
        self._punctuation_ids: np.ndarray | None = None
        if byte_classes:  # WordPiece's cuts (word_cache cuts its own way)
            self._classes, self._glued_tokens = _byte_classes(marked, marker, punctuation_cuts)
            self._punctuation_ids = _punctuation_ids(marked, self._classes, self._glued_tokens)
        self._class_table = self._classes.tobytes()
        self._lock = threading.Lock()
        self.hits = self.misses = 0  # chunks answered from the cache / not (a batch encodes each distinct miss once)
        self.collisions = 0  # chunks whose key matched a different chunk's
        self.clears = 0  # times the cache was emptied because it was full
        self._values = np.dtype(values)  # what the cache keeps per token: ids (word_cache: ids packed with more)
        self._table = ChunkTable(self._values)

    def __len__(self) -> int:
        return len(self._table)

    @property
    def nbytes(self) -> int:
        """Bytes of data the cache holds, at most ``max_bytes`` (its arrays' allocations: at most 1.5 times that,
        plus ~20 KB; a batch still reading arrays of an emptied cache keeps them alive until it ends)."""
        return self._table.nbytes_with()

    # -- the batch ----------------------------------------------------------------------------------------

    def encode(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        """Per document: (ids int32, word starts, index of each sentence's first token), as
        ``SentenceEncoder.encode`` gives them. Raises what the tokenizer raises."""
        data, doc_at, sent, glued, per_doc = self._batch(texts, sentences)
        chunks = _wordpiece_chunks(
            data,
            np.concatenate([doc_at, sent.ravel()]),
            glued,
            self._class_table,
            self._punctuation_ids is not None,
            self._max_chunk_bytes,
            self._key_mask,
        )
        if len(chunks.starts) == 0:
            empty = np.zeros(0, np.int32)
            return [(empty, np.zeros(0, bool), np.zeros(k, np.int64)) for k in per_doc.tolist()]
        ids, token_at = self._encode_chunks(data, chunks)
        token_at = np.append(token_at, len(ids))
        first_token = token_at[np.searchsorted(chunks.starts, sent[:, 0])]
        return documents_of(
            ids, ~self._continuation[ids], token_at[np.searchsorted(chunks.starts, doc_at)], first_token, per_doc
        )

    def _batch(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        """The batch as one text: (its UTF-8 bytes, each document's start, each sentence's (start, end), the positions
        ``_glued`` gives, each document's number of sentences), positions in bytes."""
        big = "".join(texts)
        data = big.encode("utf-8")
        char_at = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)), out=char_at[1:])
        per_doc = np.fromiter(map(len, sentences), np.int64, len(sentences))
        edges = itertools.chain.from_iterable(itertools.chain.from_iterable(sentences))
        sent = np.fromiter(edges, np.int64, 2 * int(per_doc.sum())).reshape(-1, 2)
        sent += np.repeat(char_at[:-1], per_doc)[:, None]
        glued = self._glued(big)
        doc_at = char_at
        if len(data) != len(big):  # not ASCII: character positions to byte positions
            doc_at, sent, glued = (byte_positions(data, x) for x in (char_at, sent, glued))
        return data, doc_at, sent, glued, per_doc

    def _glued(self, text: str) -> np.ndarray:
        """Character positions where no chunk may end: inside and at both edges of every occurrence (overlapping
        ones too) of the added tokens ``_byte_classes`` chose to glue."""
        spans = []
        for token in self._glued_tokens:
            at = text.find(token)
            while at >= 0:
                spans.append((at, at + len(token) + 1))
                at = text.find(token, at + 1)
        if not spans:
            return np.zeros(0, np.int64)
        a, z = np.array(spans, np.int64).T
        return run_indices(a, z - a)

    def _encode_chunks(self, data: bytes, chunks: Chunks) -> tuple[np.ndarray, np.ndarray]:
        """The ids of all chunks, one after another, and the index of each chunk's first id."""
        count = np.zeros(len(chunks.starts), np.int64)
        source = np.zeros(len(chunks.starts), np.int64)  # where in the cache's ids, or in the new ids
        looked_up = np.flatnonzero(chunks.cacheable)
        with self._lock:
            hit, entries = self._table.lookup(chunks.keys[looked_up])
            cached_ids, ids_at, ids_count, words, words_at, length = self._table.entries()
        found, entries = looked_up[hit], entries[hit]
        at = words_at[entries]
        same = chunks.same_as(found, length[entries], words[at], lambda k, j: words[at[k] + j])
        collisions = len(same) - int(same.sum())
        found, entries = found[same], entries[same]
        count[found] = ids_count[entries]
        source[found] = ids_at[entries]
        direct = np.flatnonzero(chunks.direct)
        count[direct] = chunks.lengths[direct]
        source[direct] = chunks.starts[direct]
        missed = ~chunks.direct
        missed[found] = False
        missed = np.flatnonzero(missed)
        new_ids = np.zeros(0, self._values)
        if len(missed):
            new_ids, unlike = self._encode_missed(data, chunks, missed, count, source)
            collisions += unlike
        token_at, total = exclusive_cumsum(count)
        out = np.empty(total, self._values)
        for src, which, table in (
            (cached_ids, found, None),
            (new_ids, missed, None),
            (chunks.bytes, direct, self._punctuation_ids),
        ):
            c = count[which]
            one, runs = which[c == 1], which[c > 1]  # most chunks are one token: a plain gather, no index runs
            got = src[np.concatenate([source[one], run_indices(source[runs], c[c > 1])])]
            out[np.concatenate([token_at[one], run_indices(token_at[runs], c[c > 1])])] = (
                got if table is None else table[got]
            )
        with self._lock:
            self.hits += len(found)
            self.misses += len(missed)
            self.collisions += collisions
        return out, token_at

    def _encode_missed(self, data: bytes, chunks: Chunks, missed: np.ndarray, count: np.ndarray, source: np.ndarray):
        """Encode the distinct missed chunks in one tokenizer input, fill ``count``/``source`` of every missed
        chunk (``source`` into the returned ids), and add the cacheable ones to the cache. Returns the ids
        and the number of chunks that had another chunk's key."""
        keyed = missed[chunks.cacheable[missed]]
        # one representative per key; a chunk whose bytes differ from its representative's is encoded alone
        keys, first, which = np.unique(chunks.keys[keyed], return_index=True, return_inverse=True)
        representatives = keyed[first]
        twin = representatives[which]
        alike = chunks.same_as(
            keyed, chunks.lengths[twin], chunks.first_words[twin], lambda k, j: chunks.word(twin[k], j)
        )
        alone = np.concatenate([missed[~chunks.cacheable[missed]], keyed[~alike]])
        pieces = np.concatenate([representatives, alone])
        ids, piece_at, piece_count = self._encode_chunk_pieces(data, chunks, pieces)
        k = len(representatives)
        slot = np.empty(len(chunks.starts), np.int64)
        slot[representatives] = np.arange(k)
        slot[keyed] = slot[twin]
        slot[alone] = np.arange(k, len(pieces))
        count[missed] = piece_count[slot[missed]]
        source[missed] = piece_at[slot[missed]]
        self._insert(keys, chunks, representatives, ids, piece_at[:k], piece_count[:k])
        return ids, len(alike) - int(alike.sum())

    def _encode_chunk_pieces(self, data: bytes, chunks: Chunks, pieces: np.ndarray):
        """:meth:`_encode_pieces` of the chunks ``pieces`` (indices into ``chunks``)."""
        starts, ends = chunks.starts[pieces].tolist(), chunks.ends[pieces].tolist()
        return self._encode_pieces([data[s:e].decode("utf-8") for s, e in zip(starts, ends)])

    def _encode_pieces(self, pieces: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids of all pieces without the markers, index of each piece's first id, number of ids of each)."""
        enc = self._tok.encode_batch_fast([self._marker.join(pieces)], add_special_tokens=False)[0]
        ids = np.array(enc.ids, np.int32)
        cut = ids == self._marker_id
        markers = np.flatnonzero(cut)
        if len(markers) != len(pieces) - 1:
            raise ValueError("a chunk holds the sentence cut marker")
        begin = np.concatenate([[0], markers + 1])
        end = np.append(markers, len(ids))
        return ids[~cut], begin - np.arange(len(pieces)), end - begin

    def _insert(self, keys, chunks: Chunks, representatives, ids, piece_at, piece_count) -> None:
        """Add the missed chunks (distinct keys) that the cache does not hold yet; empty it first when they
        would not fit in its budget, and add only as many as an empty cache holds."""
        with self._lock:
            present, _ = self._table.lookup(
                keys
            )  # another thread may have added some, or a different chunk holds the key
            keys, representatives = keys[~present], representatives[~present]
            piece_at, piece_count = piece_at[~present], piece_count[~present]
            if not len(keys):
                return
            n_words = (chunks.lengths[representatives] + 7) // 8
            if self._table.nbytes_with(len(keys), int(n_words.sum()), int(piece_count.sum())) > self._max_bytes:
                self._table.clear()
                self.clears += 1
                fits = len(keys)
                while (
                    fits
                    and self._table.nbytes_with(fits, int(n_words[:fits].sum()), int(piece_count[:fits].sum()))
                    > self._max_bytes
                ):
                    fits //= 2
                keys, representatives, piece_at, piece_count = (
                    keys[:fits],
                    representatives[:fits],
                    piece_at[:fits],
                    piece_count[:fits],
                )
                if not fits:
                    return
            words, n_words = chunks.words(representatives)
            self._table.add(
                keys,
                chunks.lengths[representatives],
                words,
                n_words,
                ids[run_indices(piece_at, piece_count)],
                piece_count,
            )
