"""Fine-tuning takes nothing but the vocabulary and the normalization from a checkpoint's tokenizer.json: a hub file's
truncation and padding (``"truncation": {"max_length": ...}``, ``"padding": {"strategy": {"Fixed": ...}}``) would cut
every text the tokenizer encodes and put pad ids inside the inputs (issue 32, item 2). A Hugging Face BERT directory
whose tokenizer.json carries both gives the same QA and GLUE features as one without (real XQuAD and RTE)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import SHARED_DATA
from tokenizers import Tokenizer

from tests.support.hf_checkpoints import save_bert
from trainer.finetuning import squad
from trainer.finetuning.checkpoint import load_pretrained
from trainer.finetuning.features import glue_feature
from trainer.finetuning.glue import read_tsv
from trainer.finetuning.tasks import get_task

FINETUNE = SHARED_DATA / "finetune"
XQUAD = FINETUNE / "squad_format_xquad_en" / "xquad.en.json"
RTE_TRAIN = FINETUNE / "glue_rte" / "train.tsv"


@pytest.fixture(scope="module")
def checkpoints(demo_artifact, tmp_path_factory) -> tuple[Path, Path]:
    """(a BERT directory with the demo artifact's tokenizer.json, the same with truncation at 12 tokens and fixed
    padding to 24 in its tokenizer.json, as tokenizers' enable_truncation / enable_padding save them)."""
    if not (XQUAD.exists() and RTE_TRAIN.exists()):
        pytest.skip(f"real data not available: {FINETUNE}")
    root = tmp_path_factory.mktemp("ckpt_tokenizer")
    tok = Tokenizer.from_file(str(demo_artifact / "tokenizer.json"))
    plain = save_bert(root / "plain", tok.get_vocab_size(with_added_tokens=True))
    shutil.copy(demo_artifact / "tokenizer.json", plain / "tokenizer.json")
    hub = root / "hub"
    shutil.copytree(plain, hub)
    tok.enable_truncation(max_length=12)
    tok.enable_padding(length=24, pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    tok.save(str(hub / "tokenizer.json"))
    saved = json.loads((hub / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["truncation"]["max_length"] == 12 and saved["padding"]["strategy"] == {"Fixed": 24}
    return plain, hub


def test_truncation_and_padding_of_a_checkpoint_tokenizer_are_not_inherited(checkpoints):
    plain, hub = (load_pretrained(str(path))[1] for path in checkpoints)
    assert plain.ids == hub.ids
    questions, _ = squad.read_squad(str(XQUAD), "squad1", "train")
    questions = questions[:60]
    opts = dict(max_seq_len=128, doc_stride=64, max_query_len=24, training=True)
    qa_plain, qa_hub = squad.qa_features(questions, plain, **opts), squad.qa_features(questions, hub, **opts)
    assert len(qa_plain) > len(questions)  # XQuAD's passages need several 128-token windows
    assert len(qa_hub) == len(qa_plain) and qa_hub == qa_plain
    task = get_task("rte")
    examples = read_tsv(task, str(RTE_TRAIN), "train")[0][:40]
    pairs_plain = [glue_feature(task, "cls", plain, ex, max_seq_len=128) for ex in examples]
    pairs_hub = [glue_feature(task, "cls", hub, ex, max_seq_len=128) for ex in examples]
    assert pairs_hub == pairs_plain
    assert sum(len(f["input_ids"]) > 24 for f in pairs_plain) > 20  # pairs longer than the file's padding length
    assert not any(hub.pad_id in f["input_ids"] for f in pairs_hub)
