"""GLUE examples -> model inputs for each head, and the collation of features into padded batches.

(QA features come from ``trainer.finetuning.squad.qa_features``, SpEx ones from ``spex.spex_feature``.)
Every feature is a dict of Python lists and ints; :func:`collate` pads ``input_ids`` with the pad role's id
(``ModelTokenizer.pad_id``: [PAD], RoBERTa's <pad>) to the longest feature of the batch and builds
``attention_mask``; keys that are not model inputs (decoding metadata) stay out of the batch.
"""

from __future__ import annotations

import torch

from trainer.finetuning import span_ft, spex
from trainer.finetuning.encoding import ModelTokenizer, assemble, encode, truncate_pair
from trainer.finetuning.glue import Example
from trainer.finetuning.tasks import Task

PADDED = {"input_ids": None, "token_type_ids": 0, "span_mask": 0, "token_mask": 0}  # None: the pad id
SCALARS = {"labels": None, "start_positions": torch.long, "end_positions": torch.long}
FIXED = ("span_index", "span_token_mask")


def glue_feature(
    task: Task,
    head: str,
    tokenizer: ModelTokenizer,
    ex: Example,
    *,
    max_seq_len: int,
    segmentation: str = "ngram",
    segmenter=None,
    max_spans: int = 16,
    max_span_len: int = 64,
    seed: int = 0,
) -> dict:
    if head == "spex":
        return spex.spex_feature(task, tokenizer, ex.text_a, ex.text_b, ex.label, max_seq_len)
    a = encode(tokenizer, ex.text_a)
    b = encode(tokenizer, ex.text_b) if ex.text_b is not None else None
    a, b = truncate_pair(a, b, max_seq_len - (3 if b is not None else 2))
    feature = assemble(tokenizer, a.ids, b.ids if b is not None else None)
    feature["labels"] = ex.label
    if head == "span-ft":
        n = len(feature["input_ids"])
        if segmentation == "none":
            feature["token_mask"] = [0] + [1] * len(a) + [0] + ([1] * len(b) + [0] if b is not None else [])
        else:
            rng = span_ft.random_for(seed, ex.uid) if segmentation == "random" else None
            per_text = [span_ft.segment_piece(a, 1, segmentation, segmenter, rng)]
            if b is not None:
                per_text.append(span_ft.segment_piece(b, len(a) + 2, segmentation, segmenter, rng))
            assert all(0 < s < e < n for spans in per_text for s, e in spans)
            feature["span_index"], feature["span_token_mask"] = span_ft.span_tensors(per_text, max_spans, max_span_len)
            feature["num_spans"] = sum(len(spans) for spans in per_text)
            feature["spans_per_text"] = [len(spans) for spans in per_text]
    return feature


def collate(features: list[dict], pad_id: int, regression: bool = False) -> dict[str, torch.Tensor]:
    width = max(len(f["input_ids"]) for f in features)
    batch: dict[str, torch.Tensor] = {}
    for key, fill in PADDED.items():
        if key in features[0]:
            value = pad_id if fill is None else fill
            batch[key] = torch.tensor([f[key] + [value] * (width - len(f[key])) for f in features], dtype=torch.long)
    batch["attention_mask"] = torch.tensor(
        [[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features], dtype=torch.long
    )
    for key, dtype in SCALARS.items():
        if key in features[0]:
            if dtype is None:
                dtype = torch.float32 if regression else torch.long
            batch[key] = torch.tensor([f[key] for f in features], dtype=dtype)
    for key in FIXED:
        if key in features[0]:
            batch[key] = torch.tensor([f[key] for f in features], dtype=torch.long)
    return batch
