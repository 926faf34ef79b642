"""Merge partial counts: shard_to_partial_counts -> frequent_tables (``MergePartialCounts``)."""

from __future__ import annotations

import collections

import apache_beam as beam

from pipeline.ngrams.codes import I8, blob_words, sum_code_counts, word_blob


class _MergeShard(beam.DoFn):
    """(shard, partial counts) -> the shard's frequent table ``(n, shard, keys, counts)``, sorted by key."""

    def __init__(self, *, n: int, min_count: int):
        self._n = n
        self._min_count = min_count

    def process(self, shard_partials):
        import numpy as np

        shard, partials = shard_partials
        if self._n == 1:
            word_counts: collections.Counter[str] = collections.Counter()
            for keys, part_counts in partials:
                for word, count in zip(blob_words(keys), np.frombuffer(part_counts, I8).tolist()):
                    word_counts[word] += count
            frequent = sorted((w, c) for w, c in word_counts.items() if c >= self._min_count)
            if frequent:
                yield 1, shard, word_blob([w for w, _ in frequent]), np.array([c for _, c in frequent], I8).tobytes()
            return
        parts = []
        for keys, part_counts in partials:
            parts.append((np.frombuffer(keys, I8), np.frombuffer(part_counts, I8)))
            if len(parts) >= 64:
                parts = [sum_code_counts(parts)]
        if not parts:
            return
        codes, counts = sum_code_counts(parts)
        kept = counts >= self._min_count
        if kept.any():
            yield self._n, shard, codes[kept].astype(I8).tobytes(), counts[kept].astype(I8).tobytes()


class MergePartialCounts(beam.PTransform):
    """shard_to_partial_counts -> frequent_tables: the counts summed per shard, kept if >= min_count."""

    def __init__(self, *, n: int, min_count: int):
        super().__init__()
        self._merge = _MergeShard(n=n, min_count=min_count)

    def expand(self, shard_to_partial_counts):
        shard_to_partials = shard_to_partial_counts | "GroupByShard" >> beam.GroupByKey()
        return shard_to_partials | "SumAndKeepFrequent" >> beam.ParDo(self._merge)
