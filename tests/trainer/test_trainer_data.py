"""The trainer's streaming loader: partition, order, resume, world-size change, errors; real WikiText-2 at the end."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import torch

from schemas import format as fmt
from trainer.data import (
    DataConfig,
    TokenizerMismatchError,
    build_eval_loader,
    build_train_loader,
    check_tokenizer,
    open_artifact,
)
from trainer.masking import IGNORE_INDEX, MaskingConfig, Rows

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
VOCAB = 64


# -- a synthetic artifact, written the way FORMAT.md says -----------------------------------------
def synthetic_rows(
    num_rows: int, seed: int = 0, min_len: int = 6, max_len: int = 30, spans: bool = False
) -> list[dict]:
    """Rows of random content tokens (ids 5..VOCAB-1) with random word starts; optional candidate spans."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(num_rows):
        n = int(rng.integers(min_len, max_len + 1))
        ws = rng.random(n) < 0.7
        ws[0] = True
        row = {
            "input_ids": rng.integers(5, VOCAB, n).tolist(),
            "word_start": ws.tolist(),
            "entity_spans": [],
            "noun_phrase_spans": [],
            "ngram_spans": [],
        }
        if spans:
            starts = np.flatnonzero(ws).tolist() + [n]
            cands = [(starts[k], starts[k + 2]) for k in range(0, len(starts) - 2, 3)]  # two words each
            row["entity_spans"] = [
                {"start": a, "end": b, "label": "DATE" if k % 2 else "PERSON"} for k, (a, b) in enumerate(cands)
            ]
            row["noun_phrase_spans"] = [{"start": a, "end": b} for a, b in cands]
            row["ngram_spans"] = [{"start": a, "end": b} for a, b in cands]
        rows.append(row)
    return rows


def file_entry(path: Path) -> dict:
    data = Path(path).read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def reseal(root: Path, rel: str) -> None:
    """Make the manifest's size and sha256 of shard ``rel`` those of the file as it is now (a writer's bug, not damage)."""
    manifest = json.loads((root / fmt.MANIFEST_FILE).read_text())
    entry = next(s for s in manifest["shards"] if s["path"] == rel)
    entry.update(file_entry(root / rel))
    (root / fmt.MANIFEST_FILE).write_text(fmt.dumps_manifest(manifest))


def write_artifact(
    root: Path,
    shards: list[list[dict]],
    *,
    rows_per_batch: int = 4,
    vocab_size: int = VOCAB,
    version: str = fmt.FORMAT_VERSION,
) -> Path:
    """Write an artifact whose shard ``k`` holds ``shards[k]`` (rows as dicts of the shard columns)."""
    root = Path(root)
    (root / fmt.SHARDS_DIR).mkdir(parents=True, exist_ok=True)
    schema = fmt.shard_schema(vocab_size)
    counts = np.zeros(vocab_size, np.int64)
    entries = []
    for k, rows in enumerate(shards):
        rel = fmt.shard_filename(k, len(shards))
        cols = {
            "doc_id": [f"doc{k}-{i}" for i in range(len(rows))],
            "seq_index": [0] * len(rows),
            "input_ids": [r["input_ids"] for r in rows],
            "word_start": [r["word_start"] for r in rows],
            "sentence_start": [[j == 0 for j in range(len(r["input_ids"]))] for r in rows],
            "entity_spans": [r.get("entity_spans", []) for r in rows],
            "noun_phrase_spans": [r.get("noun_phrase_spans", []) for r in rows],
            "ngram_spans": [r.get("ngram_spans", []) for r in rows],
        }
        table = pa.Table.from_pydict(cols, schema=schema)
        with (
            pa.OSFile(str(root / rel), "wb") as f,
            ipc.new_file(f, schema, options=ipc.IpcWriteOptions(compression="zstd")) as w,
        ):
            for b in table.to_batches(max_chunksize=rows_per_batch):
                w.write_batch(b)
        for r in rows:
            np.add.at(counts, r["input_ids"], 1)
        entries.append(
            {"path": rel, "rows": len(rows), "tokens": sum(len(r["input_ids"]) for r in rows), **file_entry(root / rel)}
        )
    uni = pa.Table.from_pydict(
        {"token_id": list(range(vocab_size)), "token": [f"t{i}" for i in range(vocab_size)], "count": counts.tolist()},
        schema=fmt.unigram_schema(),
    )
    with pa.OSFile(str(root / fmt.UNIGRAM_FILE), "wb") as f, ipc.new_file(f, uni.schema) as w:
        w.write_table(uni)
    manifest = {
        "format": fmt.FORMAT_NAME,
        "format_version": version,
        "shards": entries,
        "rows_per_batch": rows_per_batch,
        "max_seq_len": 512,
        "max_row_tokens": 510,
        "input_ids_type": "uint16",
        "tokenizer": {
            "file": fmt.TOKENIZER_FILE,
            "vocab_size": vocab_size,
            "special_token_ids": SPECIAL,
            "special_tokens": {k: f"[{k.upper()}]" for k in SPECIAL},
        },
        "unigram": {"file": fmt.UNIGRAM_FILE, "total": int(counts.sum())},
    }
    # rows with candidate spans: the kinds say so, as a build with --mask-candidates KIND does
    kinds = [k for k, col in fmt.CANDIDATE_KINDS.items() if any(r.get(col) for rows in shards for r in rows)]
    if kinds:
        manifest["candidates"] = {"kinds": kinds}
    (root / fmt.MANIFEST_FILE).write_text(fmt.dumps_manifest(manifest))
    return root


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    """5 shards of 60, 52, 71, 57 and 40 rows (4-row blocks): 240 training rows, 40 held out."""
    rows = synthetic_rows(280)
    sizes = [60, 52, 71, 57, 40]
    shards, i = [], 0
    for s in sizes:
        shards.append(rows[i : i + s])
        i += s
    return write_artifact(tmp_path_factory.mktemp("synthetic") / "artifact", shards)


