"""An evaluation file changed under a job whose workers are other processes (found by the attack round on issue 35)."""

from __future__ import annotations

import json

from pipeline import build_shards
from tests.conftest import DEMO_CORPUS


def test_worker_processes_refuse_in_one_line_an_evaluation_file_changed_after_the_launcher_checked_it(
    tmp_path, capfd, monkeypatch
):
    from pipeline.dedup import removal

    doc = json.loads(DEMO_CORPUS.read_text(encoding="utf-8").splitlines()[4])
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"id": "ex-copied", "text": " ".join(doc["text"].split()[10:30])}) + "\n")
    checked = removal.eval_files

    def check_then_edit(o):  # the real check; the file is then edited before the worker processes read it
        files = checked(o)
        evals.write_text(json.dumps({"id": "late", "text": "written after the launcher checked it " * 3}) + "\n")
        return files

    monkeypatch.setattr(removal, "eval_files", check_then_edit)
    argv = ["--input", str(DEMO_CORPUS), "--output", str(tmp_path / "out"), "--train-tokenizer", "--vocab-size",
            "2000", "--num-shards", "2", "--decontaminate", str(evals), "--runner", "FnApiRunner",
            "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]  # fmt: skip
    try:
        code = build_shards.main(argv)
    except Exception as e:  # what reaches the caller is the finding
        code = f"raised {type(e).__name__}"
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("build_shards: error:")]
    assert code == 2 and "Traceback" not in err, (code, err[-1500:])
    assert len(lines) == 1 and str(evals) in lines[0] and "changed since the job started" in lines[0]
