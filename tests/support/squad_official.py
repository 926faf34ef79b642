"""An independent implementation of the official SQuAD evaluation scripts (``evaluate-v1.1.py``,
``evaluate-v2.0.py`` with its default na_prob threshold 1.0 and no na_prob file), written from their published
description for tests/trainer/test_finetune_scoring.py: it walks the dataset JSON as the scripts do and shares no
code with ``trainer.finetuning.squad_metric``."""

from __future__ import annotations

import collections
import re
import string


def _normalize(s: str) -> str:
    def remove_articles(t: str) -> str:
        return re.sub(r"\b(a|an|the)\b", " ", t)

    def remove_punc(t: str) -> str:
        exclude = set(string.punctuation)
        return "".join(ch for ch in t if ch not in exclude)

    return " ".join(remove_articles(remove_punc(s.lower())).split())


def _f1_v1(prediction: str, truth: str) -> float:
    p, t = _normalize(prediction).split(), _normalize(truth).split()
    same = sum((collections.Counter(p) & collections.Counter(t)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(t)
    return (2 * precision * recall) / (precision + recall)


def evaluate_v1(dataset: list, predictions: dict) -> dict:
    f1 = exact_match = total = 0.0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                truths = [a["text"] for a in qa["answers"]]
                pred = predictions[qa["id"]]
                exact_match += max(float(_normalize(pred) == _normalize(t)) for t in truths)
                f1 += max(_f1_v1(pred, t) for t in truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _tokens(s: str) -> list[str]:
    return _normalize(s).split() if s else []


def _f1_v2(gold: str, pred: str) -> float:
    g, p = _tokens(gold), _tokens(pred)
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if len(g) == 0 or len(p) == 0:
        return float(g == p)
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return (2 * precision * recall) / (precision + recall)


def evaluate_v2(dataset: list, predictions: dict, breakdown: bool = True) -> dict:
    """breakdown: the HasAns/NoAns split (the script fails with a KeyError there when a prediction is missing)."""
    has_ans = {qa["id"]: bool(qa["answers"]) for a in dataset for p in a["paragraphs"] for qa in p["qas"]}
    exact, f1 = {}, {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qid = qa["id"]
                golds = [a["text"] for a in qa["answers"] if _normalize(a["text"])] or [""]
                if qid not in predictions:
                    continue
                pred = predictions[qid]
                exact[qid] = max(float(_normalize(g) == _normalize(pred)) for g in golds)
                f1[qid] = max(_f1_v2(g, pred) for g in golds)
    out = {"exact_match": 100.0 * sum(exact.values()) / len(exact), "f1": 100.0 * sum(f1.values()) / len(f1)}
    for name, want in (("has_answer", True), ("no_answer", False)) if breakdown else ():
        ids = [k for k, v in has_ans.items() if v == want]
        if ids:
            out[f"{name}_exact_match"] = 100.0 * sum(exact[k] for k in ids) / len(ids)
            out[f"{name}_f1"] = 100.0 * sum(f1[k] for k in ids) / len(ids)
    return out
