"""Everything that touches DeepSpeed: distributed set-up, ``deepspeed.initialize``, the training loop,
checkpoints (with the data loader's position) and the monitor. The model (``trainer.model``) knows
nothing of it.

Layout of a run directory (``--output-dir RUN_DIR``)::

    RUN_DIR/config.json                    the resolved configuration (every option, the DeepSpeed JSON as used)
    RUN_DIR/checkpoints/latest             DeepSpeed's pointer to the newest checkpoint
    RUN_DIR/checkpoints/global_stepN/      DeepSpeed's model/optimizer files + spanprep_trainer.json + tokenizer.json
    RUN_DIR/monitor/*.csv                  DeepSpeed CSV monitor: train_loss.csv, train_lr.csv, eval_mlm_acc.csv, ...
    RUN_DIR/tensorboard/                   DeepSpeed TensorBoard monitor (when tensorboard is installed)

Device-agnostic: ``deepspeed.init_distributed()`` picks the backend of DeepSpeed's accelerator (nccl on
GPUs, gloo on CPU), the device comes from ``deepspeed.get_accelerator()`` and the local rank.
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

# DeepSpeed's ZeRO calls a torch.distributed function that torch marks deprecated, once per step and rank.
warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*is deprecated", category=FutureWarning)

from trainer import resume_check
from trainer.checkpoint_files import load_tensors
from trainer.config import (
    CHECKPOINT_META_FILE,
    CHECKPOINT_TOKENIZER_FILE,
    ConfigError,
    ModelConfig,
    OptimConfig,
    RunConfig,
    WarmupLinearDecay,
    dumps,
    to_jsonable,
)
from trainer.model import SpanBert

log = logging.getLogger("trainer")

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
CHECKPOINTS = "checkpoints"
TAG_PREFIX = "global_step"
# Keys of the DeepSpeed JSON that the trainer's own options own (one source for every value).
_OWNED_TOP_LEVEL = {
    "train_batch_size": "set train_micro_batch_size_per_gpu and gradient_accumulation_steps instead, so one config serves any world size",
    "gradient_clipping": "use --grad-clip",
    "scheduler": "the warmup + linear decay schedule comes from --lr, --warmup-steps and --max-steps",
}
# A resume that changes the number of ranks loads a universal checkpoint (see ``_elastic_resume_plan``).
UNIVERSAL_SUFFIX = "_universal"
UNIVERSAL_MARKER = "spanprep_universal.json"  # written after a complete conversion; its absence means redo it
CONVERSION_TIMEOUT_HOURS = 6  # how long the other ranks wait for rank 0's conversion
_OWNED_OPTIMIZER_PARAMS = {"lr": "--lr", "betas": "--adam-beta1/--adam-beta2", "eps": "--adam-eps", "weight_decay": "--weight-decay"}
# Peak dense bf16 TFLOP/s per accelerator, for model FLOPs utilisation (GPU only; --peak-tflops overrides).
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "A800": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0, "V100": 125.0}


# ---------------------------------------------------------------------------------------------
# Distributed environment
# ---------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_single_process_env(local_rank: int | None = None) -> None:
    """Make ``python trainer/pretrain.py`` one process of a world of one.

    The ``deepspeed`` launcher (and torchrun) set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
    without them DeepSpeed would try MPI discovery and fail. Under mpirun (OMPI_*/PMI_* set) DeepSpeed's own
    MPI discovery is left to work.
    """
    env = os.environ
    if local_rank is not None and local_rank >= 0:
        env.setdefault("LOCAL_RANK", str(local_rank))
    if "RANK" in env or "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env:
        return
    env.setdefault("RANK", "0")
    env.setdefault("WORLD_SIZE", "1")
    env.setdefault("LOCAL_RANK", "0")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(_free_port()))


def env_rank() -> tuple[int, int, int]:
    """(rank, local rank, world size) from the environment, before torch.distributed is up."""
    env = os.environ
    rank = int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", "0"))))
    local = int(env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    world = int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", env.get("PMI_SIZE", "1"))))
    return rank, local, world


@dataclass
class Dist:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def on_gpu(self) -> bool:
        return self.device.type != "cpu"


@contextlib.contextmanager
def environment_ninja():
    """Build DeepSpeed's JIT ops (``deepspeed_shm_comm`` on CPU, CPU Adam, ...) with the ``ninja`` of this Python
    environment, whatever PATH the run was started with.

    torch runs the first ``ninja`` on PATH. The ``ninja`` package DeepSpeed depends on (1.13 here) records a
    rapidhash of each command in ``.ninja_log``, a system ninja (1.11) a MurmurHash of the same command, so each
    one takes the other's log entries for a changed command line and recompiles the op from scratch. Runs started
    from a shell with the virtualenv activated (its ``bin`` first on PATH) and runs started as ``.venv/bin/python``
    / ``.venv/bin/deepspeed`` without it alternated such rebuilds (20-140 s each) in the shared
    TORCH_EXTENSIONS_DIR, although ``build.ninja`` was the same. PATH is changed only for the duration of the block.
    """
    bin_dir = None
    try:
        import ninja

        candidate = getattr(ninja, "BIN_DIR", None)
        if candidate and os.access(os.path.join(candidate, "ninja"), os.X_OK):
            bin_dir = candidate
    except ImportError:  # no ninja package: torch uses the system's, the only one there is
        pass
    saved = os.environ.get("PATH")
    if bin_dir is not None:
        os.environ["PATH"] = bin_dir + (os.pathsep + saved if saved else "")
    try:
        yield
    finally:
        if bin_dir is not None:
            if saved is None:
                os.environ.pop("PATH", None)
            else:
                os.environ["PATH"] = saved


def init_distributed() -> Dist:
    import deepspeed
    import torch.distributed as torch_dist

    accelerator = deepspeed.get_accelerator()
    with environment_ninja():  # the CPU backend JIT-builds its shared-memory op here
        deepspeed.init_distributed()  # backend: the accelerator's (nccl on GPUs, gloo on CPU)
    rank, world = torch_dist.get_rank(), torch_dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if accelerator.device_name() == "cpu":
        device = torch.device("cpu")
        torch.set_flush_denormal(True)  # denormals make CPU kernels crawl
    else:
        accelerator.set_device(local_rank)
        device = torch.device(accelerator.device_name(local_rank))
    return Dist(rank=rank, local_rank=local_rank, world_size=world, device=device)


def accelerator_is_gpu() -> bool:
    import deepspeed

    return deepspeed.get_accelerator().device_name() != "cpu"


# ---------------------------------------------------------------------------------------------
# DeepSpeed configuration
# ---------------------------------------------------------------------------------------------
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
        raise ConfigError(f"{where}: remove checkpoint.load_universal: the trainer sets it when --resume changes the number of ranks")
    stage = ds.get("zero_optimization", {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"{where}: zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}")
    if ds.get("fp16", {}).get("enabled") and ds.get("bf16", {}).get("enabled"):
        raise ConfigError(f"{where}: enable at most one of fp16 and bf16")
    if not on_gpu and ds.get("fp16", {}).get("enabled"):
        raise ConfigError(f"{where}: fp16 needs a GPU; on CPU use fp32 or bf16 (trainer/configs/zero*_cpu.json)")

    optimizer = ds.setdefault("optimizer", {"type": "AdamW", "params": {}})
    if str(optimizer.get("type", "")).lower() not in ("adam", "adamw"):
        raise ConfigError(f"{where}: optimizer.type must be Adam or AdamW (the trainer's options are Adam's), got {optimizer.get('type')!r}")
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
    params.update(lr=optim.lr, betas=[optim.adam_beta1, optim.adam_beta2], eps=optim.adam_eps, weight_decay=optim.weight_decay)
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
    from deepspeed.runtime.config import DeepSpeedConfig

    try:
        DeepSpeedConfig(json.loads(json.dumps(ds)))
    except Exception as e:  # pydantic ValidationError, AssertionError, ValueError, ...
        detail = " ".join(str(e).split("\n")[:3]).strip() or type(e).__name__
        raise ConfigError(f"{where}: DeepSpeed rejects it: {detail}") from None


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """BERT's rule: no weight decay on biases and LayerNorm weights."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith(".bias") or "LayerNorm" in name or ".ln" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------
def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CHECKPOINTS)


