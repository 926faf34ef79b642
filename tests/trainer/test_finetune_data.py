"""Reading the fine-tuning data: GLUE TSV layouts (declared, checked), bad-row accounting, SQuAD JSON with
answer_start checks, and the QA windows with stride whose answers map back to the exact characters."""

from __future__ import annotations

import json

import pytest
from conftest import SHARED_DATA
from tokenizers import Tokenizer

from trainer.finetuning import squad, squad_metric
from trainer.finetuning.encoding import ModelTokenizer
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
    return ModelTokenizer.of(Tokenizer.from_file(str(demo_artifact / "tokenizer.json")))


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
    examples, bad = squad.read_squad(str(path), "squad1", "train")
    assert [ex.qid for ex in examples] == ["ok"]
    assert bad.summary()["by_reason"] == {"answer_start_mismatch": 1, "no_answer": 1}
    assert "' Carolin'" in bad.records[0]["detail"]
    with pytest.raises(DataError, match="SQuAD version '0.9'; task squad2 reads v2.0"):
        doc["version"] = "0.9"
        path.write_text(json.dumps(doc), encoding="utf-8")
        squad.read_squad(str(path), "squad2", "dev")


def test_a_one_space_answer_at_a_space_is_a_blank_answer_scored_as_officially(tmp_path):
    """Issue 32: an answer of one space at an offset holding a space points where it says; it is a blank answer (no
    token to train on), not an answer_start mismatch. Dev still scores it against its text, as the official v1.1
    script does (an empty prediction matches it exactly)."""
    from tests.support.squad_official import evaluate_v1

    context = "Denver beat Carolina 24-10."
    doc = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "ok", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]},
        {"id": "space", "question": "What?", "answers": [{"text": " ", "answer_start": 6}]},
        {"id": "shifted", "question": "What?", "answers": [{"text": " ", "answer_start": 7}]},
    ]}]}]}  # fmt: skip
    assert context[6] == " " and context[7] != " "
    path = tmp_path / "q.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    examples, bad = squad.read_squad(str(path), "squad1", "train")
    assert [ex.qid for ex in examples] == ["ok"]
    assert bad.summary()["by_reason"] == {"blank_answer": 1, "answer_start_mismatch": 1}
    (blank,) = [r for r in bad.records if r["reason"] == "blank_answer"]
    assert blank["detail"].startswith("space: answer ' ' at 6: only whitespace") and blank["line"].endswith("qas[1]")
    examples, bad = squad.read_squad(str(path), "squad1", "dev")
    assert [ex.qid for ex in examples] == ["ok", "space", "shifted"] and bad.used == 3
    predictions = {"ok": "Denver", "space": "", "shifted": "Carolina"}
    ours = squad_metric.evaluate([(ex.qid, ex.gold_texts) for ex in examples], predictions)
    official = evaluate_v1(doc["data"], predictions)
    assert ours["exact_match"] == pytest.approx(official["exact_match"]) == pytest.approx(200 / 3)


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
    n_tokens = len(tokenizer.encode(ex.context).ids)
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
    golds = [(ex.qid, ex.gold_texts) for ex in examples]
    assert squad_metric.evaluate(golds, predictions, version2=True)["f1"] == 100.0


