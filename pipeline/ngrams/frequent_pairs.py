"""Count the pairs and turn the text into word ids: paths -> (frequent_tables of length 2, id_chunks)
(``FrequentPairs``)."""

from __future__ import annotations

import array
import itertools

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.ngrams.codes import I4, NO_ID, SHIFT, CodeCounts, Progress, sorted_words, tables_by_length
from pipeline.ngrams.frequent_tables import MergePartialCounts
from pipeline.ngrams.lines import ReadLines
from pipeline.ngrams.rules import NgramRules, raw_line_runs

CHUNK_TOKENS = 1 << 18  # tokens per chunk of word ids (1 MB of int32)

SECOND_READ = "pairs pass"  # the progress phase of apriori pruning's second read of the input


class _EncodeAndCountPairsPerBundle(beam.DoFn):
    """Raw lines -> sharded partial counts of the candidate pairs (both words frequent), and, tagged
    ``ids``, the lines as chunks of word ids for the longer lengths. Side input: the frequent word tables."""

    IDS = "ids"

    def __init__(self, *, rules: NgramRules, max_keys: int):
        self._rules = rules
        self._max_keys = max_keys
        self._progress = Progress("counting pairs")

    def setup(self) -> None:
        self._word_ids: dict[str, int] | None = None

    def start_bundle(self) -> None:
        self._ids = array.array("i")
        self._pairs = CodeCounts(self._max_keys)
        self._progress.start()

    def process(self, raw: bytes, word_tables):
        if self._word_ids is None:
            # Batch, global window: the side input is the same for every element; rank it once.
            words, _ = sorted_words(tables_by_length(word_tables).get(1, []))
            if len(words) >= 1 << 31:
                raise ValueError("more than 2**31 frequent words")
            self._word_ids = {w: i for i, w in enumerate(words)}
        ids = self._ids
        get = self._word_ids.get
        for run in raw_line_runs(raw, self._rules, self._progress):
            ids.extend(map(get, run, itertools.repeat(NO_ID, len(run))))
            ids.append(NO_ID)  # barrier: no n-gram spans it
        if len(ids) >= CHUNK_TOKENS:
            yield from self._chunk_done(force=False)

    def finish_bundle(self):
        for output in self._chunk_done(force=True):
            if isinstance(output, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
            else:
                yield GlobalWindows.windowed_value(output)
        self._progress.done()

    def _chunk_done(self, *, force: bool):
        import numpy as np

        ids = np.frombuffer(self._ids, dtype=np.int32).astype(np.int64)
        self._ids = array.array("i")
        if len(ids) > 1:
            at = np.flatnonzero((ids[:-1] >= 0) & (ids[1:] >= 0))
            self._pairs.add((ids[at] << SHIFT) | ids[at + 1])
            # Keep what a longer n-gram can use: collapse runs of -1 into one.
            keep = np.ones(len(ids), dtype=bool)
            keep[1:] = (ids[1:] >= 0) | (ids[:-1] >= 0)
            if (ids >= 0).sum() >= 3:
                yield beam.pvalue.TaggedOutput(self.IDS, (ids[keep].astype(I4).tobytes(), b""))
        yield from self._pairs.flush(force=force)


class FrequentPairs(beam.PTransform):
    """file paths -> (frequent_tables of the pairs (n = 2), id_chunks): reads the input a second time, turning
    it into word ids (side input: the frequent word tables) while counting the pairs of frequent words."""

    def __init__(self, *, rules: NgramRules, word_tables, split_bytes: int, max_keys_per_bundle: int):
        super().__init__()
        self._encode = _EncodeAndCountPairsPerBundle(rules=rules, max_keys=max_keys_per_bundle)
        self._word_tables = word_tables
        self._split_bytes = split_bytes
        self._min_count = rules.min_count

    def expand(self, paths):
        lines = paths | "ReadLines" >> ReadLines(split_bytes=self._split_bytes, progress_phase=SECOND_READ)
        outputs = lines | "EncodeAndCountPerBundle" >> beam.ParDo(
            self._encode, word_tables=beam.pvalue.AsList(self._word_tables)
        ).with_outputs(_EncodeAndCountPairsPerBundle.IDS, main="shard_to_partial_counts")
        frequent_tables = outputs.shard_to_partial_counts | "Merge" >> MergePartialCounts(
            n=2, min_count=self._min_count
        )
        return frequent_tables, outputs[_EncodeAndCountPairsPerBundle.IDS]
