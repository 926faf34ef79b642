"""The QA feature building before issue 21 (item 9), kept as the reference of what the features must be: it
scored every window for every token of every window (quadratic in the windows, about cubic in the passage).
tests/trainer/test_finetune_data.py checks that ``trainer.finetuning.squad.qa_features`` gives identical
features; benchmarks/bench_finetune.py --qa times both."""

from __future__ import annotations

from trainer.finetuning.glue import BadRows, DataError
from trainer.finetuning.squad import QAExample, char_span_to_tokens, window_starts


def old_qa_features(
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
