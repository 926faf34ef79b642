"""Everything that touches DeepSpeed; the model (``trainer.model``) knows nothing of it.

In: the parsed ``trainer/pretrain.py`` command line. ``setup.prepare`` resolves and checks it into a ``TrainSetup``
(configs, the artifact, this rank's loaders from ``trainer.data``/``trainer.masking``) before any process group
exists; ``loop.train`` sets up the process group (``distributed``), builds the DeepSpeed engine with the resolved
JSON (``ds_config``), runs the steps (stopping cleanly on SIGTERM/SIGINT, ``signals``) and writes a run directory
(``--output-dir RUN_DIR``) out: ``RUN_DIR/config.json`` (the resolved configuration), ``RUN_DIR/checkpoints/``
(``latest`` and ``global_stepN/``: DeepSpeed's files + ``spanprep_trainer.json`` + ``tokenizer.json``; elastic
resume and universal conversion in ``checkpoints``, what a resume may change in ``resume_check``, safe reading of
``*.pt`` files in ``checkpoint_files``), ``RUN_DIR/monitor/*.csv`` and ``RUN_DIR/tensorboard/``. The names below
are what the entry points and the fine-tuning code import from ``trainer.engine``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.lazy import exports

if TYPE_CHECKING:
    from trainer.engine.checkpoints import (
        UNIVERSAL_MARKER,
        ElasticResume,
        checkpoint_dir,
        checkpoint_tags,
        convert_to_universal,
        latest_tag,
        optimizer_state_bytes,
        remove_universal_checkpoints,
    )
    from trainer.engine.distributed import (
        Dist,
        accelerator_is_gpu,
        default_single_process_env,
        env_rank,
        environment_ninja,
        finish_distributed,
        init_distributed,
    )
    from trainer.engine.ds_config import load_deepspeed_json, parameter_groups, resolve_deepspeed_config
    from trainer.engine.loop import Trainer, train
    from trainer.engine.run_lock import LOCK_FILE as RUN_LOCK_FILE
    from trainer.engine.run_lock import RunLock, RunLockError
    from trainer.engine.run_lock import acquire as acquire_run_lock
    from trainer.engine.setup import DATA_FIELDS_SET_BY_TRAINER, SETUP_ERRORS, TrainSetup, prepare


def _runtime_first() -> None:
    """The environment DeepSpeed reads at import, set before any name of the engine is imported (runtime.py)."""
    from trainer.engine import runtime  # noqa: F401


__getattr__ = exports(
    __name__,
    {
        "UNIVERSAL_MARKER": "checkpoints",
        "ElasticResume": "checkpoints",
        "checkpoint_dir": "checkpoints",
        "checkpoint_tags": "checkpoints",
        "convert_to_universal": "checkpoints",
        "latest_tag": "checkpoints",
        "optimizer_state_bytes": "checkpoints",
        "remove_universal_checkpoints": "checkpoints",
        "Dist": "distributed",
        "accelerator_is_gpu": "distributed",
        "default_single_process_env": "distributed",
        "env_rank": "distributed",
        "environment_ninja": "distributed",
        "finish_distributed": "distributed",
        "init_distributed": "distributed",
        "load_deepspeed_json": "ds_config",
        "parameter_groups": "ds_config",
        "resolve_deepspeed_config": "ds_config",
        "Trainer": "loop",
        "train": "loop",
        "RUN_LOCK_FILE": "run_lock:LOCK_FILE",
        "RunLock": "run_lock",
        "RunLockError": "run_lock",
        "acquire_run_lock": "run_lock:acquire",
        "DATA_FIELDS_SET_BY_TRAINER": "setup",
        "SETUP_ERRORS": "setup",
        "TrainSetup": "setup",
        "prepare": "setup",
    },
    before=_runtime_first,
)

__all__ = [
    "TrainSetup",
    "Trainer",
    "train",
    "init_distributed",
    "default_single_process_env",
    "env_rank",
    "load_deepspeed_json",
    "resolve_deepspeed_config",
    "checkpoint_dir",
    "latest_tag",
    "checkpoint_tags",
    "optimizer_state_bytes",
    "parameter_groups",
    "accelerator_is_gpu",
    "prepare",
    "SETUP_ERRORS",
    "DATA_FIELDS_SET_BY_TRAINER",
    "Dist",
    "ElasticResume",
    "environment_ninja",
    "UNIVERSAL_MARKER",
    "convert_to_universal",
    "remove_universal_checkpoints",
    "finish_distributed",
    "RUN_LOCK_FILE",
    "RunLock",
    "RunLockError",
    "acquire_run_lock",
]
