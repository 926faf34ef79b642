"""A run directory is never silently restarted or shared (issue 21, items 2, 3 and the trainer's part of 8).

* ``--resume`` with an empty or garbage ``checkpoints/latest``, or one naming a missing or incomplete tag, resumes
  from the newest complete checkpoint and says so; with no complete checkpoint it refuses in one line (exit 2). A
  truncated model-states file is named. (Before: an empty ``latest`` restarted at step 0 beside the checkpoints; a
  truncated model-states file was a torch traceback.)
* Two ``trainer/pretrain.py`` runs into one ``--output-dir``: the second stops with one line naming
  ``RUN_DIR/_run.lock`` and its holder (before: both ran and both succeeded).

Real runs: the tiny preset on the embedded demo artifact, one CPU process, ZeRO-1 (tests/support/pretrain_runs.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.pretrain_runs import DEEPSPEED, PRETRAIN, REPO, TIMEOUT, ds_config, metric, run, run_env

pytestmark = pytest.mark.slow

TINY = ["--preset", "tiny", "--warmup-steps", "1", "--no-progress", "--num-workers", "0", "--eval-every", "0"]
TINY += ["--seed", "7", "--log-every", "1"]


@pytest.fixture(scope="module")
def two_checkpoints(demo_artifact, tmp_path_factory) -> Path:
    """A finished run of 4 steps with checkpoints global_step2 and global_step4."""
    tmp = tmp_path_factory.mktemp("two_checkpoints")
    out = tmp / "run"
    cfg = ds_config(tmp, 1)
    run([sys.executable, str(PRETRAIN), "--deepspeed_config", str(cfg), "--data", str(demo_artifact)]
        + ["--output-dir", str(out), "--max-steps", "4", "--save-every", "2", *TINY])  # fmt: skip
    assert (out / "checkpoints" / "latest").read_text() == "global_step4"
    assert not (out / "_run.lock").exists()  # released at the end of the run
    return out


def copy_run(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def args(run_dir: Path, artifact: Path, cfg: Path, max_steps: int, *extra: str) -> list[str]:
    return ["--deepspeed_config", str(cfg), "--data", str(artifact), "--output-dir", str(run_dir)] + [
        "--max-steps", str(max_steps), *TINY, *extra,
    ]  # fmt: skip


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# -- which checkpoint --resume takes -------------------------------------------------------------------
DAMAGE = {
    "latest empty": lambda ck: (ck / "latest").write_text(""),
    "latest garbage": lambda ck: (ck / "latest").write_bytes(b"\xff\xfe\x00garbage\n"),
    "latest missing": lambda ck: (ck / "latest").unlink(),
    "latest names a missing tag": lambda ck: (ck / "latest").write_text("global_step9"),
    "model states truncated": lambda ck: truncate(ck / "global_step4" / "mp_rank_00_model_states.pt"),
    "optimizer states missing": lambda ck: (ck / "global_step4" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink(),
    "trainer meta half written": lambda ck: truncate(ck / "global_step4" / "spanprep_trainer.json"),
}
WHY = {
    "latest empty": "latest is empty",
    "latest garbage": "latest does not name a checkpoint",
    "latest missing": "latest is missing",
    "latest names a missing tag": "latest names global_step9, which is incomplete: ",
    "model states truncated": "mp_rank_00_model_states.pt is truncated or damaged",
    "optimizer states missing": "zero_pp_rank_0_mp_rank_00_optim_states.pt is missing",
    "trainer meta half written": "spanprep_trainer.json is unreadable",
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_point_is_the_newest_complete_checkpoint(damage, two_checkpoints, tmp_path):
    from trainer.engine.resume_point import find_resume_point

    ck = copy_run(two_checkpoints, tmp_path / "run") / "checkpoints"
    assert find_resume_point(str(ck)).tag == "global_step4" and find_resume_point(str(ck)).note is None
    DAMAGE[damage](ck)
    point = find_resume_point(str(ck))
    assert point.tag == ("global_step4" if damage.startswith("latest") else "global_step2"), point
    assert point.note.startswith("resume: ") and WHY[damage] in point.note, point.note
    assert point.note.endswith("resuming from " + point.tag + " instead, the newest complete checkpoint") or (
        "also incomplete" in point.note
    )


def test_resume_after_an_empty_latest_continues_instead_of_restarting(two_checkpoints, demo_artifact, tmp_path):
    run_dir = copy_run(two_checkpoints, tmp_path / "run")
    (run_dir / "checkpoints" / "latest").write_text("")  # DeepSpeed's open(..., "w") then a kill
    cfg = ds_config(tmp_path, 1)
    proc = run([sys.executable, str(PRETRAIN), *args(run_dir, demo_artifact, cfg, 6, "--resume")])
    ckpt = run_dir / "checkpoints"
    assert f"resume: {ckpt}/latest is empty; resuming from global_step4 instead" in proc.stdout, proc.stdout
    assert f"resumed from {ckpt}/global_step4 at step 4" in proc.stdout
    assert "starting at step 0" not in proc.stdout
    assert sorted(metric(run_dir, "train_loss")) == list(range(1, 7))  # steps 1-4 before, 5 and 6 now
    assert (ckpt / "latest").read_text() == "global_step6"  # written by the trainer, atomically


def test_resume_with_no_complete_checkpoint_refuses_in_one_line_naming_the_file(
    two_checkpoints, demo_artifact, tmp_path, main_in_process
):
    run_dir = copy_run(two_checkpoints, tmp_path / "run")
    ckpt = run_dir / "checkpoints"
    for tag in ("global_step2", "global_step4"):
        truncate(ckpt / tag / "mp_rank_00_model_states.pt", keep=0.9)
    code, err = main_in_process(*args(run_dir, demo_artifact, ds_config(tmp_path, 1), 6, "--resume"))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"pretrain: error: cannot resume from {ckpt}: it holds no complete checkpoint (")
    for tag in ("global_step2", "global_step4"):
        assert f"{ckpt / tag / 'mp_rank_00_model_states.pt'} is truncated or damaged" in err
    assert "restore the damaged files from a copy, or start a new run in another --output-dir" in err
    assert not (run_dir / "_run.lock").exists()


def test_without_resume_a_run_directory_holding_only_checkpoint_directories_is_refused(
    two_checkpoints, demo_artifact, tmp_path, main_in_process
):
    run_dir = copy_run(two_checkpoints, tmp_path / "run")
    (run_dir / "checkpoints" / "latest").unlink()
    code, err = main_in_process(*args(run_dir, demo_artifact, ds_config(tmp_path, 1), 6))
    assert code == 2 and f"{run_dir} already holds checkpoints (latest: unreadable, directories: global_step2, " in err
    assert err.count("\n") == 1, err


# -- the run lock -----------------------------------------------------------------------------------
@pytest.mark.parametrize("second_launcher", ["python", "deepspeed, 2 ranks"])
def test_two_runs_into_one_output_dir_the_second_stops_naming_the_lock(second_launcher, demo_artifact, tmp_path):
    """The second run is refused by its rank 0; with the launcher, its other rank (which does not look at the lock)
    is ended by the launcher when rank 0 exits 2."""
    from conftest import free_port

    run_dir, cfg = tmp_path / "run", ds_config(tmp_path, 1)
    launch = [sys.executable, str(PRETRAIN)]
    if second_launcher != "python":
        launch = [str(DEEPSPEED), "--num_gpus", "2", "--master_port", str(free_port()), str(PRETRAIN)]
    first = subprocess.Popen(
        [sys.executable, str(PRETRAIN), *args(run_dir, demo_artifact, cfg, 80)],
        cwd=REPO, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lock = run_dir / "_run.lock"
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and first.poll() is None and not (run_dir / "monitor" / "train_loss.csv").exists():
            time.sleep(0.2)
        assert first.poll() is None, "the first run ended before the second could start"
        holder = json.loads(lock.read_text())
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()
        second = subprocess.run(
            [*launch, *args(run_dir, demo_artifact, cfg, 80)],
            cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert first.poll() is None, "the first run ended before the second one was refused: nothing was tested"
        out, err = first.communicate(timeout=TIMEOUT)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-3000:]
    line = (
        f"pretrain: error: {lock}: another run is using {run_dir} (host {holder['host']}, pid {first.pid}, "
        f"started {holder['started_at']}); if that run is no longer running anywhere (killed outright), delete the "
        f"file and start again"
    )
    errors = [x for x in (second.stdout + second.stderr).splitlines() if x.startswith("pretrain: error: ")]
    assert errors[0] == line and errors.count(line) == 1, second.stdout[-3000:] + second.stderr[-3000:]
    assert first.returncode == 0, err[-3000:]
    assert "done: 80 steps" in out
    assert sorted(metric(run_dir, "train_loss")) == list(range(1, 81))  # one run's steps, once each
    assert not lock.exists()


def test_a_lock_left_by_a_killed_run_is_called_stale_and_an_error_leaves_no_lock(
    demo_artifact, tmp_path, main_in_process
):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer exists
    lock = run_dir / "_run.lock"
    lock.write_text(json.dumps({"run_id": "x", "host": socket.gethostname(), "pid": dead.pid, "started_at": "then"}))
    argv = args(run_dir, demo_artifact, ds_config(tmp_path, 1), 6)
    code, err = main_in_process(*argv)
    assert code == 2 and err.count("\n") == 1, err
    assert f"pid {dead.pid}, started then); its process no longer exists on this host, so the lock is stale: " in err
    assert "delete the file and start again" in err
    lock.unlink()
    code, err = main_in_process(*argv, "--mask-ratio", "1.5")  # an error after the lock
    assert code == 2 and "mask_ratio must be in (0, 1)" in err
    assert os.listdir(run_dir) == []  # the lock was released


def test_sigterm_while_the_run_sets_up_releases_the_lock(demo_artifact, tmp_path):
    """A scheduler's SIGTERM before the training loop (which saves and exits 0 on it) ends the run through Python's
    exit path, so the lock does not outlive it (Python's default SIGTERM handling ends the process without that)."""
    import signal

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(PRETRAIN), *args(run_dir, demo_artifact, ds_config(tmp_path, 1), 80)],
        cwd=REPO, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lock = run_dir / "_run.lock"
    try:
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and proc.poll() is None and not lock.exists():
            time.sleep(0.05)
        assert proc.poll() is None and lock.exists()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (run_dir / "monitor" / "train_loss.csv").exists(), "the signal came after set-up: nothing was tested"
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert not lock.exists()
    assert "Traceback" not in err  # and it says so, where it ended without a word
    assert err.strip().splitlines()[-1] == (
        "pretrain: stopped by SIGTERM during start-up, before the first step (no checkpoint written)"
    )


def test_checkpoints_beyond_the_resumed_step_do_not_count_for_keep_checkpoints(
    two_checkpoints, demo_artifact, tmp_path
):
    """Resumed from global_step2 because global_step4 is damaged: at step 3 with --keep-checkpoints 2 the two kept
    are global_step2 and global_step3, not the damaged global_step4 and global_step3."""
    run_dir = copy_run(two_checkpoints, tmp_path / "run")
    ckpt = run_dir / "checkpoints"
    truncate(ckpt / "global_step4" / "mp_rank_00_model_states.pt")
    extra = ("--resume", "--save-every", "1", "--keep-checkpoints", "2")
    proc = run([sys.executable, str(PRETRAIN), *args(run_dir, demo_artifact, ds_config(tmp_path, 1), 3, *extra)])
    assert f"resumed from {ckpt}/global_step2 at step 2" in proc.stdout
    assert sorted(p.name for p in ckpt.glob("global_step*")) == ["global_step2", "global_step3", "global_step4"]
    assert (ckpt / "latest").read_text() == "global_step3"
