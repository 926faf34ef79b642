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

Bad rows (counted, written to bad_rows.jsonl; :func:`read_squad`): in training, a question without id or text,
a gold answer whose ``answer_start`` does not point at its text in the context, an answer that covers no token,
a repeated id, wrong JSON types, and, in v1.1, a question without answers are not used. On dev every question
with an id is scored (as the official scripts do): such rows are reported with ``kept`` and scored (a question
that cannot be predicted scores as a miss).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from trainer.finetuning.encoding import ModelTokenizer, encode
from trainer.finetuning.glue import BadRows, DataError

VERSIONS = {"squad1": ("1.1",), "squad2": ("v2.0", "2.0", "1.1")}


@dataclass
class QAExample:
    qid: str
    question: str
    context: str
    answers: list[tuple[str, int]]  # (text, answer_start): the training target is the first one
    is_impossible: bool = False
    golds: list[str] | None = None  # the texts of the file's "answers" (scored as the official script does)
    predictable: bool = True  # False: a dev question without usable question or context (predicted "", a miss)

    @property
    def gold_texts(self) -> list[str]:
        return self.golds if self.golds is not None else [t for t, _ in self.answers]


def _load_json(path: str) -> object:
    """The file's JSON (a UTF-8 byte order mark is allowed), or a DataError naming the file and the position."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 (byte {e.start}: {data[e.start : e.start + 1]!r})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}:{e.colno}: not SQuAD JSON ({e.msg})") from None


def _gold_answers(raw: object) -> tuple[list[str], list[tuple[str, object]], str]:
    """(texts, (text, answer_start) pairs, problem) of a question's "answers" value; problem "" when well-typed."""
    if not isinstance(raw, list):
        return [], [], f"'answers' is {type(raw).__name__}, not a list"
    texts: list[str] = []
    pairs: list[tuple[str, object]] = []
    for ans in raw:
        if not isinstance(ans, dict) or not isinstance(ans.get("text"), str):
            return texts, pairs, f"an answer {str(ans)[:60]} has no text string"
        texts.append(ans["text"])
        pairs.append((ans["text"], ans.get("answer_start")))
    return texts, pairs, ""


