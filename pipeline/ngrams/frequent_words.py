"""Count the words: path_to_line -> frequent_tables of length 1 (``FrequentWords``)."""

from __future__ import annotations

import collections

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.ngrams.codes import Progress, sharded_word_counts
from pipeline.ngrams.frequent_tables import MergePartialCounts
from pipeline.ngrams.rules import NgramRules, raw_line_runs


class _CountWordsPerBundle(beam.DoFn):
    """(path, raw line) -> sharded partial counts of the words, flushed at ``max_keys`` distinct words."""

    def __init__(self, *, rules: NgramRules, max_keys: int):
        self._rules = rules
        self._max_keys = max_keys
        self._progress = Progress("counting words")

    def start_bundle(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()
        self._progress.start()

    def process(self, path_and_line: tuple[str, bytes]):
        for run in raw_line_runs(path_and_line[1], self._rules, self._progress):
            self._counts.update(run)
        if len(self._counts) >= self._max_keys:
            yield from sharded_word_counts(self._counts)
            self._counts.clear()

    def finish_bundle(self):
        for shard_partial in sharded_word_counts(self._counts):
            yield GlobalWindows.windowed_value(shard_partial)
        self._counts = collections.Counter()
        self._progress.done()


class FrequentWords(beam.PTransform):
    """path_to_line -> frequent_tables of the words (n = 1) with count >= min_count."""

    def __init__(self, *, rules: NgramRules, max_keys_per_bundle: int):
        super().__init__()
        self._count = _CountWordsPerBundle(rules=rules, max_keys=max_keys_per_bundle)
        self._min_count = rules.min_count

    def expand(self, path_to_line):
        shard_to_partial_counts = path_to_line | "CountPerBundle" >> beam.ParDo(self._count)
        return shard_to_partial_counts | "Merge" >> MergePartialCounts(n=1, min_count=self._min_count)
