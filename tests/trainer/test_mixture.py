"""A weighted mixture of artifacts (trainer/data/mixture*.py, sources.py): proportions, epochs and passes, the
partition over ranks and workers, exact and elastic resume, resume with other weights, and the refusals.

Real data: WikiText-2 valid and a slice of the Wikipedia sample, built with the same tokenizer (the WikiText-2
artifact's tokenizer.json). Small synthetic artifacts where a test needs many epochs or passes quickly.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from itertools import permutations
from pathlib import Path

import numpy as np
import pytest
import torch
from test_trainer_data import MASK, cfg, synthetic_rows, write_artifact

from tests.support.mixture_data import wikipedia_slice as wikipedia_slice_artifact
from trainer.data import DataConfig, build_mixture_loaders, check_sources, open_artifact, parse_sources
from trainer.data.mixture_order import MixtureOrder, source_seed
from trainer.data.sources import Source
from trainer.masking import MaskingConfig


@pytest.fixture(scope="module")
def wikipedia_slice(tmp_path_factory, wikitext2_artifact) -> Path:
    """The first articles of the Wikipedia sample, tokenized with the WikiText-2 artifact's tokenizer."""
    return wikipedia_slice_artifact(tmp_path_factory.mktemp("wikipedia_slice"), wikitext2_artifact / "tokenizer.json")


@pytest.fixture(scope="module")
def synthetic_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A small source (40 training rows) and a larger one (150), 4-row blocks, one held-out shard each."""
    tmp = tmp_path_factory.mktemp("mixture")
    small = write_artifact(tmp / "small", [synthetic_rows(40, seed=11), synthetic_rows(12, seed=12)])
    large = write_artifact(
        tmp / "large", [synthetic_rows(70, seed=13), synthetic_rows(80, seed=14), synthetic_rows(16, seed=15)]
    )
    return small, large


@pytest.fixture(scope="module")
def synthetic_triple(synthetic_pair, tmp_path_factory) -> dict[str, Path]:
    """Three sources whose names sort in another order than the pair's: wiki (40 rows), books (150), code (60)."""
    small, large = synthetic_pair
    code = write_artifact(
        tmp_path_factory.mktemp("mixture3") / "code", [synthetic_rows(60, seed=21), synthetic_rows(8, seed=22)]
    )
    return {"wiki": small, "books": large, "code": code}


def loaders(sources: list[Source], **kw):
    return build_mixture_loaders(sources, cfg(sources[0].uri, **kw), MASK)


def mixture(small: Path, large: Path, w_small: float | None = 1, w_large: float | None = 3) -> list[Source]:
    return [Source("small", str(small), w_small), Source("large", str(large), w_large)]


def pairs(batch: dict) -> list[tuple[int, int]]:
    return list(zip(batch["source"].tolist(), batch["sample_id"].tolist()))


def take_pairs(loader, n: int) -> list[tuple[int, int]]:
    it = iter(loader)
    return [p for _ in range(n) for p in pairs(next(it))]


def source_stream(ds, k: int, count: int) -> list[int]:
    """The first ``count`` sample ids of source ``k``'s own endless stream: its passes, each its epoch order."""
    st = ds.streams[k]
    out: list[int] = []
    p = 0
    while len(out) < count:
        out += st.global_order(p).tolist()
        p += 1
    assert st.data_cfg.seed == source_seed(ds.data_cfg.seed, ds.names[k])
    return out[:count]


def stream_pairs(ds, n: int) -> list[tuple[int, int]]:
    """(source, sample id) of the mixture's first ``n`` positions, from the order alone (no loader)."""
    src, passes, pos = ds.sources_at(np.arange(n))
    ids = np.empty(n, dtype=np.int64)
    for s, p in set(zip(src.tolist(), passes.tolist())):
        sel = (src == s) & (passes == p)
        ids[sel] = ds.streams[s].order(p).sample_ids(pos[sel])
    return list(zip(src.tolist(), ids.tolist()))


