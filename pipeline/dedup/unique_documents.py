"""DropDuplicates: documents -> the documents kept, and one ``RemovedDocument`` per copy left out.

``--dedup exact``: documents with the same normalised words (``pipeline.dedup.text``) are copies. ``--dedup near``:
first exact, then MinHash + LSH over word shingles on the documents exact kept; a pair that shares a band is a
*candidate*, and it is *confirmed* only if the exact Jaccard similarity of the two shingle sets reaches the
threshold (so no pair below the threshold is ever removed; LSH only decides which pairs get looked at). A bucket of
m documents gives m - 1 candidates: each member with the bucket's smallest (a star; all pairs grew as m**2 for a
template many pages share).

Which copy stays: the copies form clusters (connected components of exact copies and confirmed pairs); the smallest
``(source path, byte offset, line, doc_id)`` of a cluster stays, every other is removed and its record names the one
that stays, with their similarity (exact Jaccard of their shingle sets: in a chain A ~ B ~ C it may be below the
threshold for A and C). The outcome is a function of the set of documents alone: the same whatever the runner, the
worker count or the order the files are given in.

Three reads of the input, and the documents' text is never held or shuffled: the *pre-pass* reads the input
(decompressing and parsing it again costs less than a runner materialising every document), computes a digest and
band keys per document and groups them (GroupByKey on digest, on band). ``near``'s *confirmation pass* reads it once
more and sets aside the shingles of the documents in a candidate pair (and their exact copies), looked up per
document in a multimap side input: their number grows with the near copies, not with the corpus. Those are shuffled
to be confirmed and clustered: ``ROUNDS`` rounds of smallest-label propagation over the confirmed pairs (a cluster
whose documents are more than ``ROUNDS`` confirmed pairs apart is counted in the manifest's ``dedup.unconverged``
and its far end stays). Each removed document's fate (its record's method, kept document and similarity) then
reaches the *main pass* as a multimap side input looked up per document where it is read, so the main pass reads,
filters and tokenizes in one fused step (a kept document joining the main pass from a shuffle would make a local
runner hold every document in memory before tokenizing).
"""

from __future__ import annotations

import heapq
import json
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from pipeline import faults
from pipeline.dedup import minhash, text
from pipeline.elements import DUPLICATE, Document, RemovedDocument, preview

DocKey = tuple[str, int, int, str]  # source path, byte offset, line, doc_id: the order "smallest" means
MODES = ("off", "exact", "near")
ROUNDS = 6  # label propagation rounds: clusters up to this many confirmed pairs across are exact
DEFER = "d"  # the confirmation pass sets the document's shingles aside
DROP = ""  # left out and recorded elsewhere (contaminated)


def doc_key(d: Document) -> DocKey:
    return (d.source.path, d.source.byte_offset, d.source.line, d.doc_id)


def key_dict(key: DocKey) -> dict:
    return {"doc_id": key[3], "source": {"path": key[0], "byte_offset": key[1], "line": key[2]}}


def side_key(key: DocKey) -> str:
    """A document key as the string key of a multimap side input (looked up per document, never loaded whole)."""
    return json.dumps(list(key), ensure_ascii=False)


def _mark(method: str, kept: DocKey, similarity: float) -> dict:
    return {"method": method, "duplicate_of": key_dict(kept), "similarity": similarity}


class _SignFn(beam.DoFn):
    """document (pre-pass) -> (text digest, (key, band keys)); the band keys only for ``near``."""

    def __init__(self, params: minhash.NearParams | None):
        self._params = params
        self._no_words = Metrics.counter("dedup", "documents_without_words")

    def process(self, doc: Document):
        faults.reached("sign")
        hashes, digest = text.analyse(doc.text)
        if digest is None:
            self._no_words.inc()  # nothing to compare: never a duplicate
            return
        bands: tuple = ()
        if self._params is not None:
            windows = text.shingle_windows(hashes, self._params.shingle)  # a minimum needs no sorting or dedup
            bands = tuple(minhash.band_keys(minhash.signature(windows, self._params.num_perm), self._params))
        yield digest, (doc_key(doc), bands)


def _exact_copies(digest_members):
    """The smallest key of a digest stays (and goes on to the bands); every other -> (its key, the kept key)."""
    _, members = digest_members
    members = sorted(members)
    kept, bands = members[0]
    for band in bands:
        yield TaggedOutput("bands", (band, kept))
    for key, _ in members[1:]:
        yield key, kept