def read_squad(path: str, task_name: str, split: str) -> tuple[list[QAExample], BadRows]:
    """Every question of the file as an example, or as a bad row with its reason (file, JSON path, detail).

    Training split: a question that cannot give a training target is a bad row and not used. Other splits (dev):
    every question with an id is scored, as the official scripts score every ``qa`` entry; one whose answer
    offsets do not match, whose id repeats, or that has no answer (v1.1) is still used and scored against its
    answers' texts (a bad row with ``kept``), and one without a usable question or context is predicted as ""
    (a miss; a bad row with ``kept``). Wrong JSON types are bad rows too, never a traceback."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file ({task_name} {split} split)")
    doc = _load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise DataError(f"{path}: not SQuAD JSON (no top-level 'data' list)")
    version = str(doc.get("version", ""))
    if version not in VERSIONS[task_name]:
        raise DataError(f"{path}: SQuAD version {version!r}; task {task_name} reads {', '.join(VERSIONS[task_name])}")
    v2, training = task_name == "squad2", split == "train"
    bad = BadRows()
    examples: list[QAExample] = []
    seen: set[str] = set()
    for a, article in enumerate(doc["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            bad.read += 1
            bad.add(path, f"data[{a}]", "malformed_entry", "an article without a 'paragraphs' list")
            continue
        for p, paragraph in enumerate(paragraphs):
            qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(qas, list):
                bad.read += 1
                bad.add(path, f"data[{a}].paragraphs[{p}]", "malformed_entry", "a paragraph without a 'qas' list")
                continue
            context = paragraph.get("context")
            for q, qa in enumerate(qas):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                bad.read += 1
                qid = qa.get("id") if isinstance(qa, dict) else None
                if isinstance(qid, bool) or not isinstance(qid, (str, int)) or qid == "":
                    bad.add(path, where, "missing_field", f"no usable id: {str(qa)[:80]}")
                    continue  # without an id nobody can score it
                qid = str(qid)
                question = qa.get("question")
                impossible = qa.get("is_impossible", False) if v2 else False
                golds, pairs, problem = _gold_answers(qa.get("answers", []))
                reason = "malformed_entry" if problem else ""
                if not reason and not isinstance(impossible, bool):
                    reason, problem = "malformed_entry", f"'is_impossible' is {impossible!r}, not true/false"
                if not reason and (not isinstance(question, str) or not question.strip()):
                    reason, problem = "missing_field", f"question {str(question)[:40]!r}"
                if not reason and (not isinstance(context, str) or not context):
                    reason, problem = "missing_field", f"context {str(context)[:40]!r}"
                if reason:  # nothing to predict from: a miss on dev, unused in training
                    bad.add(path, where, reason, f"{qid}: {problem}", kept=not training)
                    if not training:
                        examples.append(QAExample(qid, "", "", [], bool(impossible is True), golds, False))
                        bad.used += 1
                    continue
                flags: list[tuple[str, str]] = []
                if qid in seen and not training:  # both are scored (v1.1 counts each entry)
                    flags.append(("duplicate_id", f"{qid}: the id of an earlier question"))
                seen.add(qid)
                answers: list[tuple[str, int]] = []
                assert isinstance(context, str) and isinstance(question, str)  # checked above
                for text, start in [] if impossible else pairs:
                    if not isinstance(start, int) or isinstance(start, bool):
                        has = f"answer_start {start!r}"
                    elif context[start : start + len(text)] != text:
                        has = context[start : start + len(text)]
                    elif not text.strip():  # the offset is right; the official scripts score it as an empty answer
                        detail = "only whitespace: no token to point at (scored as an empty answer, as officially)"
                        flags.append(("blank_answer", f"{qid}: answer {text!r} at {start}: {detail}"))
                        answers = []
                        break
                    else:
                        answers.append((text, start))
                        continue
                    flags.append(("answer_start_mismatch", f"{qid}: answer {text!r} at {start!r}: {has!r}"))
                    answers = []
                    break
                if not impossible and not answers and not pairs:
                    flags.append(("no_answer", f"{qid}: an answerable question without answers"))
                if flags and training:
                    bad.add(path, where, *flags[-1])
                    continue
                for reason, detail in flags:
                    bad.add(path, where, reason, detail, kept=True)
                examples.append(QAExample(qid, question.strip(), context, answers, impossible, golds))
                bad.used += 1
    bad.check()
    return examples, bad


def char_span_to_tokens(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """First and last token (inclusive) overlapping the characters [start, end), or None. ``offsets`` are the
    tokens' characters (``encoding.token_chars``): a token that covers no character overlaps nothing."""
    covering = [i for i, (s, e) in enumerate(offsets) if s < e and e > start and s < end]
    if not covering:
        return None
    return covering[0], covering[-1]


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
    tokenizer: ModelTokenizer,
    *,
    max_seq_len: int,
    doc_stride: int,
    max_query_len: int,
    training: bool,
    bad: BadRows | None = None,
) -> list[dict]:
    """One feature per window. Model inputs: input_ids, token_type_ids, span_mask, start/end_positions;
    decoding needs: example_index, window_start (its first passage token), token_offsets (per position, the
    characters of the word its token belongs to, ``encoding.Piece.word_chars``; None off the passage and for a
    token of whitespace only: an answer never starts or ends inside a word or on a space), max_context."""
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    features = []
    for index, ex in enumerate(examples):
        if not ex.predictable:
            continue  # a dev question without question or context: no feature, predicted ""
        q_ids = tokenizer.encode(ex.question).ids[:max_query_len]
        ctx = encode(tokenizer, ex.context)
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
        word_offsets = ctx.word_chars()
        starts = window_starts(len(ctx), window, doc_stride)
        owner = max_context_windows(starts, len(ctx), window)
        for w, start in enumerate(starts):
            length = min(window, len(ctx) - start)
            ids = [cls_id] + ctx.ids[start : start + length] + [sep_id] + q_ids + [sep_id]
            offsets = [None] + word_offsets[start : start + length] + [None] * (len(q_ids) + 2)
            max_context = [False] * len(ids)
            for j in range(length):
                max_context[j + 1] = owner[start + j] == w
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


def max_context_windows(starts: list[int], n_tokens: int, window: int) -> list[int]:
    """Per passage token, the window where it has the most context (BERT's score: min(left, right) + 0.01 x
    the window's length; the first such window on a tie). Only the windows that hold a token compete for it,
    so this is O(tokens x windows per token): linear in the number of windows (scoring every window for every
    token of every window was quadratic in them, about cubic in the passage's length)."""
    owner = [-1] * n_tokens
    best = [-2.0] * n_tokens
    for k, start in enumerate(starts):
        length = min(window, n_tokens - start)
        for pos in range(start, start + length):
            score = min(pos - start, start + length - 1 - pos) + 0.01 * length
            if score > best[pos]:  # strictly better: an earlier window keeps a tie, as max() does
                best[pos], owner[pos] = score, k
    return owner


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
