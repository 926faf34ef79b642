"""A shard that differs from its manifest is refused when it is opened for training, naming it (issue 9, case 4):
size always, sha256 by default (once per node, cached; schemas/integrity.py). Real artifacts (tests/conftest.py)."""

from __future__ import annotations

import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import format as fmt
from schemas import integrity
from schemas.artifact import Artifact
from tests.support.shard_damage import flip_byte_changing_input_ids
from trainer.data import DataConfig, build_train_loader
from trainer.masking import MaskingConfig

REPO = Path(__file__).resolve().parents[2]
MASK = MaskingConfig(scheme="span", seed=0)


def damaged_copy(artifact: Path, dest: Path, shard: int = 0) -> tuple[Path, str]:
    shutil.copytree(artifact, dest)
    rel = Artifact.open(str(dest)).shard_paths[shard]
    flip_byte_changing_input_ids(dest / rel)
    return dest, rel


def cfg(art: Path, **kw) -> DataConfig:
    return DataConfig(**{"artifact": str(art), "micro_batch_size": 2, "num_workers": 0, "num_epochs": 1, **kw})


def test_a_flipped_byte_is_refused_before_training_naming_the_shard(demo_artifact, tmp_path):
    bad, rel = damaged_copy(demo_artifact, tmp_path / "bad")
    for mode in ("once", "always"):
        with pytest.raises(
            integrity.ShardMismatchError, match=rf"{bad}/{rel}: sha256 \w+… differs from the manifest's"
        ):
            build_train_loader(cfg(bad, verify_shards=mode), MASK)
    # The damage is silent otherwise: with the check off the loader reads the changed rows without complaint.
    loader, ds = build_train_loader(cfg(bad, verify_shards="off"), MASK)
    assert ds.shard_checks == {"size": 3, "hashed": 0, "cached": 0}
    expected = len(loader)
    assert sum(1 for _ in loader) == expected > 0


def test_once_hashes_each_shard_once_per_node_and_a_changed_file_again(demo_artifact, tmp_path):
    good = tmp_path / "good"
    shutil.copytree(demo_artifact, good)
    art = Artifact.open(str(good))
    assert art.fingerprint == Artifact.open(str(demo_artifact)).fingerprint  # content, not location
    cache = tmp_path / "cache"
    paths = art.shard_paths

    def check(mode="once"):
        return {
            p: integrity.verify_file(
                art.fs,
                art.path(p),
                art.shard_entry(p),
                art.display(p),
                mode=mode,
                fingerprint=art.fingerprint,
                location=art.display(p),
                cache=str(cache),
            )
            for p in paths
        }

    assert set(check().values()) == {"hashed"} and len(paths) == 4
    assert set(check().values()) == {"cached"}
    assert set(check("always").values()) == {"hashed"}  # always ignores the cache
    flip_byte_changing_input_ids(good / paths[1])  # same size; new modification time: a new file version
    with pytest.raises(integrity.ShardMismatchError, match=paths[1]):
        check()
    with pytest.raises(integrity.ShardMismatchError, match=paths[1]):  # a failure is not cached
        check()


def _check_in_process(artifact: str, start: int, queue) -> None:
    queue.put(Artifact.open(artifact).check_shards(Artifact.open(artifact).shard_paths, "once", start=start))


def test_ranks_of_one_node_hash_each_shard_once_between_them(demo_artifact, tmp_path, shard_check_cache):
    copy = tmp_path / "copy"  # a location no other test has cached
    shutil.copytree(demo_artifact, copy)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_check_in_process, args=(str(copy), rank, queue)) for rank in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert sum(r["hashed"] for r in results) == 4  # every shard hashed exactly once on this "node"
    assert sum(r["cached"] for r in results) == 2 * 4


def test_size_is_checked_on_every_open_even_with_checksums_off(demo_artifact, tmp_path):
    bad = tmp_path / "appended"
    shutil.copytree(demo_artifact, bad)
    rel = Artifact.open(str(bad)).shard_paths[2]
    with open(bad / rel, "ab") as f:
        f.write(b"\0" * 16)  # an Arrow file still reads fine with bytes appended
    with pytest.raises(fmt.FormatError, match=rf"{rel}: [\d,]+ bytes, the manifest says [\d,]+ \(truncated, appended"):
        Artifact.open(str(bad)).open_shard(rel)