def _star_pairs(band_members, cap: int):
    """Every member of a bucket with the bucket's smallest: m - 1 pairs, not m(m-1)/2; only the ``cap`` smallest
    members, streamed through a heap (the step holds ``cap`` keys, whatever the bucket's size), and a bucket past
    the cap is counted (tag ``capped``). A document is in a bucket once: its band keys differ by band index, and
    only one document per digest signs."""
    faults.reached("bands")
    _, members = band_members
    size = 0

    def counted():
        nonlocal size
        for key in members:
            size += 1
            yield key

    keys = heapq.nsmallest(cap, counted())
    for b in keys[1:]:
        yield keys[0], b
    if size > cap:
        yield TaggedOutput("capped", size)


def _route_copies(kept_groups):
    """(kept key, {copies, pairs}) -> a final exact mark per copy, or the copy and its kept document set aside for
    confirmation when that one is in a candidate pair (its cluster may have a smaller document)."""
    faults.reached("copies")
    kept, groups = kept_groups
    copies = sorted(groups["copies"])
    if next(iter(groups["pairs"]), None) is None:
        for copy in copies:
            yield side_key(copy), json.dumps(_mark("exact", kept, 1.0), sort_keys=True, ensure_ascii=False)
        return
    yield TaggedOutput("deferred", kept)
    for copy in copies:
        yield TaggedOutput("deferred", copy)
        yield TaggedOutput("edges", (copy, (kept, 1.0)))


class _SplitFn(beam.DoFn):
    """The main pass: each document as it is read -> kept, removed (its record), or left out silently."""

    def process(self, doc: Document, routes):
        faults.reached("split")
        found = next(iter(routes[side_key(doc_key(doc))]), None)  # at most one route per document
        if found is None:
            yield doc
        elif found != DROP:
            yield TaggedOutput(
                "removed", RemovedDocument(DUPLICATE, doc.doc_id, doc.source, json.loads(found), preview(doc.text))
            )


class _SetAsideFn(beam.DoFn):
    """The confirmation pass: a document to be confirmed -> (its key, its sorted distinct shingles)."""

    def __init__(self, shingle: int):
        self._shingle = shingle

    def process(self, doc: Document, deferred):
        faults.reached("set-aside")
        key = doc_key(doc)
        if next(iter(deferred[side_key(key)]), None) is not None:
            yield key, text.shingles_of(text.analyse(doc.text)[0], self._shingle)


class _PairShinglesFn(beam.DoFn):
    """(key, {shingles, pairs}) -> (pair, (key, shingles)) per candidate pair, and (key, shingles) for the rest."""

    def process(self, key_groups):
        faults.reached("shingles")
        key, groups = key_groups
        shingles = next(iter(groups["shingles"]))
        for pair in sorted(set(groups["pairs"])):
            yield pair, (key, shingles)
        yield TaggedOutput("docs", (key, shingles))


class _ConfirmFn(beam.DoFn):
    """(pair, the two (key, shingles)) -> (b, (a, similarity)) when the exact Jaccard reaches the threshold."""

    def __init__(self, threshold: float):
        self._threshold = threshold

    def process(self, pair_shingles):
        faults.reached("confirm")
        _, ends = pair_shingles
        (a, shingles_a), (b, shingles_b) = sorted(ends, key=lambda end: end[0])
        similarity = text.jaccard(shingles_a, shingles_b)
        if similarity >= self._threshold:
            yield b, (a, round(similarity, 6))


def _both_ways(edge):
    b, (a, similarity) = edge
    yield a, (b, similarity)
    yield b, (a, similarity)


def _spread(key_groups):
    """One round: a document's label to itself and to each neighbour (the smallest arriving wins)."""
    faults.reached("labels")
    key, groups = key_groups
    label = min(groups["label"])
    yield key, label
    for other, _ in groups["edges"]:
        yield other, label


