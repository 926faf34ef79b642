"""A build in which every document is dead-lettered wrote nothing usable: it exits 1 with one line giving the
dead letters' reasons and counts, and verify refuses what it left (before, it exited 0 and verify said OK)."""

from __future__ import annotations

import json
import subprocess
import sys

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from tests.conftest import DEMO_CORPUS, REPO
from tests.support import beam_services


def _broken_byte_level_bpe() -> str:
    """A RoBERTa-style tokenizer whose vocabulary lost every byte (only its special tokens are left): a real
    byte-level BPE that drops every character it cannot find, so every text gives no tokens."""
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    for special in vocab:
        tok.add_special_tokens([special])
    assert tok.encode("Some text.", add_special_tokens=False).ids == []
    return tok.to_str()


def test_a_build_that_writes_no_document_exits_1_with_the_dead_letter_reasons(tmp_path):
    documents = sum(1 for _ in DEMO_CORPUS.open(encoding="utf-8"))
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(_broken_byte_level_bpe(), encoding="utf-8")
    output = tmp_path / "artifact"
    run = subprocess.run(
        [sys.executable, "-m", "pipeline.build_shards", "--input", str(DEMO_CORPUS), "--output", str(output),
         "--tokenizer", str(tokenizer), "--num-shards", "2"],
        cwd=REPO, env=beam_services.checkout_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and run.stdout == ""
    errors = [line for line in run.stderr.splitlines() if line.startswith("build_shards: error: ")]
    assert errors == [run.stderr.splitlines()[-1]]
    manifest = json.loads((output / "manifest.json").read_text())
    reasons = manifest["counts"]["dead_lettered_by_reason"]
    assert manifest["counts"]["documents_written"] == 0 and sum(reasons.values()) == documents > 0
    assert f"all {documents:,} documents were dead-lettered (no_tokens: {reasons['no_tokens']:,}" in errors[0]

    verified = subprocess.run(
        [sys.executable, "-m", "pipeline.verify", str(output)],
        cwd=REPO, env=beam_services.checkout_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert verified.returncode == 1 and "Traceback" not in verified.stderr
    assert f"counts: no document written ({documents:,} read, {documents:,} dead-lettered: " in verified.stderr
