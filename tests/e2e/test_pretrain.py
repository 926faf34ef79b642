"""`trainer/pretrain.py` for real: DeepSpeed ZeRO 1/2/3 on two CPU ranks (gloo), one plain `python` process,
resume, SIGTERM, optimizer partitioning, and the clear errors. Uses the embedded demo artifact (tests/conftest.py).

Every run is `OMP_NUM_THREADS=1 deepspeed --num_gpus 2 trainer/pretrain.py ...` (or `python trainer/pretrain.py`)
with the tiny preset and the shipped `trainer/configs/zero*_cpu.json` (micro batch set to 4), on its own free port.
The first DeepSpeed run compiles a C++ op into TORCH_EXTENSIONS_DIR (about 30 s, cached).
"""

from __future__ import annotations

import glob
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import free_port

from tests.support.pretrain_runs import (
    DEEPSPEED,
    MICRO_BATCH,
    PRETRAIN,
    REPO,
    TIMEOUT,
    ds_config,
    metric,
    resume_from,
    run,
    run_env,
)

MAX_STEPS, RESUME_AT = 8, 4
COMMON = [
    "--preset", "tiny", "--lr", "5e-3", "--warmup-steps", "2", "--max-steps", str(MAX_STEPS), "--log-every", "1",
    "--eval-every", str(RESUME_AT), "--eval-batches", "2", "--no-progress", "--num-workers", "1", "--seed", "7",
]  # fmt: skip

pytestmark = pytest.mark.slow


def launcher(ranks: int) -> list[str]:
    return [str(DEEPSPEED), "--num_gpus", str(ranks), "--master_port", str(free_port()), str(PRETRAIN)]


def latest(run_dir: Path) -> str:
    return (run_dir / "checkpoints" / "latest").read_text().strip()


def assert_loss_went_down(run_dir: Path) -> None:
    loss = metric(run_dir, "train_loss")
    assert sorted(loss) == list(range(1, MAX_STEPS + 1))
    first, last = [loss[s] for s in (1, 2, 3)], [loss[s] for s in (MAX_STEPS - 2, MAX_STEPS - 1, MAX_STEPS)]
    # 8 steps of a tiny model: the loss (MLM + SBO, ~2 x ln(4000) = 16.6 at the start) falls by several percent.
    assert sum(last) / 3 < 0.95 * sum(first) / 3, loss


def assert_same_run(full: Path, resumed: Path, after: int) -> None:
    """The resumed run's losses (and evaluation) after step ``after`` are those of the uninterrupted run."""
    a, b = metric(full, "train_loss"), metric(resumed, "train_loss")
    steps = list(range(after + 1, MAX_STEPS + 1))
    assert sorted(b) == steps
    assert [b[s] for s in steps] == pytest.approx([a[s] for s in steps], rel=1e-6, abs=0)
    for name in ("eval_mlm_loss", "eval_sbo_loss"):
        ea, eb = metric(full, name), metric(resumed, name)
        assert eb[MAX_STEPS] == pytest.approx(ea[MAX_STEPS], rel=1e-6)


def optimizer_state_bytes(run_dir: Path, tag: str) -> list[int]:
    from trainer.engine import optimizer_state_bytes as measure

    return measure(str(run_dir / "checkpoints"), tag)


# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def one_process_run(demo_artifact, tmp_path_factory) -> Path:
    """`python trainer/pretrain.py` with no distributed environment at all: one rank, ZeRO-1."""
    tmp = tmp_path_factory.mktemp("one_process")
    out = tmp / "run"
    cmd = [
        sys.executable,
        str(PRETRAIN),
        "--deepspeed_config",
        str(ds_config(tmp, 1)),
        "--data",
        str(demo_artifact),
        "--output-dir",
        str(out),
        "--save-every",
        str(MAX_STEPS),
        *COMMON,
    ]
    proc = run(cmd)
    assert f"done: {MAX_STEPS} steps" in proc.stdout
    return out


