"""TokenizeDocuments: documents -> tokenized documents (ids, word starts, sentence starts, spans).

Each document is encoded once, whole, without special tokens; sentence boundaries from Punkt are
mapped to tokens through the tokenizer's character offsets, so the concatenation of a document's
rows is exactly the tokenization of its text. Candidate spans found on characters (spaCy) are
aligned to tokens the same way; n-gram spans come from the segmenter over the tokenizer's words.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipeline.elements import (
    NO_TOKENS,
    TOKENIZER_ERROR,
    AnnotatedDocument,
    DeadLetter,
    Document,
    TokenizedDocument,
    preview,
)
from pipeline.segmenter import Segmenter
from pipeline.tokenize.sentence_encoding import DEFAULT_CACHE_BYTES, SentenceEncoder
from pipeline.tokenize.sentences import sentence_spans
from pipeline.tokenize.tokenizer import TokenizerSpec

log = logging.getLogger(__name__)

DEAD_LETTERS = "dead_letters"


def char_spans_to_tokens(
    starts: np.ndarray, ends: np.ndarray, token_starts: np.ndarray, token_ends: np.ndarray, word_start: np.ndarray
):
    """Map character spans to token spans ``[first, last + 1)`` covering them.

    A token belongs to a span when its characters overlap the span. The result is widened to
    whole words (a span never starts or ends inside a word). Returns (token_spans (k, 2) int32,
    keep mask) where spans covering no token are not kept.
    """
    if len(starts) == 0:
        return np.empty((0, 2), np.int32), np.zeros(0, bool)
    first = np.searchsorted(token_ends, starts, side="right")  # first token ending after span start
    last = np.searchsorted(token_starts, ends, side="left")  # one past the last token starting before span end
    keep = last > first
    first = first[keep]
    last = last[keep]
    if len(first):
        # widen to word boundaries
        word_id = np.cumsum(word_start) - 1
        word_first = np.flatnonzero(word_start)
        word_end = np.append(word_first[1:], len(word_start))
        first = word_first[word_id[first]]
        last = word_end[word_id[last - 1]]
    return np.stack([first, last], axis=1).astype(np.int32), keep


# Longer texts are encoded in pieces cut at a line break (else a space): the tokenizer's own encoding
# costs about 600 bytes of memory per token, so one 50 MB record used to need ~10 GB. Pieces give the
# same tokens: the normalizer works per character and the pre-tokenizer splits at every whitespace.
ENCODE_PIECE_CHARS = 1 << 20


def text_pieces(text: str, limit: int) -> list[tuple[int, int]]:
    """``[start, end)`` character ranges of at most ``limit`` characters, each (but the first) starting at a
    line break or, failing that, a space; a run of ``limit`` characters without either stays whole."""
    pieces, start, n = [], 0, len(text)
    while n - start > limit:
        cut = text.rfind("\n", start + 1, start + limit)
        if cut < 0:
            cut = text.rfind(" ", start + 1, start + limit)
        if cut < 0:
            break
        pieces.append((start, cut))
        start = cut
    pieces.append((start, n))
    return pieces


_NON_SPACE = re.compile(r"\S")


class _Encoded:
    """A tokenizer encoding as arrays: ids, word numbers (distinct per word) and character offsets (n, 2).

    Offsets are read back from the tokenizer only when asked for (they cost about a quarter of the
    encoding itself); :meth:`first_tokens_at` answers sentence starts without them.
    """

    def __init__(self, ids: np.ndarray, words: np.ndarray, offsets: np.ndarray | None = None, encoding=None):
        self.ids = ids
        self.words = words
        self._offsets = offsets
        self._encoding = encoding

    @property
    def offsets(self) -> np.ndarray:
        if self._offsets is None:
            n = len(self.ids)
            self._offsets = np.fromiter(
                itertools.chain.from_iterable(self._encoding.offsets), dtype=np.int64, count=2 * n
            ).reshape(n, 2)
        return self._offsets

    def first_tokens_at(self, text: str, chars: np.ndarray) -> np.ndarray:
        """For each character position of ``text``, the first token starting at or after it (``len(ids)``
        if none), as ``searchsorted(token_starts, chars, side="left")`` gives it. Without the offsets when
        it can be proved per position: the tokenizer names the token k holding the first non-space
        character from there, and start(k) >= c > start(k - 1) makes k the answer; else the offsets decide."""
        enc = self._encoding
        if enc is not None and self._offsets is None:
            out = []
            for c in chars.tolist():
                m = _NON_SPACE.search(text, c)
                k = enc.char_to_token(m.start()) if m else None
                if k is None or enc.token_to_chars(k)[0] < c or (k > 0 and enc.token_to_chars(k - 1)[0] >= c):
                    break
                out.append(k)
            else:
                return np.array(out, dtype=np.int64)
        return np.searchsorted(self.offsets[:, 0], chars, side="left")

    @classmethod
    def of(cls, enc, char_base: int = 0) -> _Encoded:
        word_ids = enc.word_ids
        try:
            w = np.array(word_ids, dtype=np.int64)
        except TypeError:  # special tokens inside text have no word: each is its own word
            w = np.array([-1 - i if v is None else v for i, v in enumerate(word_ids)], dtype=np.int64)
        ids = np.array(enc.ids, dtype=np.int64)
        if char_base:
            return cls(ids, w, cls(ids, w, encoding=enc).offsets + char_base)
        return cls(ids, w, encoding=enc)

    @classmethod
    def concatenate(cls, parts: list[_Encoded]) -> _Encoded:
        if len(parts) == 1:
            return parts[0]
        words, base = [], 0
        for p in parts:  # renumber the words so that no word continues across pieces
            if len(p.words):
                w = p.words - p.words.min() + base
                base = int(w.max()) + 1
                words.append(w)
        return cls(
            np.concatenate([p.ids for p in parts]),
            np.concatenate(words) if words else np.zeros(0, np.int64),
            np.concatenate([p.offsets for p in parts]).reshape(-1, 2),
        )


class _TokenizeFn(beam.DoFn):
    def __init__(
        self,
        spec: TokenizerSpec,
        ids_dtype: str,
        language: str = "english",
        segmenter_path: str | None = None,
        encoder_threads: int = 1,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ):
        self._spec = spec
        self._threads = max(1, encoder_threads)
        self._cache_bytes = cache_bytes
        self._ids_dtype = ids_dtype
        self._language = language
        self._segmenter_path = segmenter_path
        self._documents = Metrics.counter("tokenize", "documents")
        self._tokens = Metrics.counter("tokenize", "tokens")

    def setup(self):
        self._tok = self._spec.load_for_text()
        self._dtype = np.dtype(self._ids_dtype)
        sentence_spans("Warm up. Punkt.", self._language)
        self._segmenter = None
        if self._segmenter_path:
            self._segmenter = Segmenter.from_dictionary(self._segmenter_path)
        # Without character spans to align (no n-gram dictionary, no spaCy candidates) documents are encoded
        # sentence by sentence without offsets where that provably gives the same tokens (sentence_encoding),
        # through a cache of chunk encodings (chunk_cache).
        self._sentences = (
            None if self._segmenter is not None else SentenceEncoder.for_tokenizer(self._tok, self._cache_bytes)
        )
        # The Rust calls run on our encoder threads (GIL released), each single-threaded: the tokenizers
        # library's own thread pool would compete with them and with this thread for the same cores, and its
        # idle threads spin (measured: 8% slower jobs on 2 cores). Parallelism comes from encoder threads
        # and worker processes instead.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        self._encoder = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="encode")
        self._pending: collections.deque[tuple] = collections.deque()

    def process(self, batch: list):
        """Batches are pipelined: while the encoder threads run the Rust calls for the last ``encoder_threads``
        batches (GIL released), this thread emits the batch before them (and the stages fused after it run)
        and splits the next batch into sentences, so Python and Rust work overlap even with a single worker.
        Batches are emitted in the order they came."""
        self._pending.append(self._start(batch))
        if len(self._pending) > self._threads:
            yield from self._finish(*self._pending.popleft())

    def finish_bundle(self):
        while self._pending:
            for out in self._finish(*self._pending.popleft()):
                if isinstance(out, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(out.tag, WindowedValue(out.value, MIN_TIMESTAMP, (GlobalWindow(),)))
                else:
                    yield WindowedValue(out, MIN_TIMESTAMP, (GlobalWindow(),))

    def teardown(self):
        if getattr(self, "_encoder", None) is not None:
            self._encoder.shutdown(wait=True)
        encoder = getattr(self, "_sentences", None)
        cache = encoder.cache if encoder is not None else None
        if cache is not None and cache.hits + cache.misses:
            log.debug(
                "chunk cache: %d of %d chunks answered from the cache, %d entries",
                cache.hits,
                cache.hits + cache.misses,
                len(cache),
            )

    def _start(self, batch: list):
        """Split the batch into sentences, choose each document's path, and hand the Rust calls to an encoder thread."""
        docs, spans = [], []
        for element in batch:
            if isinstance(element, AnnotatedDocument):
                docs.append(element.document)
                spans.append(element.spans)
            else:
                docs.append(element)
                spans.append(())
        sentences = [sentence_spans(d.text, self._language) for d in docs]
        fast = []
        if self._sentences is not None:
            fast = [
                i
                for i, (d, cs, sent) in enumerate(zip(docs, spans, sentences))
                if not cs and len(d.text) <= ENCODE_PIECE_CHARS and self._sentences.applies(d.text, sent)
            ]
        future = self._encoder.submit(self._encode_batch, docs, fast, sentences)
        return docs, spans, sentences, future

    def _encode_batch(self, docs: list[Document], fast: list[int], sentences: list) -> dict:
        """On an encoder thread, only the Rust calls: document index -> its sentence-path arrays or its
        Encoding. A call that fails leaves its documents out: the sentence path's go to the whole-document
        call, and the whole-document path, one document at a time, then finds the document that fails."""
        encoded: dict = {}
        if fast and self._sentences is not None:
            try:
                encoded.update(
                    zip(fast, self._sentences.encode([docs[i].text for i in fast], [sentences[i] for i in fast]))
                )
            except Exception:
                pass
        short = [i for i, d in enumerate(docs) if i not in encoded and len(d.text) <= ENCODE_PIECE_CHARS]
        if short:
            try:
                encoded.update(
                    zip(short, self._tok.encode_batch([docs[i].text for i in short], add_special_tokens=False))
                )
            except Exception:
                pass
        return encoded

    def _finish(self, docs, spans, sentences, future):
        encoded = future.result()
        for i, (doc, char_spans, sent) in enumerate(zip(docs, spans, sentences)):
            enc = encoded.get(i)
            if enc is None:
                enc = self._encode_one(doc)
            elif not isinstance(enc, tuple):
                enc = _Encoded.of(enc)
            if isinstance(enc, str):
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTERS, DeadLetter(TOKENIZER_ERROR, enc, doc.source, doc.doc_id, preview(doc.text))
                )
                continue
            yield from self._tokenize(doc, char_spans, sent, enc)

    def _encode_one(self, doc: Document) -> _Encoded | str:
        """The document's encoding (long texts piece by piece), or the tokenizer's error message (a dead letter)."""
        try:
            parts = [
                _Encoded.of(self._tok.encode(doc.text[a:b], add_special_tokens=False), a)
                for a, b in text_pieces(doc.text, ENCODE_PIECE_CHARS)
            ]
        except Exception as e:
            return f"the tokenizer cannot encode this text: {type(e).__name__}: {e}"
        return _Encoded.concatenate(parts)

    def _tokenize(self, doc: Document, char_spans, sent: list[tuple[int, int]], enc: _Encoded | tuple):
        whole: _Encoded | None = None  # the whole-document Encoding (with offsets), when there is one
        if isinstance(enc, tuple):  # sentence by sentence: ids, word starts, sentence starts (no offsets)
            ids, word_start, sentence_firsts = enc
        else:
            whole, ids, word_start, sentence_firsts = enc, enc.ids, None, None
        n = len(ids)
        if n == 0:
            yield beam.pvalue.TaggedOutput(
                DEAD_LETTERS,
                DeadLetter(
                    NO_TOKENS,
                    "the tokenizer produced no tokens for this text",
                    doc.source,
                    doc.doc_id,
                    preview(doc.text),
                ),
            )
            return
        ids_arr = ids.astype(self._dtype)
        if word_start is None:
            assert whole is not None, "the sentence path always gives word starts"
            w = whole.words
            word_start = np.empty(n, dtype=bool)
            np.not_equal(w[1:], w[:-1], out=word_start[1:])
        word_start[0] = True
        sentence_start = np.zeros(n, dtype=bool)
        if sent:
            if sentence_firsts is not None:
                idx = sentence_firsts
            else:
                assert whole is not None, "the sentence path always gives sentence starts"
                idx = whole.first_tokens_at(
                    doc.text, np.fromiter((s for s, _ in sent), dtype=np.int64, count=len(sent))
                )
            idx = idx[idx < n]
            sentence_start[idx] = True
        # a sentence always starts at a word start (punkt splits at whitespace); the first token starts both
        sentence_start &= word_start
        sentence_start[0] = True

        spans: dict[str, np.ndarray] = {}
        labels: dict[str, list[str]] = {}
        if char_spans or self._segmenter is not None:
            assert whole is not None, "documents with spans to align take the whole-document path"
            token_starts, token_ends = whole.offsets[:, 0], whole.offsets[:, 1]
        for cs in char_spans:
            tok_spans, keep = char_spans_to_tokens(
                np.asarray(cs.starts, np.int64), np.asarray(cs.ends, np.int64), token_starts, token_ends, word_start
            )
            lab = [lab for lab, k in zip(cs.labels, keep.tolist()) if k] if cs.labels is not None else None
            tok_spans, lab = _sorted_unique(tok_spans, lab)
            spans[cs.kind] = tok_spans
            if lab is not None:
                labels[cs.kind] = lab
        if self._segmenter is not None:
            spans["ngrams"] = self._ngram_spans(doc.text, sent, word_start, token_starts, token_ends)

        self._documents.inc()
        self._tokens.inc(n)
        yield TokenizedDocument(
            doc_id=doc.doc_id,
            source_path=doc.source.path,
            source_line=doc.source.line,
            source_offset=doc.source.byte_offset,
            ids=ids_arr,
            word_start=word_start,
            sentence_start=sentence_start,
            cleaned=doc.cleaned,
            spans=spans,
            span_labels=labels,
        )

    def _ngram_spans(self, text: str, sent: list[tuple[int, int]], word_start, token_starts, token_ends) -> np.ndarray:
        """Multi-word segments of the greedy longest-match segmentation, per sentence."""
        word_first = np.flatnonzero(word_start)
        word_last = np.append(word_first[1:], len(word_start)) - 1
        w_starts = token_starts[word_first]
        w_ends = token_ends[word_last]
        words = [text[s:e] for s, e in zip(w_starts.tolist(), w_ends.tolist())]
        out = []
        segmenter = self._segmenter
        assert segmenter is not None, "called only with an n-gram dictionary"
        for a, b in _sentence_word_bounds(sent, w_starts):
            for s, e in segmenter.ngram_spans(words[a:b]):
                out.append((word_first[a + s], word_last[a + e - 1] + 1))
        if not out:
            return np.empty((0, 2), np.int32)
        return np.array(out, dtype=np.int32)


