"""`pretrain.py --init`: continued pre-training from a Hugging Face BERT (issue 24), checked before any rank starts.

Tiny `BertForPreTraining`s with random weights, cased and uncased WordPiece vocabularies trained on WikiText-2, and
artifacts built for them (tests/support/hf_checkpoints.py). With zero training steps our model's MLM logits are
transformers' and our MLM loss on a masked batch of the artifact is transformers' loss on it; every refusal (another
vocabulary, lower-casing, sizes, a pickle that runs code, another architecture, too few positions, a vocabulary that
is not the embedding matrix's) is one line and exit 2. Skips without ../shared/data or transformers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest
import torch

from schemas.artifact import Artifact
from schemas.format import SPECIAL_TOKENS
from tests.support.hf_checkpoints import MAX_SEQ_LEN, hf_case, save_bert
from trainer import engine, pretrain
from trainer.masking import IGNORE_INDEX, Masker, MaskingConfig, Rows
from trainer.model import SpanBert

REPO = Path(__file__).resolve().parents[2]
DS_CONFIG = str(REPO / "trainer" / "configs" / "zero2_cpu.json")


@pytest.fixture(scope="module")
def cased(tmp_path_factory):
    return hf_case(tmp_path_factory, "cased")


@pytest.fixture(scope="module")
def uncased(tmp_path_factory):
    return hf_case(tmp_path_factory, "uncased")


def argv(artifact: Path, init: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--data", str(artifact), "--init", str(init), "--output-dir", str(out), "--max-steps", "4",
        "--deepspeed_config", DS_CONFIG, "--eval-every", "0", "--num-workers", "0", "--no-progress", *extra,
    ]  # fmt: skip


def prepare(*args: str) -> engine.TrainSetup:
    return engine.prepare(pretrain.build_parser().parse_args(list(args)))


def initialised(setup: engine.TrainSetup) -> SpanBert:
    """The model as `Trainer.build` makes it at step 0 (without DeepSpeed): fresh with the run's seed, then --init."""
    torch.manual_seed(setup.run.seed)
    model = SpanBert(setup.model)
    assert setup.init is not None
    setup.init.apply(model)
    return model.eval()


def refusal(args: list[str], capsys) -> str:
    """The one line `pretrain.py` prints for a setup error; asserts exit status 2."""
    capsys.readouterr()  # what the test printed before (transformers' progress bars)
    assert pretrain.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pretrain: error: --init "), err
    return err[0]


@pytest.fixture(autouse=True)
def one_rank(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)


