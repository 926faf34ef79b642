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
import re
from collections.abc import Mapping
from typing import Any

import torch

from trainer.engine import runtime  # noqa: F401  (before DeepSpeed is imported: the environment it reads)


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
        raise UntrustedCheckpointError(
            f"{path}: refused to load: it holds objects other than tensors and DeepSpeed's plain state "
            f"({_refused(str(e))}); load only checkpoints you trust"
        ) from None


def _refused(message: str) -> str:
    """What torch's weights-only unpickler refused, without its advice on loading the file anyway (``weights_only``
    set to False, an allow-list): ``Unsupported global: GLOBAL module.name``."""
    found = re.search(r"GLOBAL ([\w.]+)", message)
    if found:
        return f"Unsupported global: GLOBAL {found.group(1).rstrip('.')}"
    return "an object the weights-only unpickler does not load"


class NonFiniteWeightsError(ValueError):
    """A checkpoint's tensor holds NaN or infinity: training from it gives a NaN loss from the first step."""


def check_finite(tensors: Mapping[str, torch.Tensor], source: str) -> None:
    """:class:`NonFiniteWeightsError` naming ``source`` (the file) and the first tensor (by name) holding NaN or
    infinity, with how many of its values do."""
    for name in sorted(tensors):
        tensor = tensors[name]
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            continue
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise NonFiniteWeightsError(
                f"{source}: tensor {name} holds {bad} non-finite values (NaN or infinity) of {tensor.numel()}; "
                f"weights that are not finite are neither trained from nor exported"
            )
