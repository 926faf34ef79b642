"""Turn the frequent tables back into strings: frequent_tables -> ngram_to_count (``DecodeNgrams``)."""

from __future__ import annotations

import apache_beam as beam

from pipeline.ngrams.codes import decode_tables


class DecodeNgrams(beam.PTransform):
    """frequent_tables of lengths 1..max_n -> ngram_to_count for the lengths >= min_n."""

    def __init__(self, min_n: int):
        super().__init__()
        self._min_n = min_n

    def expand(self, frequent_tables):
        min_n = self._min_n
        all_tables = frequent_tables | "CollectTables" >> beam.combiners.ToList()
        return all_tables | "ToStrings" >> beam.FlatMap(lambda tables: decode_tables(tables, min_n=min_n))
