"""SQuAD v1.1 EM/F1 rules against hand-computed scores on real XQuAD (SQuAD v1.1 dev) answers, and the GLUE
metrics (Matthews, F1, Pearson, Spearman with ties) against hand-computed values."""

from __future__ import annotations

import json
import math
import random

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
    assert squad_metric.score_question("", [""], version2=True) == (1.0, 1.0)
    assert squad_metric.score_question("Broncos", [], version2=True) == (0.0, 0.0)  # unanswerable: only "" scores
    assert squad_metric.score_question("", ["Broncos"], version2=True) == (0.0, 0.0)
    result = squad_metric.evaluate({"a": ["x y"], "b": []}, {"a": "x", "b": ""}, version2=True)
    assert result["no_answer_exact_match"] == 100.0 and result["has_answer_f1"] == pytest.approx(100 * 2 / 3, abs=1e-4)


def test_official_edge_cases_v1_and_v2_differ():
    """Issue 25, item 5: v1.1 gives F1 0 when both normalise to "" (EM 1); v2.0 drops golds that normalise to ""."""
    assert squad_metric.score_question("the", ["a"]) == (1.0, 0.0)  # v1.1
    assert squad_metric.score_question("the", ["a"], version2=True) == (1.0, 1.0)  # v2.0: [""] against ""
    assert squad_metric.score_question("", ["The"], version2=True) == (1.0, 1.0)  # articles only: gold [""]
    assert squad_metric.score_question("", ["The", "Denver"], version2=True) == (0.0, 0.0)  # "The" is dropped
    assert squad_metric.score_question("Denver", ["The", "Denver"], version2=True) == (1.0, 1.0)
    # a repeated id: v1.1 counts every entry, v2.0 one score per id
    golds = [("q", ["Denver"]), ("q", ["Carolina"]), ("r", ["x"])]
    assert squad_metric.evaluate(golds, {"q": "Denver", "r": "x"})["exact_match"] == pytest.approx(200 / 3, abs=1e-4)
    assert squad_metric.evaluate(golds, {"q": "Denver", "r": "x"}, version2=True)["exact_match"] == 50.0
    # a missing prediction: 0 in v1.1, left out of the total in v2.0
    assert squad_metric.evaluate(golds, {"q": "Denver"})["questions"] == 3
    assert squad_metric.evaluate(golds, {"q": "Carolina"}, version2=True)["questions"] == 1


def test_glue_metrics_by_hand():
    pred, gold = [1, 1, 0, 0, 1, 0], [1, 0, 0, 1, 1, 0]  # tp 2, fp 1, fn 1, tn 2
    assert metrics.accuracy(pred, gold) == pytest.approx(4 / 6)
    assert metrics.f1_binary(pred, gold) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert metrics.matthews(pred, gold) == pytest.approx((2 * 2 - 1 * 1) / math.sqrt(3 * 3 * 3 * 3))
    assert metrics.matthews([1, 1, 1], [1, 0, 1]) == 0.0  # a constant prediction: 0, not a division by zero
    x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 9.0]
    # deviations x: -1.5 -.5 .5 1.5, y: -3.25 -1.25 .75 3.75; sxy 11.5, sxx 5, syy 26.75
    assert metrics.pearson(x, y) == pytest.approx(11.5 / math.sqrt(5 * 26.75))
    assert metrics.pearson([2.5, 2.5, 2.5], [1.0, 2.0, 4.0]) == 0.0  # a constant prediction: 0 (scipy: NaN)
    assert metrics.spearman(x, y) == pytest.approx(1.0)
    assert metrics.ranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    # ties: ranks x = 1,2.5,2.5,4, y = 1,2,3,4 -> Pearson of the ranks
    # rank deviations -1.5 0 0 1.5 and -1.5 -.5 .5 1.5: sxy 4.5, sxx 4.5, syy 5
    assert metrics.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert metrics.glue_metrics(("accuracy", "matthews"), pred, gold) == {"accuracy": 66.6667, "matthews": 33.3333}
    with pytest.raises(ValueError):
        metrics.accuracy([1], [1, 0])


