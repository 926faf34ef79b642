"""Encode a document sentence by sentence, without offsets, where that provably equals encoding it whole.

The whole-document path (``tokenized_documents``) encodes each text once and reads word numbers and
positions back from the tokenizer to place the Punkt sentence starts: about a third of the
tokenizing CPU goes to tracking and reading back what only served that placement. Here the Punkt
sentences themselves are encoded with ``encode_batch_fast`` (no offsets tracked); a sentence starts
at the running token count, and a token starts a word unless it is a continuing WordPiece (``##``),
looked up in a table over the vocabulary.

One input per document, not per sentence (``tokenizers`` has a cost per input: all 4,576 articles of the
Wikipedia sample took 11% less CPU this way): the sentences are joined with a cut marker, a special added
token known only to a copy of the tokenizer kept here. The tokenizer splits its input at added tokens
before normalizing and pre-tokenizing, so each piece between two markers is encoded exactly as that
sentence alone; the markers' ids are then removed and their positions are the sentence starts. The
marker has no border (no proper prefix equal to a suffix), so in the joined text it matches only where
it was put; a document whose text contains it takes the whole-document path.

By default the sentences are cut further, at ASCII whitespace and punctuation, into chunks encoded through
a process-wide cache (``chunk_cache``): the same argument (text on each side of a whitespace or punctuation
character is tokenized alone) makes a sentence's ids its chunks' ids, and most chunks of a corpus are
repeats that the cache answers without the tokenizer. ``cache_bytes=0`` encodes every sentence instead.

Why this gives the same ids (checked before use, per tokenizer and per document):

* the tokenizer is a ``WordPiece`` model behind ``BertPreTokenizer`` with a ``BertNormalizer`` (or no
  normalizer): the normalizer works character by character (cleaning, CJK padding, lowercasing,
  accent stripping never join or move text across whitespace) and the pre-tokenizer splits at every
  whitespace character, so text on either side of a whitespace run is tokenized independently;
* every stretch of the document between two Punkt sentences, and before the first and after the
  last, is made only of characters that are whitespace to both Python and the tokenizer (space, tab,
  line feed, carriage return and the Unicode space separators Zs); where two sentences touch (Punkt
  ends a sentence at ``?!"`` or before ``[1]`` without a space), the character on one side of the cut
  is punctuation, which the pre-tokenizer always isolates, so the cut is a word boundary of the whole
  text as well. A document where that does not hold (e.g. a line separator U+2028 that the tokenizer
  treats differently) goes through the whole-document path instead;
* no added token the tokenizer matches in text (``[UNK]``) contains whitespace or starts with the
  continuing prefix, and no cut falls inside one written in the text, so each is matched as in the
  whole text and still starts a word, as the whole-document path counts it (``tests/pipeline/test_sentence_encoding.py`` compares both paths on real text and
  on generated text full of edge cases).
"""

from __future__ import annotations

import json
import re
import string
import unicodedata

import numpy as np
from tokenizers import AddedToken, Tokenizer

from pipeline.tokenize.chunk_cache import ChunkCache, shared_cache

# Whitespace to Python (Punkt), to BERT's normalizer (mapped to a space) and to its pre-tokenizer (a split).
_SAFE_SPACE = "[ \t\n\r\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]"
_SAFE_GAP = re.compile(_SAFE_SPACE + "+")
_SAFE_EDGE = re.compile(_SAFE_SPACE + "*")
_ASCII_PUNCTUATION = frozenset(string.punctuation)


def _is_punctuation(c: str) -> bool:
    """BERT's pre-tokenizer test: ASCII punctuation or a Unicode punctuation category (P*)."""
    return c in _ASCII_PUNCTUATION or unicodedata.category(c).startswith("P")


# Private-use characters around a name: first and last character differ and occur once.
CUT_MARKER = "\ue000spanprep-sentence-cut\ue001"

# Memory for the cache of chunk encodings (chunk_cache.py), shared by a worker process's threads.
DEFAULT_CACHE_BYTES = 64 << 20


