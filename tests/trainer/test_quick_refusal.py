"""A refusal of the command line or the artifact comes before torch and DeepSpeed are imported (trainer/pretrain.py
``check_before_torch``, trainer/finetune.py), so it returns in seconds, under the ``deepspeed`` launcher too, as one
line and exit status 2 (issue 45 item 5)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, free_port
from tests.support.pretrain_runs import DEEPSPEED, PRETRAIN, run_env

PROBE = """
import sys
from trainer import {program}
code = {program}.main(sys.argv[1:])
print("imported:", sorted(m for m in ("torch", "deepspeed") if m in sys.modules), "exit:", code)
"""


@pytest.mark.parametrize(
    "program, argv, words",
    [
        ("pretrain", ["--data", "{tmp}/nowhere", "--preset", "tiny", "--max-steps", "4", "--output-dir", "{tmp}/run"],
         "pretrain: error: {tmp}/nowhere: artifact directory does not exist"),
        ("pretrain", ["--data", "{tmp}/nowhere", "--preset", "tiny", "--max-steps", "4", "--warmup-steps", "4",
                      "--output-dir", "{tmp}/run"], "pretrain: error: --warmup-steps (4) must be smaller"),
        ("pretrain", ["--data", "{tmp}/nowhere", "--preset", "tiny", "--max-steps", "4", "--deepspeed_config",
                      "{tmp}/none.json", "--output-dir", "{tmp}/run"], "pretrain: error: --deepspeed_config {tmp}/none.json: no such file"),
        ("finetune", ["--init", "{tmp}/nowhere", "--task", "rte", "--head", "cls", "--data-dir", "{tmp}",
                      "--output-dir", "{tmp}/out"], "finetune: error: --init {tmp}/nowhere: no such directory"),
        ("finetune", ["--init", "{tmp}/nowhere", "--task", "rte", "--head", "cls", "--data-dir", "{tmp}",
                      "--cpu-threads", "0", "--output-dir", "{tmp}/out"], "finetune: error: --cpu-threads 0: must be at least 1"),
    ],
)  # fmt: skip
def test_a_refusal_does_not_import_torch_or_deepspeed(program, argv, words, tmp_path):
    argv = [a.format(tmp=tmp_path) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(program=program), *argv],
        cwd=REPO, env={**run_env(), "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.stdout.strip().splitlines()[-1] == "imported: [] exit: 2", (proc.stdout, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(words.format(tmp=tmp_path)), proc.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


def test_a_refusal_under_the_launcher_with_two_cpu_ranks_is_one_line_and_exit_2(tmp_path):
    """The documented CPU command (docs/TRAINING.md): the ranks refuse before importing torch; the launcher prints
    no rank's command line but the one in its own [ERROR] line on a rank's non-zero exit (deepspeed/launcher/launch.py
    prints it at ERROR level after the ranks are gone, so it stays the last line)."""
    missing = tmp_path / "nowhere"
    cmd = [str(DEEPSPEED), "--log_level", "warning", "--master_port", str(free_port()), "--num_gpus", "2",
           str(PRETRAIN.relative_to(REPO)), "--deepspeed_config", "trainer/configs/zero2_cpu.json", "--data",
           str(missing), "--preset", "tiny", "--max-steps", "4", "--output-dir", str(tmp_path / "run")]  # fmt: skip
    env = {**run_env(), "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    ours = [line for line in lines if line.startswith("pretrain: error:")]
    assert ours == [f"pretrain: error: {missing}: artifact directory does not exist"], lines
    assert "Traceback" not in proc.stderr
    assert not any("CUDA" in line or "built successfully" in line for line in lines), lines
    dumps = [line for line in lines if "--local_rank" in line]  # a rank's command line
    assert len(dumps) == 1 and "[ERROR]" in dumps[0] and "exits with return code = 2" in dumps[0], lines
    assert not (tmp_path / "run").exists()


def test_deepspeeds_build_notice_is_dropped_and_every_other_line_kept(capsys):
    """deepspeed/comm/torch.py prints ``DeepSpeed <op> built successfully`` in every rank of a CPU run."""
    from trainer.engine import runtime  # noqa: F401  (DS_ACCELERATOR before DeepSpeed is imported)

    # isort: split
    from deepspeed.accelerator import get_accelerator

    from trainer.engine.distributed import without_build_notice

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    notice = f"DeepSpeed {builder.absolute_name()} built successfully"  # the line as DeepSpeed makes it
    with without_build_notice():
        print("before")
        print(notice)
        print("after")
    assert capsys.readouterr().out == "before\nafter\n"
    with pytest.raises(RuntimeError), without_build_notice():
        print("said before a failure")
        raise RuntimeError("the op did not build")
    assert capsys.readouterr().out == "said before a failure\n"