def test_python_single_process_trains(one_process_run):
    out = one_process_run
    assert_loss_went_down(out)
    resolved = json.loads((out / "config.json").read_text())
    assert resolved["world_size"] == 1 and resolved["global_batch_size"] == MICRO_BATCH
    assert resolved["deepspeed"]["zero_optimization"]["stage"] == 1
    assert resolved["deepspeed"]["optimizer"]["params"]["eps"] == 1e-8  # the trainer's Adam options are written in
    assert latest(out) == f"global_step{MAX_STEPS}"
    for name in (
        "train_mlm_loss",
        "train_sbo_loss",
        "train_lr",
        "train_seq_per_s",
        "train_tokens_per_s",
        "eval_mlm_loss",
        "eval_mlm_acc",
        "eval_sbo_loss",
        "eval_sbo_acc",
    ):
        assert sorted(metric(out, name)) != [], name
    assert "train_mfu" not in {p.stem for p in (out / "monitor").glob("*.csv")}  # MFU on GPUs only
    assert list((out / "tensorboard").rglob("events.out.tfevents.*"))
    lr = metric(out, "train_lr")
    assert (
        lr[1] == pytest.approx(2.5e-3) and lr[2] == pytest.approx(5e-3) and lr[3] > lr[MAX_STEPS] > 0
    )  # warmup, decay


@pytest.mark.parametrize("stage", [1, 3])
def test_zero_two_ranks_partition_optimizer_and_resume_exactly(stage, demo_artifact, one_process_run, tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    # --log-level info keeps DeepSpeed's line that says its shared-memory op was loaded (dropped by default)
    args = ["--deepspeed_config", str(ds_config(tmp_path, stage)), "--data", str(demo_artifact), *COMMON,
            "--log-level", "info"]  # fmt: skip
    cmd = [*launcher(2), *args, "--output-dir", str(full), "--save-every", str(RESUME_AT)]
    proc = run(cmd)
    assert_loss_went_down(full)
    # DeepSpeed's CPU shared-memory all-reduce was set up, and its /dev/shm buffers did not outlive the run.
    assert "deepspeed_shm_comm_op built successfully" in proc.stdout
    port = cmd[cmd.index("--master_port") + 1]
    assert not glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{port}_*")
    assert json.loads((full / "config.json").read_text())["world_size"] == 2

    # ZeRO partitions the optimizer (fp32 master weights + Adam moments) over the two ranks.
    one = optimizer_state_bytes(one_process_run, f"global_step{MAX_STEPS}")
    two = optimizer_state_bytes(full, f"global_step{MAX_STEPS}")
    assert len(one) == 1 and len(two) == 2 and one[0] > 0
    for per_rank in two:
        assert 0.45 < per_rank / one[0] < 0.55, (per_rank, one)

    resume_from(full, f"global_step{RESUME_AT}", resumed)
    proc = run([*launcher(2), *args, "--output-dir", str(resumed), "--resume"])
    assert f"resumed from {resumed / 'checkpoints'}/global_step{RESUME_AT} at step {RESUME_AT}" in proc.stdout
    assert_same_run(full, resumed, after=RESUME_AT)
    if stage == 3:
        assert_checkpoint_holds_trained_weights(full, demo_artifact)


def assert_checkpoint_holds_trained_weights(run_dir: Path, artifact: Path) -> None:
    """The consolidated fp32 weights of a partitioned (ZeRO-3, 2 ranks) checkpoint, evaluated in this process on
    both ranks' evaluation batches, give the evaluation loss the training run logged at that step."""
    from trainer.data import DataConfig, build_eval_loader
    from trainer.export import load_model
    from trainer.masking import MaskingConfig

    resolved = json.loads((run_dir / "config.json").read_text())
    data = DataConfig.from_dict({**resolved["data"], "num_workers": 0})
    masking = MaskingConfig.from_dict(
        {k: tuple(v) if isinstance(v, list) else v for k, v in resolved["masking"].items()}
    )
    model, meta = load_model(str(run_dir / "checkpoints"))
    assert meta["step"] == MAX_STEPS
    loss_sum, targets = 0.0, 0
    with torch.no_grad():
        for rank in range(2):
            loader, _ = build_eval_loader(data, masking, rank=rank, world_size=2)
            for i, batch in enumerate(loader):
                if i == 2:  # --eval-batches 2
                    break
                out = model(
                    **{
                        k: batch[k]
                        for k in ("input_ids", "attention_mask", "labels", "span_left", "span_right", "span_position")
                    }
                )
                loss_sum += out["mlm_loss"].item() * out["num_targets"].item()
                targets += out["num_targets"].item()
    assert targets > 0
    assert loss_sum / targets == pytest.approx(metric(run_dir, "eval_mlm_loss")[MAX_STEPS], rel=1e-4)


def test_zero2_sigterm_saves_exits_0_and_the_resumed_run_continues(demo_artifact, tmp_path):
    import psutil

    full, stopped = tmp_path / "full", tmp_path / "stopped"
    args = ["--deepspeed_config", str(ds_config(tmp_path, 2)), "--data", str(demo_artifact), *COMMON]
    run([*launcher(2), *args, "--output-dir", str(full)])
    assert_loss_went_down(full)

    proc = subprocess.Popen(
        [*launcher(2), *args, "--output-dir", str(stopped)],
        cwd=REPO,
        env=run_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        csv_path = stopped / "monitor" / "train_loss.csv"
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and proc.poll() is None:
            if csv_path.exists() and len(csv_path.read_text().splitlines()) >= 2:  # header + step 1: in the loop
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be signalled"
        # Like a cluster scheduler: SIGTERM to every process of the job below the launcher (ranks and their
        # DataLoader workers).
        launch = next(
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "deepspeed.launcher.launch" in " ".join(p.cmdline())
        )
        job = launch.children(recursive=True)
        ranks = launch.children()
        assert len(ranks) == 2 and len(job) > 2  # two ranks, each with a DataLoader worker
        for p in job:
            p.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-6000:]}"
    assert (stdout + stderr).count("exits successfully") == 2  # the launcher's report of each rank's exit status 0
    stop_lines = [line for line in stdout.splitlines() if line.startswith("stopped by signal at step")]
    assert len(stop_lines) == 1, stdout
    step = int(stop_lines[0].split()[5].rstrip(";"))
    assert 1 <= step < MAX_STEPS
    assert latest(stopped) == f"global_step{step}"
    assert sorted(metric(stopped, "train_loss")) == list(range(1, step + 1))

    resumed = run([*launcher(2), *args, "--output-dir", str(stopped), "--resume"])
    assert f"at step {step}" in resumed.stdout
    assert_same_run(full, stopped, after=0)  # steps 1..step before the stop, the rest after the resume


