"""The DeepSpeed JSON: the shipped configs, loading, resolving it with the trainer's own options, and the
optimizer's parameter groups. Every refusal is a one-line ``ConfigError`` naming the file."""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

from trainer.config import ConfigError, OptimConfig

if TYPE_CHECKING:  # torch is not imported here: trainer/pretrain.py reads --deepspeed_config before it is
    import torch

log = logging.getLogger("trainer")

# trainer/configs: the shipped DeepSpeed JSON files.
CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
# Keys of the DeepSpeed JSON that the trainer's own options own (one source for every value).
_OWNED_TOP_LEVEL = {
    "train_batch_size": "set train_micro_batch_size_per_gpu and gradient_accumulation_steps instead, so one config serves any world size",
    "gradient_clipping": "use --grad-clip",
    "scheduler": "the warmup + linear decay schedule comes from --lr, --warmup-steps and --max-steps",
}
_OWNED_OPTIMIZER_PARAMS = {
    "lr": "--lr",
    "betas": "--adam-beta1/--adam-beta2",
    "eps": "--adam-eps",
    "weight_decay": "--weight-decay",
}


def default_deepspeed_config_path(on_gpu: bool) -> str:
    return os.path.join(CONFIG_DIR, "zero2.json" if on_gpu else "zero2_cpu.json")


def load_deepspeed_json(path: str, on_gpu: bool) -> tuple[str, dict]:
    if path == "auto":
        path = default_deepspeed_config_path(on_gpu)
    if not os.path.isfile(path):
        raise ConfigError(f"--deepspeed_config {path}: no such file (the shipped ones are in {CONFIG_DIR})")
    try:
        with open(path) as f:
            ds = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--deepspeed_config {path}: not valid JSON ({e})") from None
    if not isinstance(ds, dict):
        raise ConfigError(f"--deepspeed_config {path}: expected a JSON object")
    return path, ds


def resolve_deepspeed_config(path: str, ds: dict, optim: OptimConfig, run_dir: str, on_gpu: bool) -> dict:
    """The DeepSpeed config as used: the JSON's system settings plus the trainer's optimizer options,
    gradient clipping and the monitor under RUN_DIR. Refuses what would make a value ambiguous or fail later."""
    ds = json.loads(json.dumps(ds))  # deep copy
    where = f"--deepspeed_config {path}"
    for key, why in _OWNED_TOP_LEVEL.items():
        if key in ds:
            raise ConfigError(f"{where}: remove {key!r}: {why}")
    micro = ds.get("train_micro_batch_size_per_gpu")
    if not isinstance(micro, int) or isinstance(micro, bool) or micro < 1:
        raise ConfigError(f"{where}: train_micro_batch_size_per_gpu must be a positive integer, got {micro!r}")
    accum = ds.setdefault("gradient_accumulation_steps", 1)
    if not isinstance(accum, int) or isinstance(accum, bool) or accum < 1:
        raise ConfigError(f"{where}: gradient_accumulation_steps must be a positive integer, got {accum!r}")
    if "load_universal" in ds.get("checkpoint", {}):
        raise ConfigError(
            f"{where}: remove checkpoint.load_universal: the trainer sets it when --resume changes the number of ranks"
        )
    stage = ds.get("zero_optimization", {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"{where}: zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}")
    if ds.get("fp16", {}).get("enabled") and ds.get("bf16", {}).get("enabled"):
        raise ConfigError(f"{where}: enable at most one of fp16 and bf16")
    if not on_gpu and ds.get("fp16", {}).get("enabled"):
        raise ConfigError(f"{where}: fp16 needs a GPU; on CPU use fp32 or bf16 (trainer/configs/zero*_cpu.json)")

    optimizer = ds.setdefault("optimizer", {"type": "AdamW", "params": {}})
    if str(optimizer.get("type", "")).lower() not in ("adam", "adamw"):
        raise ConfigError(
            f"{where}: optimizer.type must be Adam or AdamW (the trainer's options are Adam's), got {optimizer.get('type')!r}"
        )
    params = optimizer.setdefault("params", {})
    for key, flag in _OWNED_OPTIMIZER_PARAMS.items():
        if key in params:
            raise ConfigError(f"{where}: remove optimizer.params.{key}: it is set with {flag}")
    offload = ds.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none") not in (None, "none")
    if not on_gpu and not params.get("torch_adam", False) and not offload:
        raise ConfigError(
            f"{where}: uses DeepSpeed's fused Adam, which needs a GPU; on CPU use a *_cpu.json config "
            f"(optimizer.params.torch_adam: true)"
        )
    params.update(
        lr=optim.lr, betas=[optim.adam_beta1, optim.adam_beta2], eps=optim.adam_eps, weight_decay=optim.weight_decay
    )
    ds["gradient_clipping"] = optim.grad_clip

    ds["csv_monitor"] = {**ds.get("csv_monitor", {"enabled": True}), "output_path": run_dir, "job_name": "monitor"}
    tensorboard = dict(ds.get("tensorboard", {"enabled": True}))
    if tensorboard.get("enabled"):
        try:
            import torch.utils.tensorboard  # noqa: F401
        except ImportError:
            log.warning("tensorboard is not installed: TensorBoard monitor off (pip install 'spanprep[report]')")
            tensorboard["enabled"] = False
    ds["tensorboard"] = {**tensorboard, "output_path": run_dir, "job_name": "tensorboard"}
    ds.setdefault("steps_per_print", 10**9)  # the trainer reports progress itself
    ds.setdefault("wall_clock_breakdown", False)
    _check_with_deepspeed(ds, where)
    return ds


def _check_with_deepspeed(ds: dict, where: str) -> None:
    """Let DeepSpeed's own config parser judge the rest now (unknown keys, wrong types), not after start-up."""
    from trainer.engine import runtime  # noqa: F401  (before DeepSpeed: the environment it reads at import)

    # isort: split
    from deepspeed.runtime.config import DeepSpeedConfig

    try:
        DeepSpeedConfig(json.loads(json.dumps(ds)))
    except Exception as e:  # pydantic ValidationError, AssertionError, ValueError, ...
        detail = " ".join(str(e).split("\n")[:3]).strip() or type(e).__name__
        raise ConfigError(f"{where}: DeepSpeed rejects it: {detail}") from None


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """BERT's rule: no weight decay on biases and LayerNorm weights."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith(".bias") or "LayerNorm" in name or ".ln" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
