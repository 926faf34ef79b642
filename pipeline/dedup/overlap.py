"""Evaluation-set overlap: the n-grams of evaluation examples, held in memory, matched against corpus documents
streamed one at a time (``pipeline.contamination``; docs/DEDUP.md, "Contamination").

An n-gram is n consecutive normalised words (``pipeline.dedup.text``: NFKD, accents removed, casefolded, runs of
``\\w`` and marks, each Han or kana character a word; so punctuation is dropped and case ignored), taken inside one text of an example (a SQuAD context, question
or answer; a GLUE sentence), never across two. n = 13 by default, as GPT-3's and dolma's decontamination. An example
all of whose texts are shorter than n words has no n-gram and is counted as too short, never as contaminated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.dedup import text
from pipeline.dedup.eval_sets import Example

DEFAULT_N = 13
_FILTER_BITS = 23  # a bool per value of an n-gram hash's top 23 bits (8 MiB): few corpus n-grams pass to the search


def text_ngrams(body: str, n: int, erase: bool = True) -> np.ndarray:
    """Sorted distinct n-gram hashes of one text (the reference rule: words as strings, then their hashes)."""
    return np.unique(text.ngram_hashes(text.word_hashes(text.words(body, erase)), n))


@dataclass
class EvalSet:
    """One evaluation file: which example holds which n-gram, as two aligned arrays sorted by hash (a few large
    arrays: cheap to pickle into a Beam step, vectorised to look up), and what a scan found."""

    name: str
    example_ids: list[str]
    pair_hashes: np.ndarray  # uint64, sorted; with pair_examples: the distinct (n-gram, example) pairs
    pair_examples: np.ndarray  # int32, the example index of each pair
    documents: list[str] = field(default_factory=list)  # a doc id per corpus document holding one (standalone check)

    @classmethod
    def build(cls, name: str, examples: list[Example], n: int, erase: bool = True) -> EvalSet:
        """The distinct (n-gram, example) pairs of ``examples``: each distinct text (a SQuAD context is shared by its
        questions) analysed once, all texts in one batch (:func:`text.analyse_texts`), each n-gram given to every
        example holding its text; the same pairs as :func:`text_ngrams` of each text gives (``erase``: the rule's,
        :func:`text.normalise`)."""
        index: dict[str, int] = {}
        text_of: list[int] = []  # with owners_of: the (text, example) pairs, example by example
        owners_of: list[int] = []
        for i, ex in enumerate(examples):
            for t in ex.texts:
                text_of.append(index.setdefault(t, len(index)))
                owners_of.append(i)
        hashes, word_text = text.analyse_texts(list(index), erase)
        grams, gram_text = text.ngrams_within(hashes, word_text, n)
        by_text = np.argsort(np.asarray(text_of, dtype=np.int64), kind="stable")
        pair_text = np.asarray(text_of, dtype=np.int64)[by_text]
        pair_example = np.asarray(owners_of, dtype=np.int32)[by_text]
        first = np.searchsorted(pair_text, np.arange(len(index)))  # each text's first (text, example) pair
        count = np.bincount(pair_text, minlength=len(index))[gram_text]
        gram = np.repeat(np.arange(len(grams)), count)
        within = np.arange(len(gram)) - np.repeat(np.cumsum(count) - count, count)
        pair_hashes, pair_examples = grams[gram], pair_example[first[gram_text[gram]] + within]
        order = np.lexsort((pair_examples, pair_hashes))
        pair_hashes, pair_examples = pair_hashes[order], pair_examples[order]
        distinct = np.ones(len(order), dtype=bool)
        distinct[1:] = (pair_hashes[1:] != pair_hashes[:-1]) | (pair_examples[1:] != pair_examples[:-1])
        return cls(name, [ex.id for ex in examples], pair_hashes[distinct], pair_examples[distinct])

    @property
    def hashes(self) -> np.ndarray:
        """Every n-gram of the file, sorted distinct."""
        return np.unique(self.pair_hashes)

    def sizes(self) -> np.ndarray:
        """How many distinct n-grams each example has."""
        return np.bincount(self.pair_examples, minlength=len(self.example_ids))

    def examples_holding(self, grams: np.ndarray) -> np.ndarray:
        """Sorted indices of the examples with one of ``grams`` (sorted distinct)."""
        return np.unique(self.pair_examples[np.isin(self.pair_hashes, grams)])


def members(sorted_hashes: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """The ``candidates`` that occur in ``sorted_hashes`` (by binary search: no copy of either)."""
    if not len(sorted_hashes) or not len(candidates):
        return candidates[:0]
    at = np.searchsorted(sorted_hashes, candidates)
    at[at == len(sorted_hashes)] = 0
    return candidates[sorted_hashes[at] == candidates]


class OverlapIndex:
    """The n-grams of every evaluation file; ``scan`` a corpus document at a time; ``report`` at the end."""

    def __init__(self, sets: list[EvalSet], n: int, erase: bool = True):
        self.sets = sets
        self.n = n
        self.erase = erase  # the rule the sets were built by (text.normalise): the documents are read by it too
        self.hashes = np.unique(np.concatenate([s.pair_hashes for s in sets])) if sets else np.zeros(0, np.uint64)
        self._filter = np.zeros(1 << _FILTER_BITS, dtype=bool)  # by the top bits: most corpus n-grams stop here
        self._filter[self.hashes >> np.uint64(64 - _FILTER_BITS)] = True
        self.found: set[int] = set()  # evaluation n-grams seen in the corpus (a subset of theirs: small)
        self.documents_scanned = 0

    def scan(self, doc_id: str, body: str | list[str], record: bool = True) -> np.ndarray:
        """The evaluation n-grams one corpus document holds (sorted, distinct); ``body``: its text, or its texts
        when no n-gram may span from one to the next (a decoded document cut at its unknown words); ``record``: also
        count them and the document for :meth:`report` (a Beam worker does not: it sends them on instead)."""
        self.documents_scanned += 1
        parts = [
            text.ngram_hashes(text.analyse(t, self.erase)[0], self.n)
            for t in ([body] if isinstance(body, str) else body)
        ]
        own = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        own = np.unique(own[self._filter[own >> np.uint64(64 - _FILTER_BITS)]])
        grams = members(self.hashes, own)
        if len(grams) and record:
            self.found.update(int(h) for h in grams)
            for s in self.sets:
                if len(members(s.pair_hashes, grams)):
                    s.documents.append(doc_id)
        return grams

    def report(self) -> dict[str, dict]:
        """Per evaluation file: examples, examples_contaminated (sharing at least one n-gram with the corpus),
        examples_too_short, ngrams / ngrams_found (distinct, whole file), ngram_fraction_found (the mean, over the
        contaminated examples, of the fraction of their n-grams found), documents (sorted corpus doc ids, one per
        document: an id two documents share is there twice when both hold one) and
        contaminated_examples ({id, fraction})."""
        found = np.array(sorted(self.found), dtype=np.uint64)
        out = {}
        for s in self.sets:
            sizes = s.sizes()
            hit = np.bincount(s.pair_examples[np.isin(s.pair_hashes, found)], minlength=len(s.example_ids))
            fractions = hit / np.maximum(sizes, 1)
            contaminated = np.nonzero(hit)[0]
            hits: list[dict[str, Any]] = [
                {"id": s.example_ids[i], "fraction": round(float(fractions[i]), 6)} for i in contaminated
            ]
            out[s.name] = {
                "examples": len(s.example_ids),
                "examples_contaminated": len(hits),
                "examples_too_short": int((sizes == 0).sum()),
                "ngram_size": self.n,
                "ngrams": int(len(s.hashes)),
                "ngrams_found": int(len(members(found, s.hashes))),
                "ngram_fraction_found": round(sum(h["fraction"] for h in hits) / len(hits), 6) if hits else 0.0,
                "documents": sorted(s.documents),
                "contaminated_examples": hits,
            }
        return out