def test_resume_with_more_steps_follows_the_new_schedule(one_process_run, demo_artifact, tmp_path):
    run_dir = tmp_path / "longer"
    resume_from(one_process_run, f"global_step{MAX_STEPS}", run_dir)
    longer = MAX_STEPS + 4
    args = list(COMMON)
    args[args.index("--max-steps") + 1] = str(longer)
    proc = run(
        [
            sys.executable,
            str(PRETRAIN),
            "--deepspeed_config",
            str(ds_config(tmp_path, 1)),
            "--data",
            str(demo_artifact),
            "--output-dir",
            str(run_dir),
            "--resume",
            *args,
        ]
    )
    # Every option that differs from the checkpoint's run is listed (issue 9, case 8).
    changes = [
        line.split("accepted: ", 1)[1]
        for line in proc.stdout.splitlines()
        if line.startswith("resume: option changed since the checkpoint, accepted: ")
    ]
    old_ds = one_process_run.parent / f"zero1_cpu_mb{MICRO_BATCH}.json"
    assert sorted(changes) == [
        f"run.deepspeed_config: {str(old_ds)!r} -> {str(ds_config(tmp_path, 1))!r}",
        f"run.max_steps: {MAX_STEPS} -> {longer}",
        f"run.output_dir: {str(one_process_run)!r} -> {str(run_dir)!r}",
        f"run.save_every: {MAX_STEPS} -> 1000",
    ], proc.stdout
    lr = metric(run_dir, "train_lr")
    assert sorted(lr) == list(range(MAX_STEPS + 1, longer + 1))
    warmup, peak = 2, 5e-3
    for step, value in lr.items():  # linear decay from the end of warmup to the new last step
        assert value == pytest.approx(peak * (longer - step + 1) / (longer - warmup + 1), rel=1e-6), (step, value)