def latest_tag(ckpt_dir: str) -> str | None:
    return latest_tag_file(ckpt_dir, "latest")


def latest_tag_file(ckpt_dir: str, name: str) -> str | None:
    path = os.path.join(ckpt_dir, name)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return f.read().strip() or None


def checkpoint_tags(ckpt_dir: str) -> list[tuple[int, str]]:
    """(step, tag) of the checkpoints in ``ckpt_dir``, oldest first."""
    out = []
    for path in glob.glob(os.path.join(ckpt_dir, TAG_PREFIX + "*")):
        m = re.fullmatch(re.escape(TAG_PREFIX) + r"(\d+)", os.path.basename(path))
        if m and os.path.isdir(path):
            out.append((int(m.group(1)), os.path.basename(path)))
    return sorted(out)


def optimizer_state_bytes(ckpt_dir: str, tag: str) -> list[int]:
    """Bytes of optimizer tensors (fp32 master partition, Adam moments) in each rank's ZeRO file, by rank."""
    files = sorted(glob.glob(os.path.join(ckpt_dir, tag, "*zero_pp_rank_*_optim_states.pt")),
                   key=lambda p: int(re.search(r"zero_pp_rank_(\d+)_", os.path.basename(p)).group(1)))

    def tensor_bytes(obj: Any) -> int:
        if torch.is_tensor(obj):
            return obj.numel() * obj.element_size()
        if isinstance(obj, dict):
            return sum(tensor_bytes(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return sum(tensor_bytes(v) for v in obj)
        return 0

    return [tensor_bytes(load_tensors(f)["optimizer_state_dict"]) for f in files]


@dataclass
class ElasticResume:
    """A resume whose checkpoint was written by another number of ranks (decided in :func:`prepare`)."""

    tag: str  # the checkpoint, e.g. global_step5000
    saved_world_size: int
    world_size: int
    universal: bool  # convert to a universal checkpoint (partitioned optimizer state); False: ZeRO-0 fp32/fp16
    saved_global_batch: int | None  # None for checkpoints written before the trainer recorded it


def universal_dir(ckpt_dir: str, tag: str) -> str:
    """Where the universal form of checkpoint ``tag`` goes: next to it, ``<tag>_universal``."""
    return os.path.join(ckpt_dir, tag + UNIVERSAL_SUFFIX)


def convert_to_universal(ckpt_dir: str, tag: str) -> tuple[str, bool]:
    """Convert ``ckpt_dir/tag`` with DeepSpeed's ``ds_to_universal`` into ``ckpt_dir/<tag>_universal``.

    Runs the converter's command-line entry point in a child process (its worker pool forks, and its memory,
    about one checkpoint's worth, is returned when it ends). A complete earlier conversion of the same tag is
    reused: the trainer's (marked by a file it writes at the end) or one made by hand with the same command
    (the converter's last act is to point ``latest_universal`` at it); an incomplete one is redone.
    Returns (the universal tag, whether it converted).
    """
    src, dst = os.path.join(ckpt_dir, tag), universal_dir(ckpt_dir, tag)
    marker = os.path.join(dst, UNIVERSAL_MARKER)
    if os.path.isfile(marker):
        return os.path.basename(dst), False
    if latest_tag_file(ckpt_dir, "latest_universal") == os.path.basename(dst) and os.path.isfile(
            os.path.join(dst, "zero", "optimizer_state.pt")):
        return os.path.basename(dst), False
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    workers = max(1, min(4, os.cpu_count() or 1))
    cmd = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", src, "--output_folder", dst,
           "--num_extract_workers", str(workers), "--num_merge_workers", str(max(1, workers // 2)),
           "--inject_missing_state"]  # checkpoints written before the trainer recorded universal_checkpoint_info
    log_path = os.path.join(dst, "ds_to_universal.log")
    with open(log_path, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-15:])
        raise RuntimeError(f"DeepSpeed's ds_to_universal could not convert {src} (exit {proc.returncode}; "
                           f"full output in {log_path}):\n{tail}")
    with open(marker, "w") as f:
        json.dump({"source": tag, "deepspeed_command": cmd}, f, indent=1)
    return os.path.basename(dst), True


def remove_universal_checkpoints(ckpt_dir: str) -> None:
    """Delete the universal checkpoints (``<tag>_universal``): once a newer checkpoint exists, nothing resumes from them."""
    for path in glob.glob(os.path.join(ckpt_dir, TAG_PREFIX + "*" + UNIVERSAL_SUFFIX)):
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(ckpt_dir, "latest_universal"))  # the converter's pointer; the trainer names tags itself


# ---------------------------------------------------------------------------------------------
# Data (trainer.data / trainer.masking own the loader; this adapts it to the loop)
# ---------------------------------------------------------------------------------------------
def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    non_blocking = device.type != "cpu"
    return {k: v.to(device, non_blocking=non_blocking) for k, v in batch.items()}


MODEL_INPUTS = ("input_ids", "attention_mask", "labels", "span_left", "span_right", "span_position", "token_type_ids",
                "next_sentence_label")


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------
class StopRequested:
    """SIGTERM/SIGINT set a flag; the loop saves a checkpoint at the end of the step and exits 0."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    def __enter__(self) -> "StopRequested":
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self._pid:  # a forked child (DataLoader worker) before its worker_init_fn ran
            return
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def requested(self) -> bool:
        return self.signum is not None


def ignore_stop_signals_in_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: workers ignore SIGTERM/SIGINT and leave stopping to their rank.

    PyTorch's workers die on a SIGTERM that does not come from their parent (its C handler re-raises it), and
    the rank's SIGCHLD handler then raises at an arbitrary point, e.g. inside a collective. Schedulers and the
    ``deepspeed`` launcher signal whole process trees, so the workers must survive until their rank has saved
    and exited (a worker also exits when its parent is gone).
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _ChainedWorkerInit:
    def __init__(self, previous):
        self.previous = previous

    def __call__(self, worker_id: int) -> None:
        ignore_stop_signals_in_worker(worker_id)
        if self.previous is not None:
            self.previous(worker_id)


def protect_workers(loader) -> None:
    """Make ``loader``'s workers ignore stop signals (see :func:`ignore_stop_signals_in_worker`)."""
    if loader is not None and not isinstance(loader.worker_init_fn, _ChainedWorkerInit):
        loader.worker_init_fn = _ChainedWorkerInit(loader.worker_init_fn)


@dataclass
class TrainSetup:
    """Everything the loop needs, resolved and validated before any process group exists."""

    model: ModelConfig
    optim: OptimConfig
    run: RunConfig
    data: Any  # trainer.data.DataConfig
    masking: Any  # trainer.masking.MaskingConfig
    deepspeed_path: str
    deepspeed: dict  # resolved DeepSpeed config
    artifact: Any  # schemas.artifact.Artifact
    train_loader: Any  # trainer.data.StreamLoader of this rank (not iterated yet)
    eval_loader: Any  # trainer.data.StreamLoader over the held-out shards, or None
    elastic: ElasticResume | None = None  # --resume of a checkpoint written by another number of ranks
    resume_changes: list[str] = field(default_factory=list)  # options that differ from the checkpoint's run

    def options(self, world_size: int) -> dict:
        return run_options(self.run, self.optim, self.data, self.masking, self.deepspeed, world_size)

    def resolved(self, world_size: int) -> dict:
        ds = self.deepspeed
        elastic = None
        if self.elastic is not None:
            elastic = {"checkpoint": self.elastic.tag, "saved_world_size": self.elastic.saved_world_size,
                       "universal_checkpoint": self.elastic.universal}
        return {
            "model": to_jsonable(self.model),
            "optim": to_jsonable(self.optim),
            "run": to_jsonable(self.run),
            "data": to_jsonable(self.data),
            "masking": to_jsonable(self.masking),
            "deepspeed_config_file": self.deepspeed_path,
            "deepspeed": ds,
            "world_size": world_size,
            "global_batch_size": ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * world_size,
            "elastic_resume": elastic,
            "artifact": {
                "uri": self.artifact.uri,
                "format_version": self.artifact.manifest.get("format_version"),
                "tokenizer": self.artifact.manifest["tokenizer"],
                "max_seq_len": self.artifact.manifest.get("max_seq_len"),
                "rows": self.artifact.manifest.get("counts", {}).get("rows"),
            },
            "versions": _versions(),
        }


def run_options(run, optim, data, masking, ds: dict, world_size: int) -> dict:
    """The options a checkpoint records, to list what a resume changes (``trainer.resume_check``)."""
    return {"run": to_jsonable(run), "optim": to_jsonable(optim), "data": to_jsonable(data), "masking": to_jsonable(masking),
            "world_size": world_size, "zero_stage": ds.get("zero_optimization", {}).get("stage", 0),
            "global_batch_size": ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * world_size}


def _versions() -> dict:
    import deepspeed

    return {"python": sys.version.split()[0], "torch": torch.__version__, "deepspeed": deepspeed.__version__}


class Trainer:
    def __init__(self, setup: TrainSetup, dist: Dist):
        self.s = setup
        self.dist = dist
        self.run_dir = setup.run.output_dir
        self.ckpt_dir = checkpoint_dir(self.run_dir)
        self.micro = setup.deepspeed["train_micro_batch_size_per_gpu"]
        self.accum = setup.deepspeed["gradient_accumulation_steps"]
        self.tokenizer_json = setup.artifact.tokenizer_json()
        self.step = 0

    # -- set-up --------------------------------------------------------------------------------
    def build(self) -> None:
        import deepspeed

        s = self.s
        logging.getLogger("DeepSpeed").setLevel(s.run.log_level.upper())
        torch.manual_seed(s.run.seed)  # identical initial weights on every rank
        model = SpanBert(s.model)
        schedule = WarmupLinearDecay(s.optim.warmup_steps, s.run.max_steps)
        with environment_ninja():  # ops an optimizer may JIT-build (CPU Adam with offload)
            self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=model,
                model_parameters=parameter_groups(model, s.optim.weight_decay),
                config=s.deepspeed,
                lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule),
            )
        self.monitor = self.engine.monitor
        self.train_loader = s.train_loader
        self.eval_loader = s.eval_loader
        protect_workers(self.train_loader)
        protect_workers(self.eval_loader)

    # -- checkpoints -----------------------------------------------------------------------------
    def _meta(self, data_state: dict) -> dict:
        art = self.s.artifact
        return {
            **resume_check.checkpoint_record(art, self.s.options(self.dist.world_size), data_state),
            "step": self.step,
            "model": to_jsonable(self.s.model),
            "tokenizer": art.manifest["tokenizer"],
            "max_seq_len": art.manifest.get("max_seq_len"),
            "artifact": art.uri,
            "world_size": self.dist.world_size,
            "zero_stage": self.s.deepspeed.get("zero_optimization", {}).get("stage", 0),
            "global_batch_size": self.micro * self.accum * self.dist.world_size,
            "deepspeed_config_file": self.s.deepspeed_path,
        }

    def save(self, data_state: dict) -> str:
        tag = f"{TAG_PREFIX}{self.step}"
        if self.dist.is_main:
            os.makedirs(os.path.join(self.ckpt_dir, tag), exist_ok=True)
            with open(os.path.join(self.ckpt_dir, tag, CHECKPOINT_META_FILE), "w") as f:
                f.write(dumps(self._meta(data_state)))
            with open(os.path.join(self.ckpt_dir, tag, CHECKPOINT_TOKENIZER_FILE), "w", encoding="utf-8") as f:
                f.write(self.tokenizer_json)
        from deepspeed.checkpoint.constants import (
            UNIVERSAL_CHECKPOINT_INFO,
            UNIVERSAL_CHECKPOINT_VERSION_KEY,
            UNIVERSAL_CHECKPOINT_VERSION_VALUE,
        )

        client_state = {"step": self.step, "data": data_state, "world_size": self.dist.world_size,
                        # what DeepSpeed's ds_to_universal requires of a checkpoint (data parallelism only here)
                        UNIVERSAL_CHECKPOINT_INFO: {UNIVERSAL_CHECKPOINT_VERSION_KEY: UNIVERSAL_CHECKPOINT_VERSION_VALUE}}
        self.engine.save_checkpoint(self.ckpt_dir, tag=tag, client_state=client_state)
        torch.distributed.barrier()
        if self.dist.is_main:
            remove_universal_checkpoints(self.ckpt_dir)  # an elastic resume's conversion is superseded
            if self.s.run.keep_checkpoints:
                for _, old in checkpoint_tags(self.ckpt_dir)[: -self.s.run.keep_checkpoints]:
                    if old != tag:
                        shutil.rmtree(os.path.join(self.ckpt_dir, old), ignore_errors=True)
        return tag

    def resume(self) -> bool:
        tag = latest_tag(self.ckpt_dir)
        if tag is None:
            return False
        load_tag = tag
        elastic = self.s.elastic
        if elastic is not None and elastic.tag != tag:
            raise RuntimeError(f"{self.ckpt_dir}/latest changed from {elastic.tag} to {tag} while the run started")
        groups = None
        if elastic is not None and elastic.universal:
            load_tag = self._universal_checkpoint(tag)
            groups = [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in self.optimizer.param_groups]
        path, client = self.engine.load_checkpoint(self.ckpt_dir, tag=load_tag)
        if path is None:
            raise RuntimeError(f"{self.ckpt_dir}/{load_tag}: DeepSpeed could not load the checkpoint")
        if groups is not None:
            self._repair_universal_load(groups)
        self.step = int(client["step"])
        # The loader's state is global (epoch, consumed samples), the same on every rank.
        self.train_loader.load_state_dict(client["data"])
        self._apply_schedule()
        return True

    def _repair_universal_load(self, groups: list[dict]) -> None:
        """Undo two things DeepSpeed 0.19.8's ZeRO-3 universal loader gets wrong (ZeRO-1/2's does neither).

        * It gives every parameter group the hyperparameters of the first: biases and LayerNorm weights would get
          weight decay. Each group gets back its own, as built from this run's options (the lr follows in
          ``_apply_schedule``).
        * It stores one and the same ``step`` tensor in the Adam state of every group, and ``torch.optim.AdamW``
          increments it in place once per group, so the bias correction would count steps twice. Each state gets
          its own copy.
        """
        for group, own in zip(self.optimizer.param_groups, groups):
            group.update(own)
        base = getattr(self.optimizer, "optimizer", self.optimizer)  # the torch optimizer inside ZeRO's wrapper
        seen: set[int] = set()
        for state in base.state.values():
            step = state.get("step")
            if torch.is_tensor(step):
                if id(step) in seen:
                    state["step"] = step.clone()
                seen.add(id(state["step"]))

    def _universal_checkpoint(self, tag: str) -> str:
        """Rank 0 converts ``tag`` to a universal checkpoint while the other ranks wait; all learn the outcome."""
        e = self.s.elastic
        src, dst = os.path.join(self.ckpt_dir, tag), universal_dir(self.ckpt_dir, tag)
        self._print(f"elastic resume: {src} was saved by {e.saved_world_size} ranks, this run has {e.world_size}; "
                    f"ZeRO stage {self.s.deepspeed.get('zero_optimization', {}).get('stage', 0)} partitions the "
                    f"optimizer state by rank, so rank 0 converts the checkpoint with DeepSpeed's ds_to_universal "
                    f"into {dst} (the other ranks wait) and every rank loads its new partition from there")
        error = ""
        if self.dist.is_main:
            start = time.perf_counter()
            try:
                _, converted = convert_to_universal(self.ckpt_dir, tag)
                self._print(f"elastic resume: {'converted' if converted else 'reusing the complete conversion'} "
                            f"{dst}" + (f" in {time.perf_counter() - start:.1f} s" if converted else ""))
            except Exception as exc:  # reported on every rank below
                error = str(exc)
        # A collective rather than a barrier: the other ranks must learn that rank 0 failed. On a group of its own
        # (gloo, CPU tensors) with a long timeout: converting a large checkpoint can outlast DEEPSPEED_TIMEOUT.
        wait = torch.distributed.new_group(backend="gloo", timeout=datetime.timedelta(hours=CONVERSION_TIMEOUT_HOURS))
        failed = torch.tensor([1.0 if error else 0.0])
        torch.distributed.all_reduce(failed, group=wait)
        torch.distributed.destroy_process_group(wait)
        if failed.item():
            raise RuntimeError(error or f"rank 0 could not convert {src} to a universal checkpoint (see its error)")
        return os.path.basename(dst)

    def _apply_schedule(self) -> None:
        """Make the restored scheduler follow this run's --lr, --warmup-steps and --max-steps from the resumed step.

        LambdaLR's state restores the schedule of the run that saved it; a resumed run may train longer or change
        the rate. With unchanged options this recomputes the same value.
        """
        sched = self.scheduler
        for f in sched.lr_lambdas:
            f.warmup_steps, f.total_steps = self.s.optim.warmup_steps, self.s.run.max_steps
        sched.base_lrs = [self.s.optim.lr for _ in sched.base_lrs]
        values = [base * f(sched.last_epoch) for base, f in zip(sched.base_lrs, sched.lr_lambdas)]
        for group, value in zip(sched.optimizer.param_groups, values):
            group["lr"] = value
        sched._last_lr = values

    # -- the loop --------------------------------------------------------------------------------
    def _data_left(self) -> bool:
        """False when a finite stream (--num-epochs) cannot fill another optimizer step."""
        left = self.train_loader.dataset.num_batches
        return left is None or left >= self.accum

    def train(self) -> int:
        run = self.s.run
        if self.step >= run.max_steps:
            self._print(f"step {self.step} >= --max-steps {run.max_steps}: nothing to do")
            return 0
        progress = None
        if self.dist.is_main and run.progress:
            from tqdm import tqdm

            progress = tqdm(total=run.max_steps, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                            mininterval=1.0, file=sys.stderr)
        self._progress = progress
        self.engine.train()
        window = _Window()
        data_state = self.train_loader.state_dict()
        with StopRequested() as stop:
            batches = iter(self.train_loader)  # forks the workers inside the signal context
            step_start = time.perf_counter()
            while self.step < run.max_steps:
                if not self._data_left():
                    self._print(f"the training data ended (--num-epochs {self.s.data.num_epochs}) at step {self.step}")
                    self.save(data_state)
                    break
                lr = self.scheduler.get_last_lr()[0]  # the rate this step's update uses
                device_sums, host = self._train_step(batches)
                self.step += 1
                data_state = self.train_loader.state_dict()
                # One all-reduce per step: the metrics and whether any rank was asked to stop.
                host["stop"] = 1.0 if stop.requested else 0.0
                totals = self._all_reduce(device_sums, host)
                now = time.perf_counter()  # after the all-reduce's sync: the step's work is done
                totals["seconds"], totals["lr"] = now - step_start, lr  # data wait included, eval and saves not
                window.add(totals)
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(loss=f"{totals['loss'] / totals['micro_batches']:.3f}", refresh=False)
                if self.step % run.log_every == 0 or self.step == run.max_steps or totals["stop"]:
                    self._log_train(window)
                    window = _Window()
                if run.eval_every and self.step % run.eval_every == 0 and not totals["stop"]:  # a stop saves first
                    self._evaluate()
                if totals["stop"]:
                    tag = self.save(data_state)
                    self._print(f"stopped by signal at step {self.step}; checkpoint {self.ckpt_dir}/{tag}")
                    break
                if self.step == run.max_steps or (run.save_every and self.step % run.save_every == 0):
                    self.save(data_state)
                step_start = time.perf_counter()
        if progress is not None:
            progress.close()
        if self.step >= run.max_steps:
            self._print(f"done: {self.step} steps; checkpoint {self.ckpt_dir}/{latest_tag(self.ckpt_dir)}")
        return 0

    # Per-step statistics; DEVICE_STATS accumulate on the device, so a step synchronises once (at the all-reduce).
    DEVICE_STATS = ("loss", "mlm_loss", "sbo_loss", "tokens", "targets", "nsp_loss")
    HOST_STATS = ("sequences", "padded_tokens", "micro_batches", "stop")

    def _train_step(self, batches: Iterator[dict]) -> tuple[torch.Tensor, dict[str, float]]:
        device_sums = torch.zeros(len(self.DEVICE_STATS), dtype=torch.float64, device=self.dist.device)
        host = dict(sequences=0.0, padded_tokens=0.0, micro_batches=float(self.accum), stop=0.0)
        for micro in range(self.accum):
            batch = next(batches)
            inputs = _to_device({k: batch[k] for k in MODEL_INPUTS if k in batch}, self.dist.device)
            # Dropout is a pure function of (seed, step, micro-batch, rank), so a resumed run repeats the
            # uninterrupted one. Seeded after fetching: a DataLoader draws from the global generator when it
            # starts an epoch.
            torch.manual_seed(((self.s.run.seed * 1_000_003 + self.step) * 257 + micro) * 65_537 + self.dist.rank)
            out = self.engine(**inputs)
            self.engine.backward(out["loss"])
            self.engine.step()
            zero = out["loss"].new_zeros(())
            device_sums += torch.stack([
                out["loss"].detach(), out["mlm_loss"].detach(), out.get("sbo_loss", zero).detach(),
                inputs["attention_mask"].sum(), out["num_targets"], out.get("nsp_loss", zero).detach(),
            ]).to(torch.float64)  # fmt: skip
            host["sequences"] += inputs["input_ids"].size(0)
            host["padded_tokens"] += inputs["input_ids"].numel()
        return device_sums, host

    def _all_reduce(self, device_sums: torch.Tensor, host: dict[str, float]) -> dict[str, float]:
        """Sum the step's statistics over the ranks (one collective, one device sync)."""
        host_t = torch.tensor([host[k] for k in self.HOST_STATS], dtype=torch.float64, device=self.dist.device)
        t = torch.cat([device_sums, host_t])
        torch.distributed.all_reduce(t)
        return dict(zip(self.DEVICE_STATS + self.HOST_STATS, t.tolist()))

    def _log_train(self, w: "_Window") -> None:
        t = w.totals
        if not t:
            return
        n = t["micro_batches"]
        loss, mlm, sbo = t["loss"] / n, t["mlm_loss"] / n, t["sbo_loss"] / n
        seq_s = t["sequences"] / t["seconds"]
        tok_s = t["tokens"] / t["seconds"]
        events = [
            ("train/loss", loss, self.step),
            ("train/mlm_loss", mlm, self.step),
            ("train/lr", w.last["lr"], self.step),
            ("train/seq_per_s", seq_s, self.step),
            ("train/tokens_per_s", tok_s, self.step),
        ]
        if self.s.model.use_sbo:
            events.append(("train/sbo_loss", sbo, self.step))
        if self.s.model.nsp:
            events.append(("train/nsp_loss", t["nsp_loss"] / n, self.step))
        mfu = self._mfu(t)
        if mfu is not None:
            events.append(("train/mfu", mfu, self.step))
        self.monitor.write_events(events)
        if self.dist.is_main:
            parts = [f"step {self.step}/{self.s.run.max_steps}", f"loss {loss:.4f}", f"mlm {mlm:.4f}"]
            if self.s.model.use_sbo:
                parts.append(f"sbo {sbo:.4f}")
            if self.s.model.nsp:
                parts.append(f"nsp {t['nsp_loss'] / n:.4f}")
            parts += [f"lr {w.last['lr']:.3g}", f"{seq_s:.1f} seq/s", f"{tok_s:,.0f} tok/s"]
            if mfu is not None:
                parts.append(f"MFU {100 * mfu:.1f}%")
            self._print("  ".join(parts))

    def _mfu(self, t: dict[str, float]) -> float | None:
        """Model FLOPs utilisation; GPUs only (a CPU has no meaningful peak to compare with)."""
        if not self.dist.on_gpu:
            return None
        peak = self.s.run.peak_tflops
        if not peak:
            name = torch.cuda.get_device_name(self.dist.local_rank) if self.dist.device.type == "cuda" else ""
            peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), 0.0)
        if not peak or not t["sequences"]:
            return None
        seq_len = t["padded_tokens"] / t["sequences"]
        flops = t["sequences"] * self.engine.module.flops_per_sequence(seq_len, t["targets"] / t["sequences"])
        return flops / (t["seconds"] * self.dist.world_size * peak * 1e12)

    @torch.no_grad()
    def _evaluate(self) -> dict[str, float]:
        self.engine.eval()
        keys = ("batches", "targets", "mlm_loss_sum", "mlm_correct", "sbo_loss_sum", "sbo_correct", "pairs", "nsp_loss_sum",
                "nsp_correct")
        sums = dict.fromkeys(keys, 0.0)
        it = iter(self.eval_loader)
        for _ in range(self.s.run.eval_batches):
            batch = next(it, None)
            # ZeRO-3 gathers parameters collectively: all ranks run the same number of forwards.
            have = torch.tensor([0.0 if batch is None else 1.0], device=self.dist.device)
            torch.distributed.all_reduce(have, op=torch.distributed.ReduceOp.MIN)
            if have.item() == 0:
                break
            inputs = _to_device({k: batch[k] for k in MODEL_INPUTS if k in batch}, self.dist.device)
            out = self.engine(**inputs)
            n = float(out["num_targets"].item())
            sums["batches"] += 1
            sums["targets"] += n
            sums["mlm_loss_sum"] += out["mlm_loss"].item() * n
            sums["mlm_correct"] += float(out["mlm_correct"].item())
            if "sbo_loss" in out:
                sums["sbo_loss_sum"] += out["sbo_loss"].item() * n
                sums["sbo_correct"] += float(out["sbo_correct"].item())
            if "nsp_loss" in out:
                pairs = float(out["num_pairs"].item())
                sums["pairs"] += pairs
                sums["nsp_loss_sum"] += out["nsp_loss"].item() * pairs
                sums["nsp_correct"] += float(out["nsp_correct"].item())
        t = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=self.dist.device)
        torch.distributed.all_reduce(t)
        sums = dict(zip(keys, t.tolist()))
        self.engine.train()
        if not sums["targets"]:
            self._print("eval: the held-out split yielded no targets")
            return {}
        n = sums["targets"]
        result = {"mlm_loss": sums["mlm_loss_sum"] / n, "mlm_acc": sums["mlm_correct"] / n}
        if self.s.model.use_sbo:
            result.update(sbo_loss=sums["sbo_loss_sum"] / n, sbo_acc=sums["sbo_correct"] / n)
        if self.s.model.nsp and sums["pairs"]:
            result.update(nsp_loss=sums["nsp_loss_sum"] / sums["pairs"], nsp_acc=sums["nsp_correct"] / sums["pairs"])
        self.monitor.write_events([(f"eval/{k}", v, self.step) for k, v in result.items()])
        self._print(f"eval step {self.step}: " + "  ".join(f"{k} {v:.4f}" for k, v in result.items())
                    + f"  ({int(n)} targets)")
        return result

    def _print(self, message: str) -> None:
        if not self.dist.is_main:
            return
        if getattr(self, "_progress", None) is not None:
            self._progress.write(message, file=sys.stdout)
        else:
            print(message, flush=True)


