"""Two trainer nodes on one machine, launched the way Kubernetes and Slurm launch them (docs/RUNNING.md): one
``deepspeed --hostfile HOSTFILE --no_ssh --node_rank N --master_addr ADDR --master_port PORT`` launcher per node,
here two on 127.0.0.1 with one CPU rank each (gloo). Each node has its own node-local directories, as two machines
would: the shard cache (``--cache-dir``) and the verified-shard cache (``$SPANPREP_CACHE_DIR``); RUN_DIR is shared.
docs/cluster/pretrain.sbatch (Slurm) and docs/cluster/pretrain-indexed-job.yaml (a Kubernetes Indexed Job) use exactly
this launch form (checked below).

1. The 2-node run saves at step 4; node 1's rank is killed (SIGKILL, no notice) as it starts step 6: node 0's rank
   fails in that step's all-reduce and both launchers end.
2. Resume on both nodes from global_step4 to step 8.
3. Resume the 2-node checkpoint on one node with one rank (elastic: a universal checkpoint, 2 micro-batches a step).

Checked with the probe's records (tests/support/elastic_probe.py: the sample ids each rank's steps took from the
loader, and each rank's shard checks and shard-cache fills): each node filled (downloaded and hashed) every shard
into its own cache once, and a resume hashes nothing again; every sample is taken once across the two nodes (the
two ranks' parts of a step are disjoint, steps 1..8 hold 32 distinct samples), the resumed steps take exactly the
samples the killed run took (step 5) or would have taken, and the 1-node resume takes the same samples as the 2-node
resume, nothing repeated or skipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port
from test_elastic_resume import COMMON, GLOBAL_BATCH, MAX_STEPS, PROBE, SAVED_AT, ds_config, global_stream

from tests.support.pretrain_runs import DEEPSPEED, REPO, TIMEOUT, resume_from, run_env

pytestmark = pytest.mark.slow

NODES = 2
TORCHRUN = DEEPSPEED.parent / "torchrun"
# The launch form: the launcher's flags, then the trainer's node-local options and environment.
LAUNCHER_FLAGS = ("--hostfile", "--no_ssh", "--node_rank", "--master_addr", "--master_port")
NODE_LOCAL = ("--cache-dir", "SPANPREP_CACHE_DIR")
DIE_AT = SAVED_AT + 2  # node 1's rank is killed as it starts this step: step SAVED_AT + 1 is trained, not saved


def hostfile(tmp: Path) -> Path:
    path = tmp / "hostfile"
    path.write_text("".join(f"node-{n} slots=1\n" for n in range(NODES)))  # names only: --no_ssh never resolves them
    return path


def node_dirs(tmp: Path, node: int) -> tuple[Path, Path]:
    """This node's (shard cache, verified-shard cache) directories."""
    cache, verified = tmp / f"node{node}" / "shard_cache", tmp / f"node{node}" / "verified"
    cache.mkdir(parents=True, exist_ok=True)
    verified.mkdir(parents=True, exist_ok=True)
    return cache, verified


def launch_nodes(
    tmp: Path,
    run_dir: Path,
    artifact: Path,
    *extra: str,
    die_at: int = 0,
    shard_cache: bool = True,
    torchrun: bool = False,
) -> list[tuple[int, str]]:
    """Both nodes' launchers, each in its own session; returns (exit status, output) per node. Whatever happens,
    no process of theirs outlives this call. ``shard_cache``: pass the node's --cache-dir (else the shards are
    verified through the node's verified-shard cache). ``torchrun``: launch with ``torchrun --nnodes`` instead."""
    port = free_port()
    procs = []
    try:
        for node in range(NODES):
            cache, verified = node_dirs(tmp, node)
            env = {**run_env(), "SPANPREP_PROBE_DIR": str(run_dir / "probe"), "SPANPREP_CACHE_DIR": str(verified)}
            env["SPANPREP_PROBE_DUMP_STATE"] = "0"
            if die_at and node == NODES - 1:
                env["SPANPREP_PROBE_DIE_AT_STEP"] = str(die_at)
            values = (str(hostfile(tmp)), None, str(node), "127.0.0.1", str(port))
            launcher = [a for flag, v in zip(LAUNCHER_FLAGS, values, strict=True) for a in (flag, v) if a is not None]
            if torchrun:  # torchrun's form of the same: --nnodes instead of a hostfile, no --no_ssh
                launcher = ["--nnodes", str(NODES), "--nproc_per_node", "1", *launcher[3:]]
            cmd = [
                str(TORCHRUN if torchrun else DEEPSPEED), *launcher, str(PROBE),
                "--deepspeed_config", str(ds_config(tmp, 2, NODES)), "--data", str(artifact),
                "--output-dir", str(run_dir), *(["--cache-dir", str(cache)] if shard_cache else []), *COMMON, *extra,
            ]  # fmt: skip
            log = open(tmp / f"{run_dir.name}.node{node}.log", "w+")
            procs.append((subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True), log))  # fmt: skip
        results = []
        for proc, log in procs:
            proc.wait(timeout=TIMEOUT)
            log.seek(0)
            results.append((proc.returncode, log.read()))
        return results
    finally:
        for proc, log in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher's session: its ranks too
            except ProcessLookupError:
                pass
            proc.wait()
            log.close()


