"""Continued pre-training for real (issue 24): `deepspeed --num_gpus 2 trainer/pretrain.py --init HF_DIR` with ZeRO-2 on
two CPU ranks from a tiny Hugging Face `BertForPreTraining` (random weights, WordPiece vocabulary trained on WikiText-2,
tests/support/hf_checkpoints.py): the first step's MLM loss is transformers' loss on the same masked batches, a resume
from the middle repeats the uninterrupted run, and `BertForMaskedLM.from_pretrained` on the export gives our logits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import free_port

from tests.support.hf_checkpoints import hf_case
from tests.support.pretrain_runs import DEEPSPEED, PRETRAIN, ds_config, metric, resume_from, run
from trainer import engine, pretrain
from trainer.export import load_model

pytestmark = pytest.mark.slow
MAX_STEPS = 4


def options(hf: dict, ds: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--deepspeed_config", str(ds), "--data", str(hf["artifact"]), "--init", str(hf["safetensors"]),
        "--max-steps", str(MAX_STEPS), "--save-every", "2", "--warmup-steps", "1", "--lr", "5e-3", "--log-every", "1",
        "--eval-every", "0", "--num-workers", "0", "--no-progress", "--seed", "11", "--output-dir", str(out), *extra,
    ]  # fmt: skip


def launch(*args: str):
    return run([str(DEEPSPEED), "--num_gpus", "2", "--master_port", str(free_port()), str(PRETRAIN), *args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    hf = hf_case(tmp_path_factory, "cased")
    tmp = tmp_path_factory.mktemp("continued")
    ds = ds_config(tmp, 2)
    full = launch(*options(hf, ds, tmp / "full"))
    resume_from(tmp / "full", "global_step2", tmp / "resumed")
    resumed = launch(*options(hf, ds, tmp / "resumed", "--resume"))
    return {"hf": hf, "ds": ds, "tmp": tmp, "full": full, "resumed": resumed}


def test_the_first_step_loss_is_transformers_loss_on_our_batches(runs, monkeypatch):
    transformers = pytest.importorskip("transformers")
    hf, tmp = runs["hf"], runs["tmp"]
    assert "--init: loaded" in runs["full"].stdout and "new (initialised fresh): sbo_head." in runs["full"].stdout
    theirs = transformers.BertForMaskedLM.from_pretrained(str(hf["safetensors"])).eval()
    losses = []
    for rank in (0, 1):  # each rank's first micro-batch, as its loader gives it
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        args = pretrain.build_parser().parse_args(options(hf, runs["ds"], tmp / f"probe{rank}"))
        batch = next(iter(engine.prepare(args).train_loader))
        with torch.no_grad():
            out = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        losses.append(float(out.loss))
    # the loss logged at step 1 is computed before the first update: the checkpoint's weights (no dropout in it)
    assert metric(tmp / "full", "train_mlm_loss")[1] == pytest.approx(sum(losses) / 2, rel=1e-5)
    resolved = json.loads((tmp / "full" / "config.json").read_text())
    assert resolved["init"]["kind"] == "huggingface" and resolved["init"]["path"] == str(hf["safetensors"])
    assert resolved["init"]["loaded"] > 30 and all(n.startswith("sbo_head.") for n in resolved["init"]["new"])
    assert resolved["model"]["hidden_size"] == 32 and resolved["deepspeed"]["zero_optimization"]["stage"] == 2


def test_a_resumed_init_run_repeats_the_uninterrupted_one(runs):
    tmp = runs["tmp"]
    out = runs["resumed"].stdout
    assert "resumed from" in out and "global_step2 at step 2" in out
    assert "--init: loaded" not in out  # the run's own checkpoint, not the initial weights
    a, b = metric(tmp / "full", "train_loss"), metric(tmp / "resumed", "train_loss")
    assert sorted(b) == [3, 4]
    assert [b[s] for s in (3, 4)] == pytest.approx([a[s] for s in (3, 4)], rel=1e-6, abs=0)


def test_the_export_loads_in_transformers_with_our_logits(runs):
    transformers = pytest.importorskip("transformers")
    hf, tmp = runs["hf"], runs["tmp"]
    ckpt = tmp / "full" / "checkpoints"
    run([sys.executable, "-m", "trainer.export", str(ckpt), "--out", str(tmp / "export")])
    ours, meta = load_model(str(ckpt))
    assert meta["step"] == MAX_STEPS
    exported = transformers.BertForMaskedLM.from_pretrained(str(tmp / "export")).eval()
    start = transformers.BertForMaskedLM.from_pretrained(str(hf["safetensors"])).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp / "export"))
    lines = [line for line in hf["text"].read_text(encoding="utf-8").splitlines() if len(line) > 200][:4]
    enc = tok(lines, padding=True, truncation=True, max_length=128, return_tensors="pt")
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        mine = ours.mlm_logits(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
        theirs = exported(**enc).logits
        before = start(**enc).logits
    assert real.sum() > 100
    torch.testing.assert_close(theirs[real], mine[real], rtol=1e-4, atol=1e-4)
    assert (before[real] - mine[real]).abs().max() > 1e-2  # four steps at lr 5e-3 moved the weights


def test_a_spanprep_run_continues_with_every_head(runs, monkeypatch):
    """--init RUN_DIR: the checkpoint's sizes and all its weights (SBO included); with --objective mlm the SBO head
    is listed as not used."""
    hf, tmp = runs["hf"], runs["tmp"]
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    ours, _ = load_model(str(tmp / "full" / "checkpoints"))
    args = options(hf, runs["ds"], tmp / "again")
    args[args.index("--init") + 1] = str(tmp / "full")
    setup = engine.prepare(pretrain.build_parser().parse_args(args))
    assert setup.init is not None and setup.init.kind == "spanprep" and setup.init.new == [] and setup.init.unused == []
    assert setup.model.hidden_size == 32 and setup.model.use_sbo
    expected = ours.state_dict()
    assert len(setup.init.state) > 30
    for name, tensor in setup.init.state.items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0)
    setup = engine.prepare(pretrain.build_parser().parse_args([*args, "--objective", "mlm"]))
    assert setup.init is not None and setup.init.unused and all(n.startswith("sbo_head.") for n in setup.init.unused)


def test_resuming_without_the_init_option_says_what_to_give(runs, monkeypatch):
    hf, tmp = runs["hf"], runs["tmp"]
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    args = options(hf, runs["ds"], tmp / "full", "--resume")
    del args[args.index("--init") : args.index("--init") + 2]
    with pytest.raises(ValueError, match=r"hidden_size: checkpoint 32, now 768.*its --preset or --init included"):
        engine.prepare(pretrain.build_parser().parse_args(args))
