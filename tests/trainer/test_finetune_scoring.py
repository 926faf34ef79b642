"""SQuAD v1.1 EM/F1 rules against hand-computed scores on real XQuAD (SQuAD v1.1 dev) answers, and the GLUE
metrics (Matthews, F1, Pearson, Spearman with ties) against hand-computed values."""

from __future__ import annotations

import json
import math

import pytest
from conftest import SHARED_DATA

from trainer.finetuning import metrics, squad_metric

XQUAD = SHARED_DATA / "finetune" / "squad_format_xquad_en" / "xquad.en.json"


def real_answers() -> dict[str, str]:
    if not XQUAD.exists():
        pytest.skip(f"real data not available: {XQUAD}")
    doc = json.loads(XQUAD.read_text(encoding="utf-8"))
    return {qa["id"]: qa["answers"][0]["text"] for art in doc["data"] for p in art["paragraphs"] for qa in p["qas"]}


def test_normalisation_removes_case_punctuation_articles_and_extra_space():
    assert squad_metric.normalize_answer("  The  Denver Broncos! ") == "denver broncos"
    assert squad_metric.normalize_answer("an apple, a pear") == "apple pear"
    assert squad_metric.normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert squad_metric.normalize_answer("20–18") == "20–18"  # the en dash is not in string.punctuation


def test_em_and_f1_on_real_answers_by_hand():
    gold = real_answers()
    assert gold["56beb4343aeaaa14008c925b"] == "308"
    assert gold["56beb7953aeaaa14008c92ab"] == "Pittsburgh Steelers"
    assert gold["56beb7953aeaaa14008c92ad"] == "New England Patriots"
    assert gold["56beb7953aeaaa14008c92af"] == "17 seconds"
    assert gold["56beb7953aeaaa14008c92ae"] == "20–18"
    predictions = {
        "56beb4343aeaaa14008c925b": "308 points",  # P 1/2, R 1 -> F1 2/3; EM 0
        "56beb7953aeaaa14008c92ab": "the Pittsburgh Steelers.",  # normalises to the gold: EM 1, F1 1
        "56beb7953aeaaa14008c92ad": "England Patriots and the Broncos",  # common 2; P 2/4, R 2/3 -> F1 4/7
        "56beb7953aeaaa14008c92af": "seventeen seconds",  # common 1; P 1/2, R 1/2 -> F1 1/2
        "56beb7953aeaaa14008c92ae": "20-18",  # hyphen removed: "2018" vs "20–18": F1 0
    }
    expected = {
        "56beb4343aeaaa14008c925b": (0, 2 / 3),
        "56beb7953aeaaa14008c92ab": (1, 1),
        "56beb7953aeaaa14008c92ad": (0, 4 / 7),
        "56beb7953aeaaa14008c92af": (0, 0.5),
        "56beb7953aeaaa14008c92ae": (0, 0),
    }
    for qid, (em, f1) in expected.items():
        got = squad_metric.score_question(predictions[qid], [gold[qid]])
        assert got == (pytest.approx(em), pytest.approx(f1)), qid
    golds = {qid: [gold[qid]] for qid in expected}
    golds["56beb4343aeaaa14008c925c"] = [gold["56beb4343aeaaa14008c925c"]]  # no prediction: scores 0
    result = squad_metric.evaluate(golds, predictions)
    assert result["questions"] == 6 and result["missing_predictions"] == 1
    assert result["exact_match"] == pytest.approx(100 * 1 / 6, abs=1e-4)
    assert result["f1"] == pytest.approx(100 * (2 / 3 + 1 + 4 / 7 + 0.5) / 6, abs=1e-4)


def test_best_over_several_gold_answers_and_v2_empty_rule():
    assert squad_metric.score_question("Broncos", ["Denver Broncos", "the Broncos"]) == (1.0, 1.0)
    assert squad_metric.score_question("", [""]) == (1.0, 1.0)
    assert squad_metric.score_question("Broncos", []) == (0.0, 0.0)  # unanswerable: only "" scores
    assert squad_metric.score_question("", ["Broncos"]) == (0.0, 0.0)
    result = squad_metric.evaluate({"a": ["x y"], "b": []}, {"a": "x", "b": ""})
    assert result["no_answer_exact_match"] == 100.0 and result["has_answer_f1"] == pytest.approx(100 * 2 / 3, abs=1e-4)


def test_glue_metrics_by_hand():
    pred, gold = [1, 1, 0, 0, 1, 0], [1, 0, 0, 1, 1, 0]  # tp 2, fp 1, fn 1, tn 2
    assert metrics.accuracy(pred, gold) == pytest.approx(4 / 6)
    assert metrics.f1_binary(pred, gold) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert metrics.matthews(pred, gold) == pytest.approx((2 * 2 - 1 * 1) / math.sqrt(3 * 3 * 3 * 3))
    assert metrics.matthews([1, 1, 1], [1, 0, 1]) == 0.0  # a constant prediction: 0, not a division by zero
    x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 9.0]
    # deviations x: -1.5 -.5 .5 1.5, y: -3.25 -1.25 .75 3.75; sxy 11.5, sxx 5, syy 26.75
    assert metrics.pearson(x, y) == pytest.approx(11.5 / math.sqrt(5 * 26.75))
    assert metrics.spearman(x, y) == pytest.approx(1.0)
    assert metrics.ranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    # ties: ranks x = 1,2.5,2.5,4, y = 1,2,3,4 -> Pearson of the ranks
    # rank deviations -1.5 0 0 1.5 and -1.5 -.5 .5 1.5: sxy 4.5, sxx 4.5, syy 5
    assert metrics.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert metrics.glue_metrics(("accuracy", "matthews"), pred, gold) == {"accuracy": 66.6667, "matthews": 33.3333}
    with pytest.raises(ValueError):
        metrics.accuracy([1], [1, 0])
