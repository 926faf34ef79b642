"""`python -m trainer.export`: a DeepSpeed checkpoint -> Hugging Face files that `BertForMaskedLM.from_pretrained`
loads with the same MLM logits as our model. The Hugging Face checks skip when `transformers` is not installed
(it is an optional dependency); exporting itself needs only safetensors."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.config import ModelConfig
from trainer.export import hf_config, load_model, to_hf_state_dict
from trainer.model import SpanBert

REPO = Path(__file__).resolve().parents[2]
TEXTS = [
    "The river flows north through the old town .",
    "Müller's café opened in 1921 ; it closed , reopened and is still there today !",
    "short",
]


def hf_from_our_weights(model: SpanBert):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(**{k: v for k, v in hf_config(model.config).items() if k != "architectures"})
    hf = transformers.BertForMaskedLM(cfg).eval()
    result = hf.load_state_dict(to_hf_state_dict(model.state_dict(), model.config), strict=False)
    assert not result.unexpected_keys
    assert set(result.missing_keys) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}  # tied
    return hf


@pytest.mark.parametrize("type_vocab_size", [2, 0])
def test_mapping_gives_hugging_face_the_same_logits(type_vocab_size):
    torch.manual_seed(0)
    model = SpanBert(ModelConfig.preset("tiny", vocab_size=500, type_vocab_size=type_vocab_size)).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases, so a swapped name shows
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    hf = hf_from_our_weights(model)
    ids = torch.randint(5, 500, (3, 24))
    mask = torch.ones_like(ids)
    mask[1, 15:], ids[1, 15:] = 0, 0
    with torch.no_grad():
        ours = model.mlm_logits(ids, mask)
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert ours.shape == theirs.shape
    torch.testing.assert_close(theirs[real], ours[real], rtol=1e-4, atol=1e-5)


def test_qkv_split_follows_the_fused_layout():
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=100)
    model = SpanBert(cfg)
    sd = to_hf_state_dict(model.state_dict(), cfg)
    H = cfg.hidden_size
    qkv = model.layers[1].attn.qkv.weight
    assert torch.equal(sd["bert.encoder.layer.1.attention.self.query.weight"], qkv[:H])
    assert torch.equal(sd["bert.encoder.layer.1.attention.self.key.weight"], qkv[H : 2 * H])
    assert torch.equal(sd["bert.encoder.layer.1.attention.self.value.weight"], qkv[2 * H :])
    assert torch.equal(sd["cls.predictions.bias"], model.mlm_head.decoder.bias)
    assert not any(k.startswith("sbo") or "sbo_head" in k for k in sd)


# -- a real checkpoint ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(demo_artifact, tmp_path_factory) -> Path:
    """Three ZeRO-3 steps in one `python trainer/pretrain.py` process (the stage whose weights are partitioned)."""
    from conftest import free_port

    tmp = tmp_path_factory.mktemp("export_run")
    cfg = json.loads((REPO / "trainer" / "configs" / "zero3_cpu.json").read_text())
    cfg["train_micro_batch_size_per_gpu"] = 4
    (tmp / "ds.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", MASTER_PORT=str(free_port()))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    proc = subprocess.run(
        [sys.executable, "trainer/pretrain.py", "--deepspeed_config", str(tmp / "ds.json"), "--data", str(demo_artifact),
         "--preset", "tiny", "--max-steps", "3", "--warmup-steps", "1", "--lr", "5e-3", "--eval-every", "0",
         "--num-workers", "0", "--no-progress", "--output-dir", str(tmp / "run")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-5000:]
    # it ends with the command that exports it, as the user can run it from the working directory
    interpreter, *rest = shlex.split(proc.stdout.strip().splitlines()[-1].removeprefix("export: "))
    assert rest == ["-m", "trainer.export", str(tmp / "run" / "checkpoints"), "--out", "hf_model"], proc.stdout
    assert Path(REPO, interpreter).samefile(sys.executable), interpreter
    return tmp / "run" / "checkpoints"


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "model"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.export", str(checkpoint), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "exported" in proc.stdout and "global_step3" in proc.stdout
    return out


@pytest.mark.slow
def test_export_writes_the_hugging_face_files(exported, demo_artifact):
    names = {p.name for p in exported.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
        "special_tokens_map.json",
    } <= names
    modes = {p.name: p.stat().st_mode & 0o777 for p in exported.iterdir()}
    assert len(set(modes.values())) == 1, modes  # model.safetensors was 0600, the rest 0644
    assert (exported / "tokenizer.json").read_bytes() == (demo_artifact / "tokenizer.json").read_bytes()
    manifest = json.loads((demo_artifact / "manifest.json").read_text())
    vocab = (exported / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert (
        len(vocab)
        == manifest["tokenizer"]["vocab_size"]
        == json.loads((exported / "config.json").read_text())["vocab_size"]
    )
    for name, token in manifest["tokenizer"]["special_tokens"].items():
        assert vocab[manifest["tokenizer"]["special_token_ids"][name]] == token


@pytest.mark.slow
def test_bert_for_masked_lm_loads_the_export_with_our_logits(exported, checkpoint, demo_artifact):
    transformers = pytest.importorskip("transformers")
    import tokenizers

    ours, meta = load_model(str(checkpoint))
    assert meta["step"] == 3
    hf = transformers.BertForMaskedLM.from_pretrained(str(exported)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(exported))
    raw = tokenizers.Tokenizer.from_file(str(demo_artifact / "tokenizer.json"))
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    for i, text in enumerate(TEXTS):  # the exported tokenizer is the artifact's
        n = int(enc["attention_mask"][i].sum())
        assert enc["input_ids"][i, :n].tolist() == raw.encode(text).ids
    with torch.no_grad():
        theirs = hf(**enc).logits
        mine = ours.mlm_logits(enc["input_ids"], enc["attention_mask"], enc.get("token_type_ids"))
    real = enc["attention_mask"].bool()
    torch.testing.assert_close(theirs[real], mine[real], rtol=1e-4, atol=1e-5)
    # and the trained weights are not the initial ones (3 steps at lr 5e-3 moved them)
    torch.manual_seed(1234)
    init = SpanBert(ours.config)
    assert not torch.allclose(init.embeddings.word_embeddings.weight, ours.embeddings.word_embeddings.weight)


@pytest.mark.slow
def test_export_writes_a_tokenizer_without_truncation_and_padding(checkpoint, demo_artifact, tmp_path):
    """Issue 32, item 2: a checkpoint whose tokenizer.json carries truncation and padding (a hub file's) exports one
    that carries neither, so the export encodes a long text whole and without pad ids, as the artifact's does."""
    import shutil

    import tokenizers

    from trainer.export import main as export_main

    tag = (checkpoint / "latest").read_text().strip()
    copy = tmp_path / "checkpoints"
    shutil.copytree(checkpoint / tag, copy / tag)
    (copy / "latest").write_text(tag)
    tok = tokenizers.Tokenizer.from_file(str(demo_artifact / "tokenizer.json"))
    tok.enable_truncation(max_length=12)
    tok.enable_padding(length=24, pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    tok.save(str(copy / tag / "tokenizer.json"))
    assert export_main([str(copy), "--out", str(tmp_path / "hf")]) == 0
    written = json.loads((tmp_path / "hf" / "tokenizer.json").read_text(encoding="utf-8"))
    assert written["truncation"] is None and written["padding"] is None
    text = " ".join(TEXTS * 4)
    artifact_ids = tokenizers.Tokenizer.from_file(str(demo_artifact / "tokenizer.json")).encode(text).ids
    assert len(artifact_ids) > 24
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json")).encode(text).ids == artifact_ids


def test_export_of_a_directory_without_checkpoint_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.export", str(tmp_path), "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"export: error: {tmp_path}: no 'latest' file" in proc.stderr


def test_export_with_an_empty_latest_is_a_clear_error(tmp_path):
    """An interrupted save leaves `latest` empty; the export said the checkpoint directory's own (absent) meta file
    was missing, as if `latest` named the directory itself (issue 21, case 2)."""
    (tmp_path / "global_step2").mkdir()
    (tmp_path / "latest").write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.export", str(tmp_path), "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"export: error: {tmp_path / 'latest'}: empty; name the checkpoint to export with --tag" in proc.stderr


# -- checkpoint files are loaded without running code from them (issue 9, case 9) -------------------
class RunsCodeWhenUnpickled:
    """What a crafted checkpoint can hold: unpickling it calls ``open(path, "w")`` (any callable would do)."""

    def __init__(self, path: Path, call=open):
        self.path, self.call = str(path), call

    def __reduce__(self):
        return (open, (self.path, "w")) if self.call is open else (self.call, (self.path,))


def crafted_checkpoint(root: Path, marker: Path, file_name: str, key: str, call=open) -> Path:
    """A checkpoint directory whose DeepSpeed file ``file_name`` holds a payload under ``key`` (it calls ``call``)."""
    tag = root / "global_step1"
    tag.mkdir(parents=True)
    (root / "latest").write_text("global_step1")
    cfg = ModelConfig.preset("tiny", vocab_size=100)
    (tag / "spanprep_trainer.json").write_text(
        json.dumps({"step": 1, "model": json.loads(json.dumps(cfg.__dict__)), "tokenizer": {}, "max_seq_len": 64})
    )
    (tag / "tokenizer.json").write_text("{}")
    torch.save({key: {"weight": torch.zeros(2), "payload": RunsCodeWhenUnpickled(marker, call)}}, tag / file_name)
    return root


@pytest.mark.parametrize("call", [open, os.mkdir], ids=["builtins.open", "posix.mkdir"])
def test_export_refuses_a_checkpoint_file_that_would_run_code(tmp_path, call):
    """The one line names what was refused and passes on none of torch's advice to load it anyway (``weights_only``
    set to False, an allow-list): a function of a module torch blocks (``posix``) is said in other words (issue 32)."""
    marker = tmp_path / "code_ran"
    ckpt = crafted_checkpoint(tmp_path / "checkpoints", marker, "mp_rank_00_model_states.pt", "module", call)
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.export", str(ckpt), "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert not marker.exists(), "loading the checkpoint ran code from it"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"export: error: {ckpt}/global_step1/mp_rank_00_model_states.pt: refused to load"), line
    assert "Unsupported global" in line and call.__name__ in line
    assert "weights_only" not in line and "safe_globals" not in line and "\x1b" not in line, line


def test_optimizer_state_sizes_are_read_without_running_code(tmp_path):
    from trainer.engine import optimizer_state_bytes
    from trainer.engine.checkpoint_files import UntrustedCheckpointError

    marker = tmp_path / "code_ran"
    ckpt = crafted_checkpoint(
        tmp_path / "checkpoints", marker, "zero_pp_rank_0_mp_rank_00_optim_states.pt", "optimizer_state_dict"
    )
    with pytest.raises(UntrustedCheckpointError, match="zero_pp_rank_0_mp_rank_00_optim_states.pt: refused to load"):
        optimizer_state_bytes(str(ckpt), "global_step1")
    assert not marker.exists()


@pytest.mark.slow
def test_a_real_zero0_checkpoint_exports_with_weights_only_loading(demo_artifact, tmp_path):
    """ZeRO-0 is the stage whose weights the exporter reads with its own torch.load (the others go through
    DeepSpeed's zero_to_fp32): a real one still loads with weights_only=True."""
    from conftest import free_port

    cfg = json.loads((REPO / "trainer" / "configs" / "zero1_cpu.json").read_text())
    cfg.update(train_micro_batch_size_per_gpu=4, zero_optimization={"stage": 0})
    (tmp_path / "ds.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", MASTER_PORT=str(free_port()))
    proc = subprocess.run(
        [sys.executable, "trainer/pretrain.py", "--deepspeed_config", str(tmp_path / "ds.json"), "--data", str(demo_artifact),
         "--preset", "tiny", "--max-steps", "2", "--warmup-steps", "1", "--lr", "5e-3", "--eval-every", "0",
         "--num-workers", "0", "--no-progress", "--output-dir", str(tmp_path / "run")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-5000:]
    ckpt = tmp_path / "run" / "checkpoints"
    assert not list((ckpt / "global_step2").glob("*optim_states.pt"))  # the exporter's own-loading path
    model, meta = load_model(str(ckpt))
    assert meta["step"] == 2
    torch.manual_seed(1234)
    assert not torch.allclose(
        SpanBert(model.config).embeddings.word_embeddings.weight, model.embeddings.word_embeddings.weight
    )
    out = subprocess.run(
        [sys.executable, "-m", "trainer.export", str(ckpt), "--out", str(tmp_path / "hf")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0 and (tmp_path / "hf" / "model.safetensors").exists(), out.stderr[-3000:]
