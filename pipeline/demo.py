"""``make demo``: build an artifact from the embedded corpus, verify it, and pre-train a tiny SpanBERT on it.

    .venv/bin/python -m pipeline.demo [--workdir demo] [--steps 40] [--no-train]

Everything is offline and takes a few minutes on 2 CPU cores: the corpus is
``pipeline/data/demo_corpus.jsonl`` (40 original articles written for this project), the
tokenizer is trained on it, spaCy marks entity and noun-phrase candidates, and the trainer runs
under the ``deepspeed`` launcher (two CPU ranks with gloo, or the GPUs when there are any).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from pipeline import build_shards, verify
from schemas import commands

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "pipeline" / "data" / "demo_corpus.jsonl"


def _banner(text: str) -> None:
    print(f"\n== {text}", flush=True)


def build_artifact(workdir: Path) -> Path:
    artifact = workdir / "artifact"
    _banner(
        f"1/3 building the artifact from {CORPUS.relative_to(REPO)} (tokenizer training, punkt, spaCy candidates, Arrow shards, report)"
    )
    argv = [
        "--input", str(CORPUS), "--input-format", "jsonl", "--output", str(artifact), "--overwrite",
        "--train-tokenizer", "--vocab-size", "4000", "--num-shards", "4", "--max-seq-len", "128",
        "--mask-candidates", "entities,noun_phrases", "--report",
    ]  # fmt: skip
    started = time.time()
    code = build_shards.main(argv)
    if code:
        raise SystemExit(code)
    print(f"   built in {time.time() - started:.0f} s")
    _banner("2/3 verifying checksums, counts and invariants")
    if verify.main([str(artifact)]):
        raise SystemExit("verify failed")
    return artifact


def _launcher_command(artifact: Path, run_dir: Path, steps: int) -> tuple[list[str], dict]:
    import torch

    deepspeed = Path(sys.executable).parent / "deepspeed"
    env = dict(os.environ)
    if torch.cuda.is_available():
        config, ranks = "trainer/configs/zero2.json", ["--num_gpus", str(torch.cuda.device_count())]
    else:
        config, ranks = "trainer/configs/zero2_cpu.json", ["--num_gpus", "2"]  # two CPU ranks
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("DS_ACCELERATOR", "cpu")  # the launcher's own processes too (trainer/engine/runtime.py)
    # the launcher's own log at WARNING: its INFO lines are its argv per rank, world info and, on CPU, "Setting
    # CUDA_VISIBLE_DEVICES" (its name for the CPU ranks' numbering); the ranks log as --log-level says
    cmd = [
        str(deepspeed), "--log_level", "warning", *ranks, "--master_port", str(_free_port()), "trainer/pretrain.py",
        "--deepspeed_config", config, "--data", str(artifact), "--preset", "tiny", "--max-seq-len", "128",
        "--max-steps", str(steps), "--warmup-steps", str(max(1, steps // 10)), "--lr", "1e-3",
        "--log-every", "5", "--eval-every", str(steps), "--save-every", str(steps), "--num-workers", "1",
        "--output-dir", str(run_dir),
    ]  # fmt: skip
    return cmd, env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(artifact: Path, workdir: Path, steps: int) -> Path:
    run_dir = workdir / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd, env = _launcher_command(artifact, run_dir, steps)
    _banner(f"3/3 pre-training the tiny preset for {steps} steps under the deepspeed launcher")
    set_here = [f"{k}={env[k]}" for k in ("OMP_NUM_THREADS", "DS_ACCELERATOR") if env.get(k) != os.environ.get(k)]
    print("   " + " ".join([*set_here, commands.program(cmd[0]), *cmd[1:]]), flush=True)
    started = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=env)
    if proc.returncode:
        raise SystemExit(f"training failed with exit status {proc.returncode}")
    print(f"   trained in {time.time() - started:.0f} s")
    return run_dir


def print_losses(run_dir: Path) -> None:
    files = sorted(run_dir.rglob("*loss*.csv"))
    if not files:
        print(f"   (no loss CSV found under {run_dir})")
        return
    for f in files:
        with f.open() as fh:
            rows = [r for r in csv.reader(fh) if r]
        values = [(r[0], r[1]) for r in rows if len(r) >= 2 and r[0].replace(".", "").isdigit()]
        if values:
            shown = ", ".join(f"step {s}: {float(v):.3f}" for s, v in values[:: max(1, len(values) // 8)])
            print(f"   {f.relative_to(run_dir)}: {shown}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=commands.module("pipeline.demo"), description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="demo", help="where the artifact and the run go (default: ./demo)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--no-train", action="store_true", help="only build and verify the artifact")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    artifact = build_artifact(workdir)
    if args.no_train:
        print(f"\nartifact: {artifact}")
        return 0
    run_dir = train(artifact, workdir, args.steps)
    _banner("losses")
    print_losses(run_dir)
    print(
        f"\nartifact:    {artifact}\n             ({commands.module('pipeline.verify')} {artifact}; schemas/FORMAT.md)"
    )
    print(f"report:      {artifact}/report/index.html and the dataset card {artifact}/README.md")
    print(f"training run: {run_dir}\n             (checkpoints, monitor CSV/TensorBoard, resolved config)")
    print(f"export:      {commands.module('trainer.export')} {run_dir}/checkpoints --out {workdir}/hf_model")
    return 0


if __name__ == "__main__":
    from schemas.quick_exit import quick_exit

    quick_exit(main())