def cfg(art, **kw) -> DataConfig:
    base = dict(artifact=str(art), seed=7, micro_batch_size=4, num_workers=0, shuffle_window=3, eval_shards=1)
    base.update(kw)
    return DataConfig(**base)


MASK = MaskingConfig(scheme="span", seed=3)


def take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def assert_same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


# -- order and partition ---------------------------------------------------------------------
def test_global_order_is_a_seeded_shuffle_across_shards_and_rows(artifact):
    _, ds = build_train_loader(cfg(artifact), MASK)
    _, again = build_train_loader(cfg(artifact), MASK)
    o0, o1 = ds.global_order(0), ds.global_order(1)
    assert ds.num_samples == 240
    assert sorted(o0.tolist()) == list(range(240))  # training shards = rows 0..239 (shard 4 held out)
    assert np.array_equal(o0, again.global_order(0))
    assert not np.array_equal(o0, o1)
    _, other_seed = build_train_loader(cfg(artifact, seed=8), MASK)
    assert not np.array_equal(o0, other_seed.global_order(0))
    # rows of one shuffle window (3 blocks of 4 rows) come from several shards and are not in block order
    shard_of = np.searchsorted(np.cumsum([60, 52, 71, 57]), o0, side="right")
    assert len(set(shard_of[:12].tolist())) >= 2
    assert not np.array_equal(np.sort(o0[:4]), o0[:4])


@pytest.mark.parametrize("world_size,num_workers", [(1, 0), (2, 0), (3, 0), (2, 2)])
def test_ranks_and_workers_partition_the_global_stream(artifact, world_size, num_workers):
    c = cfg(artifact, num_workers=num_workers, worker_chunk_batches=2, num_epochs=1)
    per_rank = []
    for r in range(world_size):
        loader, ds = build_train_loader(c, MASK, rank=r, world_size=world_size)
        expected = len(loader)
        per_rank.append([b["sample_id"] for b in loader])
        assert len(per_rank[-1]) == expected == 240 // (4 * world_size)
        assert len(loader) == 0  # what is left after the one epoch
    order = ds.global_order(0)
    G = 4 * world_size
    delivered = []
    for step in range(len(per_rank[0])):
        ids = torch.cat([per_rank[r][step] for r in range(world_size)]).numpy()
        assert np.array_equal(ids, order[step * G : (step + 1) * G])
        delivered.append(ids)
    delivered = np.concatenate(delivered)
    assert len(delivered) == 240 and len(np.unique(delivered)) == 240  # no duplicates, no gaps


