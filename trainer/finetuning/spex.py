"""SpEx-BERT: classification and regression as span extraction over choices written into the input.

Input (the paper's section 3 and Table 1): the *source text*, from which the span is extracted, and the
*auxiliary text*: ``[CLS] source [SEP] auxiliary [SEP]``.

- sentence pair: source = sentence 1 + " " + choices, auxiliary = sentence 2 (RTE: "... entailment or not?");
- single sentence: source = the choices alone, auxiliary = the sentence (SST: "negative or positive?");
- regression: the choices are the bucketed values (STS-B: "0.0 0.25 0.5 ... 5.0"), the gold bucket is the
  score rounded to the nearest 0.25.

The gold span is the label's words in the choices (their tokens, found through character offsets, never by
searching the text or by a token's spelling). In a pair the choices are encoded as they stand in the source,
after a space (what a byte-level BPE or Metaspace token carries). Only the sentences are truncated
(longest-first), never the choices. The head is the QA start/end head, its softmax restricted to the source text.

Decoding: the predicted label is the choice whose span scores best (start logit of its first token + end
logit of its last); ``free_span`` (the paper's a = argmax p_start, b = argmax p_end over the source) is
reported too, with whether it is exactly a choice's span.
"""

from __future__ import annotations

from trainer.finetuning.encoding import ModelTokenizer, assemble, encode, truncate_pair
from trainer.finetuning.tasks import Task, buckets, format_bucket


def choice_char_spans(task: Task) -> tuple[str, list[tuple[int, int]]]:
    """The choices text and, per label (or bucket), the characters [start, end) of its words in it."""
    words = [format_bucket(v) for v in buckets(task)] if task.kind == "regression" else list(task.label_words)
    if task.kind == "regression":
        seps = [" "] * (len(words) - 1) + [""]
    elif len(words) == 2:
        seps = [" or ", "?"]
    else:
        seps = [", "] * (len(words) - 2) + [" or ", "?"]
    text, spans = "", []
    for word, sep in zip(words, seps):
        spans.append((len(text), len(text) + len(word)))
        text += word + sep
    assert text == task.choices, (text, task.choices)
    return text, spans


def gold_index(task: Task, label: int | float) -> int:
    """The choice a label is: the class id, or the bucket nearest to the score."""
    if task.kind == "classification":
        return int(label)
    values = buckets(task)
    return min(range(len(values)), key=lambda i: (abs(values[i] - float(label)), i))


def value_of(task: Task, index: int) -> int | float:
    """Inverse of :func:`gold_index`: the class id, or the bucket's value."""
    return index if task.kind == "classification" else buckets(task)[index]


def spex_feature(
    task: Task, tokenizer: ModelTokenizer, text_a: str, text_b: str | None, label: int | float, max_seq_len: int
) -> dict:
    choices_text, char_spans = choice_char_spans(task)
    # After sentence 1 the choices are encoded with the space that separates them (a byte-level BPE or Metaspace
    # token carries it: " entailment" is not "entailment"); WordPiece gives the same ids either way.
    lead = " " if task.is_pair else ""
    choices = encode(tokenizer, lead + choices_text)
    token_spans = []
    for start, end in ((s + len(lead), e + len(lead)) for s, e in char_spans):
        covered = [i for i, (s, e) in enumerate(choices.offsets) if s < e and s < end and e > start]
        if not covered:
            raise ValueError(f"task {task.name}: choice {choices.text[start:end]!r} has no tokens")
        token_spans.append((covered[0], covered[-1]))
    if task.is_pair:
        if text_b is None:
            raise ValueError(f"task {task.name} takes sentence pairs: text_b is missing")
        sentence, paired = truncate_pair(
            encode(tokenizer, text_a), encode(tokenizer, text_b), max_seq_len - 3 - len(choices)
        )
        assert paired is not None, "truncate_pair keeps a given second piece"
        auxiliary = paired
        source_ids, shift = sentence.ids + choices.ids, 1 + len(sentence)
    else:
        auxiliary = encode(tokenizer, text_a)
        auxiliary, _ = truncate_pair(auxiliary, None, max_seq_len - 3 - len(choices))
        source_ids, shift = choices.ids, 1
    feature = assemble(tokenizer, source_ids, auxiliary.ids)
    spans = [(s + shift, e + shift) for s, e in token_spans]
    gold = gold_index(task, label)
    feature.update(
        span_mask=[0] + [1] * len(source_ids) + [0] * (len(feature["input_ids"]) - 1 - len(source_ids)),
        start_positions=spans[gold][0],
        end_positions=spans[gold][1],
        choice_spans=spans,
    )
    return feature


def decode(feature: dict, start_logits: list[float], end_logits: list[float]) -> dict:
    """{"choice": index of the best-scoring choice span, "free_span": (a, b), "free_is_choice": bool}."""
    spans = feature["choice_spans"]
    scores = [start_logits[s] + end_logits[e] for s, e in spans]
    choice = max(range(len(spans)), key=lambda i: (scores[i], -i))
    source = [i for i, m in enumerate(feature["span_mask"]) if m]
    a = max(source, key=lambda i: (start_logits[i], -i))
    b = max(source, key=lambda i: (end_logits[i], -i))
    return {"choice": choice, "free_span": (a, b), "free_is_choice": (a, b) in [tuple(s) for s in spans]}
