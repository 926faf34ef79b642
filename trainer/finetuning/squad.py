"""Extractive QA in SQuAD v1.1 / v2.0 JSON: reading with bad-row accounting, 512-token windows with a stride,
answers between characters and tokens, and n-best decoding back to text (BERT's recipe; SpanBERT's layout).

Input layout (SpanBERT, Joshi et al. 2020, section 4.1): ``[CLS] p_1 ... p_l [SEP] q_1 ... q_l' [SEP]``, the
passage first (token type 0) and the question second (type 1). A passage longer than what fits beside the
question is split into windows of ``max_seq_len`` tokens whose starts are ``doc_stride`` tokens apart (BERT's
``doc_stride`` 128; SpanBERT: "a sliding window of size 128 if the lengths are longer than 512"). The question
is cut to ``max_query_len`` tokens. Training target: the first gold answer's tokens when the window holds all
of them, else [CLS] (BERT's rule); an unanswerable v2.0 question also targets [CLS] (SpanBERT).

Decoding (BERT): over every window of a question, the ``n_best`` highest start and end logits among passage
tokens, ``start <= end``, at most ``max_answer_len`` tokens, the start token taken only from the window where it
has the most context (min(left, right) + 0.01 * window length), score = start + end logit; the best span's
characters in the original passage, from the start of its first token's word to the end of its last token's
word (words as the tokenizer's pre-tokenizer splits them: BERT maps answers back to words too), are the
answer. v2.0: the no-answer score is the smallest [CLS] start + end over the windows; "" is predicted when it
exceeds the best span's score by more than ``null_threshold`` (BERT's tau, default 0).

Bad rows (counted, written to bad_rows.jsonl, not used): a question without id or text, a gold answer whose
``answer_start`` does not point at its text in the context, an answer that covers no token, and, in v1.1, a
question without answers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from trainer.finetuning.glue import BadRows, DataError

VERSIONS = {"squad1": ("1.1",), "squad2": ("v2.0", "2.0", "1.1")}


@dataclass
class QAExample:
    qid: str
    question: str
    context: str
    answers: list[tuple[str, int]]  # (text, answer_start)
    is_impossible: bool = False


def read_squad(path: str, task_name: str, split: str) -> tuple[list[QAExample], BadRows]:
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file ({task_name} {split} split)")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not SQuAD JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise DataError(f"{path}: not SQuAD JSON (no top-level 'data' list)")
    version = str(doc.get("version", ""))
    if version not in VERSIONS[task_name]:
        raise DataError(f"{path}: SQuAD version {version!r}; task {task_name} reads {', '.join(VERSIONS[task_name])}")
    v2 = task_name == "squad2"
    bad = BadRows()
    examples: list[QAExample] = []
    for a, article in enumerate(doc["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            context = paragraph.get("context", "")
            for q, qa in enumerate(paragraph.get("qas", [])):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                bad.read += 1
                qid, question = qa.get("id"), str(qa.get("question", "")).strip()
                if not qid or not question or not context:
                    bad.add(path, where, "missing_field", f"id {qid!r}, question {question[:40]!r}")
                    continue
                impossible = bool(qa.get("is_impossible", False)) if v2 else False
                answers, problem = [], ""
                for ans in [] if impossible else qa.get("answers", []):
                    text, start = ans.get("text", ""), ans.get("answer_start", -1)
                    if not isinstance(start, int) or context[start : start + len(text)] != text or not text.strip():
                        problem = (
                            f"answer {text!r} at {start}: context has {context[start : start + len(text)]!r}"
                            if isinstance(start, int)
                            else f"answer_start {start!r}"
                        )
                        break
                    answers.append((text, start))
                if problem:
                    bad.add(path, where, "answer_start_mismatch", f"{qid}: {problem}")
                    continue
                if not impossible and not answers:
                    bad.add(path, where, "no_answer", f"{qid}: an answerable question without answers")
                    continue
                examples.append(
                    QAExample(
                        qid=str(qid), question=question, context=context, answers=answers, is_impossible=impossible
                    )
                )
                bad.used += 1
    bad.check()
    return examples, bad


def char_span_to_tokens(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """First and last token (inclusive) overlapping the characters [start, end), or None."""
    first = next((i for i, (s, e) in enumerate(offsets) if e > start and s < end), None)
    if first is None:
        return None
    last = max(i for i, (s, e) in enumerate(offsets) if s < end and e > start)
    return first, last


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Starts of the windows of ``window`` tokens, ``stride`` apart, that together cover ``n_tokens``."""
    starts, start = [], 0
    while True:
        starts.append(start)
        if start + window >= n_tokens:
            return starts
        start += min(window, stride)


