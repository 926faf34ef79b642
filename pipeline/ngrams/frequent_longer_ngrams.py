"""Count the longer lengths on word ids: id_chunks -> (frequent_tables of length n >= 3, id_chunks for n+1)
(``FrequentLongerNgrams``)."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipeline.ngrams.codes import I4, NO_ID, SHIFT, CodeCounts, Progress, sorted_codes, tables_by_length
from pipeline.ngrams.frequent_tables import MergePartialCounts


class _CountLongerPerBundle(beam.DoFn):
    """Id chunks ``(W, P)`` -> sharded partial counts of the length-n candidates (n >= 3), n-grams whose two
    (n-1)-grams are frequent; and, tagged ``ids`` (when a longer length follows), the chunks for length n+1.

    ``W``: int32 word ids, -1 at barriers; ``P``: int32 id of the frequent (n-2)-gram starting at each position
    or -1 (empty for n = 3: the words themselves). Side input: the frequent tables of length n-1, whose ranks
    give the (n-1)-gram ids ``Q`` passed on as the next length's ``P``. The chunks passed on keep only the
    stretches that can hold a length-(n+1) candidate (three consecutive frequent (n-1)-grams), so they shrink
    from one length to the next.
    """

    IDS = "ids"

    def __init__(self, *, n: int, max_keys: int, pass_on: bool):
        if n < 3:
            raise ValueError("longer n-grams start at n = 3")
        self._n = n
        self._max_keys = max_keys
        self._pass_on = pass_on
        self._progress = Progress(f"counting {n}-grams")

    def setup(self) -> None:
        self._codes: Any = None  # sorted codes of the frequent (n-1)-grams (numpy int64): position = rank = id

    def start_bundle(self) -> None:
        self._counts = CodeCounts(self._max_keys)
        self._progress.start()

    def process(self, chunk: tuple[bytes, bytes], shorter_tables):
        import numpy as np

        table = self._codes
        if table is None:
            table = self._codes = sorted_codes(tables_by_length(shorter_tables).get(self._n - 1, []))[0]
            if len(table) >= 1 << 31:
                raise ValueError("more than 2**31 frequent n-grams of one length")
        n = self._n
        w = np.frombuffer(chunk[0], I4).astype(np.int64)
        p = np.frombuffer(chunk[1], I4).astype(np.int64) if chunk[1] else w
        self._progress.tokens += len(w)
        m = len(w) - n + 2  # positions where an (n-1)-gram fits
        if m < 2 or len(table) == 0:
            return
        # q[i]: id of the frequent (n-1)-gram starting at i (its rank among the frequent (n-1)-grams), or -1
        at = np.flatnonzero((p[:m] >= 0) & (p[1 : m + 1] >= 0))  # both (n-2)-grams frequent
        codes = (p[at] << SHIFT) | w[at + n - 2]
        rank = np.minimum(np.searchsorted(table, codes), len(table) - 1)
        hit = table[rank] == codes
        q = np.full(len(w), NO_ID, dtype=np.int64)
        q[at[hit]] = rank[hit]
        starts = np.flatnonzero((q[: m - 1] >= 0) & (q[1:m] >= 0))  # length-n candidates
        self._counts.add((q[starts] << SHIFT) | w[starts + n - 1])
        if self._pass_on:
            passed = self._next_chunk(w, q)
            if passed is not None:
                yield beam.pvalue.TaggedOutput(self.IDS, passed)
        yield from self._counts.flush(force=False)
        self._progress.maybe_log()

    def _next_chunk(self, w, q):
        """The stretches of (w, q) that can hold a length-(n+1) candidate s: q[s], q[s+1], q[s+2] >= 0 (its
        two n-grams' (n-1)-grams), covering tokens s..s+n; a -1 barrier after each stretch, and q = -1 where
        an (n-1)-gram would run past its stretch's end."""
        import numpy as np

        n, size = self._n, len(w)
        ok = np.flatnonzero((q[:-2] >= 0) & (q[1:-1] >= 0) & (q[2:] >= 0))
        if not len(ok):
            return None
        cover = np.cumsum(
            np.bincount(ok, minlength=size + 1)[:size]
            - np.bincount(np.minimum(ok + n + 1, size), minlength=size + 1)[:size]
        )
        kept = np.flatnonzero(cover > 0)
        new_run = np.ones(len(kept), dtype=bool)
        new_run[1:] = np.diff(kept) != 1
        run = np.cumsum(new_run) - 1
        last = np.ones(len(kept), dtype=bool)
        last[:-1] = new_run[1:]
        run_end = kept[last][run]
        at = np.arange(len(kept)) + run  # one barrier slot after each earlier stretch
        w2 = np.full(len(kept) + run[-1] + 1, NO_ID, dtype=np.int64)
        q2 = w2.copy()
        w2[at] = w[kept]
        q_kept = q[kept]
        q_kept[kept + n - 2 > run_end] = NO_ID
        q2[at] = q_kept
        return w2.astype(I4).tobytes(), q2.astype(I4).tobytes()

    def finish_bundle(self):
        for output in self._counts.flush(force=True):
            yield GlobalWindows.windowed_value(output)
        self._progress.done()


class FrequentLongerNgrams(beam.PTransform):
    """id_chunks -> (frequent_tables of length n >= 3, id_chunks for length n+1), counting only the candidates
    whose two (n-1)-grams are in ``shorter_tables`` (the frequent tables of length n-1)."""

    def __init__(self, *, n: int, min_count: int, shorter_tables, max_keys_per_bundle: int, pass_on: bool):
        super().__init__()
        self._count = _CountLongerPerBundle(n=n, max_keys=max_keys_per_bundle, pass_on=pass_on)
        self._n = n
        self._min_count = min_count
        self._shorter_tables = shorter_tables

    def expand(self, id_chunks):
        outputs = id_chunks | "CountPerBundle" >> beam.ParDo(
            self._count, shorter_tables=beam.pvalue.AsList(self._shorter_tables)
        ).with_outputs(_CountLongerPerBundle.IDS, main="shard_to_partial_counts")
        frequent_tables = outputs.shard_to_partial_counts | "Merge" >> MergePartialCounts(
            n=self._n, min_count=self._min_count
        )
        return frequent_tables, outputs[_CountLongerPerBundle.IDS]
