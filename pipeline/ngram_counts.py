"""N-gram counts over WikiText files: the counting stages of ``pipeline.build_ngram_dictionary``.

The rules (also stated in ``dictionaries/README.md``):

- A WikiText line is a heading (``heading_level(line) > 0``: ``" = Title = "``, ``" = = Section = = "``, ...),
  blank, or a paragraph. Heading lines and blank lines never count: neither their words nor the ``=`` markup.
  (A ``=`` inside a paragraph line, e.g. ``" C = O "`` or the table leftover ``" = National record "``, is an
  ordinary symbol token.)
- A paragraph's tokens are ``line.split()`` (WikiText separates tokens with single spaces). ``<unk>`` is a
  barrier: n-grams never contain it and never span it. With ``drop_punctuation``, punctuation tokens are
  barriers too, which is exactly "drop every n-gram that contains a punctuation token".
- ``lowercase`` lowercases the tokens before counting (``<unk>`` is recognised before lowercasing).
- Punctuation token (:func:`is_punctuation`): WikiText's ``@-@``, ``@,@``, ``@.@`` markers, or a token all of
  whose characters are in a Unicode punctuation (P*) or symbol (S*) category: ``, . " ( ) ; : ' – — / % $ =
  ... ° £ +`` are punctuation; ``1.5``, ``U.S.``, ``½`` (a number, No) and ``'s`` are not.
- N-grams are the token sequences of length ``min_n..max_n`` inside one barrier-free run of one line, written
  as their tokens joined by a single space. Their count is the number of positions they occur at.

How counting scales (the stages below):

1. Pre-aggregation with bounded memory: every counting DoFn keeps the partial counts of its bundle and flushes
   them whenever they hold ``max_keys_per_bundle`` keys; the partial counts are shuffled in ``SHARDS`` key
   ranges, packed (one element per shard and flush, not one per n-gram), and merged per shard
   (:class:`MergePartialCounts`), which applies the threshold.
2. Apriori pruning (``pruning="apriori"``, the default): an n-gram occurring ``c`` times contains each of its
   two (n-1)-grams at those ``c`` positions, so it can reach ``min_count`` only if both (n-1)-grams did. So the
   words are counted first, then each length n = 2..max_n, only at positions whose two (n-1)-grams are
   frequent. The counts of the n-grams that survive are exact; only hopeless n-grams are never counted. This
   shrinks what is shuffled from every distinct n-gram of the corpus (hundreds of millions on WikiText-103,
   mostly seen once) to the candidates (WikiText-2: 1.09 M distinct 2..5-grams, 0.31 M candidates, 5,077 kept).
3. Numbers, not strings: the frequent words get ids (their rank in sorted order), each frequent k-gram an id
   (the rank of its code), and a (k+1)-gram the exact code ``(id of its first k words) << 32 | (id of its last
   word)``; every worker ranks the same side input, so codes agree across workers. The input is read twice:
   once to count words (:class:`FrequentWords`, sharing its read with the corpus summary), once to turn every
   line into word ids (-1 for infrequent words and between runs) while counting pairs (:class:`FrequentPairs`).
   Longer lengths (:class:`FrequentLongerNgrams`) work on those id chunks with numpy alone: look the k-gram
   codes up in the sorted codes of the frequent k-grams (``searchsorted``) for k = 2..n-1, count the codes of
   the length-n candidates (``numpy.unique``). The frequent n-grams become strings once, at the end
   (:class:`DecodeNgrams`). The id chunks (4 bytes per token) are the only copy of the corpus the job keeps
   between stages.

``pruning="none"`` counts every n-gram as a string in one pass (:class:`CountNgrams`); use it for ``min_count``
1 or 2, where nearly everything is frequent and pruning cannot help.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import itertools
import logging
import time
import unicodedata
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from pipeline.wikitext import UNK, heading_level

_LOG = logging.getLogger("spanprep.ngram_counts")

AT_MARKERS = ("@-@", "@,@", "@.@")
PRUNING_MODES = ("apriori", "none")
PROGRESS_EVERY_SECONDS = 30.0

_ASCII_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def is_punctuation(token: str) -> bool:
    """True for WikiText's ``@-@ @,@ @.@`` and for tokens made only of Unicode punctuation/symbol characters."""
    if token in AT_MARKERS:
        return True
    if not token:
        return False
    for ch in token:
        if ch in _ASCII_WORD_CHARS or unicodedata.category(ch)[0] not in "PS":
            return False
    return True


