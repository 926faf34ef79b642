"""Collation: a masked chunk -> batch dicts of tensors ([CLS] row [SEP], padded to a multiple of 8).

The batch dict (what the model consumes; ``B`` rows, ``T`` positions)::

    input_ids       LongTensor [B, T]  [CLS] masked row [SEP], then [PAD]; T = longest row + 2 rounded up to
                                       a multiple of 8, at most max_seq_len
    attention_mask  LongTensor [B, T]  1 on real tokens ([CLS], row, [SEP]), 0 on padding
    labels          LongTensor [B, T]  the original token id at every MLM target, -100 elsewhere
    span_left       LongTensor [B, T]  SBO: position of x_{s-1} (the token before the target's unit), 0 elsewhere
    span_right      LongTensor [B, T]  SBO: position of x_{e+1} (the token after the target's unit), 0 elsewhere
    span_position   LongTensor [B, T]  SBO: 0-based place of the target in its unit, clipped to
                                       max_span_positions - 1 (default 32 -> 0..31), 0 elsewhere
    sample_id       LongTensor [B]     global sample ids (row index over all shards in manifest order)

Positions index the final sequence, so ``[CLS]`` (position 0) and ``[SEP]`` (position n+1) are the
boundaries of units at the edges of the row: ``1 <= span_left + 1 <= target <= span_right - 1 <= n``.
A *unit* is what is masked as a whole: a span (``span``), a word (``whole_word``, the random-word part of
the candidate schemes), a candidate span (``entity``, ``noun_phrase``, ``ngram``) or a token (``subword``).
SBO targets are relative to the *maximal masked run* holding the unit (units that touch form one run), so
``span_left``/``span_right`` are never targets themselves (``trainer.masking.sbo_targets``).

"""

from __future__ import annotations

import numpy as np
import torch

from schemas.format import SPECIAL_POSITIONS
from trainer.masking.rows import IGNORE_INDEX, Masked

PAD_TO_MULTIPLE = 8


class Collator:
    """Batches of a :class:`~trainer.masking.rows.Masked` chunk for sequences of at most ``max_seq_len`` positions."""

    def __init__(self, *, pad_id: int, cls_id: int, sep_id: int, max_seq_len: int):
        self.pad_id, self.cls_id, self.sep_id, self.max_seq_len = pad_id, cls_id, sep_id, max_seq_len

    def _batch_shape(self, masked: Masked, start: int, stop: int) -> tuple[int, int]:
        n = np.diff(masked.offsets[start : stop + 1])
        longest = int(n.max()) + SPECIAL_POSITIONS if stop > start else SPECIAL_POSITIONS
        T = min(-(-longest // PAD_TO_MULTIPLE) * PAD_TO_MULTIPLE, self.max_seq_len)
        if longest > T:
            raise ValueError(f"a row needs {longest} positions; max_seq_len is {self.max_seq_len}")
        return stop - start, T

    def _fill(self, masked: Masked, start: int, stop: int, out: np.ndarray) -> None:
        """Write rows ``start:stop`` into ``out`` [6, B, T]: input_ids, labels, span_left, span_right,
        span_position, attention_mask."""
        _, B, T = out.shape
        o = masked.offsets
        lo, hi = int(o[start]), int(o[stop])
        n = np.diff(o[start : stop + 1])
        r = np.repeat(np.arange(B), n)
        p = np.arange(hi - lo) - np.repeat(o[start:stop] - lo, n) + 1  # final positions (after [CLS])
        out[:] = 0
        out[0] = self.pad_id
        out[1] = IGNORE_INDEX
        out[0, :, 0] = self.cls_id
        out[0, np.arange(B), n + 1] = self.sep_id
        for k, values in enumerate(
            (masked.input_ids, masked.labels, masked.span_left, masked.span_right, masked.span_position)
        ):
            out[k, r, p] = values[lo:hi]
        out[5] = np.arange(T)[None, :] < (n + SPECIAL_POSITIONS)[:, None]

    @staticmethod
    def _as_batch(t: torch.Tensor, sample_id: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "input_ids": t[0],
            "attention_mask": t[5],
            "labels": t[1],
            "span_left": t[2],
            "span_right": t[3],
            "span_position": t[4],
            "sample_id": sample_id,
        }

    def collate(self, masked: Masked, start: int = 0, stop: int | None = None) -> dict[str, torch.Tensor]:
        """The batch dict (module docstring) for rows ``start:stop`` of a masked chunk."""
        stop = masked.offsets.shape[0] - 1 if stop is None else stop
        B, T = self._batch_shape(masked, start, stop)
        out = np.empty((6, B, T), dtype=np.int64)
        self._fill(masked, start, stop, out)
        return self._as_batch(torch.from_numpy(out), torch.from_numpy(masked.sample_ids[start:stop].copy()))

    def collate_chunk(self, masked: Masked, micro_batch_size: int) -> list[dict[str, torch.Tensor]]:
        """Consecutive batches of ``micro_batch_size`` rows of a masked chunk, as :meth:`collate` makes them,
        but all tensors are views of ONE storage: a DataLoader worker hands the whole chunk to the training
        process through a single shared-memory segment instead of one per tensor."""
        R = masked.offsets.shape[0] - 1
        bounds = [(a, min(a + micro_batch_size, R)) for a in range(0, R, micro_batch_size)]
        shapes = [self._batch_shape(masked, a, b) for a, b in bounds]
        sizes = [6 * B * T + B for B, T in shapes]
        buf = np.empty(int(sum(sizes)), dtype=np.int64)
        t = torch.from_numpy(buf)
        batches, off = [], 0
        for (a, b), (B, T), size in zip(bounds, shapes, sizes):
            block = buf[off : off + 6 * B * T].reshape(6, B, T)
            self._fill(masked, a, b, block)
            buf[off + 6 * B * T : off + size] = masked.sample_ids[a:b]
            batches.append(self._as_batch(t[off : off + 6 * B * T].view(6, B, T), t[off + 6 * B * T : off + size]))
            off += size
        return batches
