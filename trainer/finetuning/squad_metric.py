"""SQuAD's exact match and F1, following the definition of the official v1.1 evaluation (Rajpurkar et al.).

Both compare a normalised prediction with each normalised gold answer and keep the best; the scores are means
over questions, x 100. Normalisation: lower-case; remove punctuation (Python's ``string.punctuation``); remove
the articles a, an, the (as whole words); collapse whitespace. F1 is over the bag of whitespace tokens of the
normalised strings (precision and recall of the common tokens). SQuAD v2.0's rule for unanswerable questions:
their gold answer is the empty string, and only an empty prediction scores (EM = F1 = 1); an empty prediction
on an answerable question scores 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:  # v2.0: empty against empty is a match, empty against text is not
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def score_question(prediction: str, golds: Sequence[str]) -> tuple[float, float]:
    """(EM, F1) of one question: the best over its gold answers ([""] for an unanswerable one)."""
    golds = list(golds) or [""]
    return max(exact_match(prediction, g) for g in golds), max(f1(prediction, g) for g in golds)


def evaluate(golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict[str, float]:
    """``{"exact_match", "f1"}`` x 100 over every question of ``golds`` (a missing prediction scores 0),
    plus ``has_answer_*`` / ``no_answer_*`` splits when there are unanswerable questions."""
    if not golds:
        raise ValueError("no questions to score")
    em, f = {}, {}
    for qid, answers in golds.items():
        if qid in predictions:
            em[qid], f[qid] = score_question(predictions[qid], answers)
        else:
            em[qid], f[qid] = 0.0, 0.0
    out = {
        "exact_match": round(100.0 * sum(em.values()) / len(em), 4),
        "f1": round(100.0 * sum(f.values()) / len(f), 4),
        "questions": len(golds),
        "missing_predictions": sum(q not in predictions for q in golds),
    }
    unanswerable = [q for q, a in golds.items() if not [x for x in a if x]]
    if unanswerable:
        answerable = [q for q in golds if q not in set(unanswerable)]
        for name, ids in (("has_answer", answerable), ("no_answer", unanswerable)):
            if ids:
                out[f"{name}_exact_match"] = round(100.0 * sum(em[q] for q in ids) / len(ids), 4)
                out[f"{name}_f1"] = round(100.0 * sum(f[q] for q in ids) / len(ids), 4)
    return out
