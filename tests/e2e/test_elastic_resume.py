"""`--resume` with another number of ranks (elastic resume through DeepSpeed's universal checkpoints).

A run trained on two CPU ranks (the `deepspeed` launcher) is resumed on one rank (`python`), and, for ZeRO-3, that
run is resumed on two ranks again. Dropout is off and the one-rank runs accumulate two micro-batches, so that the
global batch (4 sequences) and its split into micro-batches stay the same: the resumed run is then the
uninterrupted run, and the tests compare it step by step. The runs stay within the first epoch (where an epoch
ends, the loader leaves out its last ``N mod (micro batch x ranks)`` samples, which depends on the number of ranks).

Each process is `tests/support/elastic_probe.py`, which runs `trainer/pretrain.py`'s main unchanged and records the sample
ids every training step took from the loader, and (on `--resume`) the full fp32 weights, Adam moments, Adam step
counts and parameter-group settings right after the load. The checkpoint's own state is consolidated from its
files with DeepSpeed's zero_to_fp32 (see `consolidated`), independently of the universal conversion and of the
loading.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import free_port

from tests.support.pretrain_runs import DEEPSPEED, REPO, TIMEOUT, metric, resume_from, run_env

PROBE = REPO / "tests" / "support" / "elastic_probe.py"
MAX_STEPS, SAVED_AT = 8, 4
MICRO_BATCH, GLOBAL_BATCH = 2, 4  # 8 steps = 32 samples: within the first epoch of the demo artifact (52)
WEIGHT_DECAY = 0.01
COMMON = [
    "--preset", "tiny", "--lr", "5e-3", "--warmup-steps", "2", "--max-steps", str(MAX_STEPS), "--log-every", "1",
    "--eval-every", "0", "--no-progress", "--num-workers", "0", "--seed", "7", "--weight-decay", str(WEIGHT_DECAY),
    "--hidden-dropout", "0", "--attention-dropout", "0", "--keep-checkpoints", "0",
]  # fmt: skip

pytestmark = pytest.mark.slow


def ds_config(tmp: Path, stage: int, ranks: int) -> Path:
    """The shipped CPU config of ``stage`` with the micro batch and the accumulation that make GLOBAL_BATCH a step."""
    cfg = json.loads((REPO / "trainer" / "configs" / f"zero{stage}_cpu.json").read_text())
    cfg["train_micro_batch_size_per_gpu"] = MICRO_BATCH
    cfg["gradient_accumulation_steps"] = GLOBAL_BATCH // (MICRO_BATCH * ranks)
    path = tmp / f"zero{stage}_{ranks}ranks.json"
    path.write_text(json.dumps(cfg))
    return path


def probe(run_dir: Path, ranks: int, stage: int, artifact: Path, *extra: str) -> str:
    """Train (or resume) RUN_DIR on ``ranks`` ranks through the probe; returns stdout."""
    cmd = (
        [sys.executable, str(PROBE)]
        if ranks == 1
        else [str(DEEPSPEED), "--num_gpus", str(ranks), "--master_port", str(free_port()), str(PROBE)]
    )
    cmd += [
        "--deepspeed_config",
        str(ds_config(run_dir.parent, stage, ranks)),
        "--data",
        str(artifact),
        "--output-dir",
        str(run_dir),
        *COMMON,
        *extra,
    ]
    env = {**run_env(), "SPANPREP_PROBE_DIR": str(run_dir / "probe")}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    )
    return proc.stdout


def global_stream(run_dir: Path) -> dict[int, list[int]]:
    """step -> the sample ids of the step's global batch in stream order (rank 0's micro-batches, then rank 1's)."""
    per_step: dict[int, list[tuple[int, list[list[int]]]]] = {}
    for path in sorted((run_dir / "probe").glob("samples_rank*.jsonl")):
        rank = int(path.stem.removeprefix("samples_rank"))
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            per_step.setdefault(rec["step"], []).append((rank, rec["micro_batches"]))
    return {
        step: [i for _, micro in sorted(parts) for batch in micro for i in batch] for step, parts in per_step.items()
    }