# -- the command line ------------------------------------------------------------------------------
def test_data_specs_parse_and_refuse_clearly():
    assert parse_sources("/data/wiki") is None and parse_sources(["s3://b/wiki"]) is None  # one artifact, as before
    got = parse_sources(["wiki=s3://bucket/wiki-v3:0.7", "books=/data/books:0.3"])
    assert got == [Source("books", "/data/books", 0.3), Source("wiki", "s3://bucket/wiki-v3", 0.7)]  # name order
    assert parse_sources(["b=/y", "a=gs://b/x"]) == [Source("a", "gs://b/x", None), Source("b", "/y", None)]
    for specs, words in [
        (["/a", "/b"], "name every source of a mixture"),
        (["a=/x:1", "/b"], "--data /b: name every source"),
        (["a=/x:1", "a=/y:2"], "a given more than once"),
        (["a=/x:1", "b=/y"], "b has none"),
        (["a=/x:0", "b=/y:1"], "weight must be a number > 0"),
        (["a=:1", "b=/y:1"], "no artifact path"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_sources(specs)


# -- proportions, epochs, passes (real data) -------------------------------------------------------
def test_observed_proportions_are_the_weights_over_20000_samples(wikitext2_artifact, wikipedia_slice):
    sources = [Source("wt2", str(wikitext2_artifact), 0.3), Source("wiki", str(wikipedia_slice), 0.7)]
    loader, ds, _ = loaders(sources, micro_batch_size=50, num_workers=0, eval_shards=1)
    got = take_pairs(loader, 400)
    assert len(got) == 20_000 and ds.names == ["wiki", "wt2"]  # name order
    share = Counter(ds.names[s] for s, _ in got)
    assert abs(share["wt2"] / 20_000 - 0.3) < 0.01 and abs(share["wiki"] / 20_000 - 0.7) < 0.01, share
    # each source's samples are its own stream: passes in a new order each, nothing repeated within a pass
    state = loader.state_dict()["sources"]
    for k, name in enumerate(ds.names):
        ids = [i for s, i in got if s == k]
        n = ds.streams[k].num_samples
        assert ids == source_stream(ds, k, len(ids))
        assert state[name]["samples"] == len(ids) and state[name]["passes"] == len(ids) // n >= 5
        first, second = ids[:n], ids[n : 2 * n]
        assert sorted(first) == sorted(second) == sorted(ds.streams[k].global_order(0).tolist())
        assert first != second  # a new order per pass


def test_natural_sizes_give_every_sample_exactly_once_per_epoch(wikitext2_artifact, wikipedia_slice):
    sources = [Source("wt2", str(wikitext2_artifact)), Source("wiki", str(wikipedia_slice))]
    loader, ds, _ = loaders(sources, micro_batch_size=7, num_workers=2, num_epochs=2)
    sizes = [st.num_samples for st in ds.streams]
    M = sum(sizes)
    assert ds.num_samples == M and ds.order.n == sizes
    expected = stream_pairs(ds, 2 * M)
    for e in range(2):  # the order: every sample of every source exactly once per epoch
        epoch = expected[e * M : (e + 1) * M]
        for k in (0, 1):
            ids = [i for s, i in epoch if s == k]
            assert sorted(ids) == list(range(sizes[k]))  # the training rows are the first shards' rows
            assert ids == ds.streams[k].global_order(e).tolist()  # in the source's order of pass e
    batches = [pairs(b) for b in loader]
    assert len(batches) == 2 * M // 7  # continuous: only the run's last partial step is left
    for b, got in enumerate(batches):  # the loader delivers it: each micro-batch is its 7 positions of the order
        assert sorted(got) == sorted(expected[7 * b : 7 * b + 7]) and got == sorted(got, key=lambda p: p[0])
    assert len(batches) * 7 > M > 0


# -- ranks and workers -----------------------------------------------------------------------------
@pytest.mark.parametrize("world_size,num_workers", [(1, 0), (2, 0), (3, 0), (1, 2), (2, 2), (3, 2)])
def test_accounting_over_ranks_and_workers_adds_up(synthetic_pair, world_size, num_workers):
    """Counts per (source, sample id) of what the ranks' loaders hand out add up exactly to the state's counts."""
    small, large = synthetic_pair
    c = cfg(small, micro_batch_size=4, num_workers=num_workers, worker_chunk_batches=2, num_epochs=3)
    per_rank = []
    for r in range(world_size):
        loader, ds, _ = build_mixture_loaders(mixture(small, large), c, MASK, rank=r, world_size=world_size)
        per_rank.append([pairs(b) for b in loader])
        state = loader.state_dict()
    G = 4 * world_size
    steps = len(per_rank[0])
    assert all(len(p) == steps for p in per_rank) and steps == 3 * ds.num_samples // G
    stream = [p for s in range(steps) for r in range(world_size) for p in per_rank[r][s]]
    # the same global stream whatever the ranks and workers: the one-rank, no-worker stream's positions
    one, _, _ = build_mixture_loaders(mixture(small, large), cfg(small, micro_batch_size=4, num_workers=0), MASK)
    assert stream == take_pairs(one, len(stream) // 4)
    counts = Counter(stream)
    checked = 0
    for k, name in enumerate(ds.names):
        n = ds.streams[k].num_samples
        drawn = state["sources"][name]["samples"]
        assert sum(v for (s, _), v in counts.items() if s == k) == drawn
        passes, extra = divmod(drawn, n)
        per_id = Counter(counts[(k, i)] for i in range(n))
        assert per_id == +Counter({passes + 1: extra, passes: n - extra})
        checked += n
    assert sum(counts.values()) == steps * G == state["total_consumed_samples"] and checked > 0


# -- resume ----------------------------------------------------------------------------------------
def test_mid_epoch_resume_reproduces_the_uninterrupted_stream(synthetic_pair):
    small, large = synthetic_pair
    c = cfg(small, num_workers=2, worker_chunk_batches=3)
    full_loader, _, _ = build_mixture_loaders(mixture(small, large), c, MASK)
    it = iter(full_loader)
    full = [next(it) for _ in range(70)]  # 280 samples: past the first epoch (40 small + 120 large)
    loader, ds, _ = build_mixture_loaders(mixture(small, large), c, MASK)
    it = iter(loader)
    first = [next(it) for _ in range(23)]
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    resumed, _, _ = build_mixture_loaders(mixture(small, large), c, MASK)
    resumed.load_state_dict(state)
    it = iter(resumed)
    rest = [next(it) for _ in range(47)]
    assert len(full) == len(first + rest) == 70
    for a, b in zip(full, first + rest):
        assert a.keys() == b.keys() and "source" in a
        for key in a:
            assert torch.equal(a[key], b[key]), key
    assert resumed.state_dict()["epoch"] >= 1  # crossed an epoch boundary after the resume


def test_two_ranks_resumed_on_one_continue_the_global_stream(synthetic_pair):
    small, large = synthetic_pair
    c2 = cfg(small, micro_batch_size=4)
    states = []
    for r in range(2):
        loader, _, _ = build_mixture_loaders(mixture(small, large), c2, MASK, rank=r, world_size=2)
        it = iter(loader)
        for _ in range(9):
            next(it)
        states.append(loader.state_dict())
    assert states[0] == states[1] and states[0]["consumed_samples"] == 72
    one, _, _ = build_mixture_loaders(mixture(small, large), cfg(small, micro_batch_size=8), MASK)
    one.load_state_dict(states[0])
    after = take_pairs(one, 30)
    ref, _, _ = build_mixture_loaders(mixture(small, large), cfg(small, micro_batch_size=8), MASK)
    everything = take_pairs(ref, 39)
    assert after == everything[72:]  # nothing repeated, nothing skipped


@pytest.mark.parametrize("weights", [(0.2, 0.5, 0.3), (1, 1, 1), None], ids=["weighted", "equal", "natural"])
def test_every_order_of_data_gives_the_same_stream_and_resumes_every_other_exactly(synthetic_triple, weights):
    """Stop after 5 micro-batches in any order of the three --data flags and resume in any order: the delivered
    batches (sample ids, sources, masks) are the uninterrupted run's, nothing repeated or skipped."""
    arts, names = synthetic_triple, list(synthetic_triple)
    c = cfg(arts["wiki"], micro_batch_size=4, num_workers=0)

    def sources(order) -> list[Source]:
        return [Source(n, str(arts[n]), None if weights is None else weights[names.index(n)]) for n in order]

    def take(loader, n: int) -> list[dict]:
        it = iter(loader)
        return [next(it) for _ in range(n)]

    def named(batches: list[dict], ds) -> list[tuple[str, int]]:
        return [(ds.names[s], i) for b in batches for s, i in pairs(b)]

    head_n, rest_n = 5, 60  # 260 samples: past the end of the first epoch (M = 250 at natural sizes)
    ref_loader, ref_ds, _ = build_mixture_loaders(sources(names), c, MASK)
    reference = take(ref_loader, head_n + rest_n)
    checked = 0
    for first in permutations(names):
        loader, ds, _ = build_mixture_loaders(sources(first), c, MASK)
        head = take(loader, head_n)
        assert named(head, ds) == named(reference[:head_n], ref_ds), first  # the same stream from the start
        state = pickle.loads(pickle.dumps(loader.state_dict()))
        for second in permutations(names):
            resumed, ds2, _ = build_mixture_loaders(sources(second), c, MASK)
            resumed.load_state_dict(state)
            assert ds2.weights_changed_on_resume == [], (first, second)  # a plain continuation
            rest = take(resumed, rest_n)
            assert named(head + rest, ds2) == named(reference, ref_ds), (first, second)
            for a, b in zip(reference[head_n:], rest):
                assert all(torch.equal(a[k], b[k]) for k in a), (first, second)  # masks too
            checked += 1
    assert checked == 36
    for k, name in enumerate(ref_ds.names):  # each source's samples are its own stream: none repeated or skipped
        ids = [i for n, i in named(reference, ref_ds) if n == name]
        assert ids and ids == source_stream(ref_ds, k, len(ids))


def test_a_negligible_weight_is_refused_wherever_it_stands(synthetic_triple):
    """A share of half a sample per epoch is refused in every place of --data and of the name order (the rounding of
    the cumulative counts once gave it 0 or 1 sample depending on its neighbours)."""
    arts = synthetic_triple
    for order in permutations(arts):
        sources = [Source(n, str(arts[n]), 0.05 if n == "code" else 0.475) for n in order]
        with pytest.raises(ValueError, match=r"^source\(s\) code get less than one of the 10 samples"):
            build_mixture_loaders(sources, cfg(arts["wiki"], samples_per_epoch=10), MASK)
    for tiny in "abc":  # the tiny source first, middle or last by name
        w = [0.05 if n == tiny else 0.475 for n in "abc"]
        with pytest.raises(ValueError, match=rf"^source\(s\) {tiny} get less than one of the 10 samples"):
            MixtureOrder(["a", "b", "c"], [100] * 3, w, seed=0, samples_per_epoch=10)


def test_the_order_needs_no_more_memory_for_a_1_to_20_million_mixture():
    """The interleaving's memory does not grow with the ratio of the weights (it took 1.0 GB at 1:2e7)."""
    import tracemalloc

    M = 20_000_001
    tracemalloc.start()
    try:
        o = MixtureOrder(["rare", "vast"], [1000, 10**9], [1, 2e7], seed=0, samples_per_epoch=M)
        assert o.n == [1, 20_000_000]
        last = np.arange(M - 3 * o.K, M + 2 * o.K)  # the end of epoch 0 (the rare sample's window) into epoch 1
        src, count = o.locate(last, epoch0=3)
        assert np.array_equal(o.drawn(M, 3), [1, 20_000_000]) and np.array_equal(o.drawn(M + 10, 3)[0:1], [1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MB"
    rare = last[src == 0]
    assert len(rare) == 1 and M - o.K < rare[0] < M and count[src == 0].tolist() == [0]  # once, in its window


def test_a_mixture_checkpoint_resumed_with_one_artifact_says_how_to_resume(synthetic_pair):
    from trainer.config import ConfigError
    from trainer.data import build_train_loader
    from trainer.engine.resume_check import check_data_stream

    small, large = synthetic_pair
    loader, _, _ = build_mixture_loaders(mixture(small, large), cfg(small), MASK)
    take_pairs(loader, 2)
    single, _ = build_train_loader(cfg(small), MASK)
    given = [f"large={large}:3", f"small={small}:1"]
    for options, flags in [
        ({"run": {"data": given}}, f"--data large={large}:3 --data small={small}:1"),  # as the run gave them
        ({}, f"--data large={large}[:WEIGHT] --data small={small}[:WEIGHT]"),  # an older checkpoint: from the state
    ]:
        with pytest.raises(ConfigError) as e:
            check_data_stream({"data_state": loader.state_dict(), "options": options}, single, "run/global_step2")
        assert str(e.value) == (
            "cannot resume run/global_step2 with one --data PATH: it was trained on a mixture of 2 sources (large, "
            f"small); resume it with the same sources, one --data NAME=PATH[:WEIGHT] each: {flags}"
        )


def test_a_version_1_state_resumes_every_source_where_it_stopped(synthetic_pair):
    """A checkpoint of the order that followed --data (version 1): its counts per source are by name, so every
    source continues its own stream, in a new segment, nothing repeated or skipped."""
    small, large = synthetic_pair
    loader, ds, _ = build_mixture_loaders(mixture(small, large), cfg(small), MASK)
    before = take_pairs(loader, 7)
    state = {**loader.state_dict(), "version": 1}
    resumed, ds2, _ = build_mixture_loaders(mixture(small, large), cfg(small), MASK)
    resumed.load_state_dict(state)
    assert "the checkpoint's loader state is version 1" in ds2.weights_changed_on_resume[0]
    assert resumed.state_dict()["segment"]["epoch"] == 1 and resumed.state_dict()["version"] == 2
    after = take_pairs(resumed, 30)
    for k in (0, 1):
        ids = [i for s, i in before + after if s == k]
        assert len(ids) > 7 and ids == source_stream(ds, k, len(ids))


def test_resume_with_other_weights_continues_every_source_where_it_stopped(synthetic_pair):
    small, large = synthetic_pair
    loader, ds, _ = build_mixture_loaders(mixture(small, large, 1, 3), cfg(small), MASK)
    before = take_pairs(loader, 20)
    state = loader.state_dict()
    changed, ds2, _ = build_mixture_loaders(mixture(small, large, 3, 1), cfg(small), MASK)
    changed.load_state_dict(state)
    drawn = {n: state["sources"][n]["samples"] for n in ("small", "large")}
    assert sum(drawn.values()) == 80 and min(drawn.values()) > 0
    assert changed.state_dict()["segment"] == {"epoch": state["epoch"] + 1, "base": drawn}
    assert ds2.names == ["large", "small"]  # name order
    assert f"(large 120 -> {ds2.order.n[0]}, small 40 -> {ds2.order.n[1]})" in ds2.weights_changed_on_resume[0]
    after = take_pairs(changed, 40)
    share = Counter(ds2.names[s] for s, _ in after)
    assert share["small"] > 2 * share["large"]  # the new proportions apply
    for k in (0, 1):
        ids = [i for s, i in before + after if s == k]
        assert ids == source_stream(ds, k, len(ids))  # each source's own stream, nothing repeated or skipped
    # resumed again with the new weights: a plain continuation
    again, _, _ = build_mixture_loaders(mixture(small, large, 3, 1), cfg(small), MASK)
    again.load_state_dict(changed.state_dict())
    ref_state = changed.state_dict()
    assert take_pairs(again, 5) == take_pairs(changed, 5) and again.state_dict()["segment"] == ref_state["segment"]


def test_resume_refuses_another_mixture(synthetic_pair, tmp_path):
    small, large = synthetic_pair
    loader, _, _ = build_mixture_loaders(mixture(small, large), cfg(small), MASK)
    take_pairs(loader, 2)
    state = loader.state_dict()
    other = write_artifact(tmp_path / "other", [synthetic_rows(60, seed=99), synthetic_rows(8, seed=98)])
    cases = [
        (
            [Source("small", str(small), 1), Source("books", str(large), 3)],
            "sources large, small, this run books, small",
        ),
        ([Source("small", str(other), 1), Source("large", str(large), 3)], "small.fingerprint: saved"),
    ]
    for sources, words in cases:
        refused, _, _ = build_mixture_loaders(sources, cfg(small), MASK)
        with pytest.raises(ValueError, match=words):
            refused.load_state_dict(state)
    seeded, _, _ = build_mixture_loaders(mixture(small, large), cfg(small, seed=8), MASK)
    with pytest.raises(ValueError, match="seed: saved 7, now 8"):
        seeded.load_state_dict(state)
    from trainer.data import build_train_loader

    single, _ = build_train_loader(cfg(small), MASK)
    mixed, _, _ = build_mixture_loaders(mixture(small, large), cfg(small), MASK)
    with pytest.raises(ValueError, match="not a mixture's"):
        mixed.load_state_dict(single.state_dict())


# -- sources that cannot be mixed ------------------------------------------------------------------
def _with_manifest(src: Path, dst: Path, **changes) -> Path:
    import shutil

    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    for key, value in changes.items():
        manifest[key] = value(manifest[key]) if callable(value) else value
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_sources_that_cannot_be_mixed_are_one_line_naming_both(synthetic_pair, tmp_path):
    small, large = synthetic_pair
    other_tok = _with_manifest(large, tmp_path / "tok", tokenizer=lambda t: {**t, "sha256": "ab" * 32})
    long_rows = _with_manifest(large, tmp_path / "long", max_row_tokens=1022, max_seq_len=1024)
    with_entities = _with_manifest(large, tmp_path / "ents", candidates={"kinds": ["entities"]})

    def refuse(second: Path, words: str, mask: MaskingConfig = MASK, length_from: str = "--max-seq-len") -> str:
        sources = [Source("small", str(small), 1), Source("big", str(second), 1)]
        arts = [open_artifact(s.uri) for s in sources]
        with pytest.raises(ValueError) as e:
            check_sources(sources, arts, 512, mask, length_from)
        msg = str(e.value)
        assert "\n" not in msg and words in msg, msg
        return msg

    msg = refuse(other_tok, "have different tokenizers")
    assert f"--data big ({other_tok})" in msg and f"--data small ({small})" in msg
    msg = refuse(long_rows, "holds rows of up to 1022 tokens")
    assert f"--data big ({long_rows})" in msg and "sequence length 512 (--max-seq-len)" in msg
    msg = refuse(with_entities, "--scheme entity masks entities candidates", MaskingConfig(scheme="entity"))
    assert f"--data small ({small}) was built without them" in msg and f"unlike --data big ({with_entities})" in msg
    sources = [Source("small", str(small), 1), Source("big", str(large), 1)]
    check_sources(sources, [open_artifact(s.uri) for s in sources], 512, MASK, "--max-seq-len")  # these mix


def test_order_counts_are_exact_and_tiny_weights_are_refused():
    o = MixtureOrder(["a", "b", "c"], [1000, 30000, 5000], [0.5, 0.3, 0.2], seed=1, samples_per_epoch=9000)
    assert o.n == [4500, 2700, 1800] and o.M == 9000
    src, count = o.locate(np.arange(3 * 9000), epoch0=2)
    for x in (0, 1, 4095, 4096, 5000, 9000, 12345, 26999):
        assert np.array_equal(o.drawn(x, 2), np.bincount(src[:x], minlength=3)), x
    for k in range(3):
        assert np.array_equal(np.sort(count[src == k]), np.arange(3 * o.n[k]))  # every draw counted once
    with pytest.raises(ValueError, match="a get less than one of the 10000 samples"):
        MixtureOrder(["a", "b"], [10, 10_000], [1e-9, 1], seed=0)
    with pytest.raises(ValueError, match="weights must be > 0"):
        MixtureOrder(["a", "b"], [10, 10], [1, -1], seed=0)
    assert isinstance(DataConfig(artifact="x", samples_per_epoch=5).samples_per_epoch, int)


def test_every_source_is_checked_against_its_manifest_and_uses_the_shard_cache(synthetic_pair, tmp_path):
    import shutil

    from schemas.format import FormatError

    small, large = synthetic_pair
    bad = tmp_path / "bad"
    shutil.copytree(large, bad)
    shard = bad / json.loads((bad / "manifest.json").read_text())["shards"][1]["path"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1  # same size: only the sha256 can tell
    shard.write_bytes(bytes(data))
    with pytest.raises(
        FormatError, match=r"bad/shards/part-00001-of-00003\.arrow: sha256 .* differs from the manifest"
    ):
        build_mixture_loaders(mixture(small, bad), cfg(small, verify_shards="always"), MASK)
    cache = tmp_path / "cache"
    loader, ds, _ = build_mixture_loaders(mixture(small, large), cfg(small, cache_dir=str(cache), read_ahead=0), MASK)
    take_pairs(loader, 40)  # 160 samples: every training block of both sources
    cached = {p.name for p in (cache / "shards").glob("*.arrow")}
    wanted = {
        f"{s['sha256']}.arrow"
        for art in (small, large)
        for s in json.loads((art / "manifest.json").read_text())["shards"][:-1]  # the training shards
    }
    assert cached == wanted and len(wanted) == 3


def test_two_segments_pairs_and_masks_are_each_sources_own(synthetic_pair):
    """With --segments 2 every row of a mixture batch is exactly what its source's own stream makes of it."""
    small, large = synthetic_pair
    loader, ds, _ = build_mixture_loaders(mixture(small, large), cfg(small, segments=2, num_epochs=1), MASK)
    checked = 0
    for batch in loader:
        assert {"token_type_ids", "next_sentence_label", "source"} <= batch.keys()
        for j, (s, sid) in enumerate(pairs(batch)):
            st = ds.streams[s]
            masked, (_, label) = st.masked_rows(0, np.flatnonzero(st.global_order(0) == sid))
            own = st.masker.collate(masked)
            n = int(batch["attention_mask"][j].sum())
            assert torch.equal(own["input_ids"][0, :n], batch["input_ids"][j, :n])
            assert torch.equal(own["labels"][0, :n], batch["labels"][j, :n])
            assert int(label[0]) == int(batch["next_sentence_label"][j])
            checked += 1
    assert checked == 160  # one epoch: 40 + 120 rows