# -- clear errors, no traceback (main_in_process: tests/conftest.py) ------------------------------
def _cpu_config(tmp_path: Path, **changes) -> str:
    cfg = json.loads((REPO / "trainer" / "configs" / "zero2_cpu.json").read_text())
    cfg.update(changes)
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_missing_artifact_is_one_line_on_stderr(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(PRETRAIN),
            "--data",
            str(tmp_path / "nowhere"),
            "--preset",
            "tiny",
            "--max-steps",
            "5",
            "--warmup-steps",
            "1",
            "--output-dir",
            str(tmp_path / "run"),
        ],
        cwd=REPO,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"pretrain: error: {tmp_path / 'nowhere'}: artifact directory does not exist" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--warmup-steps", "10"], "--warmup-steps (10) must be smaller than --max-steps (10)"),
        (["--hidden-size", "65"], "model.hidden_size (65) must be a multiple of model.num_heads (2)"),
        (["--vocab-size", "30522"], "--vocab-size 30522 does not match the artifact"),
        (["--max-position-embeddings", "64"], "--max-position-embeddings 64 is smaller than the sequence length"),
        (["--mask-ratio", "1.5"], "mask_ratio must be in (0, 1)"),
        (["--eval-shards", "0"], "--eval-every needs held-out shards"),
    ],
)
def test_bad_options_are_clear_errors(extra, words, demo_artifact, tmp_path, main_in_process):
    code, err = main_in_process(
        "--data",
        str(demo_artifact),
        "--preset",
        "tiny",
        "--max-steps",
        "10",
        "--warmup-steps",
        "1",
        "--output-dir",
        str(tmp_path / "run"),
        "--eval-every",
        "5",
        *extra,
    )
    assert code == 2 and err.startswith("pretrain: error: ") and words in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"train_batch_size": 64}, "remove 'train_batch_size'"),
        (
            {"optimizer": {"type": "AdamW", "params": {"lr": 0.1, "torch_adam": True}}},
            "remove optimizer.params.lr: it is set with --lr",
        ),
        ({"optimizer": {"type": "AdamW", "params": {}}}, "fused Adam, which needs a GPU"),
        ({"train_micro_batch_size_per_gpu": 0}, "train_micro_batch_size_per_gpu must be a positive integer"),
        ({"zero_optimization": {"stage": 2, "overlap_comms": True}}, "DeepSpeed rejects it: 1 validation error"),
        (
            {"checkpoint": {"load_universal": True}},
            "remove checkpoint.load_universal: the trainer sets it when --resume changes",
        ),
    ],
)
def test_bad_deepspeed_config_is_a_clear_error(changes, words, demo_artifact, tmp_path, main_in_process):
    code, err = main_in_process(
        "--data",
        str(demo_artifact),
        "--preset",
        "tiny",
        "--max-steps",
        "10",
        "--warmup-steps",
        "1",
        "--output-dir",
        str(tmp_path / "run"),
        "--deepspeed_config",
        _cpu_config(tmp_path, **changes),
    )
    assert code == 2 and words in err, err


def test_existing_run_needs_resume_and_resume_needs_the_same_tokenizer(
    one_process_run, wikitext2_artifact, tmp_path, main_in_process
):
    run_dir = tmp_path / "run"
    shutil.copytree(one_process_run / "checkpoints", run_dir / "checkpoints")
    base = ["--preset", "tiny", "--max-steps", "20", "--warmup-steps", "1", "--output-dir", str(run_dir)]
    demo = json.loads((one_process_run / "config.json").read_text())["artifact"]["uri"]
    code, err = main_in_process("--data", demo, *base)
    assert code == 2 and f"already holds checkpoints (latest: global_step{MAX_STEPS}); pass --resume" in err, err
    code, err = main_in_process("--data", str(wikitext2_artifact), *base, "--resume")
    assert (
        code == 2
        and "was trained with another tokenizer" in err
        and "vocabulary 4000" in err
        and "vocabulary 8000" in err
    ), err


@pytest.fixture(scope="module")
def demo_artifact_same_tokenizer(demo_artifact, tmp_path_factory) -> Path:
    """Another artifact (3 shards, first half of the demo corpus) tokenized with the demo artifact's tokenizer."""
    from conftest import DEMO_CORPUS, build

    tmp = tmp_path_factory.mktemp("same_tokenizer")
    half = tmp / "half.jsonl"
    lines = DEMO_CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)
    half.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    build(
        half,
        tmp / "artifact",
        "--input-format",
        "jsonl",
        "--tokenizer",
        str(demo_artifact / "tokenizer.json"),
        "--num-shards",
        "3",
    )
    return tmp / "artifact"