class _Window:
    """Sums of per-step totals between two log lines."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def add(self, step_totals: dict[str, float]) -> None:
        for k, v in step_totals.items():
            if k != "lr":
                self.totals[k] = self.totals.get(k, 0.0) + v
        self.last = step_totals


# ---------------------------------------------------------------------------------------------
# Resolving and validating the options (no process group yet: every error here is a clear message)
# ---------------------------------------------------------------------------------------------
# Errors `prepare` reports as one line (FormatError and ConfigError are ValueErrors; the data side's
# config classes raise ValueError; unreadable files are OSErrors).
SETUP_ERRORS = (ValueError, OSError)
# DataConfig fields the trainer fills in from its own options and the artifact.
DATA_FIELDS_SET_BY_TRAINER = ("artifact", "seed", "micro_batch_size")


def _check_model_matches_artifact(model_given: dict, artifact) -> dict:
    """vocab_size and pad_token_id come from the artifact; if also given, they must agree."""
    tok = artifact.manifest["tokenizer"]
    ids = artifact.special_token_ids
    vocab = artifact.vocab_size
    for name in ("pad", "unk", "cls", "sep", "mask"):
        if name not in ids or not 0 <= int(ids[name]) < vocab:
            raise ConfigError(f"{artifact.uri}: the tokenizer's special token {name!r} has no id below its vocabulary size {vocab}")
    fixed = {"vocab_size": vocab, "pad_token_id": int(ids["pad"])}
    for key, value in fixed.items():
        if key in model_given and model_given[key] != value:
            raise ConfigError(
                f"--{key.replace('_', '-')} {model_given[key]} does not match the artifact {artifact.uri}: its tokenizer "
                f"({tok.get('file')}, sha256 {str(tok.get('sha256'))[:12]}) has {key} {value}"
            )
    return fixed


def _check_resume(run: RunConfig, model: ModelConfig, artifact, world_size: int,
                  ds: dict) -> tuple[ElasticResume | None, dict | None, str]:
    """Check that the latest checkpoint (if any) can be resumed; plan an elastic resume when it was written by
    another number of ranks (this sets ``checkpoint.load_universal`` in ``ds``). Returns (the plan, the checkpoint's
    meta or None without a checkpoint, the checkpoint's path)."""
    ckpt = checkpoint_dir(run.output_dir)
    tag = latest_tag(ckpt)
    if tag is None:
        return None, None, ckpt
    if not run.resume:
        raise ConfigError(
            f"{run.output_dir} already holds checkpoints (latest: {tag}); pass --resume to continue that run, "
            f"or choose another --output-dir"
        )
    meta_path = os.path.join(ckpt, tag, CHECKPOINT_META_FILE)
    if not os.path.isfile(meta_path):
        raise ConfigError(f"{meta_path}: missing; cannot resume from a checkpoint the trainer did not write")
    with open(meta_path) as f:
        meta = json.load(f)
    saved_tok, tok = meta.get("tokenizer", {}), artifact.manifest["tokenizer"]
    if saved_tok.get("sha256") != tok.get("sha256") or saved_tok.get("special_token_ids") != tok.get("special_token_ids"):
        raise ConfigError(
            f"cannot resume {ckpt}/{tag} on {artifact.uri}: the checkpoint was trained with another tokenizer "
            f"(sha256 {str(saved_tok.get('sha256'))[:12]}, vocabulary {saved_tok.get('vocab_size')}, special ids "
            f"{saved_tok.get('special_token_ids')}) than the artifact's (sha256 {str(tok.get('sha256'))[:12]}, "
            f"vocabulary {tok.get('vocab_size')}, special ids {tok.get('special_token_ids')})"
        )
    resume_check.check_same_artifact(meta, artifact, f"{ckpt}/{tag}")
    saved_model, now = meta.get("model", {}), to_jsonable(model)
    diff = [f"{k}: checkpoint {saved_model.get(k)!r}, now {now[k]!r}" for k in now if saved_model.get(k) != now[k]]
    if diff:
        raise ConfigError(f"cannot resume {ckpt}/{tag} with another model configuration: " + "; ".join(diff))
    saved_world = meta.get("world_size")
    if saved_world in (None, world_size):
        return None, meta, f"{ckpt}/{tag}"
    return _elastic_resume_plan(run, ds, f"{ckpt}/{tag}", tag, meta, int(saved_world), world_size), meta, f"{ckpt}/{tag}"


def _elastic_resume_plan(run: RunConfig, ds: dict, where: str, tag: str, meta: dict, saved_world: int,
                         world_size: int) -> ElasticResume:
    """How to resume a checkpoint written by ``saved_world`` ranks with ``world_size`` ranks, or a clear refusal.

    ZeRO 1/2/3 (and bf16 without ZeRO, whose optimizer DeepSpeed also partitions) keep each rank's slice of the
    optimizer state in its own file: DeepSpeed's universal checkpoint (``ds_to_universal``, then
    ``"checkpoint": {"load_universal": true}``) regroups it per parameter so that any number of ranks can load
    it. Without ZeRO in fp32/fp16 the optimizer state is not partitioned and loads at any world size as is.
    """
    zero = ds.get("zero_optimization", {})
    stage = zero.get("stage", 0)
    if not run.elastic_resume:
        raise ConfigError(f"cannot resume {where} (saved by {saved_world} ranks) with {world_size} ranks: "
                          f"--no-elastic-resume is set; resume with {saved_world} ranks, or drop the option")
    saved_stage = meta.get("zero_stage")
    if saved_stage is not None and saved_stage != stage:
        raise ConfigError(f"cannot resume {where} (ZeRO stage {saved_stage}, {saved_world} ranks) with ZeRO stage "
                          f"{stage} and {world_size} ranks: change the number of ranks or the stage, not both at once")
    for key in ("offload_optimizer", "offload_param"):
        if str(zero.get(key, {}).get("device", "none")).lower() == "nvme":
            raise ConfigError(f"cannot resume {where} (saved by {saved_world} ranks) with {world_size} ranks: "
                              f"zero_optimization.{key} is on NVMe, and DeepSpeed's universal checkpoints do not "
                              f"carry NVMe-swapped optimizer state; resume with {saved_world} ranks")
    universal = stage > 0 or bool(ds.get("bf16", {}).get("enabled"))
    if universal:
        ds.setdefault("checkpoint", {})["load_universal"] = True
    return ElasticResume(tag=tag, saved_world_size=saved_world, world_size=world_size, universal=universal,
                         saved_global_batch=meta.get("global_batch_size"))


def prepare(args) -> TrainSetup:
    """Build and cross-check every config from the parsed command line, open and check the artifact."""
    from schemas.artifact import Artifact
    from trainer import data as data_mod
    from trainer import masking as masking_mod
    from trainer.config import dataclass_from_args, given_fields, resolve_schedule

    run = dataclass_from_args(RunConfig, args, deepspeed_config=args.deepspeed_config or "auto")
    optim = dataclass_from_args(OptimConfig, args)
    optim = resolve_schedule(optim, run)  # warmup not given: 1% of --max-steps
    model_given = given_fields(args, ModelConfig)
    ModelConfig.preset(args.preset, **model_given)  # report a bad model option before opening the artifact

    artifact = Artifact.open(run.data)
    fixed = _check_model_matches_artifact(model_given, artifact)
    model = ModelConfig.preset(args.preset, **{**model_given, **fixed})
    # Sequence length: the artifact's (its rows hold at most max_seq_len - 2 tokens) unless --max-seq-len says otherwise.
    max_seq_len = getattr(args, "data.max_seq_len", None) or int(artifact.manifest.get("max_seq_len", 512))
    if model.max_position_embeddings < max_seq_len:
        raise ConfigError(
            f"--max-position-embeddings {model.max_position_embeddings} is smaller than the sequence length "
            f"{max_seq_len} (--max-seq-len, default: the max_seq_len of {artifact.uri})"
        )

    masking = dataclass_from_args(masking_mod.MaskingConfig, args, dest_prefix="masking.",
                                  seed=run.seed % (1 << 32), max_span_positions=model.sbo_max_span_positions)
    on_gpu = accelerator_is_gpu()
    ds_path, ds_raw = load_deepspeed_json(run.deepspeed_config, on_gpu)
    ds = resolve_deepspeed_config(ds_path, ds_raw, optim, run.output_dir, on_gpu)
    pin = {} if getattr(args, "data.pin_memory", None) is not None else {"pin_memory": on_gpu}  # default: pin on GPUs
    data = dataclass_from_args(data_mod.DataConfig, args, dest_prefix="data.", artifact=run.data, seed=run.seed,
                               micro_batch_size=ds["train_micro_batch_size_per_gpu"], max_seq_len=max_seq_len, **pin)
    if model.nsp and data.segments != 2:
        raise ConfigError("--nsp predicts whether segment B follows segment A: add --segments 2")
    if run.eval_every and data.eval_shards == 0:
        raise ConfigError("--eval-every needs held-out shards: set --eval-shards >= 1, or --eval-every 0 to not evaluate")
    rank, _, world_size = env_rank()
    elastic, resume_meta, checkpoint = _check_resume(run, model, artifact, world_size, ds)
    # The loaders only index the shards here (no reading, no workers yet), so their errors are clear messages too.
    expected = dict(expected_vocab_size=model.vocab_size, expected_special_token_ids={"pad": model.pad_token_id})
    train_loader, _ = data_mod.build_train_loader(data, masking, rank=rank, world_size=world_size, **expected)
    changes = []
    if resume_meta is not None:
        resume_check.check_zero_stage(resume_meta, ds.get("zero_optimization", {}).get("stage", 0), checkpoint)
        resume_check.check_data_stream(resume_meta, train_loader, checkpoint)
        changes = resume_check.changed_options(resume_meta, run_options(run, optim, data, masking, ds, world_size))
    eval_loader = None
    if run.eval_every:
        eval_loader, _ = data_mod.build_eval_loader(data, masking, rank=rank, world_size=world_size, **expected)
    return TrainSetup(model=model, optim=optim, run=run, data=data, masking=masking, deepspeed_path=ds_path,
                      deepspeed=ds, artifact=artifact, train_loader=train_loader, eval_loader=eval_loader,
                      elastic=elastic, resume_changes=changes)


def write_resolved_config(setup: TrainSetup, dist: Dist) -> None:
    if dist.is_main:
        os.makedirs(setup.run.output_dir, exist_ok=True)
        with open(os.path.join(setup.run.output_dir, "config.json"), "w") as f:
            f.write(dumps(setup.resolved(dist.world_size)))


def train(setup: TrainSetup) -> int:
    """Run (or resume) training as configured; every rank calls this after :func:`init_distributed`."""
    dist = init_distributed()
    trainer = Trainer(setup, dist)
    checks = getattr(setup.train_loader.dataset, "shard_checks", None)
    if checks:
        trainer._print(f"shards match the manifest (--verify-shards {setup.data.verify_shards}): rank 0 hashed "
                       f"{checks['hashed']}, found {checks['cached']} verified on this node, size-checked {checks['size']}")
    trainer.build()
    if setup.run.resume:
        if trainer.resume():
            message = f"resumed from {trainer.ckpt_dir}/{latest_tag(trainer.ckpt_dir)} at step {trainer.step}"
            e = setup.elastic
            if e is not None:
                batch = setup.resolved(dist.world_size)["global_batch_size"]
                message += (f" (saved by {e.saved_world_size} ranks, now {e.world_size}"
                            + (" via the universal checkpoint" if e.universal else "") + "; global batch "
                            + (f"{e.saved_global_batch} -> {batch}" if e.saved_global_batch not in (None, batch) else str(batch))
                            + " sequences; the sample stream continues where it stopped)")
            trainer._print(message)
            for change in setup.resume_changes:
                trainer._print(f"resume: option changed since the checkpoint, accepted: {change}")
        else:
            trainer._print(f"--resume: no checkpoint in {trainer.ckpt_dir}; starting at step 0")
    write_resolved_config(setup, dist)
    return trainer.train()


__all__ = [
    "TrainSetup", "Trainer", "train", "init_distributed", "default_single_process_env", "env_rank",
    "load_deepspeed_json", "resolve_deepspeed_config", "checkpoint_dir", "latest_tag", "checkpoint_tags",
    "optimizer_state_bytes", "parameter_groups", "accelerator_is_gpu", "prepare", "SETUP_ERRORS",
]
