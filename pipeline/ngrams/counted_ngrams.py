"""Count every n-gram as a string in one pass (``pruning="none"``): path_to_line -> ngram_to_count
(``CountNgrams``), then keep the frequent ones (``KeepFrequent``)."""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.ngrams.codes import Progress
from pipeline.ngrams.rules import NgramRules, raw_line_runs


class _CountAllPerBundle(beam.DoFn):
    """(path, raw line) -> (ngram string, partial count) for every n-gram of the given lengths, in a Counter
    flushed at ``max_keys`` keys (``pruning="none"``)."""

    def __init__(self, *, rules: NgramRules, lengths: Sequence[int], max_keys: int):
        self._rules = rules
        self._lengths = tuple(lengths)
        self._max_keys = max_keys
        self._progress = Progress("counting all n-grams")

    def start_bundle(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()
        self._progress.start()

    def process(self, path_and_line: tuple[str, bytes]) -> Iterator[tuple[str, int]]:
        counts = self._counts
        for run in raw_line_runs(path_and_line[1], self._rules, self._progress):
            for n in self._lengths:
                if len(run) >= n:
                    counts.update([" ".join(run[i : i + n]) for i in range(len(run) - n + 1)])
        if len(counts) >= self._max_keys:
            yield from counts.items()
            counts.clear()

    def finish_bundle(self):
        for key_value in self._counts.items():
            yield GlobalWindows.windowed_value(key_value)
        self._counts = collections.Counter()
        self._progress.done()


class CountNgrams(beam.PTransform):
    """path_to_line -> ngram_to_count: exact counts of every n-gram of the given lengths, as strings."""

    def __init__(self, *, rules: NgramRules, lengths: Sequence[int], max_keys_per_bundle: int):
        super().__init__()
        self._count = _CountAllPerBundle(rules=rules, lengths=lengths, max_keys=max_keys_per_bundle)

    def expand(self, path_to_line):
        ngram_to_partial_count = path_to_line | "CountPerBundle" >> beam.ParDo(self._count)
        return ngram_to_partial_count | "SumCounts" >> beam.CombinePerKey(sum)


class KeepFrequent(beam.PTransform):
    """ngram_to_count -> ngram_to_count with count >= min_count (inclusive threshold)."""

    def __init__(self, min_count: int):
        super().__init__()
        self._min_count = min_count

    def expand(self, ngram_to_count):
        min_count = self._min_count
        return ngram_to_count | "CountAtLeastMin" >> beam.Filter(lambda kv: kv[1] >= min_count)
