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

import json
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from pipeline import faults
from pipeline.dedup import buckets, minhash, text
from pipeline.elements import DUPLICATE, Document, RemovedDocument, preview

DocKey = tuple[str, int, int, str]  # source path, byte offset, line, doc_id: the order "smallest" means
MODES = ("off", "exact", "near")
ROUNDS = 6  # label propagation rounds: clusters up to this many confirmed pairs across are exact
DEFER = "d"  # the confirmation pass sets the document's shingles aside
DROP = ""  # left out and recorded elsewhere (contaminated)
STATS = ("candidate_pairs", "confirmed_pairs", "unconverged", "buckets_capped")  # near's counts in the manifest


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


def _route_copies(kept_groups):
    """(kept key, {copies, pairs}) -> a final exact mark per copy, or, when the kept document is in a candidate pair
    (its cluster may have a smaller document), what the confirmation pass sets aside (tag ``deferred``, the multimap
    its documents look up): each of the document's pairs, once however many bands it shares, and each copy."""
    faults.reached("copies")
    kept, groups = kept_groups
    copies = sorted(groups["copies"])
    pairs = sorted(set(groups["pairs"]))
    if not pairs:
        for copy in copies:
            yield side_key(copy), json.dumps(_mark("exact", kept, 1.0), sort_keys=True, ensure_ascii=False)
        return
    for pair in pairs:
        yield TaggedOutput("deferred", (side_key(kept), json.dumps(pair, ensure_ascii=False)))
    for copy in copies:
        yield TaggedOutput("deferred", (side_key(copy), DEFER))
        yield TaggedOutput("edges", (copy, (kept, 1.0)))


class _SplitFn(beam.DoFn):
    """The main pass: each document as it is read -> kept, removed (its record), or left out silently."""

    def process(self, doc: Document, routes):
        faults.reached("split")
        # At most a route and DROP per document: contaminated wins (its record is written by DropContaminated).
        found = min(routes[side_key(doc_key(doc))], default=None)
        if found is None:
            yield doc
        elif found != DROP:
            yield TaggedOutput(
                "removed", RemovedDocument(DUPLICATE, doc.doc_id, doc.source, json.loads(found), preview(doc.text))
            )


class _SetAsideFn(beam.DoFn):
    """The confirmation pass: a document set aside -> (pair, (its key, its sorted distinct shingles)) per candidate
    pair it is in, and (tag ``docs``) (its key, its shingles)."""

    def __init__(self, shingle: int):
        self._shingle = shingle

    def process(self, doc: Document, deferred):
        faults.reached("set-aside")
        key = doc_key(doc)
        found = list(deferred[side_key(key)])
        if not found:
            return
        shingles = text.shingles_of(text.analyse(doc.text)[0], self._shingle)
        for value in found:
            if value != DEFER:
                a, b = json.loads(value)
                yield (tuple(a), tuple(b)), (key, shingles)
        yield TaggedOutput("docs", (key, shingles))


class _ConfirmFn(beam.DoFn):
    """(pair, the two (key, shingles)) -> (b, (a, similarity)) when the exact Jaccard reaches the threshold; each
    pair compared (once: each end sends a pair once, however many bands it shares) -> tag ``compared``."""

    def __init__(self, threshold: float):
        self._threshold = threshold

    def process(self, pair_shingles):
        faults.reached("confirm")
        _, ends = pair_shingles
        (a, shingles_a), (b, shingles_b) = sorted(ends, key=lambda end: end[0])
        similarity = text.jaccard(shingles_a, shingles_b)
        yield TaggedOutput("compared", None)
        if similarity >= self._threshold:
            yield b, (a, round(similarity, 6))


def _both_ways(edge):
    """(b, (a, similarity, exact)) -> the edge from each end."""
    b, (a, similarity, exact) = edge
    yield a, (b, similarity, exact)
    yield b, (a, similarity, exact)


Neighbour = tuple[DocKey, float, bool]  # another document, their similarity, whether they are exact copies


def _send(key: DocKey, label: DocKey, neighbours: tuple[Neighbour, ...], shingles=None):
    """One round's messages from a document: its own state, and its label to each neighbour; after the last round
    (``shingles`` given) also a member's message to its label's document: the key, its shingles, and its edge to
    that document when it has one (``_check``)."""
    yield key, ("state", (label, neighbours))
    for other, _, _ in neighbours:
        yield other, ("label", label)
    if shingles is not None:
        edge = next((n for n in neighbours if n[0] == label), None)
        yield label, ("member", (key, shingles, edge))


