"""TokenizeDocuments: documents -> tokenized documents (ids, word starts, sentence starts, spans).

Each document is encoded once, whole, without special tokens; sentence boundaries from Punkt are
mapped to tokens through the tokenizer's character offsets, so the concatenation of a document's
rows is exactly the tokenization of its text. Candidate spans found on characters (spaCy) are
aligned to tokens the same way; n-gram spans come from the segmenter over the tokenizer's words.
"""

from __future__ import annotations

import collections
import json
import logging
import os
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
    WORD_TOO_LONG,
    AnnotatedDocument,
    DeadLetter,
    Document,
    TokenizedDocument,
    preview,
)
from pipeline.tokenize import word_heads
from pipeline.tokenize.encodings import ENCODE_PIECE_CHARS, Encoded, char_spans_to_tokens, text_pieces
from pipeline.tokenize.sentence_encoding import DEFAULT_CACHE_BYTES, SentenceEncoder
from pipeline.tokenize.sentences import sentence_spans
from pipeline.tokenize.tokenizer import TokenizerSpec
from pipeline.tokenize.word_cache import WordEncoder
from schemas.segmenter import Segmenter
from schemas.tokenizers.families import UNIGRAM, WORDPIECE, piece_cuts_allowed

log = logging.getLogger(__name__)

DEAD_LETTERS = "dead_letters"


class _TokenizeFn(beam.DoFn):
    def __init__(
        self,
        spec: TokenizerSpec,
        ids_dtype: str,
        language: str = "english",
        segmenter_path: str | None = None,
        encoder_threads: int = 1,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        max_word_tokens: int | None = None,
    ):
        self._spec = spec
        self._max_word_tokens = max_word_tokens
        self._threads = max(1, encoder_threads)
        self._cache_bytes = cache_bytes
        self._ids_dtype = ids_dtype
        self._language = language
        self._segmenter_path = segmenter_path
        self._documents = Metrics.counter("tokenize", "documents")
        self._tokens = Metrics.counter("tokenize", "tokens")

    def setup(self):
        self._tok = self._spec.load_for_text()
        added = json.loads(self._tok.to_str()).get("added_tokens") or []
        self._added = tuple(t["content"] for t in added)
        # where a long text may be cut (schemas/tokenizers/families.py): WordPiece anywhere at a line break or space, byte-level BPE at
        # a line feed before a non-space, Unigram at a space between ASCII characters; nowhere (encoded whole) when
        # an added token holds whitespace (or what the normalizer makes whitespace) or strips it
        family = self._spec.family
        self._metaspace = family == UNIGRAM
        self._piece_limit = ENCODE_PIECE_CHARS if piece_cuts_allowed(added, self._tok.normalizer) else None
        self._dtype = np.dtype(self._ids_dtype)
        sentence_spans("Warm up. Punkt.", self._language)
        self._segmenter = None
        if self._segmenter_path:
            self._segmenter = Segmenter.from_dictionary(self._segmenter_path)
        # Without character spans to align (no n-gram dictionary, no spaCy candidates) documents are encoded
        # sentence by sentence without offsets where that provably gives the same tokens (sentence_encoding),
        # through a cache of chunk encodings (chunk_cache).
        # Byte-level BPE and Unigram: whole documents through a cache of chunk encodings (word_cache).
        self._sentences: SentenceEncoder | WordEncoder | None = None
        if self._segmenter is None and family == WORDPIECE:
            self._sentences = SentenceEncoder.for_tokenizer(self._tok, self._cache_bytes)
        elif self._segmenter is None:
            self._sentences = WordEncoder.for_tokenizer(self._tok, self._cache_bytes, family, added)
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
                enc = Encoded.of(enc)
            if isinstance(enc, str):
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTERS, DeadLetter(TOKENIZER_ERROR, enc, doc.source, doc.doc_id, preview(doc.text))
                )
                continue
            yield from self._tokenize(doc, char_spans, sent, enc)

    def _encode_one(self, doc: Document) -> Encoded | str:
        """The document's encoding (long texts piece by piece), or the tokenizer's error message (a dead letter)."""
        try:
            parts = [
                Encoded.of(self._tok.encode(doc.text[a:b], add_special_tokens=False), a)
                for a, b in text_pieces(
                    doc.text,
                    self._piece_limit or len(doc.text),
                    strict=self._spec.family != WORDPIECE,
                    added=self._added,
                    metaspace=self._metaspace,
                )
            ]
        except Exception as e:
            return f"the tokenizer cannot encode this text: {type(e).__name__}: {e}"
        return Encoded.concatenate(parts)

    def _tokenize(self, doc: Document, char_spans, sent: list[tuple[int, int]], enc: Encoded | tuple):
        whole: Encoded | None = None  # the whole-document Encoding (with offsets), when there is one
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
        too_long = self._word_too_long(ids, word_start)
        if too_long is not None:
            yield beam.pvalue.TaggedOutput(
                DEAD_LETTERS, DeadLetter(WORD_TOO_LONG, too_long, doc.source, doc.doc_id, preview(doc.text))
            )
            return
        sentence_start = np.zeros(n, dtype=bool)
        if sent:
            if sentence_firsts is not None:
                idx = sentence_firsts
            else:
                assert whole is not None, "the sentence path always gives sentence starts"
                idx = word_heads.sentence_firsts(
                    doc.text,
                    whole.offsets[:, 0],
                    word_start,
                    np.fromiter((s for s, _ in sent), dtype=np.int64, count=len(sent)),
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

    def _word_too_long(self, ids: np.ndarray, word_start: np.ndarray) -> str | None:
        """Why the document cannot be packed when one of its words has more tokens than a row holds (a row
        never starts inside a word: FORMAT.md), else None."""
        limit = self._max_word_tokens
        if limit is None or len(ids) <= limit:
            return None
        firsts = np.flatnonzero(word_start)
        lengths = np.diff(np.append(firsts, len(ids)))
        longest = int(np.argmax(lengths))
        if lengths[longest] <= limit:
            return None
        start = int(firsts[longest])
        word = self._tok.decode(ids[start : start + min(int(lengths[longest]), 32)].tolist())
        return (
            f"word {word[:80]!r}{'...' if lengths[longest] > 32 else ''} at token {start} has "
            f"{int(lengths[longest])} tokens, more than a row holds ({limit}; --max-seq-len less 2)"
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
    that produced no token at all, e.g. only characters the normalizer removes, that the tokenizer
    failed on, or, given ``max_word_tokens`` (``--long-words dead-letter``), with a word of more than that many
    tokens: more than a row holds; without it such a word goes on in continuation rows, FORMAT.md).
    """

    def __init__(
        self,
        spec: TokenizerSpec,
        ids_dtype: str,
        segmenter_path: str | None = None,
        batch_size: int = 32,
        encoder_threads: int = 1,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        max_word_tokens: int | None = None,
    ):
        super().__init__()
        self._fn = _TokenizeFn(
            spec,
            ids_dtype,
            segmenter_path=segmenter_path,
            encoder_threads=encoder_threads,
            cache_bytes=cache_bytes,
            max_word_tokens=max_word_tokens,
        )
        self._batch_size = batch_size

    def expand(self, documents):
        out = (
            documents
            | "Batch" >> beam.BatchElements(min_batch_size=self._batch_size, max_batch_size=self._batch_size)
            | "Tokenize" >> beam.ParDo(self._fn).with_outputs(DEAD_LETTERS, main="documents")
        )
        return {"documents": out["documents"], DEAD_LETTERS: out[DEAD_LETTERS]}