def test_resume_on_another_artifact_with_the_same_tokenizer_is_one_line_naming_both(
    one_process_run, demo_artifact, demo_artifact_same_tokenizer, tmp_path
):
    from schemas.artifact import Artifact

    other = demo_artifact_same_tokenizer
    assert (
        Artifact.open(str(other)).manifest["tokenizer"]["sha256"]
        == Artifact.open(str(demo_artifact)).manifest["tokenizer"]["sha256"]
    )
    run_dir = tmp_path / "run"
    resume_from(one_process_run, f"global_step{MAX_STEPS}", run_dir)
    proc = subprocess.run(
        [
            sys.executable,
            str(PRETRAIN),
            "--deepspeed_config",
            str(ds_config(tmp_path, 1)),
            "--data",
            str(other),
            "--output-dir",
            str(run_dir),
            "--resume",
            *COMMON,
            "--max-steps",
            str(MAX_STEPS + 2),
        ],
        cwd=REPO,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(
        f"pretrain: error: cannot resume {run_dir / 'checkpoints'}/global_step{MAX_STEPS} on {other} (fingerprint "
    )
    assert f"trained on another artifact, {demo_artifact} (fingerprint " in line, line


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--scheme", "whole_word"], "mask_scheme: saved 'span', now 'whole_word'"),
        (["--shuffle-window", "3"], "shuffle_window: saved 16, now 3"),
        (["--seed", "8"], "seed: saved 7, now 8"),
    ],
)
def test_resume_refuses_a_sample_stream_it_cannot_continue(
    extra, words, one_process_run, demo_artifact, tmp_path, main_in_process
):
    run_dir = tmp_path / "run"
    resume_from(one_process_run, f"global_step{MAX_STEPS}", run_dir)
    args = [a for a in COMMON if a not in ("--seed", "7")]
    args[args.index("--max-steps") + 1] = str(MAX_STEPS + 2)
    code, err = main_in_process(
        "--deepspeed_config",
        str(ds_config(tmp_path, 1)),
        "--data",
        str(demo_artifact),
        "--output-dir",
        str(run_dir),
        "--resume",
        *args,
        *(extra if "--seed" in extra else ["--seed", "7", *extra]),
    )
    assert code == 2 and err.startswith(
        f"pretrain: error: cannot resume {run_dir / 'checkpoints'}/global_step{MAX_STEPS}: "
    )
    assert words in err and err.count("\n") == 1, err


def test_resume_refuses_a_zero_stage_deepspeed_cannot_load(one_process_run, demo_artifact, tmp_path, main_in_process):
    """ZeRO-1's checkpoint with ZeRO-3 at the same number of ranks: DeepSpeed's loader fails (an AssertionError
    traceback, exit 1, before this check). 1 <-> 2 loads (tried by hand) and is only listed as a change."""
    run_dir = tmp_path / "run"
    resume_from(one_process_run, f"global_step{MAX_STEPS}", run_dir)
    code, err = main_in_process(
        "--deepspeed_config",
        str(ds_config(tmp_path, 3)),
        "--data",
        str(demo_artifact),
        "--output-dir",
        str(run_dir),
        "--resume",
        *COMMON,
        "--max-steps",
        str(MAX_STEPS + 2),
    )
    assert code == 2 and err.startswith(
        f"pretrain: error: cannot resume {run_dir / 'checkpoints'}/global_step{MAX_STEPS} "
        f"(ZeRO stage 1) with ZeRO stage 3: "
    ), err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize(
    "extra, warmup",
    [
        (["--max-steps", "30"], 0),
        (["--max-steps", "250"], 3),
        (["--max-steps", "1000"], 10),
        (["--max-steps", "30", "--warmup-steps", "5"], 5),
    ],
)
def test_warmup_defaults_to_1_percent_of_max_steps(extra, warmup, demo_artifact, tmp_path, main_in_process):
    """Issue 12: `--preset tiny --max-steps 30` without --warmup-steps used to stop with "--warmup-steps (10000)
    must be smaller than --max-steps (30)"; the default is now 1% of the run (BERT: 10k of 1M), resolved."""
    from trainer import engine, pretrain

    args = pretrain.build_parser().parse_args(
        [
            "--data",
            str(demo_artifact),
            "--preset",
            "tiny",
            "--eval-every",
            "0",
            "--output-dir",
            str(tmp_path / "run"),
            *extra,
        ]
    )
    engine.default_single_process_env(args.local_rank)
    setup = engine.prepare(args)
    assert setup.optim.warmup_steps == warmup
    assert setup.resolved(1)["optim"]["warmup_steps"] == warmup  # what RUN_DIR/config.json records
