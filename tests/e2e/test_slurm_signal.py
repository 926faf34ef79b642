"""docs/cluster/pretrain.sbatch hands Slurm's early SIGTERM to the ranks, and to the ranks only.

``#SBATCH --signal=B:TERM@300`` signals the batch shell alone (``B:``; without it Slurm signals every process of the
job steps, the deepspeed launchers too, which SIGKILL ranks still saving after 30 s). Before, the shell waited on
``srun`` in the foreground without a trap: SIGTERM ended the shell, and the ranks never heard of it. Here the script
runs under bash with stand-ins for Slurm's commands and for the launcher, which starts one fake rank (a Python
process with the rank's command line that records the signal and exits 0, as a rank exits after its checkpoint).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

SBATCH = REPO / "docs" / "cluster" / "pretrain.sbatch"
RANK = """
import os, signal, sys, time
def stop(signum, frame):
    open(os.environ["SIGNALLED"], "a").write("rank\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(os.environ["STARTED"], "w").close()
time.sleep(120)
sys.exit(3)
"""
LAUNCHER = """#!/bin/bash
trap 'echo launcher >> "$SIGNALLED"' TERM
args=("$@")
for i in "${!args[@]}"; do [[ ${args[$i]} == trainer/pretrain.py ]] && rest=("${args[@]:$((i + 1))}"); done
"$PYTHON" -c "$RANK" trainer/pretrain.py --local_rank=0 "${rest[@]}" &
pid=$!
wait $pid; s=$?
if kill -0 $pid 2>/dev/null; then wait $pid; s=$?; fi
exit $s
"""
SRUN = """#!/bin/bash
overlap=0
while [[ $# -gt 0 && $1 == -* ]]; do case $1 in --overlap) overlap=1; shift;; --nodes|-N) shift 2;; *) shift;; esac; done
if (( overlap )) && [[ -n $SLOW_STOP ]]; then SLURM_NODEID=1 "$@"; s=$?; sleep "$SLOW_STOP"; exit $s; fi
SLURM_NODEID=1 exec "$@"
"""


@pytest.mark.parametrize("slow_stop", ["", "1"], ids=["stop-step-ends-first", "ranks-end-before-the-stop-step"])
def test_the_batch_shells_sigterm_reaches_the_ranks_and_not_the_launcher(tmp_path, slow_stop):
    """With ``slow_stop`` the trap's own srun ends a second after its pkill, so the ranks have saved and the step has
    ended before the trap returns (seen in CI under load: the script then took the ended step for a running one's
    interrupted wait and exited 143)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {
        "scontrol": '#!/bin/bash\nprintf "gpu-a\\ngpu-b\\n"\n',
        "srun": SRUN,
        "deepspeed": LAUNCHER,
    }.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    signalled, started = tmp_path / "signalled", tmp_path / "started"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "2", "RUN_DIR": str(tmp_path / "run"),
           "NODE_LOCAL": str(tmp_path / "local"), "GPUS_PER_NODE": "1", "PYTHON": sys.executable, "RANK": RANK,
           "SIGNALLED": str(signalled), "STARTED": str(started), "SLOW_STOP": slow_stop}  # fmt: skip
    shell = subprocess.Popen(
        ["bash", str(SBATCH)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert shell.poll() is None and time.monotonic() < deadline, shell.stderr.read() if shell.stderr else ""
            time.sleep(0.05)
        shell.send_signal(signal.SIGTERM)  # what --signal=B:TERM@300 does, to the batch shell alone
        _, err = shell.communicate(timeout=60)
    finally:
        os.killpg(shell.pid, signal.SIGKILL) if shell.poll() is None else None
        try:
            os.killpg(shell.pid, signal.SIGKILL)  # the fake rank, should it outlive a failed run
        except ProcessLookupError:
            pass
    assert signalled.exists(), f"the ranks were not signalled (exit {shell.returncode}): {err[-2000:]}"
    assert signalled.read_text() == "rank\n"  # the rank, once; never the launcher
    assert shell.returncode == 0, err[-2000:]  # the rank saved and exited 0, and so did the job