def _start(key_neighbours):
    """(key, its edges) -> round 1's messages: the label is the smallest of the key and its neighbours."""
    key, neighbours = key_neighbours
    neighbours = tuple(sorted(set(neighbours)))
    yield from _send(key, min(key, neighbours[0][0]), neighbours)


def _labelled(messages) -> tuple[tuple | None, DocKey | None, list, list]:
    """A round's messages to a document -> (its state or None, the smallest label arriving, its members, its
    shingles)."""
    own = None
    arriving, members, shingles = [], [], []
    for kind, value in messages:
        if kind == "state":
            own = value
        elif kind == "label":
            arriving.append(value)
        elif kind == "member":
            members.append(value)
        else:
            shingles.append(value)
    return own, min(arriving, default=None), members, shingles


def _round(key_messages, last: bool):
    """One round of smallest-label propagation: the smallest of a document's label and its neighbours' labels. The
    last round also gets the shingles of every document set aside (those in no edge have no state: nothing)."""
    faults.reached("labels")
    key, messages = key_messages
    own, arriving, _, shingles = _labelled(messages)
    if own is None:
        return
    label, neighbours = own
    label = label if arriving is None else min(label, arriving)
    if last:
        (one,) = shingles
        yield from _send(key, label, neighbours, one)
    else:
        yield from _send(key, label, neighbours)


def _check(key_messages):
    """After the last round, at each document: whether its label would still change (tag ``unconverged``), and, when
    it is its own label (it stays: its cluster's smallest), the route of every other member of its label: named
    with their edge's similarity (``exact`` when they are exact copies), or for a member further away with the
    exact Jaccard of their shingles. The members of a label that is not its own label (a cluster wider than ROUNDS,
    whose far documents' label is removed in turn) stay rather than name a removed document."""
    faults.reached("decide")
    key, messages = key_messages
    own, arriving, members, _ = _labelled(messages)
    if own is None:  # every message comes from a document in an edge, to one in an edge
        raise RuntimeError(f"dedup: {key} got messages but has no state")
    label, _ = own
    if arriving is not None and arriving < label:
        yield TaggedOutput("unconverged", key)
    if label != key:
        return
    (root_shingles,) = [shingles for member, shingles, _ in members if member == key]
    for member, shingles, edge in sorted(members, key=lambda m: m[0]):
        if member == key:
            continue
        if edge is not None:
            yield _route(member, "exact" if edge[2] else "near", key, edge[1])
        else:
            yield _route(member, "near", key, round(text.jaccard(root_shingles, shingles), 6))


def clusters(both, shingles, name: str):
    """Edges both ways, (a, (b, similarity, exact)), and (key, shingles) of the documents set aside -> the route of
    each document that is not its cluster's smallest (within ROUNDS edges) and whose cluster's smallest is its own
    label, and (tag ``unconverged``) each key whose label would still change (none when every cluster is within
    ROUNDS). Each round is one shuffle of the documents' states (label and edges) and the labels they send, as a
    CoGroupByKey of labels and edges and a minimum per key were two; the last also takes the shingles, and the check
    after it settles each label and names the kept document (a shuffle of the labels' members, of the documents'
    clusters and of the far members' roots before)."""
    state = both | f"{name}Group0" >> beam.GroupByKey() | f"{name}Start" >> beam.FlatMap(_start)
    tagged = shingles | f"{name}Shingles" >> beam.Map(lambda kv: (kv[0], ("shingles", kv[1])))
    for i in range(1, ROUNDS + 1):
        if i == ROUNDS:
            state = (state, tagged) | f"{name}WithShingles" >> beam.Flatten()
        state = state | f"{name}Group{i}" >> beam.GroupByKey() | f"{name}Round{i}" >> beam.FlatMap(_round, i == ROUNDS)
    return (
        state
        | f"{name}GroupCheck" >> beam.GroupByKey()
        | f"{name}Check"
        >> beam.FlatMap(_check).with_output_types(typing.Any).with_outputs("unconverged", main="routes")
    )


def _route(key: DocKey, method: str, kept: DocKey, similarity: float) -> tuple[str, str]:
    return side_key(key), json.dumps(_mark(method, kept, similarity), sort_keys=True, ensure_ascii=False)