def clusters(edges, name: str):
    """(b, (a, similarity)) edges -> (key, the smallest key within ROUNDS edges) for every key in an edge, and the
    number of keys whose label would still change (0 when every cluster is within ROUNDS)."""
    both = edges | f"{name}BothWays" >> beam.FlatMap(_both_ways)
    labels = (
        both
        | f"{name}Start" >> beam.Map(lambda kv: (kv[0], min(kv[0], kv[1][0])))
        | f"{name}Min0" >> beam.CombinePerKey(min)
    )
    for i in range(1, ROUNDS + 1):
        labels = (
            {"label": labels, "edges": both}
            | f"{name}Join{i}" >> beam.CoGroupByKey()
            | f"{name}Spread{i}" >> beam.FlatMap(_spread)
            | f"{name}Min{i}" >> beam.CombinePerKey(min)
        )
    again = (
        {"label": labels, "edges": both}
        | f"{name}JoinCheck" >> beam.CoGroupByKey()
        | f"{name}SpreadCheck" >> beam.FlatMap(_spread)
        | f"{name}MinCheck" >> beam.CombinePerKey(min)
    )
    unconverged = (
        {"before": labels, "after": again}
        | f"{name}Compare" >> beam.CoGroupByKey()
        | f"{name}Changed" >> beam.Filter(lambda kv: list(kv[1]["before"]) != list(kv[1]["after"]))
        | f"{name}CountChanged" >> beam.combiners.Count.Globally()
    )
    return labels, unconverged


def _settled(label_groups):
    """(label, {members, own}) -> (member, label) when the label's document is labelled itself (it stays), else
    (member, member): in a cluster wider than ROUNDS a far document's label may be one that is removed in turn;
    that document then stays rather than name a removed one."""
    label, groups = label_groups
    stays = min(groups["own"], default=label) == label
    for member in groups["members"]:
        yield member, label if stays else member


def _route(key: DocKey, method: str, kept: DocKey, similarity: float) -> tuple[str, str]:
    return side_key(key), json.dumps(_mark(method, kept, similarity), sort_keys=True, ensure_ascii=False)


def _decide(key_groups):
    """(key, {shingles, label, edges, exact}) -> nothing (kept: its cluster's smallest), its route (the smallest is a
    neighbour), or (smallest, (key, shingles)) to be compared with the smallest."""
    faults.reached("decide")
    key, groups = key_groups
    (shingles,) = groups["shingles"]
    root = min(groups["label"], default=key)
    if root == key:
        return
    direct = [s for other, s in groups["edges"] if other == root]
    if direct:
        method = "exact" if direct[0] == 1.0 and any(o == root for o, _ in groups["exact"]) else "near"
        yield _route(key, method, root, direct[0])
    else:
        yield TaggedOutput("far", (root, (key, shingles)))


def _far_routes(root_groups):
    root, groups = root_groups
    if next(iter(groups["far"]), None) is None:
        return
    (root_shingles,) = groups["root"]
    for key, shingles in sorted(groups["far"], key=lambda f: f[0]):
        yield _route(key, "near", root, round(text.jaccard(root_shingles, shingles), 6))