def test_pretrain_refuses_a_corrupt_shard_with_one_line_and_exit_2(demo_artifact, tmp_path):
    bad, rel = damaged_copy(demo_artifact, tmp_path / "bad", shard=1)
    cmd = [
        sys.executable,
        str(REPO / "trainer" / "pretrain.py"),
        "--data",
        str(bad),
        "--preset",
        "tiny",
        "--max-steps",
        "2",
        "--warmup-steps",
        "1",
        "--no-progress",
        "--num-workers",
        "0",
        "--output-dir",
        str(tmp_path / "run"),
    ]
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    proc = subprocess.run(
        cmd, cwd=REPO, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith(f"pretrain: error: {bad}/{rel}: sha256 ") and "differs from the manifest" in lines[-1]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


# -- issue 21: rows holding special ids, damaged footers with --verify-shards off, a damaged unigram table ------------
@pytest.mark.parametrize("name", ["mask", "cls", "pad", "sep", "unk"])
def test_rows_holding_special_ids_are_refused_naming_shard_row_and_id(name, demo_artifact, tmp_path):
    """A row holding [MASK]/[CLS]/[PAD] (or [SEP] in a doc-sentences artifact) is refused like a damaged shard, in one
    line naming the shard, the row and the id; [UNK] is text (FORMAT.md) and trains. The shard's checksum matches:
    the rows were written so (issue 21, case 6)."""
    from tests.support.shard_damage import rewrite_token

    art = tmp_path / "art"
    shutil.copytree(demo_artifact, art)
    token = Artifact.open(str(art)).special_token_ids[name]
    rel = rewrite_token(art, shard=1, row=5, position=3, token_id=token)
    loader, _ = build_train_loader(cfg(art, verify_shards="always"), MASK)  # the checksums match
    if name == "unk":
        expected = len(loader)
        assert sum(1 for _ in loader) == expected > 0
        return
    with pytest.raises(fmt.FormatError) as e:
        for _ in loader:
            pass
    assert str(e.value) == (
        f"{art}/{rel}: row 5 (record batch 0, row 5) holds the special token id {token} ([{name.upper()}]) at token 3; "
        f"rows hold text only (FORMAT.md): rebuild the artifact (pipeline.verify lists every such row)"
    )


def test_pretrain_refuses_a_row_holding_mask_with_one_line_and_exit_2(demo_artifact, tmp_path):
    from tests.support.pretrain_runs import PRETRAIN, run_env
    from tests.support.shard_damage import rewrite_token

    art = tmp_path / "art"
    shutil.copytree(demo_artifact, art)
    rel = rewrite_token(art, shard=0, row=2, position=0, token_id=Artifact.open(str(art)).special_token_ids["mask"])
    cmd = [sys.executable, str(PRETRAIN), "--data", str(art), "--preset", "tiny", "--max-steps", "40"]
    cmd += ["--warmup-steps", "1", "--no-progress", "--num-workers", "1", "--eval-every", "0"]
    proc = subprocess.run(
        [*cmd, "--output-dir", str(tmp_path / "run")], cwd=REPO, env=run_env(), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"pretrain: error: {art}/{rel}: row 2 (record batch 0, row 2) holds the special token id 4 ([MASK]) at token 0; "
        )
    )


def test_a_flipped_footer_byte_with_checks_off_is_a_format_error_naming_the_shard(demo_artifact, tmp_path):
    """Every single flipped bit in shard 0's Arrow footer, --verify-shards off: the loader either reads the shard
    (the byte did not matter) or raises a FormatError naming it; before, some flips gave ArrowNotImplementedError or
    UnicodeDecodeError tracebacks."""
    import struct

    art = tmp_path / "art"
    shutil.copytree(demo_artifact, art)
    rel = Artifact.open(str(art)).shard_paths[0]
    original = (art / rel).read_bytes()
    footer = len(original) - 10 - struct.unpack("<i", original[-10:-6])[0]
    refused = 0
    for pos in range(footer, len(original)):
        damaged = bytearray(original)
        damaged[pos] ^= 0x01
        (art / rel).write_bytes(bytes(damaged))
        try:
            loader, _ = build_train_loader(cfg(art, verify_shards="off"), MASK)
            for _ in loader:
                pass
        except fmt.FormatError as e:
            assert str(e).startswith(f"{art}/{rel}: ") and "\n" not in str(e), (pos, str(e))
            refused += 1
    assert refused > 0.5 * (len(original) - footer)


def test_unigram_ids_outside_the_vocabulary_are_a_format_error_naming_the_file(demo_artifact, tmp_path):
    import hashlib
    import json

    import pyarrow as pa
    import pyarrow.ipc as ipc

    art = tmp_path / "art"
    shutil.copytree(demo_artifact, art)
    table = ipc.open_file(str(art / "unigram.arrow")).read_all()
    ids = table.column("token_id").to_pylist()
    ids[3] = 4000 + 7  # the vocabulary has 4000 ids
    field = table.schema.field("token_id")
    table = table.set_column(table.schema.get_field_index("token_id"), field, pa.array(ids, field.type))
    with ipc.new_file(str(art / "unigram.arrow"), table.schema) as w:
        w.write_table(table)
    data = (art / "unigram.arrow").read_bytes()
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["unigram"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(fmt.FormatError) as e:  # was: IndexError, a traceback from trainer/pretrain.py
        build_train_loader(cfg(art), MASK)
    assert str(e.value) == f"{art}/unigram.arrow: row 3 holds token_id 4007; the rows are the ids 0..3999 in order"


def test_rows_holding_a_special_added_token_of_tokenizer_json_are_refused(demo_artifact, tmp_path):
    """FORMAT.md: "special" is also every added token tokenizer.json marks special, as pipeline.verify counts it."""
    import hashlib
    import json

    import pyarrow.ipc as ipc

    art = tmp_path / "art"
    shutil.copytree(demo_artifact, art)
    rel = Artifact.open(str(art)).shard_paths[0]
    first = ipc.open_file(str(art / rel)).get_batch(0).column("input_ids")[0].values[0].as_py()  # row 0, token 0
    tok = json.loads((art / "tokenizer.json").read_text())
    tok["added_tokens"].append({**tok["added_tokens"][-1], "id": first, "content": "<doc>", "special": True})
    (art / "tokenizer.json").write_text(json.dumps(tok))
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["tokenizer"]["sha256"] = hashlib.sha256((art / "tokenizer.json").read_bytes()).hexdigest()
    (art / "manifest.json").write_text(json.dumps(manifest))
    loader, _ = build_train_loader(cfg(art), MASK)
    with pytest.raises(fmt.FormatError) as e:
        for _ in loader:
            pass
    assert str(e.value).startswith(
        f"{art}/{rel}: row 0 (record batch 0, row 0) holds the special token id {first} (<doc>) at token 0; "
    ), str(e.value)
