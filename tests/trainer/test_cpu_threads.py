"""A one-process CPU run gives torch max(1, cores - data workers - 1) threads (trainer/engine/threads.py), unless
``--cpu-threads`` or ``OMP_NUM_THREADS`` says otherwise; fine-tuning's step lines in a log carry elapsed time and ETA.
The entry points are called in this process up to their first refusal (before any process group or data)."""

from __future__ import annotations

import pytest
import torch

from trainer import finetune, pretrain
from trainer.engine.threads import available_cores, choose_cpu_threads
from trainer.finetuning.eta import elapsed_and_eta


@pytest.fixture
def one_process(monkeypatch):
    """No launcher variables, no OMP_NUM_THREADS; torch's thread count restored afterwards."""
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    for key in (*launcher, "OMP_NUM_THREADS"):
        monkeypatch.setenv(key, "0")  # restored afterwards; main only fills in missing ones
        monkeypatch.delenv(key)
    before = torch.get_num_threads()
    torch.set_num_threads(available_cores())  # torch's own default, whatever an earlier test left
    yield
    torch.set_num_threads(before)


def test_the_rule_leaves_a_core_to_each_data_worker_and_to_the_process():
    assert [choose_cpu_threads(2, w) for w in (0, 1, 2, 4)] == [1, 1, 1, 1]  # 2 cores: never more than one
    assert choose_cpu_threads(16, 2) == 13
    assert choose_cpu_threads(8, 0) == 7
    assert choose_cpu_threads(1, 0) == 1


def _threads_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("threads: ")]
    assert len(lines) == 1, out
    return lines[0]


def test_pretrain_without_the_launcher_follows_the_rule(one_process, demo_artifact, tmp_path, capsys):
    # more held-out shards than the artifact has: main stops at this refusal of engine.prepare, after choosing the
    # threads (a missing artifact is refused before, without torch)
    args = ["--data", str(demo_artifact), "--eval-shards", "9", "--preset", "tiny", "--max-steps", "1",
            "--output-dir", str(tmp_path)]  # fmt: skip
    assert pretrain.main([*args, "--num-workers", "2"]) == 2
    expected = choose_cpu_threads(available_cores(), 2)
    assert torch.get_num_threads() == expected
    assert _threads_line(capsys.readouterr().out).startswith(f"threads: torch {expected} ({available_cores()} cores")
    assert pretrain.main([*args, "--cpu-threads", "3"]) == 2
    assert torch.get_num_threads() == 3
    assert _threads_line(capsys.readouterr().out) == "threads: torch 3 (--cpu-threads)"
    assert pretrain.main([*args, "--cpu-threads", "0"]) == 2
    assert "pretrain: error: --cpu-threads 0: must be at least 1" in capsys.readouterr().err


def test_finetune_without_the_launcher_follows_the_rule_and_keeps_omp_num_threads(one_process, tmp_path, capsys):
    # --init is an empty directory: refused when the checkpoint is opened, after choosing the threads (a missing
    # --init is refused before, without torch)
    (tmp_path / "no-checkpoint").mkdir()
    args = ["--init", str(tmp_path / "no-checkpoint"), "--task", "rte", "--head", "cls", "--data-dir", str(tmp_path),
            "--output-dir", str(tmp_path / "out")]  # fmt: skip
    assert finetune.main(args) == 2
    expected = choose_cpu_threads(available_cores(), 0)  # batches are made in the training process
    assert torch.get_num_threads() == expected
    assert _threads_line(capsys.readouterr().out).startswith(f"threads: torch {expected} (")
    torch.set_num_threads(2)  # as torch does at import with OMP_NUM_THREADS=2
    with pytest.MonkeyPatch.context() as m:
        m.setenv("OMP_NUM_THREADS", "2")
        assert finetune.main(args) == 2
    assert torch.get_num_threads() == 2
    assert _threads_line(capsys.readouterr().out).startswith("threads: torch 2 (OMP_NUM_THREADS")


def test_step_lines_say_elapsed_time_and_eta():
    assert elapsed_and_eta(12.0, 10, 936) == "elapsed 0:12, ETA 18:31"
    assert elapsed_and_eta(3700.0, 1, 2) == "elapsed 1:01:40, ETA 1:01:40"
    assert elapsed_and_eta(5.0, 4, 4) == "elapsed 0:05, ETA 0:00"


def test_a_start_up_error_is_said_by_the_first_rank_at_once_and_by_another_if_it_outlives_the_grace(
    monkeypatch, capsys
):
    """Under a launcher the first rank to exit non-zero makes it end the others: a silent rank exiting first took the
    only message with it. Now the other ranks wait (the launcher ends them) and say it themselves if still running."""
    from trainer.engine import distributed

    waited: list[float] = []
    monkeypatch.setattr(distributed.time, "sleep", waited.append)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    distributed.say_setup_error("pretrain", "--eval-shards 9: too many")
    assert waited == [] and capsys.readouterr().err == "pretrain: error: --eval-shards 9: too many\n"
    monkeypatch.setenv("LOCAL_RANK", "1")
    distributed.say_setup_error("pretrain", "--eval-shards 9: too many")
    assert waited == [distributed.SETUP_ERROR_GRACE_S]
    assert capsys.readouterr().err == "pretrain: error: --eval-shards 9: too many\n"