def _sentence_word_bounds(sent: list[tuple[int, int]], w_starts: np.ndarray) -> list[tuple[int, int]]:
    """Word-index ranges of the sentences (n-grams never cross a sentence)."""
    if not sent:
        return [(0, len(w_starts))]
    firsts = np.searchsorted(w_starts, np.fromiter((s for s, _ in sent), dtype=np.int64, count=len(sent)))
    firsts[0] = 0
    bounds = np.append(np.unique(firsts), len(w_starts))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _sorted_unique(spans: np.ndarray, labels: list[str] | None):
    if len(spans) == 0:
        return spans.reshape(0, 2), labels
    order = np.lexsort((spans[:, 1], spans[:, 0]))
    spans = spans[order]
    labels = [labels[i] for i in order.tolist()] if labels is not None else None
    # identical token ranges can arise when two character spans widen to the same words
    keep = np.ones(len(spans), bool)
    keep[1:] = np.any(spans[1:] != spans[:-1], axis=1)
    if labels is not None:
        labels = [lab for lab, k in zip(labels, keep.tolist()) if k]
    return spans[keep], labels


class TokenizeDocuments(beam.PTransform):
    """Encode each document (or annotated document) once and find its word and sentence starts.

    Returns a dict: ``documents`` (:class:`TokenizedDocument`) and ``dead_letters`` (documents
    that produced no token at all, e.g. only characters the normalizer removes).
    """

    def __init__(
        self,
        spec: TokenizerSpec,
        ids_dtype: str,
        segmenter_path: str | None = None,
        batch_size: int = 32,
        encoder_threads: int = 1,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ):
        super().__init__()
        self._fn = _TokenizeFn(
            spec, ids_dtype, segmenter_path=segmenter_path, encoder_threads=encoder_threads, cache_bytes=cache_bytes
        )
        self._batch_size = batch_size

    def expand(self, documents):
        out = (
            documents
            | "Batch" >> beam.BatchElements(min_batch_size=self._batch_size, max_batch_size=self._batch_size)
            | "Tokenize" >> beam.ParDo(self._fn).with_outputs(DEAD_LETTERS, main="documents")
        )
        return {"documents": out["documents"], DEAD_LETTERS: out[DEAD_LETTERS]}