def qa_features(
    examples: list[QAExample],
    tokenizer,
    *,
    max_seq_len: int,
    doc_stride: int,
    max_query_len: int,
    training: bool,
    bad: BadRows | None = None,
) -> list[dict]:
    """One feature per window. Model inputs: input_ids, token_type_ids, span_mask, start/end_positions;
    decoding needs: example_index, window_start (its first passage token), token_offsets (per position, the
    characters of the word its token belongs to; None off the passage: an answer never starts or ends inside a
    word), max_context."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    features = []
    for index, ex in enumerate(examples):
        q_ids = tokenizer.encode(ex.question, add_special_tokens=False).ids[:max_query_len]
        ctx = tokenizer.encode(ex.context, add_special_tokens=False)
        window = max_seq_len - len(q_ids) - 3
        if window < 1:
            raise DataError(
                f"--max-seq-len {max_seq_len} leaves no room for the passage beside a "
                f"{len(q_ids)}-token question (--max-query-len {max_query_len})"
            )
        answer_tokens = None
        if not ex.is_impossible and ex.answers:
            text, start = ex.answers[0]
            answer_tokens = char_span_to_tokens(ctx.offsets, start, start + len(text))
            if answer_tokens is None and training:
                if bad is not None:
                    bad.add("", ex.qid, "answer_covers_no_token", text)
                    bad.used -= 1
                continue
        words: dict[int, tuple[int, int]] = {}  # word -> its characters: answers are whole words
        for w_id, (s, e) in zip(ctx.word_ids, ctx.offsets):
            lo, hi = words.get(w_id, (s, e))
            words[w_id] = (min(lo, s), max(hi, e))
        word_offsets = [words[w_id] if w_id is not None else tuple(o) for w_id, o in zip(ctx.word_ids, ctx.offsets)]
        starts = window_starts(len(ctx.ids), window, doc_stride)
        for w, start in enumerate(starts):
            length = min(window, len(ctx.ids) - start)
            ids = [cls_id] + ctx.ids[start : start + length] + [sep_id] + q_ids + [sep_id]
            offsets = [None] + word_offsets[start : start + length] + [None] * (len(q_ids) + 2)
            max_context = [False] * len(ids)
            for j in range(length):
                pos = start + j
                best = max(range(len(starts)), key=lambda k: _context_score(starts[k], len(ctx.ids), window, pos))
                max_context[j + 1] = best == w
            start_pos = end_pos = 0
            if answer_tokens is not None and start <= answer_tokens[0] and answer_tokens[1] < start + length:
                start_pos, end_pos = answer_tokens[0] - start + 1, answer_tokens[1] - start + 1
            features.append(
                {
                    "input_ids": ids,
                    "token_type_ids": [0] * (length + 2) + [1] * (len(q_ids) + 1),
                    "span_mask": [1] * (length + 1) + [0] * (len(q_ids) + 2),  # [CLS] and the passage
                    "start_positions": start_pos,
                    "end_positions": end_pos,
                    "example_index": index,
                    "window_start": start,
                    "token_offsets": offsets,
                    "max_context": max_context,
                }
            )
    return features


def _context_score(start: int, n_tokens: int, window: int, pos: int) -> float:
    length = min(window, n_tokens - start)
    if not start <= pos < start + length:
        return -1.0
    return min(pos - start, start + length - 1 - pos) + 0.01 * length


def decode(
    examples: list[QAExample],
    features: list[dict],
    start_logits: list[list[float]],
    end_logits: list[list[float]],
    *,
    n_best: int = 20,
    max_answer_len: int = 30,
    version2: bool = False,
    null_threshold: float = 0.0,
) -> dict[str, str]:
    """qid -> predicted answer text (SQuAD's predictions.json)."""
    by_example: dict[int, list[int]] = {}
    for i, feat in enumerate(features):
        by_example.setdefault(feat["example_index"], []).append(i)
    predictions = {}
    for index, ex in enumerate(examples):
        best_score, best_text, null_score = None, "", None
        for i in by_example.get(index, []):
            feat, s_log, e_log = features[i], start_logits[i], end_logits[i]
            null = s_log[0] + e_log[0]
            null_score = null if null_score is None else min(null_score, null)
            passage = [j for j, o in enumerate(feat["token_offsets"]) if o is not None]
            top_s = sorted(passage, key=lambda j: -s_log[j])[:n_best]
            top_e = sorted(passage, key=lambda j: -e_log[j])[:n_best]
            for s in top_s:
                if not feat["max_context"][s]:
                    continue
                for e in top_e:
                    if e < s or e - s + 1 > max_answer_len:
                        continue
                    score = s_log[s] + e_log[e]
                    if best_score is None or score > best_score:
                        best_score = score
                        best_text = ex.context[feat["token_offsets"][s][0] : feat["token_offsets"][e][1]]
        if version2 and null_score is not None and (best_score is None or null_score - best_score > null_threshold):
            best_text = ""
        predictions[ex.qid] = best_text
    return predictions