def one_node(tmp: Path, run_dir: Path, artifact: Path, *extra: str) -> str:
    """One node, one rank (``python``), with node 0's node-local directories."""
    cache, verified = node_dirs(tmp, 0)
    env = {**run_env(), "SPANPREP_PROBE_DIR": str(run_dir / "probe"), "SPANPREP_CACHE_DIR": str(verified)}
    cmd = [sys.executable, str(PROBE), "--deepspeed_config", str(ds_config(tmp, 2, 1)), "--data", str(artifact),
           "--output-dir", str(run_dir), "--cache-dir", str(cache), *COMMON, *extra]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          start_new_session=True)  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def node_records(run_dir: Path) -> dict[int, dict]:
    return {
        int(p.stem.removeprefix("node_rank")): json.loads(p.read_text())
        for p in (run_dir / "probe").glob("node_rank*.json")
    }


def cached_shards(tmp: Path, node: int) -> list[str]:
    return sorted(p.name for p in (node_dirs(tmp, node)[0] / "shards").glob("*.arrow"))


def assert_each_step_disjoint_across_nodes(run_dir: Path, steps: list[int]) -> None:
    per_rank = {}
    for rank in range(NODES):
        path = run_dir / "probe" / f"samples_rank{rank}.jsonl"
        per_rank[rank] = {rec["step"]: rec["micro_batches"] for rec in map(json.loads, path.read_text().splitlines())}
    for step in steps:
        parts = [{i for batch in per_rank[r][step] for i in batch} for r in range(NODES)]
        assert all(len(p) == GLOBAL_BATCH // NODES for p in parts) and not parts[0] & parts[1], (step, parts)


def test_two_nodes_kill_one_resume_on_both_then_on_one(demo_artifact, tmp_path):
    train_shards = len(json.loads((demo_artifact / "manifest.json").read_text())["shards"]) - 1  # 1 held out

    # 1. Two nodes; node 1's rank dies at the start of step DIE_AT.
    killed = tmp_path / "run"
    results = launch_nodes(tmp_path, killed, demo_artifact, "--save-every", str(SAVED_AT), die_at=DIE_AT)
    assert all(code != 0 for code, _ in results), [code for code, _ in results]
    ckpt = killed / "checkpoints"
    assert (ckpt / "latest").read_text() == f"global_step{SAVED_AT}"
    for rank in range(NODES):  # each node's rank wrote its part of the checkpoint into the shared RUN_DIR
        assert (ckpt / f"global_step{SAVED_AT}" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").exists()
    first = global_stream(killed)
    assert sorted(first) == list(range(1, DIE_AT))  # the step node 1 died in was never completed
    assert_each_step_disjoint_across_nodes(killed, list(range(1, DIE_AT)))
    records = node_records(killed)
    for node in range(NODES):  # one rank per node: rank = node, LOCAL_RANK 0 on both
        r = records[node]
        assert r["rank"] == node and r["local_rank"] == 0
        assert r["cache_dir"] == str(node_dirs(tmp_path, node)[0])
        assert r["cache_fills"] == train_shards, r  # each shard downloaded and sha256-checked once on each node
        assert len(cached_shards(tmp_path, node)) == train_shards
    assert cached_shards(tmp_path, 0) == cached_shards(tmp_path, 1)  # the same files, in two node-local caches
    for node, (_, out) in enumerate(results):  # each node says how its shards were checked
        assert (
            f"rank {node} size-checked {train_shards}; the node-local --cache-dir {node_dirs(tmp_path, node)[0]}" in out
        )

    # 2. Resume on both nodes from global_step4, this time checking the shards through each node's verified-shard
    # cache (no --cache-dir): each node hashes each shard once; step 5 is retrained on the same samples.
    resumed = tmp_path / "resumed"
    resume_from(killed, f"global_step{SAVED_AT}", resumed)
    results = launch_nodes(
        tmp_path, resumed, demo_artifact, "--resume", "--save-every", str(SAVED_AT), shard_cache=False
    )
    for code, out in results:
        assert code == 0, out[-6000:]
    assert f"resumed from {resumed / 'checkpoints'}/global_step{SAVED_AT} at step {SAVED_AT}" in results[0][1]
    second = global_stream(resumed)
    assert sorted(second) == list(range(SAVED_AT + 1, MAX_STEPS + 1))
    assert second[SAVED_AT + 1] == first[SAVED_AT + 1]  # the step trained before the kill, trained again the same
    assert_each_step_disjoint_across_nodes(resumed, list(range(SAVED_AT + 1, MAX_STEPS + 1)))
    for node, r in node_records(resumed).items():
        assert r["cache_dir"] is None and r["verified_dir"] == str(node_dirs(tmp_path, node)[1])
        assert r["shard_checks"] == {"size": 0, "hashed": train_shards, "cached": 0}, (node, r)
        assert len(list((node_dirs(tmp_path, node)[1] / "verified-shards").iterdir())) >= train_shards
        assert f"rank {node} hashed {train_shards}, found 0 verified on this node" in results[node][1]
    taken = [i for s in range(1, SAVED_AT + 1) for i in first[s]] + [
        i for s in range(SAVED_AT + 1, MAX_STEPS + 1) for i in second[s]
    ]
    assert len(taken) == len(set(taken)) == MAX_STEPS * GLOBAL_BATCH  # every sample once in the first epoch

    # 3. The 2-node checkpoint on one node, one rank (elastic): the same samples as the 2-node resume.
    one = tmp_path / "one"
    resume_from(killed, f"global_step{SAVED_AT}", one)
    out = one_node(tmp_path, one, demo_artifact, "--resume", "--save-every", str(SAVED_AT))
    assert f"was saved by {NODES} ranks, this run has 1" in out
    third = global_stream(one)
    assert sorted(third) == list(range(SAVED_AT + 1, MAX_STEPS + 1))
    for step in range(SAVED_AT + 1, MAX_STEPS + 1):
        assert third[step] == second[step], step  # same samples, same order: nothing repeated or skipped
    assert node_records(one)[0]["cache_fills"] == 0  # node 0's shard cache is warm from the first run: no fill


def test_two_nodes_with_torchrun(demo_artifact, tmp_path):
    """torchrun --nnodes 2 --node_rank N works too (docs/RUNNING.md recommends the deepspeed launcher, as shipped)."""
    run_dir = tmp_path / "run"
    results = launch_nodes(tmp_path, run_dir, demo_artifact, "--max-steps", str(SAVED_AT), torchrun=True)
    for code, out in results:
        assert code == 0, out[-6000:]
    stream = global_stream(run_dir)
    assert sorted(stream) == list(range(1, SAVED_AT + 1))
    assert_each_step_disjoint_across_nodes(run_dir, list(range(1, SAVED_AT + 1)))
    taken = [i for s in stream.values() for i in s]
    assert len(taken) == len(set(taken)) == SAVED_AT * GLOBAL_BATCH
    assert {r["rank"]: r["local_rank"] for r in node_records(run_dir).values()} == {0: 0, 1: 0}


def test_the_shipped_slurm_and_kubernetes_examples_use_the_tested_launch_form():
    import re

    import yaml

    sbatch = (REPO / "docs" / "cluster" / "pretrain.sbatch").read_text()
    job = (REPO / "docs" / "cluster" / "pretrain-indexed-job.yaml").read_text()
    assert subprocess.run(["bash", "-n", str(REPO / "docs" / "cluster" / "pretrain.sbatch")]).returncode == 0
    kinds = [doc["kind"] for doc in yaml.safe_load_all(job)]
    assert kinds == ["Service", "ConfigMap", "Job"]
    for text in (sbatch, job):
        command = text[text.index("exec deepspeed") :]
        flags = re.findall(r"(--[a-z_]+)", command.split("trainer/pretrain.py")[0])
        assert tuple(flags) == LAUNCHER_FLAGS, flags  # the same launcher flags, in the same order
        assert all(option in text for option in NODE_LOCAL)


def test_the_slurm_script_runs_the_launch_form_on_each_node(tmp_path):
    """The batch script under bash with stand-ins for Slurm's commands and for deepspeed (which prints its
    arguments): node 1 of a 2-node allocation runs the tested launch form with its node-local directories."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "scontrol": 'printf "gpu-a\\ngpu-b\\n"',  # show hostnames $SLURM_JOB_NODELIST
        "srun": 'shift; SLURM_NODEID=1 exec "$@"',  # drop --kill-on-bad-exit=1; run as the second node
        "deepspeed": 'printf "%s\\n" "$@"; echo "SPANPREP_CACHE_DIR=$SPANPREP_CACHE_DIR"',
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    run_dir, node_local = tmp_path / "run", tmp_path / "local"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_ID": "77", "RUN_DIR": str(run_dir), "NODE_LOCAL": str(node_local), "GPUS_PER_NODE": "2"}  # fmt: skip
    proc = subprocess.run(
        ["bash", str(REPO / "docs" / "cluster" / "pretrain.sbatch"), "--resume"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.splitlines()
    hostfile = run_dir / "hostfile.77"
    assert args[:10] == ["--hostfile", str(hostfile), "--no_ssh", "--node_rank", "1", "--master_addr", "gpu-a",
                         "--master_port", "29500", "trainer/pretrain.py"]  # fmt: skip
    assert hostfile.read_text() == "gpu-a slots=2\ngpu-b slots=2\n"
    assert args[args.index("--cache-dir") + 1] == f"{node_local}/shard_cache"
    assert args[args.index("--output-dir") + 1] == str(run_dir)
    assert args[-2:] == ["--resume", f"SPANPREP_CACHE_DIR={node_local}/verified"]
    assert (node_local / "shard_cache").is_dir() and (node_local / "verified").is_dir()
