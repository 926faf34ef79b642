"""SQuAD's exact match and F1, exactly as the official evaluation scripts compute them (Rajpurkar et al.:
``evaluate-v1.1.py`` and ``evaluate-v2.0.py``, with its default no-answer threshold).

Normalisation (both): lower-case; remove punctuation (Python's ``string.punctuation``); remove the articles a,
an, the (as whole words); collapse whitespace. EM: the normalised strings are equal. F1: over the bags of
whitespace tokens of the normalised strings (precision and recall of the common tokens). Each question scores
the best over its gold answers; the scores are means over questions, x 100. Where the scripts differ:

- v1.1: F1 is 0 when no token is in common, even when prediction and gold both normalise to "" (EM is 1 then).
  Every ``qa`` entry counts (a repeated id counts twice, with the one prediction of that id); a question
  without a prediction scores 0. (A question without gold answers makes the official script fail; here it
  scores 0.)
- v2.0: gold answers that normalise to "" are dropped; a question left without any (unanswerable, or only
  answers such as "the") has the gold [""], and F1 is 1 when prediction and gold both have no tokens, 0 when
  only one has none. Scores are kept per id (a repeated id counts once, its last entry). A question without a
  prediction is left out of the total (the script prints "Missing prediction"). ``has_answer_*`` and
  ``no_answer_*`` split the ids by whether the file's ``answers`` list is non-empty (not by normalisation).
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


def f1(prediction: str, gold: str, *, version2: bool = False) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if version2 and (not pred_tokens or not gold_tokens):  # v2.0: no answer against no answer is a match
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def score_question(prediction: str, golds: Sequence[str], *, version2: bool = False) -> tuple[float, float]:
    """(EM, F1) of one question: the best over its gold answers (v2.0: those that do not normalise to "", or
    [""]; v1.1 without gold answers: 0)."""
    golds = list(golds)
    if version2:
        golds = [g for g in golds if normalize_answer(g)] or [""]
    if not golds:
        return 0.0, 0.0
    return (
        max(exact_match(prediction, g) for g in golds),
        max(f1(prediction, g, version2=version2) for g in golds),
    )


def evaluate(
    golds: Mapping[str, Sequence[str]] | Sequence[tuple[str, Sequence[str]]],
    predictions: Mapping[str, str],
    *,
    version2: bool = False,
) -> dict[str, float]:
    """``{"exact_match", "f1"}`` x 100 over the questions of ``golds`` -- (id, gold texts) per ``qa`` entry in
    file order, or a mapping id -> gold texts -- with the rules of the official script of the version (module
    docstring), plus ``has_answer_*`` / ``no_answer_*`` splits when some question has no gold answer."""
    entries = list(golds.items()) if isinstance(golds, Mapping) else list(golds)
    if not entries:
        raise ValueError("no questions to score")
    em: dict[str | int, float] = {}
    f: dict[str | int, float] = {}
    has_answer: dict[str | int, bool] = {}
    missing = 0
    for n, (qid, answers) in enumerate(entries):
        key: str | int = qid if version2 else n  # v2.0 keeps one score per id; v1.1 counts every entry
        has_answer[key] = bool(list(answers))
        if qid not in predictions:
            missing += 1
            if version2:
                continue
            em[key], f[key] = 0.0, 0.0
            continue
        em[key], f[key] = score_question(predictions[qid], answers, version2=version2)
    if not em:
        raise ValueError("no question has a prediction")
    out: dict[str, float] = {
        "exact_match": round(100.0 * sum(em.values()) / len(em), 4),
        "f1": round(100.0 * sum(f.values()) / len(f), 4),
        "questions": len(em),
        "missing_predictions": missing,
    }
    if not all(has_answer.values()):
        for name, want in (("has_answer", True), ("no_answer", False)):
            ids = [k for k in em if has_answer[k] == want]
            if ids:
                out[f"{name}_exact_match"] = round(100.0 * sum(em[k] for k in ids) / len(ids), 4)
                out[f"{name}_f1"] = round(100.0 * sum(f[k] for k in ids) / len(ids), 4)
    return out
