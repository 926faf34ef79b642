"""Reading the fine-tuning data: GLUE TSV layouts (declared, checked), bad-row accounting, SQuAD JSON with
answer_start checks, and the QA windows with stride whose answers map back to the exact characters."""

from __future__ import annotations

import json

import pytest
from conftest import SHARED_DATA
from tokenizers import Tokenizer

from trainer.finetuning import squad, squad_metric
from trainer.finetuning.glue import DataError, read_tsv
from trainer.finetuning.tasks import TASKS, get_task

FINETUNE = SHARED_DATA / "finetune"
XQUAD = FINETUNE / "squad_format_xquad_en" / "xquad.en.json"


def real(path):
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(demo_artifact):
    return Tokenizer.from_file(str(demo_artifact / "tokenizer.json"))


def test_real_glue_files_read_with_declared_layouts():
    rte, bad = read_tsv(get_task("rte"), real(FINETUNE / "glue_rte" / "train.tsv"), "train")
    assert bad.summary() == {"read": 2490, "used": 2490, "bad": 0, "by_reason": {}}
    assert sum(ex.label == 0 for ex in rte) == 1249 and sum(ex.label == 1 for ex in rte) == 1241  # README's counts
    assert rte[0].text_a.startswith("No Weapons of Mass Destruction") and rte[0].text_b
    cola, bad = read_tsv(get_task("cola"), real(FINETUNE / "glue_cola" / "in_domain_dev.tsv"), "dev")
    assert bad.bad == 0 and len(cola) == 527 and sum(ex.label == 1 for ex in cola) == 367 and cola[0].text_b is None
    sst, bad = read_tsv(get_task("sst2"), real(FINETUNE / "glue_sst2" / "dev.tsv"), "dev")
    assert bad.bad == 0 and len(sst) == 872 and sum(ex.label == 1 for ex in sst) == 444