@dataclasses.dataclass(frozen=True, kw_only=True)
class NgramRules:
    """What counts as an n-gram and which ones the dictionary keeps."""

    min_n: int = 2  # shortest n-gram kept in the dictionary
    max_n: int = 5  # longest n-gram counted (Span Fine-tuning: n <= 5)
    min_count: int = 11  # inclusive: keep count >= min_count; 11 = the paper's "more than ten times"
    lowercase: bool = False  # lowercase tokens before counting
    drop_punctuation: bool = False  # drop n-grams that contain a punctuation token

    def __post_init__(self) -> None:
        for name in ("min_n", "max_n", "min_count"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if self.min_n < 1:
            raise ValueError(f"min_n must be >= 1, got {self.min_n}")
        if self.max_n < self.min_n:
            raise ValueError(f"max_n ({self.max_n}) must be >= min_n ({self.min_n})")
        if self.max_n > 100:
            raise ValueError(f"max_n must be <= 100, got {self.max_n}")
        if self.min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {self.min_count}")


def line_runs(line: str, *, lowercase: bool = False, drop_punctuation: bool = False) -> list[list[str]]:
    """The barrier-free token runs of one WikiText line; ``[]`` for headings and blank lines.

    >>> line_runs(" a b <unk> c , d ", drop_punctuation=True)
    [['a', 'b'], ['c'], ['d']]
    """
    tokens = line.split()
    if not tokens or (tokens[0] == "=" and tokens[-1] == "=" and heading_level(line)):
        return []
    if lowercase:
        lowered = line.lower().split()  # case mappings never create or remove whitespace: same positions
    else:
        lowered = tokens
    if not drop_punctuation and UNK not in tokens:
        return [lowered]
    runs = []
    start = 0
    for i, token in enumerate(tokens):
        if token == UNK or (drop_punctuation and is_punctuation(token)):
            if i > start:
                runs.append(lowered[start:i])
            start = i + 1
    if start < len(tokens):
        runs.append(lowered[start:])
    return runs


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------------------------------
# Reading


class ReadLines(beam.PTransform):
    """file paths -> raw lines (bytes, newline stripped), split into byte ranges so workers share big files.

    Lines are read as bytes and decoded by the consumers, so that a line that is not UTF-8 becomes a
    dead-letter record (see :class:`CorpusSummary`) rather than a crash.
    """

    def __init__(self, *, split_bytes: int, with_filename: bool = False):
        super().__init__()
        self._split_bytes = split_bytes
        self._with_filename = with_filename

    def expand(self, paths):
        return paths | "ReadAllFromText" >> beam.io.ReadAllFromText(
            desired_bundle_size=self._split_bytes,
            coder=beam.coders.BytesCoder(),
            with_filename=self._with_filename,
        )


# --------------------------------------------------------------------------------------------------
# Counting

SHARDS = 64  # partial counts are shuffled and merged in this many key ranges
CHUNK_TOKENS = 1 << 18  # tokens per chunk of word ids (1 MB of int32)
_NO_ID = -1
_SHIFT = 32  # a code is (id of the first n-1 words) << 32 | (id of the last word)
_LOW = (1 << _SHIFT) - 1
_I8 = "<i8"  # counts and codes travel as little-endian int64 bytes
_I4 = "<i4"  # word ids travel as little-endian int32 bytes

# Elements between stages (plain tuples of ints and bytes, which Beam encodes without pickling):
#   partial counts:  (shard, (keys, counts))    keys: words joined by "\n" (UTF-8) for n = 1, else int64 codes
#   frequent table:  (n, shard, keys, counts)   one shard of the frequent n-grams of one length, sorted by key
#   id chunk:        bytes                      int32 word ids, -1 between runs and for infrequent words


def encode_code(prefix_id: int, word_id: int) -> int:
    """The code of an n-gram: the id of its first n-1 words (a word id, or a frequent (n-1)-gram's rank) and
    the id of its last word."""
    return (prefix_id << _SHIFT) | word_id


def _word_blob(words: Sequence[str]) -> bytes:
    return "\n".join(words).encode("utf-8")


def _blob_words(blob: bytes) -> list[str]:
    return blob.decode("utf-8").split("\n") if blob else []


def _word_shard(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % SHARDS  # stable across processes, unlike hash()


def _sharded_word_counts(counts: dict[str, int]) -> Iterator[tuple[int, tuple[bytes, bytes]]]:
    import numpy as np

    by_shard: dict[int, list[tuple[str, int]]] = collections.defaultdict(list)
    for word, count in counts.items():
        by_shard[_word_shard(word)].append((word, count))
    for shard in sorted(by_shard):
        items = by_shard[shard]
        yield shard, (_word_blob([w for w, _ in items]), np.array([c for _, c in items], _I8).tobytes())


def _sharded_code_counts(codes, counts) -> Iterator[tuple[int, tuple[bytes, bytes]]]:
    import numpy as np

    shard_of = codes % SHARDS
    order = np.argsort(shard_of, kind="stable")
    bounds = np.searchsorted(shard_of[order], np.arange(SHARDS + 1))
    for shard in range(SHARDS):
        at = order[bounds[shard] : bounds[shard + 1]]
        if len(at):
            yield shard, (codes[at].astype(_I8).tobytes(), counts[at].astype(_I8).tobytes())


def _sum_code_counts(parts):
    """[(codes, counts)] arrays -> (distinct sorted codes, summed counts)."""
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    codes = np.concatenate([c for c, _ in parts])
    counts = np.concatenate([c for _, c in parts])
    distinct, inverse = np.unique(codes, return_inverse=True)
    sums = np.zeros(len(distinct), dtype=np.int64)
    np.add.at(sums, inverse, counts)
    return distinct, sums


class _CodeCounts:
    """Partial counts of codes within a bundle, merged with numpy, flushed at ``max_keys`` distinct codes."""

    def __init__(self, max_keys: int):
        self._max_keys = max_keys
        self._parts: list = []
        self._size = 0

    def add(self, codes_in_chunk) -> None:
        import numpy as np

        codes, counts = np.unique(codes_in_chunk, return_counts=True)
        if len(codes):
            self._parts.append((codes, counts.astype(np.int64)))
            self._size += len(codes)
        if len(self._parts) > 1 and self._size >= self._max_keys:
            self._parts = [_sum_code_counts(self._parts)]
            self._size = len(self._parts[0][0])

    def flush(self, *, force: bool) -> list[tuple[int, tuple[bytes, bytes]]]:
        if not self._parts or (not force and self._size < self._max_keys):
            return []
        codes, counts = _sum_code_counts(self._parts)
        self._parts, self._size = [], 0
        return list(_sharded_code_counts(codes, counts))


def _frequent_tables(tables: Iterable[tuple[int, int, bytes, bytes]]) -> dict[int, list[tuple[bytes, bytes]]]:
    by_length: dict[int, list[tuple[bytes, bytes]]] = collections.defaultdict(list)
    for n, _shard, keys, counts in tables:
        by_length[n].append((keys, counts))
    return by_length


def _sorted_words(parts: list[tuple[bytes, bytes]]) -> tuple[list[str], Any]:
    import numpy as np

    words = [w for keys, _ in parts for w in _blob_words(keys)]
    counts = np.concatenate([np.frombuffer(c, _I8) for _, c in parts]) if parts else np.empty(0, np.int64)
    order = sorted(range(len(words)), key=words.__getitem__)
    return [words[i] for i in order], counts[order] if len(order) else counts


def _sorted_codes(parts: list[tuple[bytes, bytes]]) -> tuple[Any, Any]:
    import numpy as np

    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    codes = np.concatenate([np.frombuffer(k, _I8) for k, _ in parts])
    counts = np.concatenate([np.frombuffer(c, _I8) for _, c in parts])
    order = np.argsort(codes, kind="stable")
    return codes[order], counts[order]


def decode_tables(tables: Iterable[tuple[int, int, bytes, bytes]], *, min_n: int = 1) -> Iterator[tuple[str, int]]:
    """Frequent tables of lengths 1..max_n -> ``(ngram, count)`` for the lengths >= min_n."""
    by_length = _frequent_tables(tables)
    words, counts = _sorted_words(by_length.get(1, []))
    strings = words
    if min_n <= 1:
        yield from zip(words, counts.tolist())
    for n in range(2, max(by_length, default=1) + 1):
        codes, counts = _sorted_codes(by_length.get(n, []))
        strings = [f"{strings[code >> _SHIFT]} {words[code & _LOW]}" for code in codes.tolist()]
        if n >= min_n:
            yield from zip(strings, counts.tolist())


class _Progress:
    """Log lines for long passes: every PROGRESS_EVERY_SECONDS, and at the end of each bundle."""

    def __init__(self, label: str):
        self._label = label

    def start(self) -> None:
        self.lines = self.tokens = self.bytes = 0
        self._started = self._last = time.monotonic()

    def line(self, raw: bytes) -> None:
        self.lines += 1
        self.bytes += len(raw) + 1
        if self.lines % 1024 == 0:
            self.maybe_log()

    def maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_SECONDS:
            self._last = now
            _LOG.info("%s: %d lines, %d tokens, %.1f MB so far in this worker bundle (%.0f s)",
                      self._label, self.lines, self.tokens, self.bytes / 1e6, now - self._started)

    def done(self) -> None:
        elapsed = time.monotonic() - self._started
        if self.lines:
            _LOG.info("%s: bundle done: %d lines, %d tokens, %.1f MB in %.1f s", self._label, self.lines,
                      self.tokens, self.bytes / 1e6, elapsed)
        elif self.tokens:
            _LOG.info("%s: bundle done: %d word-id positions in %.1f s", self._label, self.tokens, elapsed)


class _CountWordsPerBundle(beam.DoFn):
    """(path, raw line) -> sharded partial counts of the words, flushed at ``max_keys`` distinct words."""

    def __init__(self, *, rules: NgramRules, max_keys: int):
        self._rules = rules
        self._max_keys = max_keys
        self._progress = _Progress("counting words")

    def start_bundle(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()
        self._progress.start()

    def process(self, path_and_line: tuple[str, bytes]):
        raw = path_and_line[1]
        self._progress.line(raw)
        line = _decode(raw)
        if line is None:  # accounted for by CorpusSummary
            return
        rules = self._rules
        for run in line_runs(line, lowercase=rules.lowercase, drop_punctuation=rules.drop_punctuation):
            self._progress.tokens += len(run)
            self._counts.update(run)
        if len(self._counts) >= self._max_keys:
            yield from _sharded_word_counts(self._counts)
            self._counts.clear()

    def finish_bundle(self):
        for shard_partial in _sharded_word_counts(self._counts):
            yield GlobalWindows.windowed_value(shard_partial)
        self._counts = collections.Counter()
        self._progress.done()


class _EncodeAndCountPairsPerBundle(beam.DoFn):
    """Raw lines -> sharded partial counts of the candidate pairs (both words frequent), and, tagged
    ``ids``, the lines as chunks of word ids for the longer lengths. Side input: the frequent word tables."""

    IDS = "ids"

    def __init__(self, *, rules: NgramRules, max_keys: int):
        self._rules = rules
        self._max_keys = max_keys
        self._progress = _Progress("counting pairs")

    def setup(self) -> None:
        self._word_ids: dict[str, int] | None = None

    def start_bundle(self) -> None:
        self._ids = array.array("i")
        self._pairs = _CodeCounts(self._max_keys)
        self._progress.start()

    def process(self, raw: bytes, word_tables):
        if self._word_ids is None:
            # Batch, global window: the side input is the same for every element; rank it once.
            words, _ = _sorted_words(_frequent_tables(word_tables).get(1, []))
            if len(words) >= 1 << 31:
                raise ValueError("more than 2**31 frequent words")
            self._word_ids = {w: i for i, w in enumerate(words)}
        self._progress.line(raw)
        line = _decode(raw)
        if line is None:  # accounted for by CorpusSummary
            return
        rules = self._rules
        ids = self._ids
        get = self._word_ids.get
        for run in line_runs(line, lowercase=rules.lowercase, drop_punctuation=rules.drop_punctuation):
            self._progress.tokens += len(run)
            ids.extend(map(get, run, itertools.repeat(_NO_ID, len(run))))
            ids.append(_NO_ID)  # barrier: no n-gram spans it
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
            self._pairs.add((ids[at] << _SHIFT) | ids[at + 1])
            # Keep what a longer n-gram can use: collapse runs of -1 into one.
            keep = np.ones(len(ids), dtype=bool)
            keep[1:] = (ids[1:] >= 0) | (ids[:-1] >= 0)
            if (ids >= 0).sum() >= 3:
                yield beam.pvalue.TaggedOutput(self.IDS, (ids[keep].astype(_I4).tobytes(), b""))
        yield from self._pairs.flush(force=force)


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
        self._progress = _Progress(f"counting {n}-grams")

    def setup(self) -> None:
        self._codes = None  # sorted codes of the frequent (n-1)-grams: position = rank = id

    def start_bundle(self) -> None:
        self._counts = _CodeCounts(self._max_keys)
        self._progress.start()

    def process(self, chunk: tuple[bytes, bytes], shorter_tables):
        import numpy as np

        if self._codes is None:
            self._codes = _sorted_codes(_frequent_tables(shorter_tables).get(self._n - 1, []))[0]
            if len(self._codes) >= 1 << 31:
                raise ValueError("more than 2**31 frequent n-grams of one length")
        n, table = self._n, self._codes
        w = np.frombuffer(chunk[0], _I4).astype(np.int64)
        p = np.frombuffer(chunk[1], _I4).astype(np.int64) if chunk[1] else w
        self._progress.tokens += len(w)
        m = len(w) - n + 2  # positions where an (n-1)-gram fits
        if m < 2 or len(table) == 0:
            return
        # q[i]: id of the frequent (n-1)-gram starting at i (its rank among the frequent (n-1)-grams), or -1
        at = np.flatnonzero((p[:m] >= 0) & (p[1 : m + 1] >= 0))  # both (n-2)-grams frequent
        codes = (p[at] << _SHIFT) | w[at + n - 2]
        rank = np.minimum(np.searchsorted(table, codes), len(table) - 1)
        hit = table[rank] == codes
        q = np.full(len(w), _NO_ID, dtype=np.int64)
        q[at[hit]] = rank[hit]
        starts = np.flatnonzero((q[: m - 1] >= 0) & (q[1:m] >= 0))  # length-n candidates
        self._counts.add((q[starts] << _SHIFT) | w[starts + n - 1])
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
        cover = np.cumsum(np.bincount(ok, minlength=size + 1)[:size]
                          - np.bincount(np.minimum(ok + n + 1, size), minlength=size + 1)[:size])
        kept = np.flatnonzero(cover > 0)
        new_run = np.ones(len(kept), dtype=bool)
        new_run[1:] = np.diff(kept) != 1
        run = np.cumsum(new_run) - 1
        last = np.ones(len(kept), dtype=bool)
        last[:-1] = new_run[1:]
        run_end = kept[last][run]
        at = np.arange(len(kept)) + run  # one barrier slot after each earlier stretch
        w2 = np.full(len(kept) + run[-1] + 1, _NO_ID, dtype=np.int64)
        q2 = w2.copy()
        w2[at] = w[kept]
        q_kept = q[kept]
        q_kept[kept + n - 2 > run_end] = _NO_ID
        q2[at] = q_kept
        return w2.astype(_I4).tobytes(), q2.astype(_I4).tobytes()

    def finish_bundle(self):
        for output in self._counts.flush(force=True):
            yield GlobalWindows.windowed_value(output)
        self._progress.done()


class _MergeShard(beam.DoFn):
    """(shard, partial counts) -> the shard's frequent table ``(n, shard, keys, counts)``, sorted by key."""

    def __init__(self, *, n: int, min_count: int):
        self._n = n
        self._min_count = min_count

    def process(self, shard_partials):
        import numpy as np

        shard, partials = shard_partials
        if self._n == 1:
            counts: collections.Counter[str] = collections.Counter()
            for keys, part_counts in partials:
                for word, count in zip(_blob_words(keys), np.frombuffer(part_counts, _I8).tolist()):
                    counts[word] += count
            kept = sorted((w, c) for w, c in counts.items() if c >= self._min_count)
            if kept:
                yield 1, shard, _word_blob([w for w, _ in kept]), np.array([c for _, c in kept], _I8).tobytes()
            return
        parts = []
        for keys, part_counts in partials:
            parts.append((np.frombuffer(keys, _I8), np.frombuffer(part_counts, _I8)))
            if len(parts) >= 64:
                parts = [_sum_code_counts(parts)]
        if not parts:
            return
        codes, counts = _sum_code_counts(parts)
        kept = counts >= self._min_count
        if kept.any():
            yield self._n, shard, codes[kept].astype(_I8).tobytes(), counts[kept].astype(_I8).tobytes()


class MergePartialCounts(beam.PTransform):
    """shard_to_partial_counts -> frequent_tables: the counts summed per shard, kept if >= min_count."""

    def __init__(self, *, n: int, min_count: int):
        super().__init__()
        self._merge = _MergeShard(n=n, min_count=min_count)

    def expand(self, shard_to_partial_counts):
        shard_to_partials = shard_to_partial_counts | "GroupByShard" >> beam.GroupByKey()
        return shard_to_partials | "SumAndKeepFrequent" >> beam.ParDo(self._merge)


class FrequentWords(beam.PTransform):
    """path_to_line -> frequent_tables of the words (n = 1) with count >= min_count."""

    def __init__(self, *, rules: NgramRules, max_keys_per_bundle: int):
        super().__init__()
        self._count = _CountWordsPerBundle(rules=rules, max_keys=max_keys_per_bundle)
        self._min_count = rules.min_count

    def expand(self, path_to_line):
        shard_to_partial_counts = path_to_line | "CountPerBundle" >> beam.ParDo(self._count)
        return shard_to_partial_counts | "Merge" >> MergePartialCounts(n=1, min_count=self._min_count)


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
        lines = paths | "ReadLines" >> ReadLines(split_bytes=self._split_bytes)
        outputs = lines | "EncodeAndCountPerBundle" >> beam.ParDo(
            self._encode, word_tables=beam.pvalue.AsList(self._word_tables)
        ).with_outputs(_EncodeAndCountPairsPerBundle.IDS, main="shard_to_partial_counts")
        frequent_tables = outputs.shard_to_partial_counts | "Merge" >> MergePartialCounts(
            n=2, min_count=self._min_count
        )
        return frequent_tables, outputs[_EncodeAndCountPairsPerBundle.IDS]


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


class DecodeNgrams(beam.PTransform):
    """frequent_tables of lengths 1..max_n -> ngram_to_count for the lengths >= min_n."""

    def __init__(self, min_n: int):
        super().__init__()
        self._min_n = min_n

    def expand(self, frequent_tables):
        min_n = self._min_n
        all_tables = frequent_tables | "CollectTables" >> beam.combiners.ToList()
        return all_tables | "ToStrings" >> beam.FlatMap(lambda tables: decode_tables(tables, min_n=min_n))


class _CountAllPerBundle(beam.DoFn):
    """(path, raw line) -> (ngram string, partial count) for every n-gram of the given lengths, in a Counter
    flushed at ``max_keys`` keys (``pruning="none"``)."""

    def __init__(self, *, rules: NgramRules, lengths: Sequence[int], max_keys: int):
        self._rules = rules
        self._lengths = tuple(lengths)
        self._max_keys = max_keys
        self._progress = _Progress("counting all n-grams")

    def start_bundle(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()
        self._progress.start()

    def process(self, path_and_line: tuple[str, bytes]) -> Iterator[tuple[str, int]]:
        raw = path_and_line[1]
        self._progress.line(raw)
        line = _decode(raw)
        if line is None:  # accounted for by CorpusSummary
            return
        rules = self._rules
        counts = self._counts
        for run in line_runs(line, lowercase=rules.lowercase, drop_punctuation=rules.drop_punctuation):
            self._progress.tokens += len(run)
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
                    n=n, min_count=rules.min_count, shorter_tables=tables[-1], max_keys_per_bundle=max_keys,
                    pass_on=n < rules.max_n,
                )
                tables.append(n_tables)
        all_tables = tables | "AllLengths" >> beam.Flatten()
        return all_tables | "DecodeNgrams" >> DecodeNgrams(rules.min_n)


# --------------------------------------------------------------------------------------------------
# Accounting: what the input was made of, and where it came from


CORPUS_FIELDS = (
    "lines",
    "blank_lines",
    "heading_lines",
    "paragraph_lines",
    "undecodable_lines",
    "paragraph_tokens",
    "unk_tokens",
)


class _SummarizeLines(beam.DoFn):
    """(path, raw line) -> one per-bundle dict of line/token counts; undecodable lines to ``dead_letter``."""

    DEAD_LETTER = "dead_letter"

    def start_bundle(self) -> None:
        self._summary = dict.fromkeys(CORPUS_FIELDS, 0)

    def process(self, path_and_line: tuple[str, bytes]):
        path, raw = path_and_line
        summary = self._summary
        summary["lines"] += 1
        line = _decode(raw)
        if line is None:
            summary["undecodable_lines"] += 1
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                reason = f"not UTF-8: {e.reason} at byte {e.start}"
            yield beam.pvalue.TaggedOutput(
                self.DEAD_LETTER,
                {"source": path, "reason": reason, "line": raw.decode("utf-8", "backslashreplace")},
            )
            return
        tokens = line.split()
        if not tokens:
            summary["blank_lines"] += 1
        elif heading_level(line):
            summary["heading_lines"] += 1
        else:
            summary["paragraph_lines"] += 1
            summary["paragraph_tokens"] += len(tokens)
            summary["unk_tokens"] += tokens.count(UNK)

    def finish_bundle(self):
        if self._summary["lines"]:
            yield GlobalWindows.windowed_value(self._summary)


class _SumDicts(beam.CombineFn):
    def create_accumulator(self) -> dict[str, int]:
        return dict.fromkeys(CORPUS_FIELDS, 0)

    def add_input(self, acc: dict[str, int], summary: dict[str, int]) -> dict[str, int]:
        for key in CORPUS_FIELDS:
            acc[key] += summary[key]
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, int]]) -> dict[str, int]:
        total = self.create_accumulator()
        for acc in accs:
            self.add_input(total, acc)
        return total

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return acc


