"""Read DeepSpeed's checkpoint files (``*.pt``) ourselves without running code from them.

``torch.load(weights_only=False)`` unpickles arbitrary objects, so a crafted ``mp_rank_00_model_states.pt``
would run code in whoever reads it. Where the trainer and the exporter read such files themselves they use
:func:`load_tensors`: ``weights_only=True`` with an allow-list of the few plain DeepSpeed classes its files hold
(found by loading real ZeRO 0-3 checkpoints; nothing else is unpickled). DeepSpeed's own loaders
(``engine.load_checkpoint`` on ``--resume``, ``zero_to_fp32`` in the export of ZeRO checkpoints,
``ds_to_universal``) still unpickle fully: a DeepSpeed checkpoint directory must be trusted (docs/TRAINING.md).
"""

from __future__ import annotations

import pickle
from typing import Any

import torch


class UntrustedCheckpointError(ValueError):
    """A checkpoint file holds something other than tensors and the allowed plain DeepSpeed objects."""


def deepspeed_safe_globals() -> list:
    """The classes DeepSpeed 0.19's model and optimizer state files pickle besides tensors and containers."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


def load_tensors(path: str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, allowing :func:`deepspeed_safe_globals`; anything else
    in the file raises :class:`UntrustedCheckpointError` naming the file, without running it."""
    try:
        with torch.serialization.safe_globals(deepspeed_safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        reason = next(
            (line.strip() for line in str(e).splitlines() if "Unsupported global" in line), str(e).splitlines()[0]
        )
        raise UntrustedCheckpointError(
            f"{path}: refused to load: it holds objects other than tensors and DeepSpeed's plain state ({reason}); "
            f"load only checkpoints you trust"
        ) from None