def test_worker_count_does_not_change_batches_or_masks(artifact):
    single = list(build_train_loader(cfg(artifact, num_epochs=1), MASK)[0])
    workers = list(build_train_loader(cfg(artifact, num_epochs=1, num_workers=2, worker_chunk_batches=3), MASK)[0])
    assert_same_batches(single, workers)


# -- resume ----------------------------------------------------------------------------------
def test_mid_epoch_resume_yields_the_same_next_batches(artifact):
    c = cfg(artifact, num_workers=2, worker_chunk_batches=4)
    full = take(build_train_loader(c, MASK)[0], 75)  # 60 steps per epoch: crosses into epoch 1
    loader, ds = build_train_loader(c, MASK)
    first = take(loader, 23)
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    assert state["epoch"] == 0 and state["consumed_samples"] == 23 * 4
    resumed_loader, _ = build_train_loader(c, MASK)
    resumed_loader.load_state_dict(state)
    rest = take(resumed_loader, 52)
    assert_same_batches(full, first + rest)


def test_resume_with_another_world_size_continues_the_global_stream(artifact):
    c2 = cfg(artifact, num_epochs=2)
    # 2 ranks take 7 global steps of 8 samples
    states = []
    for r in range(2):
        loader, _ = build_train_loader(c2, MASK, rank=r, world_size=2)
        take(loader, 7)
        states.append(loader.state_dict())
    assert states[0]["consumed_samples"] == states[1]["consumed_samples"] == 56
    # 3 ranks with micro batch 5 continue: 15 samples per step, from stream position 56
    c3 = cfg(artifact, micro_batch_size=5, num_epochs=2)
    per_rank = []
    for r in range(3):
        loader, ds = build_train_loader(c3, MASK, rank=r, world_size=3)
        loader.load_state_dict(states[0])
        per_rank.append([b["sample_id"] for b in loader])
    steps_left = (240 - 56) // 15  # then the epoch's last 4 positions are not used, epoch 1 starts at 0
    assert len(per_rank[0]) == steps_left + 240 // 15
    got = [torch.cat([per_rank[r][s] for r in range(3)]).numpy() for s in range(len(per_rank[0]))]
    o0, o1 = ds.global_order(0), ds.global_order(1)
    assert np.array_equal(np.concatenate(got[:steps_left]), o0[56 : 56 + 15 * steps_left])
    assert np.array_equal(np.concatenate(got[steps_left:]), o1[: 15 * (240 // 15)])
    # nothing repeated within the epoch: the first run's 56 samples and the rest are disjoint
    first_run = set(o0[:56].tolist())
    assert first_run.isdisjoint(np.concatenate(got[:steps_left]).tolist())


def test_resume_reads_only_the_blocks_it_needs(artifact):
    c = cfg(artifact)
    loader, ds = build_train_loader(c, MASK)
    state = ds.state_dict() | {"consumed_samples": 200}
    loader.load_state_dict(state)
    batch = next(iter(loader))
    read = ds.block_reader().blocks_read
    order = ds.order(0)
    blk, _ = order.locate(np.arange(200, 204))
    needed = {(ds.blocks.shard_paths[ds.blocks.shard[b]], int(ds.blocks.batch[b])) for b in blk}
    assert len(read) > 0 and set(read) == needed
    assert np.array_equal(batch["sample_id"].numpy(), order.sample_ids(np.arange(200, 204)))


def test_state_of_another_stream_is_refused(artifact):
    loader, _ = build_train_loader(cfg(artifact), MASK)
    take(loader, 2)
    state = loader.state_dict()
    other, _ = build_train_loader(cfg(artifact, seed=99), MASK)
    with pytest.raises(ValueError, match="seed: saved 7, now 99"):
        other.load_state_dict(state)
    other_mask, _ = build_train_loader(cfg(artifact), MaskingConfig(scheme="subword", seed=3))
    with pytest.raises(ValueError, match="mask_scheme"):
        other_mask.load_state_dict(state)
    other_mask.load_state_dict(state, strict=False)
    assert other_mask.state_dict()["consumed_samples"] == 8
    with pytest.raises(ValueError, match="not a loader state"):
        other.load_state_dict({"epoch": 1})


def test_loading_state_invalidates_a_running_iterator(artifact):
    loader, _ = build_train_loader(cfg(artifact), MASK)
    it = iter(loader)
    next(it)
    loader.load_state_dict(loader.state_dict())
    with pytest.raises(RuntimeError, match="iterate the loader again"):
        next(it)


# -- evaluation split ------------------------------------------------------------------------
def test_eval_loader_covers_held_out_shards_only_and_repeats_itself(artifact):
    c = cfg(artifact, eval_micro_batch_size=3)
    train_ids = set(build_train_loader(c, MASK)[1].global_order(0).tolist())
    per_rank = []
    for r in range(2):
        loader, ds = build_eval_loader(c, MASK, rank=r, world_size=2)
        first = list(loader)
        assert_same_batches(first, list(loader))  # same batches and masks at every evaluation
        assert len(first) == len(loader) == 40 // 6
        per_rank.append(first)
    ids = np.concatenate([b["sample_id"].numpy() for rank in per_rank for b in rank])
    assert len(ids) == 36 and len(np.unique(ids)) == 36
    assert set(ids.tolist()) <= set(range(240, 280)) and not train_ids & set(ids.tolist())


# -- artifact and config errors --------------------------------------------------------------
def test_corrupt_shard_fails_naming_the_file(artifact, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(artifact, bad)
    shard = bad / fmt.shard_filename(2, 5)
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle - 200 : middle + 200] = bytes(400)  # record batch bodies; the footer stays intact
    shard.write_bytes(bytes(data))
    with pytest.raises(fmt.FormatError, match=r"part-00002-of-00005.arrow: sha256 .* differs from the manifest's"):
        build_train_loader(cfg(bad, num_epochs=1), MASK)
    # Without the checksum (--verify-shards off) the reader's own checks still find this damage, later.
    loader, _ = build_train_loader(cfg(bad, num_epochs=1, verify_shards="off"), MASK)
    with pytest.raises(fmt.FormatError, match="part-00002-of-00005.arrow"):
        list(loader)
    shard.write_bytes(bytes(data[: len(data) // 3]))  # truncated: no footer
    for mode in ("off", "once"):
        with pytest.raises(
            fmt.FormatError, match=r"part-00002-of-00005.arrow: [\d,]+ bytes, the manifest says [\d,]+ \(truncated"
        ):
            build_train_loader(cfg(bad, verify_shards=mode), MASK)
    reseal(bad, fmt.shard_filename(2, 5))  # a manifest that agrees with the truncated file: Arrow refuses it
    with pytest.raises(fmt.FormatError, match="part-00002-of-00005.arrow.*not a readable Arrow IPC file"):
        build_train_loader(cfg(bad), MASK)


def test_corrupt_shard_error_crosses_worker_processes(artifact, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(artifact, bad)
    shard = bad / fmt.shard_filename(0, 5)
    data = bytearray(shard.read_bytes())
    data[100:1500] = bytes(1400)
    shard.write_bytes(bytes(data))
    loader, _ = build_train_loader(cfg(bad, num_epochs=1, num_workers=1, verify_shards="off"), MASK)
    with pytest.raises(fmt.FormatError, match="part-00000-of-00005.arrow"):
        list(loader)


def test_incomplete_or_unknown_version_artifacts_are_refused(artifact, tmp_path):
    incomplete = tmp_path / "incomplete"
    shutil.copytree(artifact, incomplete)
    (incomplete / fmt.MANIFEST_FILE).unlink()
    with pytest.raises(fmt.FormatError, match="incomplete artifact"):
        build_train_loader(cfg(incomplete), MASK)
    future = tmp_path / "future"
    shutil.copytree(artifact, future)
    manifest = json.loads((future / fmt.MANIFEST_FILE).read_text())
    unknown = f"{max(fmt.SUPPORTED_MAJOR_VERSIONS) + 1}.0"  # a major version no reader knows yet
    manifest["format_version"] = unknown
    (future / fmt.MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(fmt.FormatError, match=f"format version {unknown} is not supported"):
        build_train_loader(cfg(future), MASK)
    with pytest.raises(fmt.FormatError, match="does not exist"):
        build_train_loader(cfg(tmp_path / "nowhere"), MASK)


def test_irregular_record_batches_are_refused_naming_the_shard(tmp_path):
    art = write_artifact(tmp_path / "a", [synthetic_rows(10), synthetic_rows(10, seed=1)], rows_per_batch=4)
    rel = fmt.shard_filename(1, 2)
    table = ipc.open_file(str(art / rel)).read_all().combine_chunks()

    def rewrite(sizes):
        with pa.OSFile(str(art / rel), "wb") as f, ipc.new_file(f, table.schema) as w:
            start = 0
            for n in sizes:
                w.write_batch(table.slice(start, n).to_batches()[0])
                start += n
        reseal(art, rel)  # the writer got the layout wrong, not the checksum

    rewrite([3, 3, 3, 1])  # 4 batches for 10 rows where 3 batches of <= 4 rows are expected
    with pytest.raises(fmt.FormatError, match="part-00001-of-00002.arrow: 4 record batches for 10 rows"):
        build_train_loader(cfg(art, eval_shards=0, micro_batch_size=2), MASK)
    rewrite([4, 2, 4])  # the right count, the wrong sizes: found when the batch is read
    loader, _ = build_train_loader(cfg(art, eval_shards=0, micro_batch_size=2, num_epochs=1), MASK)
    with pytest.raises(
        fmt.FormatError, match=r"part-00001-of-00002.arrow: record batch [12]: has [24] rows, expected [24]"
    ):
        list(loader)


def test_tokenizer_mismatch_names_both_sides(artifact):
    art = open_artifact(str(artifact))
    check_tokenizer(art, vocab_size=VOCAB, special_token_ids={"cls": 2, "sep": 3})
    with pytest.raises(TokenizerMismatchError, match=r"vocab_size 64 \(artifact\) != 30522 \(model\)"):
        check_tokenizer(art, vocab_size=30522)
    with pytest.raises(TokenizerMismatchError, match=r"\[MASK\] id 4 \(artifact\) != 103 \(model\)"):
        build_train_loader(cfg(artifact), MASK, expected_vocab_size=VOCAB, expected_special_token_ids={"mask": 103})


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(micro_batch_size=0), "micro_batch_size must be an integer >= 1"),
        (dict(num_workers=-1), "num_workers must be an integer >= 0"),
        (dict(seed=-1), r"seed must be an integer in \[0, 2\*\*32\)"),
        (dict(shuffle_window=0), "shuffle_window must be an integer >= 1"),
        (dict(artifact=""), "artifact must be a non-empty path"),
        (dict(num_epochs=0), "num_epochs must be an integer >= 1 or None"),
        (dict(max_seq_len=True), "max_seq_len must be an integer >= 3"),
    ],
)
def test_data_config_is_validated(kw, message):
    base = dict(artifact="x")
    base.update(kw)
    with pytest.raises(ValueError, match=message):
        DataConfig(**base)
    with pytest.raises(TypeError):
        DataConfig("x")  # keyword-only


def test_split_and_size_problems_are_explained(artifact):
    with pytest.raises(ValueError, match="eval_shards=5 but .* has 5 shard"):
        build_train_loader(cfg(artifact, eval_shards=5), MASK)
    with pytest.raises(
        ValueError, match="has 240 rows, fewer than one global step of micro_batch_size 100 x world_size 3"
    ):
        build_train_loader(cfg(artifact, micro_batch_size=100), MASK, world_size=3)
    with pytest.raises(ValueError, match="rows of up to 510 tokens"):
        build_train_loader(cfg(artifact, max_seq_len=128), MASK)
    with pytest.raises(ValueError, match="eval_shards is 0"):
        build_eval_loader(cfg(artifact, eval_shards=0), MASK)
    with pytest.raises(ValueError, match=r"rank must be an integer in \[0, world_size=2\)"):
        build_train_loader(cfg(artifact), MASK, rank=2, world_size=2)


def test_file_uri_goes_through_pyarrow_fs(artifact):
    local = list(build_train_loader(cfg(artifact, num_epochs=1), MASK)[0])
    uri = list(build_train_loader(cfg(artifact.as_uri(), num_epochs=1), MASK)[0])
    assert_same_batches(local, uri)


# -- candidate spans through the loader ------------------------------------------------------
@pytest.mark.parametrize(
    "scheme,column", [("entity", "entity_spans"), ("noun_phrase", "noun_phrase_spans"), ("ngram", "ngram_spans")]
)
def test_candidate_schemes_read_their_column(tmp_path, scheme, column):
    rows = synthetic_rows(48, seed=5, min_len=60, max_len=120, spans=True)
    for r in rows[40:]:  # the fallback: rows without candidates
        r[column] = []
    art = write_artifact(tmp_path / "a", [rows[:24], rows[24:]], rows_per_batch=8)
    c = cfg(art, eval_shards=0, micro_batch_size=8, num_epochs=1)
    loader, ds = build_train_loader(c, MaskingConfig(scheme=scheme, seed=1))
    spans_of = {
        i: {(s["start"], s["end"]) for s in r[column] if not (scheme == "entity" and s["label"] == "DATE")}
        for i, r in enumerate(rows)
    }
    dates = {i: {(s["start"], s["end"]) for s in r["entity_spans"] if s["label"] == "DATE"} for i, r in enumerate(rows)}
    checked_candidates = checked_fallback = 0
    for batch in loader:
        sids = batch["sample_id"].tolist()
        # the same rows masked directly with the column's spans: the loader's batch must be exactly this
        # (units that touch share SBO boundaries, so units are read from the masker, not from the batch)
        direct = Rows.from_lists(
            [rows[i]["input_ids"] for i in sids],
            [rows[i]["word_start"] for i in sids],
            [sorted(spans_of[i]) for i in sids],
        )
        m = ds.masker.mask(direct, np.asarray(sids), 0)
        again = ds.masker.collate(m)
        assert torch.equal(again["labels"], batch["labels"]) and torch.equal(again["input_ids"], batch["input_ids"])
        for b, sid in enumerate(sids):
            target = (batch["labels"][b] != IGNORE_INDEX).numpy()
            pos = np.flatnonzero(target)
            assert len(pos) > 0
            sel = m.unit_row == b
            units = set(zip(m.unit_start[sel].tolist(), m.unit_end[sel].tolist()))
            cand_units = {
                u for u, c in zip(zip(m.unit_start[sel].tolist(), m.unit_end[sel].tolist()), m.unit_candidate[sel]) if c
            }
            assert cand_units <= spans_of[sid]
            if sid >= 40:
                checked_fallback += 1
                assert not spans_of[sid] and not cand_units and target.sum() > 0
            else:
                checked_candidates += len(cand_units)
                assert cand_units, f"row {sid}: no candidate span was masked"
                if scheme == "entity":
                    # excluded (numeric) entities are two-word spans: never a unit (random words are one word)
                    assert not units & dates[sid] and dates[sid]
    assert checked_candidates > 0 and checked_fallback > 0


# -- real data -------------------------------------------------------------------------------
def test_real_wikitext2_artifact_streams_with_workers(wikitext2_artifact):
    c = DataConfig(
        artifact=str(wikitext2_artifact), seed=1, micro_batch_size=8, num_workers=2, eval_shards=1, num_epochs=1
    )
    loader, ds = build_train_loader(
        c,
        MaskingConfig(),
        expected_vocab_size=8000,
        expected_special_token_ids={"cls": 2, "sep": 3, "pad": 0, "mask": 4},
    )
    art = open_artifact(str(wikitext2_artifact))
    shards = art.manifest["shards"]
    train_rows = sum(s["rows"] for s in shards[:-1])
    assert ds.num_samples == train_rows > 0
    ids = []
    for batch in loader:
        B, T = batch["input_ids"].shape
        assert B == 8 and T % 8 == 0 and T <= 512
        assert (batch["input_ids"][:, 0] == 2).all()
        assert ((batch["labels"] != IGNORE_INDEX).sum(1) > 0).all()
        ids.append(batch["sample_id"].numpy())
    ids = np.concatenate(ids)
    assert len(ids) == (train_rows // 8) * 8 and len(np.unique(ids)) == len(ids)
    assert ids.max() < train_rows
    # what the loader reads is what pyarrow reads: compare one row end to end
    first = ipc.open_file(str(Path(wikitext2_artifact) / shards[0]["path"])).get_batch(0)
    row0 = np.asarray(first.column("input_ids")[0].as_py())
    loader2, ds2 = build_train_loader(c, MaskingConfig(mask_prob=0.0, random_prob=0.0, keep_prob=1.0))
    for batch in loader2:
        hit = np.flatnonzero(batch["sample_id"].numpy() == 0)
        if len(hit):
            got = batch["input_ids"][hit[0]].numpy()
            assert np.array_equal(got[1 : 1 + len(row0)], row0) and got[1 + len(row0)] == 3
            break
    else:
        pytest.fail("sample 0 was not delivered")