def consolidated(ckpt_dir: Path, tag: str, key: str | None) -> dict[str, torch.Tensor]:
    """Full tensors of checkpoint ``tag`` from its per-rank files: the fp32 weights (``key`` None) with DeepSpeed's
    zero_to_fp32, or an Adam moment: each rank file's partition of ``key`` is laid out like its fp32 partition,
    so it is put in the fp32 partition's place in a copy of the files and consolidated the same way."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    if key is None:
        return get_fp32_state_dict_from_zero_checkpoint(str(ckpt_dir), tag=tag)
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, tag))
        for f in glob.glob(os.path.join(ckpt_dir, tag, "*.pt")):
            name = os.path.basename(f)
            if not name.endswith("_optim_states.pt"):
                shutil.copy(f, os.path.join(tmp, tag, name))
                continue
            sd = torch.load(f, map_location="cpu", weights_only=False)
            o = sd["optimizer_state_dict"]
            if "single_partition_of_fp32_groups" in o:  # ZeRO-1/2
                state, flat = o["base_optimizer_state"]["state"], "single_partition_of_fp32_groups"
            else:  # ZeRO-3
                state, flat = o["optimizer_state_dict"]["state"], "fp32_flat_groups"
            assert all(state[i][key].shape == o[flat][i].shape for i in range(len(o[flat])))
            o[flat] = [state[i][key] for i in range(len(o[flat]))]
            torch.save(sd, os.path.join(tmp, tag, name))
        return get_fp32_state_dict_from_zero_checkpoint(tmp, tag=tag)


def assert_resumed_state_is_the_checkpoints(run_dir: Path, source_ckpt: Path, tag: str, step: int) -> None:
    """What the resumed ranks hold right after the load is the checkpoint's state, bit for bit."""
    got = torch.load(run_dir / "probe" / "resumed_state.pt")
    assert got["step"] == step
    params = got["params"]
    assert len(params) > 40  # every parameter of the tiny model (the tied decoder weight is the embedding's)
    for key, name in ((None, "fp32"), ("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")):
        saved = consolidated(source_ckpt, tag, key)
        for pname, tensors in params.items():
            assert torch.equal(tensors[name], saved[pname].float()), (name, pname)
    assert float(params["embeddings.word_embeddings.weight"]["exp_avg_sq"].abs().sum()) > 0  # really trained state
    # Adam's step count: the saved one, in one tensor per state (AdamW increments it in place, once per group)
    steps = got["adam_steps"]
    assert len(steps) == 2 and {s for _, s in steps} == {float(step)} and len({i for i, _ in steps}) == 2, steps
    # each parameter group keeps its own weight decay (none on biases and LayerNorm weights)
    assert [g["weight_decay"] for g in got["param_groups"]] == [WEIGHT_DECAY, 0.0], got["param_groups"]


def assert_continues_the_run(full: Path, resumed: Path, after: int) -> None:
    """The resumed run trained steps after+1..MAX_STEPS on exactly the uninterrupted run's samples, with its losses."""
    a, b = global_stream(full), global_stream(resumed)
    steps = list(range(after + 1, MAX_STEPS + 1))
    assert sorted(b) == steps
    for s in steps:
        assert len(b[s]) == GLOBAL_BATCH and b[s] == a[s], s  # same samples, same order: nothing repeated or skipped
    seen = [i for s in range(1, after + 1) for i in a[s]] + [i for s in steps for i in b[s]]
    assert len(seen) == len(set(seen)) == MAX_STEPS * GLOBAL_BATCH  # all in the first epoch: no sample twice
    la, lb = metric(full, "train_loss"), metric(resumed, "train_loss")
    assert sorted(lb) == steps
    # the same arithmetic up to the order of float additions (all-reduce over ranks vs. gradient accumulation)
    assert [lb[s] for s in steps] == pytest.approx([la[s] for s in steps], rel=1e-6, abs=0)
    lr_a, lr_b = metric(full, "train_lr"), metric(resumed, "train_lr")
    assert [lr_b[s] for s in steps] == pytest.approx([lr_a[s] for s in steps], rel=1e-12)


def assert_elastic_messages(stdout: str, run_dir: Path, saved_by: int, ranks: int, stage: int, step: int) -> None:
    ckpt = run_dir / "checkpoints"
    assert (
        f"elastic resume: {ckpt}/global_step{step} was saved by {saved_by} ranks, this run has {ranks}; "
        f"ZeRO stage {stage} partitions the optimizer state by rank"
    ) in stdout
    assert f"elastic resume: converted {ckpt}/global_step{step}_universal in " in stdout
    assert (
        f"resumed from {ckpt}/global_step{step} at step {step} (saved by {saved_by} ranks, now {ranks} via the "
        f"universal checkpoint; global batch {GLOBAL_BATCH} sequences;"
    ) in stdout
    assert f"done: {MAX_STEPS} steps" in stdout
    resolved = json.loads((run_dir / "config.json").read_text())
    assert resolved["world_size"] == ranks and resolved["global_batch_size"] == GLOBAL_BATCH
    assert resolved["elastic_resume"] == {
        "checkpoint": f"global_step{step}",
        "saved_world_size": saved_by,
        "universal_checkpoint": True,
    }
    assert resolved["deepspeed"]["checkpoint"] == {"load_universal": True}
    # the universal copy is deleted once the resumed run has saved a checkpoint of its own
    assert not list(ckpt.glob("*_universal")) and not (ckpt / "latest_universal").exists()
    assert sorted(p.name for p in ckpt.glob("global_step*")) == sorted(
        {f"global_step{step}", *(f"global_step{s}" for s in range(step + 2, MAX_STEPS + 1, 2))}
    )


