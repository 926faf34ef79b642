"""Segment a sentence with an n-gram dictionary: greedy longest match from the head (Span Fine-tuning).

Bao et al. (2021): starting at the first word, take the longest dictionary n-gram (n <= max_n) that starts
there as one segment, or the word alone if none does, and continue after it. Segments are word-index spans
``[start, end)`` covering every word once, in order.

    seg = Segmenter.from_dictionary("dictionaries/wikitext103")
    seg.segment(["in", "New", "York", "City", "today"])   # -> [(0, 1), (1, 4), (4, 5)]
    seg.ngram_spans(["in", "New", "York", "City", "today"])  # multi-word segments only -> [(1, 4)]

Lookups are hashed: every prefix (of two or more words) of a dictionary entry is a key of one dict of word
tuples, mapped to whether it is itself an entry, so a match walks forward one dict lookup per word and stops
at the first word sequence that no entry starts with (usually after one lookup). No call scans the
dictionary.

WikiText normalisation (``normalize_markers``, on by default): WikiText writes ``1 @,@ 000``, ``2 @.@ 5`` and
``well @-@ known`` where plain text has ``1,000``, ``2.5`` and ``well-known``, which a BERT pre-tokenizer
splits into ``1 , 000``, ``2 . 5``, ``well - known``. With normalisation, ``@,@ @.@ @-@`` become ``, . -``
both in dictionary entries and in the words looked up, so a WikiText dictionary matches pre-tokenized plain
text and WikiText tokens alike (the entries ``a @-@ b`` and ``a - b``, if both exist, become one).
Other WikiText tokenization differences are not bridged: WikiText splits ``don't`` as ``do n't`` where a BERT
pre-tokenizer gives ``don ' t``, so such entries only match WikiText-tokenized words.

A lowercased dictionary (built with ``--lowercase``; read from its manifest) lowercases the words it looks up;
the spans always index the words as given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow.compute as pc

from schemas.ngram_dictionary import NgramDictionary

MARKER_NORMALISATION = {"@,@": ",", "@.@": ".", "@-@": "-"}


class Segmenter:
    """Greedy longest-match segmentation over words with a set of n-grams.

    ``ngrams``: each a string of words joined by single spaces (as in the dictionary) or a sequence of words.
    Entries of one word are accepted and ignored (a word alone is always a segment). ``max_n``: ignore longer
    entries (default: the longest entry). ``lowercase``: the entries are lowercase; lowercase looked-up words
    (entries are lowercased too, so mixed-case input entries still match). ``normalize_markers``: see the
    module docstring.
    """

    def __init__(
        self,
        ngrams: Iterable[str | Sequence[str]],
        *,
        max_n: int | None = None,
        lowercase: bool = False,
        normalize_markers: bool = True,
    ):
        if max_n is not None and max_n < 1:
            raise ValueError(f"max_n must be >= 1, got {max_n}")
        self.lowercase = lowercase
        self.normalize_markers = normalize_markers
        # prefix (tuple of >= 2 words) -> True if the prefix is itself an entry
        prefixes: dict[tuple[str, ...], bool] = {}
        interned: dict[str, str] = {}
        longest = 1
        entries = 0
        for ngram in ngrams:
            words = ngram.split(" ") if isinstance(ngram, str) else list(ngram)
            if any(not w or w != w.strip() or len(w.split()) != 1 for w in words):
                raise ValueError(f"bad n-gram {ngram!r}: words must be non-empty and contain no whitespace")
            if len(words) < 2 or (max_n is not None and len(words) > max_n):
                continue
            key = tuple(interned.setdefault(w, w) for w in map(self._normalise, words))
            entries += 1
            longest = max(longest, len(key))
            prefixes[key] = True
            for k in range(2, len(key)):
                prefixes.setdefault(key[:k], False)
        self._prefixes = prefixes
        self.max_n = longest if max_n is None else max_n
        self._entries = sum(prefixes.values())

    def _normalise(self, word: str) -> str:
        if self.lowercase:
            word = word.lower()
        if self.normalize_markers:
            word = MARKER_NORMALISATION.get(word, word)
        return word

    @classmethod
    def from_dictionary(
        cls,
        path: str,
        *,
        max_n: int | None = None,
        min_count: int | None = None,
        normalize_markers: bool = True,
    ) -> Segmenter:
        """Load a dictionary directory written by ``pipeline.build_ngram_dictionary`` (local or a URI
        pyarrow.fs understands), through ``schemas.ngram_dictionary``, which refuses an incomplete directory or
        an unknown format version with a ``ValueError``. Honours its ``lowercase`` option; ``min_count`` keeps
        only entries at least that frequent (e.g. 11 on a dictionary built with ``--min-count 10``)."""
        dictionary = NgramDictionary.open(path)
        table = dictionary.read_table()
        if min_count is not None:
            table = table.filter(pc.greater_equal(table["count"], min_count))
        return cls(
            table["ngram"].to_pylist(),
            max_n=max_n,
            lowercase=dictionary.lowercase,
            normalize_markers=normalize_markers,
        )

    def __len__(self) -> int:
        """Number of distinct multi-word entries (after lowercasing/normalisation and the max_n cut)."""
        return self._entries

    def __contains__(self, ngram: str | Sequence[str]) -> bool:
        words = ngram.split(" ") if isinstance(ngram, str) else ngram
        return self._prefixes.get(tuple(self._normalise(w) for w in words), False)

    def segment(self, words: Sequence[str]) -> list[tuple[int, int]]:
        """Word-index spans ``[start, end)`` of all segments, in order: dictionary n-grams and single words."""
        keys = self._keys(words)
        prefixes = self._prefixes
        max_n = self.max_n
        n_words = len(keys)
        spans = []
        i = 0
        while i < n_words:
            end = i + 1
            stop = min(n_words, i + max_n)
            j = i + 2
            while j <= stop:
                is_entry = prefixes.get(tuple(keys[i:j]))
                if is_entry is None:
                    break
                if is_entry:
                    end = j
                j += 1
            spans.append((i, end))
            i = end
        return spans

    def ngram_spans(self, words: Sequence[str]) -> list[tuple[int, int]]:
        """Only the multi-word segments of :meth:`segment` (same greedy segmentation), in order."""
        return [(s, e) for s, e in self.segment(words) if e - s > 1]

    def _keys(self, words: Sequence[str]) -> Sequence[str]:
        if self.lowercase:
            words = [w.lower() for w in words]
        if self.normalize_markers:
            get = MARKER_NORMALISATION.get
            words = [get(w, w) for w in words]
        return words