class CorpusSummary(beam.PTransform):
    """path_to_line -> (corpus_summary, dead_letters): line kinds and token counts of the whole input, and one
    dead-letter record (source, reason, line) per line that is not UTF-8 (skipped by the counting passes)."""

    def expand(self, path_to_line):
        summaries = path_to_line | "SummarizeLines" >> beam.ParDo(_SummarizeLines()).with_outputs(
            _SummarizeLines.DEAD_LETTER, main="summaries"
        )
        corpus_summary = summaries.summaries | "SumSummaries" >> beam.CombineGlobally(_SumDicts())
        return corpus_summary, summaries[_SummarizeLines.DEAD_LETTER]


class _HashFile(beam.DoFn):
    CHUNK = 8 << 20

    def process(self, path: str) -> Iterator[dict[str, Any]]:
        import hashlib

        digest = hashlib.sha256()
        size = 0
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            while chunk := f.read(self.CHUNK):
                digest.update(chunk)
                size += len(chunk)
        yield {"path": path, "bytes": size, "sha256": digest.hexdigest()}


class SourceFiles(beam.PTransform):
    """file paths -> source records ``{"path", "bytes", "sha256"}`` of the raw (still compressed) files."""

    def expand(self, paths):
        return paths | "HashFiles" >> beam.ParDo(_HashFile())