# -- zero steps: our model is transformers' ------------------------------------------------------------
@pytest.mark.parametrize("case", ["cased", "uncased"])
@pytest.mark.parametrize("weights", ["safetensors", "bin"])
def test_init_gives_transformers_logits_and_mlm_loss(case, weights, tmp_path_factory, tmp_path):
    transformers = pytest.importorskip("transformers")
    hf = hf_case(tmp_path_factory, case)
    setup = prepare(*argv(hf["artifact"], hf[weights], tmp_path / "run"))
    assert setup.model.hidden_size == 32 and setup.model.num_layers == 2 and setup.model.vocab_size > 2000
    assert setup.model.hidden_dropout == 0.0  # the checkpoint's settings are the defaults
    init = setup.init
    assert init is not None and init.unused == ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                                "cls.seq_relationship.bias", "cls.seq_relationship.weight"]  # fmt: skip
    assert init.new and all(n.startswith("sbo_head.") for n in init.new)  # only SBO is new; the MLM head is loaded
    assert "sbo_head.layer1.dense.weight" in init.describe() and "not used: bert.pooler" in init.describe()
    ours = initialised(setup)

    batch = next(iter(setup.train_loader))
    theirs_pt = transformers.BertForPreTraining.from_pretrained(str(hf["safetensors"])).eval()
    theirs_mlm = transformers.BertForMaskedLM.from_pretrained(str(hf["safetensors"])).eval()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    real = mask.bool()
    assert real.sum() > 100
    with torch.no_grad():
        mine = ours.mlm_logits(ids, mask)
        torch.testing.assert_close(mine[real], theirs_pt(input_ids=ids, attention_mask=mask).prediction_logits[real],
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        torch.testing.assert_close(mine[real], theirs_mlm(input_ids=ids, attention_mask=mask).logits[real],
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        out = ours(**{k: v for k, v in batch.items() if k != "sample_id"})
        loss = theirs_mlm(input_ids=ids, attention_mask=mask, labels=batch["labels"]).loss
    assert int(out["num_targets"]) == int((batch["labels"] != IGNORE_INDEX).sum()) > 10
    assert float(out["mlm_loss"]) == pytest.approx(float(loss), rel=1e-5)
    assert float(out["sbo_loss"]) > 0  # the fresh SBO head's loss is added on top


def test_init_with_nsp_loads_the_pooler_and_the_next_sentence_head(cased, tmp_path):
    transformers = pytest.importorskip("transformers")
    setup = prepare(*argv(cased["artifact"], cased["safetensors"], tmp_path / "run", "--nsp", "--segments", "2"))
    assert setup.init is not None and setup.init.unused == []
    ours = initialised(setup)
    theirs = transformers.BertForPreTraining.from_pretrained(str(cased["safetensors"])).eval()
    ids = torch.randint(5, setup.model.vocab_size, (2, 40))
    types = torch.zeros_like(ids)
    types[:, 20:] = 1
    with torch.no_grad():
        mine = ours.nsp_logits(ids, torch.ones_like(ids), types)
        torch.testing.assert_close(mine, theirs(input_ids=ids, token_type_ids=types).seq_relationship_logits,
                                   rtol=1e-4, atol=1e-4)  # fmt: skip


def test_a_bert_model_without_heads_gets_fresh_ones(cased, tmp_path):
    transformers = pytest.importorskip("transformers")
    bare = tmp_path / "bert_model"
    transformers.BertModel.from_pretrained(str(cased["safetensors"])).save_pretrained(str(bare))
    shutil.copy(cased["vocab"], bare / "vocab.txt")
    (bare / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    setup = prepare(*argv(cased["artifact"], bare, tmp_path / "run"))
    assert setup.init is not None
    assert {"mlm_head.transform.dense.weight", "mlm_head.decoder.bias", "sbo_head.layer2.dense.weight"} <= set(
        setup.init.new
    )
    assert "embeddings.word_embeddings.weight" in setup.init.state and setup.init.unused == [
        "bert.pooler.dense.bias",
        "bert.pooler.dense.weight",
    ]


# -- refusals ----------------------------------------------------------------------------------------
def test_another_vocabulary_is_refused(cased, uncased, tmp_path, capsys):
    line = refusal(argv(cased["artifact"], uncased["safetensors"], tmp_path / "run"), capsys)
    assert "the artifact's tokenizer is not the checkpoint's: token " in line
    assert f"{cased['artifact']}/tokenizer.json but " in line and f"in {uncased['safetensors']}/tokenizer.json" in line


def test_another_lower_casing_is_refused(cased, tmp_path, capsys):
    flipped = tmp_path / "flipped"
    shutil.copytree(cased["bin"], flipped)
    (flipped / "tokenizer_config.json").write_text('{"do_lower_case": true}')  # same vocabulary, uncased
    line = refusal(argv(cased["artifact"], flipped, tmp_path / "run"), capsys)
    assert "lower-casing (do_lower_case) is False in " in line and "but True in " in line
    assert f"{flipped}/vocab.txt with tokenizer_config.json" in line


def test_a_checkpoint_naming_other_special_tokens_is_refused(cased, tmp_path, capsys):
    swapped = tmp_path / "swapped"
    shutil.copytree(cased["bin"], swapped)
    # same vocabulary and casing, but the directory says [SEP] plays cls: its [CLS] vector was trained as another role
    (swapped / "tokenizer_config.json").write_text('{"do_lower_case": false, "cls_token": "[SEP]"}')
    line = refusal(argv(cased["artifact"], swapped, tmp_path / "run"), capsys)
    assert "names other special tokens than the artifact: cls '[SEP]' (the artifact's: '[CLS]')" in line


def test_a_vocab_txt_without_do_lower_case_is_refused(cased, tmp_path, capsys):
    unsure = tmp_path / "unsure"
    shutil.copytree(cased["bin"], unsure)
    (unsure / "tokenizer_config.json").unlink()
    line = refusal(argv(cased["artifact"], unsure, tmp_path / "run"), capsys)
    assert "cannot tell whether the model lower-cases" in line


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--hidden-size", "64"], "--hidden-size 64 conflicts with --init {init}: its config.json has hidden_size 32"),
        (["--preset", "tiny"], "--preset tiny conflicts with --init {init} (hidden_size 64 vs 32"),
    ],
)
def test_a_size_option_that_disagrees_is_refused(cased, tmp_path, capsys, option, message):
    init = cased["safetensors"]
    args = argv(cased["artifact"], init, tmp_path / "run", *option)
    assert pretrain.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(init=init) in err[0], err


def test_agreeing_size_options_are_accepted(cased, tmp_path):
    setup = prepare(*argv(cased["artifact"], cased["safetensors"], tmp_path / "run", "--hidden-size", "32",
                          "--hidden-dropout", "0.1"))  # fmt: skip
    assert setup.model.hidden_size == 32 and setup.model.hidden_dropout == 0.1


class RunsCodeWhenUnpickled:
    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_that_runs_code_is_refused(cased, tmp_path):
    crafted = tmp_path / "crafted"
    shutil.copytree(cased["bin"], crafted)
    marker = tmp_path / "code_ran"
    state = torch.load(crafted / "pytorch_model.bin", weights_only=True)
    state["bert.embeddings.payload"] = RunsCodeWhenUnpickled(marker)
    torch.save(state, crafted / "pytorch_model.bin")
    from tests.support.pretrain_runs import run_env

    proc = subprocess.run(
        [sys.executable, "trainer/pretrain.py", *argv(cased["artifact"], crafted, tmp_path / "run")],
        cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert not marker.exists(), "loading the checkpoint ran code from it"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"pretrain: error: --init {crafted}/pytorch_model.bin: refused to load"), lines[0]
    assert "Unsupported global" in lines[0]


# -- weights and a loss that are not finite (issue 32, item 7) ---------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_weights_holding_nan_or_inf_are_refused(cased, tmp_path, capsys, value):
    from safetensors.torch import load_file, save_file

    damaged = tmp_path / "damaged"
    shutil.copytree(cased["safetensors"], damaged)
    state = load_file(damaged / "model.safetensors")
    name = "bert.encoder.layer.1.attention.self.key.weight"
    state[name][3, 5] = value
    save_file(state, damaged / "model.safetensors", metadata={"format": "pt"})
    line = refusal(argv(cased["artifact"], damaged, tmp_path / "run"), capsys)
    assert f"{damaged}/model.safetensors: tensor {name} holds 1 non-finite values (NaN or infinity) of 1024" in line


def test_a_loss_that_becomes_non_finite_stops_without_saving(cased, tmp_path):
    """A real run whose learning rate (1e30) makes the weights overflow after the first update: step 2's loss is NaN.
    The run stops there with one line and exit 1; step 1's checkpoint stays the last (before: NaN checkpoints at
    steps 2-4, exit 0)."""
    from tests.support.pretrain_runs import ds_config, run_env
    from trainer.export import consolidated_state_dict

    run = tmp_path / "run"
    args = argv(cased["artifact"], cased["safetensors"], run, "--lr", "1e30", "--warmup-steps", "1",
                "--save-every", "1", "--log-every", "1", "--deepspeed_config", str(ds_config(tmp_path, 1)))  # fmt: skip
    proc = subprocess.run([sys.executable, "trainer/pretrain.py", *args], cwd=REPO, env=run_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("pretrain:")]
    assert line.startswith("pretrain: error: the training loss is nan at step 2 (not finite"), line
    assert line.endswith(f"stopped without saving: the last checkpoint, {run}/checkpoints/global_step1, is kept")
    assert "step 1/4  loss" in proc.stdout
    ckpts = run / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "global_step1"
    assert sorted(p.name for p in ckpts.glob("global_step*")) == ["global_step1"]
    state = consolidated_state_dict(str(ckpts), "global_step1")  # refuses a tensor that is not finite
    assert len(state) > 20


@pytest.mark.parametrize("lr", ["inf", "nan", "1e39"])
def test_a_learning_rate_that_is_not_a_finite_float32_is_refused(cased, tmp_path, capsys, lr):
    assert pretrain.main(argv(cased["artifact"], cased["safetensors"], tmp_path / "run", "--lr", lr)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"must be > 0 and finite, got {float(lr)!r}" in err[0], err


# -- a damaged directory is one line, exit 2 (issue 32, item 8 and the sharded index's paths) ---------------
def _sharded(cased, directory: Path) -> Path:
    """The cased checkpoint saved again by transformers in shards of 60 KB (model.safetensors.index.json)."""
    transformers = pytest.importorskip("transformers")
    model = transformers.BertForPreTraining.from_pretrained(str(cased["safetensors"]))
    model.save_pretrained(str(directory), max_shard_size="60KB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(cased["safetensors"] / name, directory / name)
    assert (directory / "model.safetensors.index.json").exists() and not (directory / "model.safetensors").exists()
    return directory


def _damage(kind: str, cased, directory: Path) -> tuple[str, str]:
    """``directory`` made into a damaged checkpoint of ``kind``; (the file the line names, what it says)."""
    if kind in ("qkv_shape", "layer_norm_eps_string"):
        shutil.copytree(cased["safetensors"], directory)
    else:
        _sharded(cased, directory)
    if kind == "qkv_shape":
        from safetensors.torch import load_file, save_file

        state = load_file(directory / "model.safetensors")
        state["bert.encoder.layer.1.attention.self.value.weight"] = torch.zeros(32, 16)
        save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
        return "", (
            "bert.encoder.layer.1.attention.self.value.weight has shape [32, 16] but "
            "bert.encoder.layer.1.attention.self.query.weight [32, 32]; query, key, value must have one shape"
        )
    if kind == "layer_norm_eps_string":
        cfg = json.loads((directory / "config.json").read_text())
        cfg["layer_norm_eps"] = "1e-12"
        (directory / "config.json").write_text(json.dumps(cfg))
        return "config.json", 'layer_norm_eps is "1e-12", not a number'
    index_path = directory / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    name, shard = sorted(index["weight_map"].items())[0]
    if kind == "weight_map_not_strings":
        index["weight_map"][name] = 1
        said = f"weight_map[{name!r}] is 1, not a file name"
    else:  # a file outside the directory, there and loadable
        outside = directory.parent / "x.safetensors"
        shutil.copy(directory / shard, outside)
        index["weight_map"] = {k: (v if v != shard else str(outside) if kind == "absolute_shard" else "../x.safetensors")
                               for k, v in index["weight_map"].items()}  # fmt: skip
        said = f"names {index['weight_map'][name]!r}, not a file of the checkpoint's directory"
    index_path.write_text(json.dumps(index))
    return "model.safetensors.index.json", said


DAMAGES = ["qkv_shape", "weight_map_not_strings", "layer_norm_eps_string", "parent_shard", "absolute_shard"]


@pytest.mark.parametrize("kind", DAMAGES)
def test_a_damaged_checkpoint_directory_is_one_line_for_pretraining_and_fine_tuning(cased, tmp_path, capsys, kind):
    from trainer.finetuning.checkpoint import CheckpointError, load_pretrained

    damaged = tmp_path / "damaged"
    file, said = _damage(kind, cased, damaged)
    where = f"{damaged}/{file}" if file else str(damaged)
    line = refusal(argv(cased["artifact"], damaged, tmp_path / "run"), capsys)
    assert line.startswith(f"pretrain: error: --init {where}: ") and said in line, line
    with pytest.raises(CheckpointError) as refused:
        load_pretrained(str(damaged))
    assert str(refused.value).startswith(f"--init {where}: ") and said in str(refused.value)


@pytest.mark.parametrize("model_type", ["roberta", "albert", "distilbert"])
def test_another_architecture_is_refused(cased, tmp_path, capsys, model_type):
    other = tmp_path / model_type
    shutil.copytree(cased["safetensors"], other)
    cfg = json.loads((other / "config.json").read_text())
    arch = {"roberta": "RobertaForMaskedLM", "albert": "AlbertForMaskedLM", "distilbert": "DistilBertForMaskedLM"}
    cfg.update(model_type=model_type, architectures=[arch[model_type]])
    (other / "config.json").write_text(json.dumps(cfg))
    line = refusal(argv(cased["artifact"], other, tmp_path / "run"), capsys)
    assert f"model_type '{model_type}' (architectures {arch[model_type]}) is not BERT" in line


def test_fewer_positions_than_the_rows_are_refused(cased, tmp_path, capsys):
    short = save_bert(tmp_path / "short", len(cased["vocab"].read_text().splitlines()), max_position_embeddings=64)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # without its config, BERT's class lower-cases
        shutil.copy(cased["safetensors"] / name, short / name)
    line = refusal(argv(cased["artifact"], short, tmp_path / "run"), capsys)
    assert f"64 position embeddings (max_position_embeddings) are fewer than the sequence length {MAX_SEQ_LEN}" in line


def test_a_vocabulary_that_is_not_the_embedding_matrix_is_refused(cased, tmp_path, capsys):
    vocab = len(cased["vocab"].read_text().splitlines())
    padded = save_bert(tmp_path / "padded", vocab + 8)  # embedding rows padded beyond the tokenizer
    for name in ("tokenizer.json", "tokenizer_config.json"):  # without its config, BERT's class lower-cases
        shutil.copy(cased["safetensors"] / name, padded / name)
    line = refusal(argv(cased["artifact"], padded, tmp_path / "run"), capsys)
    assert f"its embedding matrix has {vocab + 8} rows (vocab_size) but the artifact's tokenizer {vocab} tokens" in line


def test_a_config_json_that_does_not_fit_its_weights_is_refused(cased, tmp_path, capsys):
    wrong = tmp_path / "wrong"
    shutil.copytree(cased["safetensors"], wrong)
    cfg = json.loads((wrong / "config.json").read_text())
    cfg["intermediate_size"] = 128
    (wrong / "config.json").write_text(json.dumps(cfg))
    line = refusal(argv(cased["artifact"], wrong, tmp_path / "run"), capsys)
    assert "layers.0.fc1.weight has shape [64, 32] but its configuration" in line and "gives [128, 32]" in line


# -- the uncased rows: word starts, whole-word and span masking ---------------------------------------
def test_uncased_rows_have_bert_word_starts_and_mask_whole_words(uncased):
    art = Artifact.open(str(uncased["artifact"]))
    tokens = uncased["vocab"].read_text(encoding="utf-8").splitlines()
    ids, ws = [], []
    for rel in art.shard_paths:
        table = ipc.open_file(art.path(rel)).read_all()
        ids += table.column("input_ids").to_pylist()
        ws += table.column("word_start").to_pylist()
    rows = Rows.from_lists(ids, ws)
    pieces = [tokens[i] for i in rows.input_ids.tolist()]
    assert len(pieces) > 10_000
    assert all(p == p.lower() for p in pieces if p != "[UNK]")  # uncased rows (WikiText's <unk> is [UNK])
    assert any(not w for w in rows.word_start)
    # BERT's convention: a token begins a word exactly when it is not a ## continuation
    assert [not p.startswith("##") for p in pieces] == rows.word_start.tolist()
    checked = partial = 0
    for scheme in ("whole_word", "span"):
        masker = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=3), art)
        m = masker.mask(rows, np.arange(rows.num_rows), epoch=0)
        for r in range(rows.num_rows):
            a, b = int(rows.offsets[r]), int(rows.offsets[r + 1])
            starts = np.r_[rows.word_start[a:b], True]
            sel = m.unit_row == r
            units = list(zip(m.unit_start[sel].tolist(), m.unit_end[sel].tolist()))
            if len(units) == 1 and not (starts[units[0][0]] and starts[units[0][1]]):
                partial += 1  # a row no whole word fits in gets part of one word (BERT's budget rule)
                continue
            for s, e in units:
                assert starts[s] and starts[e], (scheme, pieces[a + s : a + e + 1])  # units are complete words
                checked += 1
            targets = m.labels[a:b] != IGNORE_INDEX
            continuation = ~rows.word_start[a:b]
            # a masked word is masked whole: a continuation is a target exactly when the token before it is
            assert (targets[1:][continuation[1:]] == targets[:-1][continuation[1:]]).all()
    assert checked > 500 and partial < rows.num_rows // 20


# -- one loader for both --init options ----------------------------------------------------------------
@pytest.mark.parametrize("weights", ["safetensors", "bin"])
def test_fine_tuning_reads_the_same_checkpoints_with_the_same_loader(cased, weights):
    """finetune.py --init goes through trainer.pretrained as pretrain.py does: also pytorch_model.bin with vocab.txt,
    the encoder's hidden states are transformers' BertModel's, and the tokenizer is the checkpoint's vocabulary."""
    transformers = pytest.importorskip("transformers")
    from trainer.finetuning.checkpoint import load_pretrained

    encoder, tokenizer, info = load_pretrained(str(cased[weights]))
    assert info["kind"] == "huggingface" and info["max_seq_len"] == MAX_SEQ_LEN
    tok = tokenizer.tokenizer
    # roles: transformers' tokenizer_config.json names BERT's tokens; a vocab.txt alone has BERT's names
    assert info["special_tokens"] == SPECIAL_TOKENS
    assert dict(tokenizer.ids) == {role: tok.token_to_id(token) for role, token in SPECIAL_TOKENS.items()}
    vocab = cased["vocab"].read_text(encoding="utf-8").splitlines()
    assert tok.get_vocab_size(with_added_tokens=True) == len(vocab) and tok.token_to_id(vocab[1500]) == 1500
    line = next(x for x in cased["text"].read_text(encoding="utf-8").splitlines() if len(x) > 300)
    ids = torch.tensor([tok.encode(line).ids[:MAX_SEQ_LEN]])
    assert ids.shape[1] > 50
    bert = transformers.BertModel.from_pretrained(str(cased["safetensors"])).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            encoder.eval().encode(ids), bert(input_ids=ids).last_hidden_state, rtol=1e-4, atol=1e-4
        )