def _predictions(dataset: list, seed: int) -> dict[str, str]:
    """Predictions of every kind the rules distinguish: exact, re-cased with punctuation and articles, partial,
    over-long, another question's answer, articles only, empty, missing (about 1 in 20)."""
    rng = random.Random(seed)
    qas = [qa for art in dataset for p in art["paragraphs"] for qa in p["qas"]]
    texts = [a["text"] for qa in qas for a in qa["answers"]] or ["nothing"]
    out = {}
    for qa in qas:
        gold = qa["answers"][0]["text"] if qa["answers"] else rng.choice(texts)
        kind = rng.randrange(9)
        if kind == 8:
            continue  # missing
        out[qa["id"]] = [
            gold,
            f"The {gold.upper()}!",
            " ".join(gold.split()[: max(1, len(gold.split()) // 2)]),
            f"{gold} and more words here",
            rng.choice(texts),
            rng.choice(["the", "a", "An", "."]),
            "",
            gold.lower(),
        ][kind]
    return out


def test_scorer_equals_an_independent_implementation_of_the_official_v1_script_on_xquad():
    """Issue 25, item 5: EM/F1 as evaluate-v1.1.py computes them (tests/support/squad_official.py) on real XQuAD
    golds, with predictions of every kind and a few missing."""
    from tests.support import squad_official

    if not XQUAD.exists():
        pytest.skip(f"real data not available: {XQUAD}")
    dataset = json.loads(XQUAD.read_text(encoding="utf-8"))["data"]
    golds = [
        (qa["id"], [a["text"] for a in qa["answers"]]) for a in dataset for p in a["paragraphs"] for qa in p["qas"]
    ]
    assert len(golds) == 1190
    for seed in range(3):
        predictions = _predictions(dataset, seed)
        ours = squad_metric.evaluate(golds, predictions)
        theirs = squad_official.evaluate_v1(dataset, predictions)
        assert ours["exact_match"] == pytest.approx(theirs["exact_match"], abs=1e-4)
        assert ours["f1"] == pytest.approx(theirs["f1"], abs=1e-4)
        assert ours["questions"] == 1190 and ours["missing_predictions"] > 0


def _synthetic_v2(seed: int) -> list:
    """A SQuAD v2.0 dataset: answerable questions (some with several answers), unanswerable ones (answers [],
    plausible_answers set) and questions whose only answers are articles ("the", "A")."""
    rng = random.Random(seed)
    words = "Denver Broncos beat the Carolina Panthers in a game at Levi's Stadium on February 7 2016".split()
    data, n = [], 0
    for a in range(4):
        paragraphs = []
        for _ in range(5):
            context = " ".join(rng.choice(words) for _ in range(30))
            qas = []
            for _ in range(6):
                n += 1
                kind = rng.randrange(4)
                if kind == 0:
                    qas.append({"id": f"q{n}", "question": "?", "answers": [], "is_impossible": True,
                                "plausible_answers": [{"text": words[0], "answer_start": 0}]})  # fmt: skip
                    continue
                answers = []
                for _ in range(1 if kind == 1 else rng.randint(1, 3)):
                    text = rng.choice(["the", "A", "a the"]) if kind == 3 else " ".join(rng.sample(words, 2))
                    answers.append({"text": text, "answer_start": 0})
                qas.append({"id": f"q{n}", "question": "?", "answers": answers, "is_impossible": False})
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"t{a}", "paragraphs": paragraphs})
    return data


def test_scorer_equals_an_independent_implementation_of_the_official_v2_script():
    """Unanswerable questions, articles-only answers, empty predictions: as evaluate-v2.0.py."""
    from tests.support import squad_official

    checked = 0
    for seed in range(4):
        dataset = _synthetic_v2(seed)
        golds = [
            (qa["id"], [x["text"] for x in qa["answers"]]) for a in dataset for p in a["paragraphs"] for qa in p["qas"]
        ]
        assert sum(not g for _, g in golds) > 5 and sum(bool(g) and g[0] in ("the", "A", "a the") for _, g in golds) > 5
        for predictions in (_predictions(dataset, seed), {q: "" for q, _ in golds}):
            # the official script's HasAns/NoAns breakdown needs every prediction
            theirs = squad_official.evaluate_v2(dataset, predictions, breakdown=len(predictions) == len(golds))
            ours = squad_metric.evaluate(golds, predictions, version2=True)
            for key, value in theirs.items():
                assert ours[key] == pytest.approx(value, abs=1e-4), (seed, key)
                checked += 1
    assert checked >= 16
    # all-empty predictions: the unanswerable ones and the articles-only ones score, nothing else does
    empty = squad_metric.evaluate(golds, {q: "" for q, _ in golds}, version2=True)
    assert 0 < empty["exact_match"] == empty["f1"] < 100