def train_two_ranks(tmp: Path, stage: int, artifact: Path) -> Path:
    full = tmp / "full"
    probe(full, 2, stage, artifact, "--save-every", str(SAVED_AT))
    assert (full / "checkpoints" / f"global_step{SAVED_AT}" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").exists()
    return full


# ---------------------------------------------------------------------------------------------
def test_zero3_two_ranks_to_one_and_back_to_two(demo_artifact, tmp_path):
    full = train_two_ranks(tmp_path, 3, demo_artifact)

    one = tmp_path / "one"  # a node is lost: continue the step-4 checkpoint of 2 ranks on 1
    resume_from(full, f"global_step{SAVED_AT}", one)
    out = probe(one, 1, 3, demo_artifact, "--resume", "--save-every", "2")
    assert_elastic_messages(out, one, saved_by=2, ranks=1, stage=3, step=SAVED_AT)
    assert_resumed_state_is_the_checkpoints(one, full / "checkpoints", f"global_step{SAVED_AT}", SAVED_AT)
    assert_continues_the_run(full, one, after=SAVED_AT)

    two = tmp_path / "two"  # the node is back: continue the 1-rank run's step-6 checkpoint on 2 ranks
    resume_from(one, "global_step6", two)
    out = probe(two, 2, 3, demo_artifact, "--resume", "--save-every", "2")
    assert_elastic_messages(out, two, saved_by=1, ranks=2, stage=3, step=6)
    assert_resumed_state_is_the_checkpoints(two, one / "checkpoints", "global_step6", 6)
    assert_continues_the_run(full, two, after=6)


@pytest.mark.parametrize("stage", [1, 2])
def test_zero12_two_ranks_to_one(stage, demo_artifact, tmp_path, main_in_process):
    full = train_two_ranks(tmp_path, stage, demo_artifact)
    one = tmp_path / "one"
    resume_from(full, f"global_step{SAVED_AT}", one)
    out = probe(one, 1, stage, demo_artifact, "--resume", "--save-every", "2")
    assert_elastic_messages(out, one, saved_by=2, ranks=1, stage=stage, step=SAVED_AT)
    assert_resumed_state_is_the_checkpoints(one, full / "checkpoints", f"global_step{SAVED_AT}", SAVED_AT)
    assert_continues_the_run(full, one, after=SAVED_AT)

    if stage != 2:
        return
    # the refusals (in this process: they come before any process group): another number of ranks with
    # --no-elastic-resume, or another number of ranks and another ZeRO stage at once
    refused = tmp_path / "refused"
    resume_from(full, f"global_step{SAVED_AT}", refused)
    base = ["--data", str(demo_artifact), "--output-dir", str(refused), *COMMON, "--resume"]
    where = f"cannot resume {refused / 'checkpoints'}/global_step{SAVED_AT}"
    code, err = main_in_process(*base, "--deepspeed_config", str(ds_config(tmp_path, 2, 1)), "--no-elastic-resume")
    assert code == 2 and f"{where} (saved by 2 ranks) with 1 ranks: --no-elastic-resume is set" in err, err
    code, err = main_in_process(*base, "--deepspeed_config", str(ds_config(tmp_path, 1, 1)))
    assert (
        code == 2
        and (
            f"{where} (ZeRO stage 2, 2 ranks) with ZeRO stage 1 and 1 ranks: change the number of "
            f"ranks or the stage, not both at once"
        )
        in err
    ), err
    assert not list((refused / "checkpoints").glob("*_universal"))


def test_conversion_is_reused_only_when_complete(tmp_path):
    """A finished conversion (the trainer's marker, or the converter's own `latest_universal` pointing at it) is
    reused; anything else is redone, and a failing conversion is an error naming its log."""
    from trainer.engine import UNIVERSAL_MARKER, convert_to_universal, remove_universal_checkpoints

    ckpt = tmp_path / "checkpoints"
    (ckpt / "global_step4").mkdir(parents=True)  # not a DeepSpeed checkpoint: converting it fails
    done = ckpt / "global_step4_universal"
    (done / "zero").mkdir(parents=True)
    (done / UNIVERSAL_MARKER).write_text("{}")
    assert convert_to_universal(str(ckpt), "global_step4") == ("global_step4_universal", False)
    (done / UNIVERSAL_MARKER).unlink()
    (done / "zero" / "optimizer_state.pt").write_bytes(b"")
    (ckpt / "latest_universal").write_text("global_step4_universal")  # converted by hand with DeepSpeed's command
    assert convert_to_universal(str(ckpt), "global_step4") == ("global_step4_universal", False)
    (ckpt / "latest_universal").write_text("global_step2_universal")  # the pointer names another: incomplete
    with pytest.raises(
        RuntimeError,
        match=r"DeepSpeed's ds_to_universal could not convert .*global_step4 \(exit 1; "
        r"full output in .*global_step4_universal/ds_to_universal.log\)",
    ):
        convert_to_universal(str(ckpt), "global_step4")
    assert not (done / "zero" / "optimizer_state.pt").exists()  # the incomplete conversion was thrown away
    remove_universal_checkpoints(str(ckpt))
    assert sorted(p.name for p in ckpt.iterdir()) == ["global_step4"]
