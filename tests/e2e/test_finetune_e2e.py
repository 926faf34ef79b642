"""`trainer/finetune.py` for real: a tiny model pre-trained on the demo artifact (as `make demo` does) fine-tunes
on a slice of RTE train and evaluates on RTE dev with the cls, spex and span-ft heads, and on XQuAD (SQuAD v1.1
format) with the span head; as one plain process and on two CPU ranks under `deepspeed` (gloo, torch Adam),
from the DeepSpeed checkpoint and from its Hugging Face export. Skips without ../shared/data."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SHARED_DATA, free_port, wikitext2

from pipeline import build_ngram_dictionary
from tests.support.pretrain_runs import run_env  # the same environment as the pre-training runs
from trainer.finetuning.tasks import get_task

REPO = Path(__file__).resolve().parents[2]
FINETUNE = REPO / "trainer" / "finetune.py"
DEEPSPEED = Path(sys.executable).parent / "deepspeed"
DATA = SHARED_DATA / "finetune"
XQUAD = DATA / "squad_format_xquad_en" / "xquad.en.json"
TIMEOUT = 600

pytestmark = pytest.mark.slow

RUNS = {  # head -> task-specific options (tiny slices: 32 training and 40 evaluation examples)
    "cls": ["--task", "rte"],
    "spex": ["--task", "rte"],
    "span-ft": ["--task", "rte"],
    "span": ["--task", "squad1", "--train-file", str(XQUAD), "--max-seq-len", "256", "--doc-stride", "64"],
}


def run(cmd: list[str], expect: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == expect, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def pretrained(demo_artifact, tmp_path_factory) -> dict:
    """One tiny pre-training run (4 steps, one process, ZeRO-1) and its Hugging Face export."""
    if not (DATA / "glue_rte" / "train.tsv").exists():
        pytest.skip(f"real data not available: {DATA}")
    tmp = tmp_path_factory.mktemp("ft_pretrain")
    run(
        [
            sys.executable,
            str(REPO / "trainer" / "pretrain.py"),
            "--data",
            str(demo_artifact),
            "--preset",
            "tiny",
            "--max-steps",
            "4",
            "--warmup-steps",
            "1",
            "--lr",
            "5e-3",
            "--eval-every",
            "0",
            "--no-progress",
            "--num-workers",
            "1",
            "--deepspeed_config",
            str(REPO / "trainer" / "configs" / "zero1_cpu.json"),
            "--output-dir",
            str(tmp / "run"),
        ]
    )
    run([sys.executable, "-m", "trainer.export", str(tmp / "run" / "checkpoints"), "--out", str(tmp / "hf")])
    dictionary = tmp / "dict"
    build_ngram_dictionary.run(["--input", str(wikitext2("valid")), "--output", str(dictionary)])
    return {"run": tmp / "run", "hf": tmp / "hf", "dict": dictionary}


def finetune_cmd(pretrained: dict, head: str, out: Path, init: str = "run", *extra: str) -> list[str]:
    return [
        str(FINETUNE),
        "--init",
        str(pretrained[init]),
        "--head",
        head,
        *RUNS[head],
        "--data-dir",
        str(DATA),
        "--max-train-examples",
        "32",
        "--max-eval-examples",
        "40",
        "--epochs",
        "1",
        "--lr",
        "1e-3",
        "--log-every",
        "1",
        "--no-progress",
        "--deepspeed_config",
        str(REPO / "trainer" / "configs" / "zero1_cpu.json"),
        "--ngram-dictionary",
        str(pretrained["dict"]),
        "--output-dir",
        str(out),
        *extra,
    ]


def check_run(out: Path, head: str, world_size: int) -> dict:
    m = json.loads((out / "metrics.json").read_text())
    assert m["head"] == head and m["world_size"] == world_size and m["global_batch_size"] == 8 * world_size
    assert m["data"]["train"]["examples"] == 32 and m["data"]["dev"]["bad"] == 0
    features = m["data"]["train"]["features"]
    assert features == 32 if head != "span" else features > 32  # QA: several windows per passage
    assert m["steps"] == -(-features // (8 * world_size)) and len(m["train_loss"]) == m["steps"]
    if head == "span":
        assert m["eval"]["questions"] == 40 and m["eval"]["missing_predictions"] == 0
        assert 0 <= m["eval"]["exact_match"] <= m["eval"]["f1"] <= 100
        predictions = json.loads((out / "predictions.json").read_text())
        assert len(predictions) == 40 and all(isinstance(v, str) and v for v in predictions.values())
    else:
        assert m["task"] == "rte" and m["eval"]["examples"] == 40 and 0 <= m["eval"]["accuracy"] <= 100
        rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert len(rows) == 40 and {r["prediction"] for r in rows} <= {0, 1}
        assert m["eval"]["accuracy"] == pytest.approx(
            100 * sum(r["label"] == r["prediction"] for r in rows) / 40, abs=1e-3
        )
    if head == "span-ft":
        assert m["segmentation"] == "ngram" and m["data"]["dev"]["mean_spans"] > 16
    assert (out / "monitor" / "finetune_train_loss.csv").exists() and (out / "bad_rows.jsonl").read_text() == ""
    return m


@pytest.mark.parametrize("head", list(RUNS))
def test_one_plain_process(pretrained, tmp_path, head):
    run([sys.executable, *finetune_cmd(pretrained, head, tmp_path / head)])
    check_run(tmp_path / head, head, 1)


@pytest.mark.parametrize("head", list(RUNS))
def test_two_cpu_ranks_under_deepspeed(pretrained, tmp_path, head):
    run(
        [
            str(DEEPSPEED),
            "--num_gpus",
            "2",
            "--master_port",
            str(free_port()),
            *finetune_cmd(pretrained, head, tmp_path / head),
        ]
    )
    check_run(tmp_path / head, head, 2)


def test_from_the_hugging_face_export_same_as_from_the_checkpoint_and_deterministic(pretrained, tmp_path):
    results = {}
    for name, init in (("ckpt", "run"), ("ckpt_again", "run"), ("hf", "hf")):
        run([sys.executable, *finetune_cmd(pretrained, "span-ft", tmp_path / name, init)])
        results[name] = json.loads((tmp_path / name / "metrics.json").read_text())
        results[name].pop("seconds")
    assert results["hf"]["init"]["kind"] == "huggingface" and results["ckpt"]["init"]["kind"] == "deepspeed_checkpoint"
    assert results["ckpt"] == results["ckpt_again"]  # seeded: the same run twice gives the same numbers
    assert (tmp_path / "ckpt" / "predictions.jsonl").read_bytes() == (
        tmp_path / "ckpt_again" / "predictions.jsonl"
    ).read_bytes()
    # The same weights and the same tokenizer through either source: the same run.
    hf_loss, ckpt_loss = ([r["loss"] for r in results[k]["train_loss"]] for k in ("hf", "ckpt"))
    assert len(hf_loss) == 4 and hf_loss == pytest.approx(ckpt_loss, rel=1e-5)
    assert results["hf"]["eval"] == pytest.approx(results["ckpt"]["eval"])
    assert results["hf"]["parameters"] == results["ckpt"]["parameters"]


def test_bad_rows_reported_and_user_errors_exit_2(pretrained, tmp_path):
    train = tmp_path / "train.tsv"
    lines = (DATA / "glue_rte" / "train.tsv").read_text(encoding="utf-8").splitlines()[:41]
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\tcontradiction"  # an unknown label
    lines[5] = lines[5].rsplit("\t", 1)[0]  # a missing column
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "bad"
    proc = run([sys.executable, *finetune_cmd(pretrained, "cls", out, "run", "--train-file", str(train))])
    assert "train: 40 rows read, 38 used, 2 bad" in proc.stdout
    # not a terminal: no progress bar (a line of carriage returns in a log), the --log-every lines instead, with the
    # time so far and the time left
    step_line = r"^step \d+/\d+: loss \d.*, elapsed \d+:\d\d, ETA \d+:\d\d$"
    assert "\r" not in proc.stderr and re.search(step_line, proc.stdout, re.M), proc.stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["data"]["train"]["by_reason"] == {"unknown_label": 1, "wrong_column_count": 1}
    records = [json.loads(line) for line in (out / "bad_rows.jsonl").read_text().splitlines()]
    assert [(r["split"], r["line"], r["reason"]) for r in records] == [
        ("train", 4, "unknown_label"),
        ("train", 6, "wrong_column_count"),
    ]
    for extra, message in (
        (["--dev-file", str(tmp_path / "missing.tsv")], "missing.tsv: no such file"),
        (["--train-file", str(XQUAD)], "header"),
    ):
        proc = run([sys.executable, *finetune_cmd(pretrained, "cls", tmp_path / "err", "run", *extra)], expect=2)
        assert proc.stderr.strip().splitlines()[-1].startswith("finetune: error:") and message in proc.stderr
        assert "Traceback" not in proc.stderr
    proc = run([sys.executable, *finetune_cmd(pretrained, "span", tmp_path / "err", "run", "--task", "rte")], expect=2)
    assert "--head span does not fit task rte" in proc.stderr


# -- the GLUE and SQuAD 2.0 formats ../shared lacks, written as distributed (issue 25) ----------------------
BOM = "\ufeff"


def _rte_rows(n: int) -> list[list[str]]:
    lines = (DATA / "glue_rte" / "train.tsv").read_text(encoding="utf-8").splitlines()[1 : n + 1]
    return [line.split("\t") for line in lines]


def _write_glue(task: str, path: Path, rows: list[list[str]]) -> None:
    """Real RTE sentence pairs in the task's GLUE layout, with a UTF-8 byte order mark as GLUE's MRPC files."""
    out = []
    for k, (idx, s1, s2, label) in enumerate(rows):
        yes = label == "entailment"
        if task == "mrpc":
            out.append(f"{int(yes)}\t{1000 + k}\t{2000 + k}\t{s1}\t{s2}")
        elif task == "qnli":
            question = s2.rstrip(".") + "?"
            out.append(f"{idx}\t{question}\t{s1}\t{label}")
        else:  # stsb
            score = 4.0 + (k % 5) / 5 if yes else 0.4 + (k % 7) / 5
            out.append(f"{idx}\tmain-news\tnews\t2012\t{k:04d}\tnone\tnone\t{s1}\t{s2}\t{score:.3f}")
    header = "\t".join(get_task(task).header)
    path.write_text(BOM + header + "\n" + "\n".join(out) + "\n", encoding="utf-8")


def _write_squad2(path: Path, questions: int) -> int:
    """XQuAD (SQuAD v1.1 dev) as SQuAD v2.0: every third question made unanswerable (answers [], the old answer
    as plausible_answers, is_impossible true), with a byte order mark. Returns the number of questions."""
    doc = json.loads(XQUAD.read_text(encoding="utf-8"))
    n, data = 0, []
    for article in doc["data"]:
        paragraphs = []
        for p in article["paragraphs"]:
            qas = []
            for qa in p["qas"]:
                if n == questions:
                    break
                impossible = n % 3 == 2
                qas.append(
                    {
                        "id": qa["id"],
                        "question": qa["question"],
                        "answers": [] if impossible else qa["answers"],
                        "is_impossible": impossible,
                        **({"plausible_answers": qa["answers"]} if impossible else {}),
                    }
                )
                n += 1
            if qas:
                paragraphs.append({"context": p["context"], "qas": qas})
        if paragraphs:
            data.append({"title": article["title"], "paragraphs": paragraphs})
    path.write_text(BOM + json.dumps({"version": "v2.0", "data": data}), encoding="utf-8")
    return n


@pytest.mark.parametrize("task", ["mrpc", "qnli", "stsb", "squad2"])
def test_glue_and_squad2_files_as_distributed_run_end_to_end(pretrained, tmp_path, task):
    """MRPC, QNLI, STS-B (GLUE TSVs with a byte order mark) and SQuAD 2.0 JSON train and evaluate with every row
    accounted for; SQuAD 2.0 scores every dev question, unanswerable ones included."""
    if task == "squad2":
        train, dev = tmp_path / "train-v2.0.json", tmp_path / "dev-v2.0.json"
        _write_squad2(train, 24)
        questions = _write_squad2(dev, 30)
        head, extra = "span", ["--max-seq-len", "256", "--doc-stride", "64"]
    else:
        train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
        rows = _rte_rows(72)
        _write_glue(task, train, rows[:40])
        _write_glue(task, dev, rows[40:])
        head, extra = "cls", []
    assert train.read_bytes().startswith(b"\xef\xbb\xbf")
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        str(FINETUNE),
        "--init",
        str(pretrained["run"]),
        "--head",
        head,
        "--task",
        task,
        "--train-file",
        str(train),
        "--dev-file",
        str(dev),
        "--epochs",
        "1",
        "--lr",
        "1e-3",
        "--no-progress",
        "--deepspeed_config",
        str(REPO / "trainer" / "configs" / "zero1_cpu.json"),
        "--output-dir",
        str(out),
        *extra,
    ]
    run(cmd)
    m = json.loads((out / "metrics.json").read_text())
    assert m["task"] == task and m["data"]["train"]["bad"] == 0 and m["data"]["dev"]["bad"] == 0
    if task == "squad2":
        predictions = json.loads((out / "predictions.json").read_text())
        assert len(predictions) == questions == m["eval"]["questions"] == 30
        assert {"has_answer_f1", "no_answer_f1"} <= set(m["eval"]) and 0 <= m["eval"]["f1"] <= 100
    else:
        assert m["data"]["train"]["used"] == 40 and m["data"]["dev"]["used"] == 32 and m["eval"]["examples"] == 32
        for name in get_task(task).metrics:
            assert -100 <= m["eval"][name] <= 100