class DropDuplicates(beam.PTransform):
    """``{"documents": the main pass, "prepass": the same documents read again, "confirm": read once more (near
    only), "dropped": keys to leave out silently (optional)}`` -> ``{"documents": kept, "removed": RemovedDocument,
    "stats": (name, count)}``."""

    def __init__(self, mode: str, params: minhash.NearParams | None = None, input_bytes: int | None = None):
        super().__init__()
        if mode not in ("exact", "near"):
            raise ValueError(f"DropDuplicates: mode must be exact or near, got {mode!r}")
        self._params = (params or minhash.NearParams()) if mode == "near" else None
        self._shards = buckets.shard_count(input_bytes)  # of the band keys (near): see pipeline/dedup/buckets.py

    def expand(self, inputs):
        documents, prepass = inputs["documents"], inputs["prepass"]
        pipeline = documents.pipeline
        exact = (
            prepass
            | "Sign" >> beam.ParDo(_SignFn(self._params))
            | "GroupByDigest" >> beam.GroupByKey()
            | "ExactCopies"
            >> beam.ParDo(buckets.ExactCopiesFn(self._shards))
            .with_output_types(typing.Any)
            .with_outputs("bands", main="copies")
        )
        dropped = inputs.get("dropped")
        routes = [] if dropped is None else [dropped | "DropRoutes" >> beam.Map(lambda k: (side_key(k), DROP))]
        stats: list = []
        params = self._params
        if params is None:
            routes.append(exact["copies"] | "ExactMarks" >> beam.Map(lambda c: _route(c[0], "exact", c[1], 1.0)))
        else:
            star = (
                exact["bands"]
                | "GroupByBand" >> beam.GroupByKey()
                | "StarPairs"
                >> beam.FlatMap(buckets.star_pairs, params.max_bucket)
                .with_output_types(typing.Any)
                .with_outputs("capped", main="pairs")
            )
            # A pair sharing several bands comes once per band: _route_copies takes each once.
            ends = star["pairs"] | "PairEnds" >> beam.FlatMap(lambda p: [(p[0], p), (p[1], p)])
            copies = (
                {"copies": exact["copies"] | "ByKept" >> beam.Map(lambda c: (c[1], c[0])), "pairs": ends}
                | "CopiesAndPairs" >> beam.CoGroupByKey()
                | "RouteCopies"
                >> beam.FlatMap(_route_copies)
                .with_output_types(typing.Any)
                .with_outputs("deferred", "edges", main="routes")
            )
            routes.append(copies["routes"])
            deferred = copies["deferred"] | "DeferKeys" >> beam.Map(lambda kv: kv).with_output_types(tuple[str, str])
            set_aside = inputs["confirm"] | "SetAside" >> beam.ParDo(
                _SetAsideFn(params.shingle), beam.pvalue.AsMultiMap(deferred)
            ).with_output_types(typing.Any).with_outputs("docs", main="pairs")
            confirmed = (
                set_aside["pairs"]
                | "GroupByPair" >> beam.GroupByKey()
                | "Confirm"
                >> beam.ParDo(_ConfirmFn(params.threshold))
                .with_output_types(typing.Any)
                .with_outputs("compared", main="confirmed")
            )
            edges = (
                confirmed["confirmed"] | "NearEdges" >> beam.Map(lambda e: (e[0], (*e[1], False))),
                copies["edges"] | "ExactEdges" >> beam.Map(lambda e: (e[0], (*e[1], True))),
            ) | "AllEdges" >> beam.Flatten()
            both = edges | "EdgesBothWays" >> beam.FlatMap(_both_ways)
            clustered = clusters(both, set_aside["docs"], "Cluster")
            routes.append(clustered["routes"])
            counted = [
                pipeline | "NoneCounted" >> beam.Create([(name, 0) for name in STATS], reshuffle=False),
                confirmed["compared"] | "CountCandidates" >> beam.Map(lambda _: ("candidate_pairs", 1)),
                confirmed["confirmed"] | "CountConfirmed" >> beam.Map(lambda _: ("confirmed_pairs", 1)),
                clustered["unconverged"] | "CountUnconverged" >> beam.Map(lambda _: ("unconverged", 1)),
                star["capped"] | "CountCapped" >> beam.Map(lambda _: ("buckets_capped", 1)),
            ]
            stats = [counted | "AllCounted" >> beam.Flatten() | "Counts" >> beam.CombinePerKey(sum)]
        route_pc = (
            routes
            | "AllRoutes" >> beam.Flatten()
            | "Routes" >> beam.Map(lambda kv: kv).with_output_types(tuple[str, str])
        )
        split = documents | "Split" >> beam.ParDo(_SplitFn(), beam.pvalue.AsMultiMap(route_pc)).with_output_types(
            typing.Any
        ).with_outputs("removed", main="documents")
        stats_pc = (stats or [pipeline | "NoStats" >> beam.Create([])]) | "AllStats" >> beam.Flatten()
        return {"documents": split["documents"], "removed": split["removed"], "stats": stats_pc}
