"""The pre-trained encoder (``trainer.model.SpanBert``, its pre-training heads removed) with one task head.

- ``cls`` (BERT): dropout, then a linear layer on the final [CLS] vector: cross-entropy over the classes, or
  the squared error of one output for regression. BERT's pooler (tanh of a dense layer, trained by NSP) is not
  used, and not loaded from a checkpoint that has one: SpanBERT has no NSP, so its pooler is never trained
  (docs/FINETUNING.md).
- ``span`` (BERT / SpanBERT QA) and ``spex`` (SpEx-BERT): two vectors d_start, d_end (one Linear(H, 2)); start
  and end distributions are softmaxes over the positions ``span_mask`` allows (QA: [CLS] and the passage;
  SpEx: the source text); loss = (CE(start) + CE(end)) / 2, as BERT's run_squad (SpEx writes the sum; the
  factor only rescales the learning rate).
- ``span-ft`` (Span Fine-tuning): s from :class:`trainer.finetuning.span_ft.HierarchicalCNN`, concatenated
  with the [CLS] vector, dropout, linear layer; losses as ``cls``.

Every head returns ``loss`` (with labels) and its outputs (``logits`` or ``start_logits``/``end_logits``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.finetuning.options import HEADS as HEADS  # re-exported
from trainer.finetuning.span_ft import HierarchicalCNN
from trainer.model import SpanBert

NEG = -1e4  # masked logits: exp() underflows to 0 in fp32 and bf16


class FineTuneModel(nn.Module):
    def __init__(
        self,
        encoder: SpanBert,
        head: str,
        *,
        num_labels: int = 2,
        regression: bool = False,
        segmentation: str = "ngram",
        kernel_size: int = 3,
    ):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
        del encoder.mlm_head  # pre-training heads: not used, not trained, not saved
        encoder.sbo_head = None
        self.encoder = encoder
        self.head = head
        self.regression = regression
        cfg = encoder.config
        H = cfg.hidden_size
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        if head in ("span", "spex"):
            self.qa_outputs = nn.Linear(H, 2)
            self._init(self.qa_outputs)
        else:
            outputs = 1 if regression else num_labels
            self.span_cnn = HierarchicalCNN(H, kernel_size, segmentation) if head == "span-ft" else None
            self.classifier = nn.Linear(2 * H if head == "span-ft" else H, outputs)
            self._init(self.classifier)

    def _init(self, linear: nn.Linear) -> None:
        nn.init.normal_(linear.weight, mean=0.0, std=self.encoder.config.initializer_range)
        nn.init.zeros_(linear.bias)

    def head_parameters(self) -> int:
        return sum(p.numel() for n, p in self.named_parameters() if not n.startswith("encoder."))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        span_mask: torch.Tensor | None = None,
        span_index: torch.Tensor | None = None,
        span_token_mask: torch.Tensor | None = None,
        token_mask: torch.Tensor | None = None,
        **unused,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)
        if self.head in ("span", "spex"):
            if span_mask is None:
                raise ValueError(f"the {self.head} head needs span_mask (the positions an answer may take)")
            logits = self.qa_outputs(hidden).float()
            allowed = span_mask.bool()
            start, end = (x.squeeze(-1).masked_fill(~allowed, NEG) for x in logits.split(1, dim=-1))
            out = {"start_logits": start, "end_logits": end}
            if start_positions is not None and end_positions is not None:
                out["loss"] = (F.cross_entropy(start, start_positions) + F.cross_entropy(end, end_positions)) / 2
            return out
        cls = hidden[:, 0]
        if self.span_cnn is not None:
            s = self.span_cnn(hidden, span_index, span_token_mask, token_mask)
            cls = torch.cat([s, cls], dim=-1)
        logits = self.classifier(self.dropout(cls)).float()
        out = {"logits": logits}
        if labels is not None:
            if self.regression:
                out["loss"] = F.mse_loss(logits.squeeze(-1), labels.float())
            else:
                out["loss"] = F.cross_entropy(logits, labels.long())
        return out