def test_bad_rows_are_counted_with_reasons_never_dropped_silently(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text(
        "index\tsentence1\tsentence2\tlabel\n"
        "0\tA man sleeps.\tA man rests.\tentailment\n"
        "1\tonly three\tcolumns\n"
        "2\tA dog.\tA cat.\tcontradiction\n"
        "3\tX.\tY.\tnot_entailment\textra\n"
        "4\t \tY.\tentailment\n"
        "5\tIt rains.\tIt is dry.\tnot_entailment\n",
        encoding="utf-8",
    )
    examples, bad = read_tsv(get_task("rte"), str(path), "dev")
    assert [ex.label for ex in examples] == [0, 1]
    assert bad.summary() == {
        "read": 6,
        "used": 2,
        "bad": 4,
        "by_reason": {"empty_text": 1, "unknown_label": 1, "wrong_column_count": 2},
    }
    assert [r["line"] for r in bad.records] == [3, 4, 5, 6]
    stsb = tmp_path / "sts.tsv"
    header = "\t".join(get_task("stsb").header)
    row = "0\tg\tf\t2012\t0\ts\ts\tA man.\tA woman.\t"
    stsb.write_text(f"{header}\n{row}3.8\n{row}high\n{row}7.0\n", encoding="utf-8")
    examples, bad = read_tsv(get_task("stsb"), str(stsb), "dev")
    assert [ex.label for ex in examples] == [3.8]
    assert bad.summary()["by_reason"] == {"bad_score": 1, "score_out_of_range": 1}


def test_a_file_without_the_declared_header_is_refused(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\nit is fine\t1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train.tsv:1: header \['sentence', 'label'\] is not rte's declared header"):
        read_tsv(get_task("rte"), str(path), "train")
    with pytest.raises(DataError, match="no such file"):
        read_tsv(get_task("rte"), str(tmp_path / "missing.tsv"), "train")
    assert all(t.header is None or len(t.header) == t.num_columns for t in TASKS.values())


def test_squad_answer_start_mismatch_is_a_bad_row(tmp_path):
    doc = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "Denver beat Carolina 24-10.",
                        "qas": [
                            {"id": "ok", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]},
                            {
                                "id": "shifted",
                                "question": "Who lost?",
                                "answers": [{"text": "Carolina", "answer_start": 11}],
                            },
                            {"id": "none", "question": "Score?", "answers": []},
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "q.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    examples, bad = squad.read_squad(str(path), "squad1", "dev")
    assert [ex.qid for ex in examples] == ["ok"]
    assert bad.summary()["by_reason"] == {"answer_start_mismatch": 1, "no_answer": 1}
    assert "context has ' Carolin'" in bad.records[0]["detail"]
    with pytest.raises(DataError, match="SQuAD version '0.9'; task squad2 reads v2.0"):
        doc["version"] = "0.9"
        path.write_text(json.dumps(doc), encoding="utf-8")
        squad.read_squad(str(path), "squad2", "dev")


def test_window_starts_and_char_to_token_mapping_by_hand():
    assert squad.window_starts(10, 4, 2) == [0, 2, 4, 6]  # the last window 6..9 reaches the end
    assert squad.window_starts(4, 4, 2) == [0]
    assert squad.window_starts(11, 4, 8) == [0, 4, 8]  # a stride longer than the window would skip tokens
    offsets = [(0, 6), (7, 11), (11, 12), (13, 21)]  # "Denver beat, Carolina"
    assert squad.char_span_to_tokens(offsets, 7, 11) == (1, 1)
    assert squad.char_span_to_tokens(offsets, 8, 15) == (1, 3)  # partial words cover their tokens
    assert squad.char_span_to_tokens(offsets, 6, 7) is None  # only the space


def test_windows_with_stride_map_every_answer_back_to_its_characters(tokenizer):
    examples, bad = squad.read_squad(real(XQUAD), "squad1", "dev")
    assert bad.bad == 0 and len(examples) == 1190
    examples = examples[:60]
    feats = squad.qa_features(examples, tokenizer, max_seq_len=96, doc_stride=32, max_query_len=24, training=True)
    assert len(feats) > 3 * len(examples)  # real passages of ~1,000 characters need several 96-token windows
    inside = 0
    for f in feats:
        ex = examples[f["example_index"]]
        assert len(f["input_ids"]) <= 96 and len(f["token_type_ids"]) == len(f["input_ids"]) == len(f["span_mask"])
        if f["start_positions"] == 0:
            continue
        inside += 1
        text, start = ex.answers[0]
        s, e = f["token_offsets"][f["start_positions"]][0], f["token_offsets"][f["end_positions"]][1]
        assert ex.context[s:e].strip() == text or text in ex.context[s:e], (ex.qid, ex.context[s:e], text)
        assert s <= start and start + len(text) <= e
    assert inside >= len(examples)  # every answer is in at least one window
    # Decoding one-hot logits at the gold tokens, from all windows, gives the gold answer back (whole words).
    starts = [[0.0] * len(f["input_ids"]) for f in feats]
    ends = [[0.0] * len(f["input_ids"]) for f in feats]
    for f, s, e in zip(feats, starts, ends):
        if f["start_positions"]:
            s[f["start_positions"]], e[f["end_positions"]] = 10.0, 10.0
    predictions = squad.decode(examples, feats, starts, ends, n_best=5, max_answer_len=30)
    exact = sum(predictions[ex.qid] == ex.answers[0][0] for ex in examples)
    assert exact >= 0.9 * len(examples), [(p, ex.answers[0][0]) for ex, p in zip(examples, predictions.values())]


def test_decoding_respects_max_context_and_max_answer_length(tokenizer):
    ex = squad.QAExample(qid="q", question="Who?", context=" ".join(f"w{i}" for i in range(40)), answers=[("w3", 9)])
    feats = squad.qa_features([ex], tokenizer, max_seq_len=20, doc_stride=5, max_query_len=8, training=False)
    assert len(feats) > 2
    # A passage token in several windows is the max-context token of exactly one of them.
    owners = {}
    for w, f in enumerate(feats):
        for pos, (off, best) in enumerate(zip(f["token_offsets"], f["max_context"])):
            if off is not None and best:
                token = f["window_start"] + pos - 1
                assert token not in owners
                owners[token] = w
    n_tokens = len(tokenizer.encode(ex.context, add_special_tokens=False).ids)
    assert sorted(owners) == list(range(n_tokens))
    assert set(owners.values()) == set(range(len(feats)))
    s_log = [[0.0] * len(f["input_ids"]) for f in feats]
    e_log = [[0.0] * len(f["input_ids"]) for f in feats]
    s_log[0][1], e_log[0][3] = 5.0, 5.0  # the first three passage tokens of window 0
    assert (
        squad.decode([ex], feats, s_log, e_log, max_answer_len=30)["q"] == ex.context[: feats[0]["token_offsets"][3][1]]
    )
    # One token at most: the best start alone, widened to its word.
    assert squad.decode([ex], feats, s_log, e_log, max_answer_len=1)["q"] == "w0"


def test_squad2_unanswerable_questions_target_cls_and_decode_to_empty(tokenizer, tmp_path):
    context = "Denver beat Carolina 24-10 in Super Bowl 50."
    doc = {
        "version": "v2.0",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": "a",
                                "question": "Who won?",
                                "answers": [{"text": "Denver", "answer_start": 0}],
                                "is_impossible": False,
                            },
                            {
                                "id": "u",
                                "question": "Who sang?",
                                "answers": [],
                                "plausible_answers": [{"text": "Carolina", "answer_start": 12}],
                                "is_impossible": True,
                            },
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    examples, bad = squad.read_squad(str(path), "squad2", "dev")
    assert bad.bad == 0 and [ex.is_impossible for ex in examples] == [False, True] and examples[1].answers == []
    feats = squad.qa_features(examples, tokenizer, max_seq_len=64, doc_stride=16, max_query_len=16, training=True)
    assert [(f["start_positions"], f["end_positions"]) for f in feats][1] == (0, 0)
    s, e = feats[0]["start_positions"], feats[0]["end_positions"]
    assert s > 0 and context[feats[0]["token_offsets"][s][0] : feats[0]["token_offsets"][e][1]] == "Denver"
    starts = [[0.0] * len(f["input_ids"]) for f in feats]
    ends = [[0.0] * len(f["input_ids"]) for f in feats]
    starts[0][s], ends[0][e] = 4.0, 4.0  # "Denver" scores 8 against [CLS]'s 0
    starts[1][0], ends[1][0] = 4.0, 4.0  # [CLS] scores 8 against the best span's 0
    predictions = squad.decode(examples, feats, starts, ends, version2=True)
    assert predictions == {"a": "Denver", "u": ""}
    assert squad.decode(examples, feats, starts, ends, version2=True, null_threshold=10.0)["u"] != ""
    assert squad_metric.evaluate({ex.qid: [t for t, _ in ex.answers] for ex in examples}, predictions)["f1"] == 100.0
