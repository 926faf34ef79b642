"""`python -m trainer.plot RUN_DIR`: training curves from the DeepSpeed CSV monitor, on a real tiny run of
`trainer/pretrain.py` and on monitor files written by DeepSpeed's own csvMonitor (resumes, missing metrics,
damaged lines)."""

from __future__ import annotations

import csv
import json
import os
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.conftest import free_port
from trainer import plot

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR" and data[-8:-4] == b"IEND", f"{path}: not a complete PNG"
    return struct.unpack(">II", data[16:24])


def assert_plots(paths: list[str], expected: set[str]) -> None:
    assert {Path(p).name for p in paths} == expected
    for p in map(Path, paths):
        width, height = png_size(p)
        assert 500 <= width <= 2000 and 250 <= height <= 2000, (p.name, width, height)
        assert p.stat().st_size > 10_000, (p.name, p.stat().st_size)


def csv_values(path: Path) -> dict[int, float]:
    out = {}
    with open(path) as f:
        for row in csv.reader(f):
            if row and row[0] != "step":
                out[int(row[0])] = float(row[1])
    return out


# ---------------------------------------------------------------------------------------------
# A real run
# ---------------------------------------------------------------------------------------------
STEPS = 6


@pytest.fixture(scope="module")
def real_run(demo_artifact, tmp_path_factory) -> Path:
    """`python trainer/pretrain.py`, one process, tiny preset, a handful of steps with two evaluations."""
    tmp = tmp_path_factory.mktemp("plot-run")
    cfg = json.loads((REPO / "trainer" / "configs" / "zero1_cpu.json").read_text())
    cfg["train_micro_batch_size_per_gpu"] = 4
    (tmp / "ds.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    env.update(OMP_NUM_THREADS="1", MASTER_PORT=str(free_port()), PYTHONUNBUFFERED="1")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    out = tmp / "run"
    cmd = [sys.executable, str(REPO / "trainer" / "pretrain.py"), "--deepspeed_config", str(tmp / "ds.json"),
           "--data", str(demo_artifact), "--output-dir", str(out), "--preset", "tiny", "--max-steps", str(STEPS),
           "--warmup-steps", "2", "--lr", "1e-3", "--log-every", "1", "--eval-every", str(STEPS // 2), "--eval-batches", "1",
           "--save-every", "0", "--no-progress", "--num-workers", "1"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return out


@pytest.mark.slow
def test_curves_of_a_real_run(real_run, capsys):
    assert plot.main([str(real_run)]) == 0
    printed = capsys.readouterr().out.split()
    assert_plots(printed, {"loss.png", "accuracy.png", "lr.png", "throughput.png"})
    assert all(Path(p).parent == real_run / "plots" for p in printed)
    series = plot.read_run(str(real_run))
    for name in ("train_loss", "train_mlm_loss", "train_sbo_loss", "train_lr", "train_tokens_per_s", "train_seq_per_s"):
        expected = csv_values(real_run / "monitor" / f"{name}.csv")
        assert series[name].steps == list(range(1, STEPS + 1)) == sorted(expected)
        assert series[name].values == [expected[s] for s in series[name].steps]
    assert series["eval_mlm_acc"].steps == [STEPS // 2, STEPS] and not series["train_loss"].restarts
    assert not any(name.startswith("Train_Samples_") for name in _other_metrics(series))  # DeepSpeed's own: not plotted


def _other_metrics(series: dict) -> list[str]:
    known = {m for _, panels in plot.FIGURES.values() for _, _, wanted in panels for m, _, _ in wanted}
    known |= {m for m, _ in plot.THROUGHPUT}
    return [n for n in series if n not in known and not n.startswith(plot.IGNORED_PREFIXES)]


# ---------------------------------------------------------------------------------------------
# Monitor files written by DeepSpeed's csvMonitor, the class the trainer's engine uses
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def monitor(monkeypatch, tmp_path):
    """Make csvMonitor instances writing to tmp_path/run/monitor, as the engine configures them (one per process
    start, so a resumed run is a new instance appending to the same files)."""
    from deepspeed.monitor import csv_monitor
    from deepspeed.monitor.config import get_monitor_config

    monkeypatch.setattr(csv_monitor, "dist", types.SimpleNamespace(get_rank=lambda: 0))
    cfg = get_monitor_config(
        {"csv_monitor": {"enabled": True, "output_path": str(tmp_path / "run"), "job_name": plot.MONITOR_DIR}}
    )
    return lambda: csv_monitor.csvMonitor(cfg.csv_monitor)


def _train_events(step: int, loss: float, sbo: bool = True) -> list[tuple[str, float, int]]:
    events = [
        ("train/loss", loss, step),
        ("train/mlm_loss", loss / 2, step),
        ("train/lr", 1e-3 / step, step),
        ("train/seq_per_s", 40.0 + step, step),
        ("train/tokens_per_s", 4000.0 + step, step),
    ]
    if sbo:
        events.append(("train/sbo_loss", loss / 2, step))
    return events


def test_a_resumed_run_keeps_the_later_values_and_marks_the_restart(monitor, tmp_path):
    first = monitor()
    for step in range(1, 9):
        first.write_events(_train_events(step, 16.0 - step / 10))
    first.write_events(
        [("eval/mlm_acc", 0.1, 4), ("eval/sbo_acc", 0.12, 4), ("eval/mlm_loss", 7.9, 4), ("eval/sbo_loss", 7.8, 4)]
    )
    second = monitor()  # resumed from the checkpoint of step 5: steps 6.. are logged again
    for step in range(6, 11):
        second.write_events(_train_events(step, 20.0 - step / 10))
    run = tmp_path / "run"
    raw = (run / "monitor" / "train_loss.csv").read_text().splitlines()
    assert raw.count("step,loss") == 2 and len(raw) == 2 + 8 + 5  # what DeepSpeed wrote, as the trainer does

    s = plot.read_series(str(run / "monitor" / "train_loss.csv"))
    assert s.steps == list(range(1, 11)) and s.restarts == [6]
    assert s.values == [16.0 - x / 10 for x in range(1, 6)] + [20.0 - x / 10 for x in range(6, 11)]
    assert_plots(plot.plot_run(str(run)), {"loss.png", "accuracy.png", "lr.png", "throughput.png"})


def test_only_the_metrics_a_run_has_are_plotted(monitor, tmp_path):
    m = monitor()  # --objective mlm, no evaluation yet, and a metric this tool does not know
    for step in range(1, 61):
        m.write_events([e for e in _train_events(step, 9.0 - step / 100, sbo=False) if "per_s" not in e[0]])
        m.write_events([("train/grad_norm", 1.0 / step, step), ("Train/Samples/lr", 1e-3, step * 8)])
    out = tmp_path / "figures"
    assert plot.main([str(tmp_path / "run" / "monitor"), "--out", str(out)]) == 0  # the monitor directory works too
    assert_plots([str(p) for p in out.iterdir()], {"loss.png", "lr.png", "other.png"})


def test_damaged_lines_are_skipped_and_counted(tmp_path):
    monitor_dir = tmp_path / "run" / "monitor"
    monitor_dir.mkdir(parents=True)
    (monitor_dir / "train_loss.csv").write_text("step,loss\n1,16.5\n2,16.4\n3,nan\n\n4,16.2\n5")  # killed mid-line
    (monitor_dir / "train_lr.csv").write_text("step,lr\n1,0.001\n2,0.0009\n3")
    s = plot.read_series(str(monitor_dir / "train_loss.csv"))
    assert s.steps == [1, 2, 4] and s.values == [16.5, 16.4, 16.2] and s.skipped == 2
    assert plot.read_series(str(monitor_dir / "train_lr.csv")).skipped == 1
    assert_plots(plot.plot_run(str(tmp_path / "run")), {"loss.png", "lr.png"})


def test_no_monitor_csv_is_a_clear_error(tmp_path, capsys):
    assert plot.main([str(tmp_path / "nowhere")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"plot: error: {tmp_path / 'nowhere'}: no such directory (give the trainer's --output-dir RUN_DIR)"
    )
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    assert plot.main([str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("plot: error: ") and "no monitor CSV files" in err and "Traceback" not in err
    (tmp_path / "run" / "monitor").mkdir()
    (tmp_path / "run" / "monitor" / "train_loss.csv").write_text("step,loss\n")
    assert plot.main([str(tmp_path / "run")]) == 2
    assert "hold no values yet" in capsys.readouterr().err
    assert not (tmp_path / "run" / "plots").exists()