def test_dev_questions_are_never_dropped_from_scoring(tmp_path):
    """Issue 25, item 4: a dev question with a wrong answer_start, a repeated id or no answer is still scored
    (reported in bad_rows with ``kept``), as the official scripts score every qa entry; one without a question
    is predicted "" (a miss)."""
    qas = [
        {"id": "ok", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]},
        {"id": "shifted", "question": "Who lost?", "answers": [{"text": "Carolina", "answer_start": 11}]},
        {"id": "ok", "question": "Who won again?", "answers": [{"text": "Denver", "answer_start": 0}]},
        {"id": "none", "question": "Score?", "answers": []},
        {"id": "empty", "question": " ", "answers": [{"text": "24-10", "answer_start": 21}]},
        {"question": "No id?", "answers": [{"text": "Denver", "answer_start": 0}]},
    ]
    doc = {"version": "1.1", "data": [{"paragraphs": [{"context": "Denver beat Carolina 24-10.", "qas": qas}]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    examples, bad = squad.read_squad(str(path), "squad1", "dev")
    assert [ex.qid for ex in examples] == ["ok", "shifted", "ok", "none", "empty"]
    assert examples[1].gold_texts == ["Carolina"] and examples[1].answers == [] and not examples[4].predictable
    s = bad.summary()
    assert (s["read"], s["used"], s["bad"]) == (6, 5, 1) and s["by_reason"] == {"missing_field": 1}
    assert s["used_with_problems"] == {
        "answer_start_mismatch": 1,
        "duplicate_id": 1,
        "missing_field": 1,
        "no_answer": 1,
    }
    train, tbad = squad.read_squad(str(path), "squad1", "train")
    assert [ex.qid for ex in train] == ["ok", "ok"] and tbad.bad == 4


def test_wrongly_typed_squad_entries_are_bad_rows_not_tracebacks(tmp_path):
    """Issue 21, item 8: wrong JSON types in a SQuAD file are bad rows with a reason."""
    good = {"id": "g", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]}
    doc = {
        "version": "1.1",
        "data": [
            "an article that is a string",
            {"paragraphs": {"not": "a list"}},
            {
                "paragraphs": [
                    7,
                    {"context": "Denver beat Carolina.", "qas": "nope"},
                    {"context": 12, "qas": [{"id": "c", "question": "Who?", "answers": []}]},
                    {
                        "context": "Denver beat Carolina.",
                        "qas": [
                            good,
                            None,
                            {"id": ["x"], "question": "Who?", "answers": []},
                            {"id": "q", "question": 5, "answers": [{"text": "Denver", "answer_start": 0}]},
                            {"id": "a", "question": "Who?", "answers": {"text": "Denver"}},
                            {"id": "t", "question": "Who?", "answers": [{"text": 3, "answer_start": 0}]},
                            {"id": "s", "question": "Who?", "answers": [{"text": "Denver", "answer_start": "0"}]},
                            {"id": "b", "question": "Who?", "answers": [{"text": "Denver", "answer_start": True}]},
                            {"id": "n", "question": "Who?", "answers": [{"text": "Denver", "answer_start": None}]},
                        ],
                    },
                ]
            },
        ],
    }
    path = tmp_path / "typed.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    for split in ("train", "dev"):
        examples, bad = squad.read_squad(str(path), "squad1", split)
        bad.check()
        assert bad.read == 14 and [ex.qid for ex in examples if ex.predictable][:1] == ["g"]
        assert all(r["source"] == str(path) and r["line"].startswith("data[") for r in bad.records)
    examples, bad = squad.read_squad(str(path), "squad1", "train")
    assert [ex.qid for ex in examples] == ["g"]
    assert bad.summary()["by_reason"] == {"answer_start_mismatch": 3, "malformed_entry": 6, "missing_field": 4}
    v2 = dict(doc, version="v2.0")
    v2["data"] = [
        {"paragraphs": [{"context": "Denver.", "qas": [{"id": "i", "question": "Q?", "is_impossible": "no"}]}]}
    ]
    path.write_text(json.dumps(v2), encoding="utf-8")
    assert squad.read_squad(str(path), "squad2", "train")[1].summary()["by_reason"] == {"malformed_entry": 1}


def test_squad_json_not_utf8_or_not_json_is_one_line_naming_file_and_position(tmp_path):
    path = tmp_path / "q.json"
    path.write_bytes(b'{"version": "1.1",\n "data": [{"title": "caf\xe9"}]}')
    with pytest.raises(DataError, match=r"q.json:2: not UTF-8 \(byte 43"):
        squad.read_squad(str(path), "squad1", "dev")
    path.write_bytes(b'{"version": "1.1",\n "data": [}')
    with pytest.raises(DataError, match=r"q.json:2:11: not SQuAD JSON"):
        squad.read_squad(str(path), "squad1", "dev")
    doc = {"version": "1.1", "data": [{"paragraphs": [{"context": "Denver won.", "qas": []}]}]}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())  # a byte order mark is fine
    assert squad.read_squad(str(path), "squad1", "dev")[1].read == 0


def test_tsv_byte_order_mark_is_accepted_and_bad_utf8_is_a_bad_row_with_file_and_line(tmp_path):
    """Issue 25, item 1 (GLUE's MRPC files start with a UTF-8 byte order mark) and issue 21, item 8."""
    path = tmp_path / "dev.tsv"
    header = "\t".join(get_task("mrpc").header)
    path.write_bytes(
        b"\xef\xbb\xbf"
        + f"{header}\r\n1\t1\t2\tHe said so.\tHe told us.\r\n".encode()
        + b"0\t3\t4\tCaf\xe9 noir.\tA black coffee.\r\n"
        + b"0\t5\t6\tIt rained.\tIt was dry.\r\n"
    )
    examples, bad = read_tsv(get_task("mrpc"), str(path), "dev")
    assert [(ex.text_a, ex.label) for ex in examples] == [("He said so.", 1), ("It rained.", 0)]
    assert bad.summary()["by_reason"] == {"not_utf8": 1}
    assert (bad.records[0]["source"], bad.records[0]["line"]) == (str(path), 3)
    path.write_bytes("\ufeffindex\tsentence1\tsentence2\tlabel\n".encode("utf-16"))
    with pytest.raises(DataError, match=r"dev.tsv:1: starts with a UTF-16 little-endian byte order mark"):
        read_tsv(get_task("rte"), str(path), "dev")
    path.write_bytes(b"ind\xffex\tsentence1\tsentence2\tlabel\n")
    with pytest.raises(DataError, match=r"dev.tsv:1: no header line \(not UTF-8"):
        read_tsv(get_task("rte"), str(path), "dev")


def test_qa_features_are_those_of_the_old_algorithm_on_xquad(tokenizer):
    """Issue 21, item 9: the linear max-context computation gives exactly the old features (the old algorithm,
    kept in tests/support/qa_reference.py) on every XQuAD question, and on long passages made of its contexts."""
    from tests.support.qa_reference import old_qa_features

    examples, _ = squad.read_squad(real(XQUAD), "squad1", "dev")
    long_context = " ".join(dict.fromkeys(ex.context for ex in examples[:30]))  # 7 passages, ~1,500 tokens
    offset = long_context.index(examples[25].context)
    text, start = examples[25].answers[0]
    examples.append(squad.QAExample("long", "Which?", long_context, [(text, start + offset)]))
    compared = 0
    for max_seq_len, stride, training in ((384, 128, True), (96, 32, False), (64, 16, True), (40, 50, False)):
        opts = dict(max_seq_len=max_seq_len, doc_stride=stride, max_query_len=24, training=training)
        chunk = examples[:: 7 if max_seq_len == 384 else 23] + examples[-1:]
        new, old = squad.qa_features(chunk, tokenizer, **opts), old_qa_features(chunk, tokenizer.tokenizer, **opts)
        assert new == old
        compared += len(new)
        assert sum(f["example_index"] == len(chunk) - 1 for f in new) >= 3  # the long passage: several windows
    assert compared > 2000


def test_qnli_puts_the_question_first(tmp_path):
    """Issue 25, item 6: GLUE and BERT feed QNLI as [CLS] question [SEP] sentence [SEP]."""
    path = tmp_path / "dev.tsv"
    path.write_text(
        "index\tquestion\tsentence\tlabel\n0\tWhen did it rain?\tIt rained on Monday.\tentailment\n", encoding="utf-8"
    )
    (ex,), bad = read_tsv(get_task("qnli"), str(path), "dev")
    assert (ex.text_a, ex.text_b, ex.label) == ("When did it rain?", "It rained on Monday.", 0) and bad.bad == 0