def test_an_artifact_built_with_the_checkpoints_tokenizer_json_is_accepted(uncased, tmp_path):
    """The refusal's other suggestion, `build_shards --tokenizer HF_DIR/tokenizer.json`, gives an artifact --init takes."""
    from conftest import build

    artifact = tmp_path / "artifact"
    build(uncased["text"], artifact, "--input-format", "wikitext", "--tokenizer",
          str(uncased["safetensors"] / "tokenizer.json"), "--max-seq-len", str(MAX_SEQ_LEN), "--num-shards", "2")  # fmt: skip
    setup = prepare(*argv(artifact, uncased["safetensors"], tmp_path / "run"))
    assert setup.init is not None and setup.artifact.manifest["tokenizer"]["lowercase"] is True


@pytest.mark.parametrize("case", ["cased", "uncased"])
def test_an_artifact_built_with_tokenizer_from_the_checkpoint_directory_is_accepted(case, request, tmp_path):
    """The documented way to build an artifact for a checkpoint, `build_shards --tokenizer-from HF_DIR` (the directory
    read as transformers' AutoTokenizer reads it), gives an artifact whose tokenizer --init accepts."""
    from conftest import build

    hf = request.getfixturevalue(case)
    artifact = tmp_path / "artifact"
    build(hf["text"], artifact, "--input-format", "wikitext", "--tokenizer-from", str(hf["safetensors"]),
          "--max-seq-len", str(MAX_SEQ_LEN), "--num-shards", "2")  # fmt: skip
    setup = prepare(*argv(artifact, hf["safetensors"], tmp_path / "run"))
    assert setup.init is not None
    assert setup.artifact.manifest["tokenizer"]["lowercase"] is (case == "uncased")