class SentenceEncoder:
    """Per-sentence fast encoding for one tokenizer; :meth:`for_tokenizer` says whether it applies."""

    def __init__(self, tok, continuation: np.ndarray, added: list[str], cache_bytes: int = DEFAULT_CACHE_BYTES):
        self._marked = Tokenizer.from_str(tok.to_str())
        self._marked.add_special_tokens([AddedToken(CUT_MARKER, special=True, normalized=False)])
        marker_id = self._marked.token_to_id(CUT_MARKER)
        if marker_id is None:
            raise RuntimeError("the tokenizer did not take the sentence-cut marker as an added token")
        self._marker_id: int = marker_id
        self._continuation = continuation
        self._added = [a for a in added if len(a) > 1]  # a cut can only fall inside a token of 2+ characters
        self.cache: ChunkCache | None = None
        if cache_bytes > 0:
            self.cache = shared_cache(
                (self._marked.to_str(), cache_bytes),
                lambda: ChunkCache(self._marked, CUT_MARKER, self._marker_id, continuation, max_bytes=cache_bytes),
            )

    @classmethod
    def for_tokenizer(cls, tok, cache_bytes: int = DEFAULT_CACHE_BYTES) -> SentenceEncoder | None:
        """The encoder for ``tok`` (as it encodes documents), or None when the equivalence above is not given.
        With ``cache_bytes`` > 0 it encodes through a cache of chunk encodings of that size (``chunk_cache``),
        shared by every encoder of the same tokenizer in the process; 0 encodes every sentence."""
        if not hasattr(tok, "encode_batch_fast"):
            return None
        config = json.loads(tok.to_str())
        model, pre, norm = config.get("model") or {}, config.get("pre_tokenizer") or {}, config.get("normalizer")
        if model.get("type") != "WordPiece" or pre.get("type") != "BertPreTokenizer":
            return None
        if norm is not None and norm.get("type") != "BertNormalizer":
            return None
        prefix = model.get("continuing_subword_prefix") or ""
        if not prefix:
            return None
        for added in config.get("added_tokens") or []:
            content = added.get("content", "")
            if any(c.isspace() for c in content) or content.startswith(prefix):
                return None
        size = tok.get_vocab_size(with_added_tokens=True)
        continuation = np.zeros(max(size, 1), dtype=bool)
        for token, i in tok.get_vocab(with_added_tokens=False).items():
            if token.startswith(prefix) and i < size:
                continuation[i] = True
        for added in config.get("added_tokens") or []:
            if added.get("id", size) < size:
                continuation[added["id"]] = False
        return cls(tok, continuation, [a.get("content", "") for a in config.get("added_tokens") or []], cache_bytes)

    def applies(self, text: str, sentences: list[tuple[int, int]]) -> bool:
        """Whether ``sentences`` cut ``text`` only where the tokenizer's own word boundaries are (see above)."""
        if not sentences or CUT_MARKER in text:
            return False
        if not _SAFE_EDGE.fullmatch(text, 0, sentences[0][0]) or not _SAFE_EDGE.fullmatch(text, sentences[-1][1]):
            return False
        touching = []
        for (_, end), (start, _) in zip(sentences, sentences[1:]):
            if end == start:
                if not (_is_punctuation(text[end - 1]) or _is_punctuation(text[start])):
                    return False
                touching.append(end)
            elif not _SAFE_GAP.fullmatch(text, end, start):
                return False
        if touching:
            for token in self._added:
                for cut in touching:
                    if text.rfind(token, max(0, cut - len(token) + 1), cut + len(token) - 1) >= 0:
                        return False
        return True

    def encode(self, texts: list[str], sentences: list[list[tuple[int, int]]]):
        """Per document: (ids, word starts, index of each sentence's first token), one Rust call for all.

        Raises what the tokenizer raises, or ValueError when a document's markers are not exactly its
        cuts (its text holds the marker); the caller then takes the whole-document path.
        """
        if self.cache is not None:
            return self.cache.encode(texts, sentences)
        joined = [CUT_MARKER.join([text[s:e] for s, e in sent]) for text, sent in zip(texts, sentences)]
        out = []
        for enc, sent in zip(self._marked.encode_batch_fast(joined, add_special_tokens=False), sentences):
            ids = np.array(enc.ids, dtype=np.int64)
            cut = ids == self._marker_id
            markers = np.flatnonzero(cut)
            if len(markers) != len(sent) - 1:
                raise ValueError("the text holds the sentence cut marker")
            firsts = np.zeros(len(sent), dtype=np.int64)
            firsts[1:] = markers - np.arange(len(markers))  # tokens before marker k, markers not counted
            if len(markers):
                ids = ids[~cut]
            out.append((ids, ~self._continuation[ids], firsts))
        return out