class DropDuplicates(beam.PTransform):
    """``{"documents": the main pass, "prepass": the same documents read again, "confirm": read once more (near
    only), "dropped": keys to leave out silently (optional)}`` -> ``{"documents": kept, "removed": RemovedDocument,
    "stats": (name, count)}``."""

    def __init__(self, mode: str, params: minhash.NearParams | None = None):
        super().__init__()
        if mode not in ("exact", "near"):
            raise ValueError(f"DropDuplicates: mode must be exact or near, got {mode!r}")
        self._params = (params or minhash.NearParams()) if mode == "near" else None

    def expand(self, inputs):
        documents, prepass = inputs["documents"], inputs["prepass"]
        pipeline = documents.pipeline
        exact = (
            prepass
            | "Sign" >> beam.ParDo(_SignFn(self._params))
            | "GroupByDigest" >> beam.GroupByKey()
            | "ExactCopies"
            >> beam.FlatMap(_exact_copies).with_output_types(typing.Any).with_outputs("bands", main="copies")
        )
        dropped = inputs.get("dropped") or (pipeline | "NoneDropped" >> beam.Create([]))
        routes = [dropped | "DropRoutes" >> beam.Map(lambda k: (side_key(k), DROP))]
        stats: list = []
        params = self._params
        if params is None:
            routes.append(exact["copies"] | "ExactMarks" >> beam.Map(lambda c: _route(c[0], "exact", c[1], 1.0)))
        else:
            star = (
                exact["bands"]
                | "GroupByBand" >> beam.GroupByKey()
                | "StarPairs"
                >> beam.FlatMap(_star_pairs, params.max_bucket)
                .with_output_types(typing.Any)
                .with_outputs("capped", main="pairs")
            )
            pairs = star["pairs"] | "DistinctPairs" >> beam.Distinct()
            ends = pairs | "PairEnds" >> beam.FlatMap(lambda p: [(p[0], p), (p[1], p)])
            copies = (
                {"copies": exact["copies"] | "ByKept" >> beam.Map(lambda c: (c[1], c[0])), "pairs": ends}
                | "CopiesAndPairs" >> beam.CoGroupByKey()
                | "RouteCopies"
                >> beam.FlatMap(_route_copies)
                .with_output_types(typing.Any)
                .with_outputs("deferred", "edges", main="routes")
            )
            routes.append(copies["routes"])
            deferred = (
                (copies["deferred"], ends | "PairMembers" >> beam.Map(lambda e: e[0]))
                | "AllDeferred" >> beam.Flatten()
                | "DeferKeys" >> beam.Map(lambda k: (side_key(k), DEFER)).with_output_types(tuple[str, str])
                | "OneDefer" >> beam.Distinct()
            )
            set_aside = inputs["confirm"] | "SetAside" >> beam.ParDo(
                _SetAsideFn(params.shingle), beam.pvalue.AsMultiMap(deferred)
            )
            shingled = (
                {"shingles": set_aside, "pairs": ends}
                | "ShinglesAndPairs" >> beam.CoGroupByKey()
                | "PairShingles"
                >> beam.ParDo(_PairShinglesFn()).with_output_types(typing.Any).with_outputs("docs", main="pairs")
            )
            confirmed = (
                shingled["pairs"]
                | "GroupByPair" >> beam.GroupByKey()
                | "Confirm" >> beam.ParDo(_ConfirmFn(params.threshold))
            )
            edges = (confirmed, copies["edges"]) | "AllEdges" >> beam.Flatten()
            labels, unconverged = clusters(edges, "Cluster")
            labels = (
                {"members": labels | "ByLabel" >> beam.Map(lambda kv: (kv[1], kv[0])), "own": labels}
                | "LabelsAndOwn" >> beam.CoGroupByKey()
                | "Settled" >> beam.FlatMap(_settled)
            )
            decided = (
                {
                    "shingles": shingled["docs"],
                    "label": labels,
                    "edges": edges | "EdgesBothWays" >> beam.FlatMap(_both_ways),
                    "exact": copies["edges"],
                }
                | "DocClusters" >> beam.CoGroupByKey()
                | "Decide" >> beam.FlatMap(_decide).with_output_types(typing.Any).with_outputs("far", main="routes")
            )
            far = {"far": decided["far"], "root": shingled["docs"]} | "FarAndRoots" >> beam.CoGroupByKey()
            routes += [decided["routes"], far | "FarRoutes" >> beam.FlatMap(_far_routes)]
            stats = [
                pairs
                | "CountCandidates" >> beam.combiners.Count.Globally()
                | "NameCandidates" >> beam.Map(lambda n: ("candidate_pairs", n)),
                confirmed
                | "CountConfirmed" >> beam.combiners.Count.Globally()
                | "NameConfirmed" >> beam.Map(lambda n: ("confirmed_pairs", n)),
                unconverged | "NameUnconverged" >> beam.Map(lambda n: ("unconverged", n)),
                star["capped"]
                | "CountCapped" >> beam.combiners.Count.Globally()
                | "NameCapped" >> beam.Map(lambda n: ("buckets_capped", n)),
            ]
        route_pc = (
            routes
            | "AllRoutes" >> beam.Flatten()
            | "Routes" >> beam.Map(lambda kv: kv).with_output_types(tuple[str, str])
            | "OneRoute" >> beam.CombinePerKey(min).with_output_types(tuple[str, str])  # contaminated wins: recorded
        )
        split = documents | "Split" >> beam.ParDo(_SplitFn(), beam.pvalue.AsMultiMap(route_pc)).with_output_types(
            typing.Any
        ).with_outputs("removed", main="documents")
        stats_pc = (stats or [pipeline | "NoStats" >> beam.Create([])]) | "AllStats" >> beam.Flatten()
        return {"documents": split["documents"], "removed": split["removed"], "stats": stats_pc}
