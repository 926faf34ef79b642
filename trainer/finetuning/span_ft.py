"""Span Fine-tuning (Bao et al. 2021): segment the input into spans, then a hierarchical CNN over them.

Segmentation (section 3.1): each text of the input is segmented by ``schemas.segmenter.Segmenter`` (greedy
longest match from the head over an n-gram dictionary; unmatched words stay single) on the tokenizer's words
(``encoding.Piece.words``: from offsets and word ids, no leading space whatever the family, punctuation apart;
tokens of whitespace only are in no word); a word span becomes the span of its tokens in the sequence. [CLS] and
[SEP] belong to no span ([CLS] is concatenated separately). Ablations (section 5.1): ``random`` segmentation (word
spans of uniformly random length 1..5, seeded by (seed, example id), so identical on every run and rank) and
``none``: BERT + CNN, two CNN layers over all tokens and one max-pool, without segmentation.

Padding and cutting (section 4.1: "r representing the largest number of spans in a sentence, and l indicating
the largest number of tokens included in a span"; r = 16, l in {64, 128}): the budget is per sentence, so each
text of a pair keeps its first r spans (A's, then B's), each cut to its first l tokens, and padding spans fill
the rest. (A shared budget left the hypothesis of 92% of RTE dev pairs without any span.) The model receives
``span_index`` [r x texts, l] (token positions) and ``span_token_mask`` [r x texts, l] (1 for a real token).
r and l are taken as the paper's text gives them; with dictionary n-grams of at most 5 words, a span rarely
needs more than ~15 tokens while a 128-token sentence has ~25-50 segments, so r = 16 cuts far more than l = 64
does (the two read as if swapped; ``--max-spans`` and ``--max-span-len`` set them).

Hierarchical CNN (equations 1-2): per span, c^i_j = ReLU(W1 [t^i_j .. t^i_{j+k-1}] + b1) with kernel k = 3 and
output size = hidden size, zero padding at the span's edges (so one-token spans have an output), then
c_i = max-pool over the span's real tokens; then s'_i = ReLU(W2 [c_i .. c_{i+k-1}] + b2) over the span
vectors and s = max-pool over the real spans. Padding tokens and padding spans are zero on the way into a
convolution and -inf on the way into a max-pool, so they never win it; an input without any span gives s = 0.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from trainer.finetuning.encoding import Piece
from trainer.finetuning.options import SEGMENTATIONS as SEGMENTATIONS  # re-exported

RANDOM_MAX_WORDS = 5  # the dictionary's n <= 5


def segment_piece(
    piece: Piece, offset: int, segmentation: str, segmenter=None, rng: random.Random | None = None
) -> list[tuple[int, int]]:
    """Token spans [start, end) in sequence positions (the piece starts at ``offset``) of one text."""
    words = piece.words()
    if segmentation == "ngram":
        if segmenter is None:
            raise ValueError("--segmentation ngram needs a dictionary (--ngram-dictionary)")
        word_spans = segmenter.segment([w for w, _, _ in words])
    elif segmentation == "random":
        if rng is None:
            raise ValueError("--segmentation random needs a random generator")
        word_spans, i = [], 0
        while i < len(words):
            n = rng.randint(1, RANDOM_MAX_WORDS)
            word_spans.append((i, min(i + n, len(words))))
            i += n
    else:
        raise ValueError(f"segmentation {segmentation!r} makes no spans")
    return [(offset + words[s][1], offset + words[e - 1][2]) for s, e in word_spans]


def span_tensors(
    per_text: list[list[tuple[int, int]]], max_spans: int, max_span_len: int
) -> tuple[list[list[int]], list[list[int]]]:
    """span_index and span_token_mask ([max_spans x texts][max_span_len]): the first ``max_spans`` spans of each
    text (r is per sentence, as the paper's "in a sentence"), one text's after the other's, each span cut to
    ``max_span_len`` tokens; padding spans at the end."""
    slots = max_spans * len(per_text)
    index = [[0] * max_span_len for _ in range(slots)]
    mask = [[0] * max_span_len for _ in range(slots)]
    kept = [span for spans in per_text for span in spans[:max_spans]]
    for i, (start, end) in enumerate(kept):
        for j, pos in enumerate(range(start, min(end, start + max_span_len))):
            index[i][j] = pos
            mask[i][j] = 1
    return index, mask


def random_for(seed: int, uid: str) -> random.Random:
    return random.Random(f"span-ft:{seed}:{uid}")  # str seeds hash with SHA-512: the same in every process


def _masked_max(x: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Max over ``dim`` of the positions where ``mask``; 0 where there are none."""
    filled = x.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    out = filled.max(dim=dim).values
    return torch.where(torch.isneginf(out), torch.zeros_like(out), out)


class HierarchicalCNN(nn.Module):
    """s from the encoder's token vectors: span CNN + max-pool, span-level CNN + max-pool (or BERT + CNN)."""

    def __init__(self, hidden_size: int, kernel_size: int = 3, segmentation: str = "ngram"):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel size must be odd (same-length zero padding), got {kernel_size}")
        self.segmentation = segmentation
        self.conv1 = nn.Conv1d(hidden_size, hidden_size, kernel_size, padding=kernel_size // 2)
        self.conv2 = nn.Conv1d(hidden_size, hidden_size, kernel_size, padding=kernel_size // 2)

    def _conv(self, conv: nn.Conv1d, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ReLU(conv) over [N, L, H] with zeros at masked positions on the way in."""
        x = x * mask.unsqueeze(-1).to(x.dtype)
        return torch.relu(conv(x.transpose(1, 2))).transpose(1, 2)

    def forward(
        self,
        hidden: torch.Tensor,
        span_index: torch.Tensor | None = None,
        span_token_mask: torch.Tensor | None = None,
        token_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.segmentation == "none":  # BERT + CNN: two CNN layers over the tokens, one max-pool
            if token_mask is None:
                raise ValueError("segmentation 'none' needs token_mask")
            mask = token_mask.bool()
            h = self._conv(self.conv1, hidden, mask)
            h = self._conv(self.conv2, h, mask)
            return _masked_max(h, mask, dim=1)
        if span_index is None or span_token_mask is None:
            raise ValueError(f"segmentation {self.segmentation!r} needs span_index and span_token_mask")
        B, R, L = span_index.shape
        H = hidden.size(-1)
        mask = span_token_mask.bool()
        tokens = torch.gather(hidden, 1, span_index.reshape(B, R * L, 1).expand(B, R * L, H)).reshape(B * R, L, H)
        c = self._conv(self.conv1, tokens, mask.reshape(B * R, L))
        spans = _masked_max(c, mask.reshape(B * R, L), dim=1).reshape(B, R, H)
        real = mask.any(-1)  # [B, R]
        s = self._conv(self.conv2, spans, real)
        return _masked_max(s, real, dim=1)
