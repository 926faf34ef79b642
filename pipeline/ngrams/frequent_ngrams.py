"""All the counting stages together: lines and paths -> ngram_to_count of the frequent n-grams
(``FrequentNgrams``)."""

from __future__ import annotations

import apache_beam as beam

from pipeline.ngrams.counted_ngrams import CountNgrams, KeepFrequent
from pipeline.ngrams.decoded_ngrams import DecodeNgrams
from pipeline.ngrams.frequent_longer_ngrams import FrequentLongerNgrams
from pipeline.ngrams.frequent_pairs import FrequentPairs
from pipeline.ngrams.frequent_words import FrequentWords
from pipeline.ngrams.rules import PRUNING_MODES, NgramRules


class FrequentNgrams(beam.PTransform):
    """``{"lines": path_to_line, "paths": paths}`` -> ngram_to_count: every n-gram of length min_n..max_n with
    count >= min_count. ``lines`` is the first read of the input (shared with the corpus summary); ``paths``
    are read again for the pairs (apriori pruning only)."""

    def __init__(
        self,
        rules: NgramRules,
        *,
        pruning: str = "apriori",
        split_bytes: int = 8 << 20,
        max_keys_per_bundle: int = 1_000_000,
    ):
        super().__init__()
        if pruning not in PRUNING_MODES:
            raise ValueError(f"pruning must be one of {PRUNING_MODES}, got {pruning!r}")
        self._rules = rules
        self._pruning = pruning
        self._split_bytes = split_bytes
        self._max_keys = max_keys_per_bundle

    def expand(self, inputs):
        rules, max_keys = self._rules, self._max_keys
        path_to_line, paths = inputs["lines"], inputs["paths"]
        if self._pruning == "none":
            lengths = range(rules.min_n, rules.max_n + 1)
            ngram_to_count = path_to_line | "CountAll" >> CountNgrams(
                rules=rules, lengths=lengths, max_keys_per_bundle=max_keys
            )
            return ngram_to_count | "KeepFrequent" >> KeepFrequent(rules.min_count)

        tables = [path_to_line | "FrequentWords" >> FrequentWords(rules=rules, max_keys_per_bundle=max_keys)]
        if rules.max_n >= 2:
            pair_tables, id_chunks = paths | "FrequentPairs" >> FrequentPairs(
                rules=rules, word_tables=tables[0], split_bytes=self._split_bytes, max_keys_per_bundle=max_keys
            )
            tables.append(pair_tables)
            for n in range(3, rules.max_n + 1):
                n_tables, id_chunks = id_chunks | f"Frequent{n}grams" >> FrequentLongerNgrams(
                    n=n,
                    min_count=rules.min_count,
                    shorter_tables=tables[-1],
                    max_keys_per_bundle=max_keys,
                    pass_on=n < rules.max_n,
                )
                tables.append(n_tables)
        all_tables = tables | "AllLengths" >> beam.Flatten()
        return all_tables | "DecodeNgrams" >> DecodeNgrams(rules.min_n)
