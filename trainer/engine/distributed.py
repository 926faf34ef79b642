"""The distributed environment: rank and world from the launcher's variables, the process group, the device.

Device-agnostic: ``deepspeed.init_distributed()`` picks the backend of DeepSpeed's accelerator (nccl on
GPUs, gloo on CPU), the device comes from ``deepspeed.get_accelerator()`` and the local rank.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch and DeepSpeed are imported where they are used: the start-up checks of trainer/pretrain.py and
# trainer/finetune.py use this module's environment functions before either is imported (a refusal in seconds).
# DeepSpeed's ZeRO calls a torch.distributed function that torch marks deprecated, once per step and rank.
warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*is deprecated", category=FutureWarning)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_single_process_env(local_rank: int | None = None) -> None:
    """Make ``.venv/bin/python trainer/pretrain.py`` one process of a world of one.

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


# How long a node's other ranks wait for its first rank to say a start-up error before they say it themselves.
SETUP_ERROR_GRACE_S = 10.0


def say_setup_error(program: str, error: object) -> None:
    """``PROGRAM: error: ...`` on stderr, once per node: every rank of a node fails the same way.

    The node's first rank says it at once. Under a launcher (deepspeed, torchrun) the first rank to exit non-zero
    makes the launcher end the others, so a rank that stayed silent and exited first could take the only message
    with it (a 2-rank refusal printed nothing but the launcher's own lines); the other ranks wait up to
    :data:`SETUP_ERROR_GRACE_S` for that, and say it themselves if they are still running.
    """
    _, local, world = env_rank()
    if local != 0 and world > 1:
        time.sleep(SETUP_ERROR_GRACE_S)
    print(f"{program}: error: {error}", file=sys.stderr, flush=True)


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


# What deepspeed/comm/torch.py build_shm_op prints (print(), not its logger, so no logger level hides it) in every
# rank of every CPU run once the op is loaded: DeepSpeed's INFO, shown with --log-level info or debug. A failed build raises; the compiler's output
# goes to the file descriptor, not through sys.stdout, and is not touched.
BUILD_NOTICE = re.compile(r"DeepSpeed \S+ built successfully")


@contextlib.contextmanager
def without_build_notice():
    """Drop :data:`BUILD_NOTICE` lines printed to ``sys.stdout`` in the block; pass every other line on, also when
    the block raises."""
    saved, buffer = sys.stdout, io.StringIO()
    sys.stdout = buffer
    try:
        yield
    finally:
        sys.stdout = saved
        kept = [
            line for line in buffer.getvalue().splitlines(keepends=True) if not BUILD_NOTICE.fullmatch(line.strip())
        ]
        if kept:
            saved.write("".join(kept))
            saved.flush()


def release_shared_memory_names(rank: int) -> None:
    """Unlink the name of this rank's DeepSpeed CPU all-reduce buffer once every rank has mapped the others'.

    On CPU with all ranks on one node, ``deepspeed.init_distributed`` creates
    ``/dev/shm/deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`` (69 MB each) and never
    unlinks it: every run left 69 MB per rank in /dev/shm until the machine ran out of memory (21 GB after one
    afternoon of test runs here). Each rank maps every other rank's buffer inside ``init_distributed``, so after a
    barrier the names are no longer needed; the mappings stay valid until the processes exit, whatever way they do.
    """
    import torch.distributed as torch_dist

    name = (
        f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_"
        f"{os.environ.get('MASTER_PORT', '')}_{rank}"
    )
    if torch_dist.get_world_size() > 1:
        torch_dist.barrier()
    try:
        os.unlink(name)
    except FileNotFoundError:  # no shared-memory op (ranks on several nodes, or not built)
        pass


def init_distributed(build_notice: bool = False) -> Dist:
    """The process group and this rank's device; ``build_notice``: keep DeepSpeed's :data:`BUILD_NOTICE` line."""
    import torch
    import torch.distributed as torch_dist

    from trainer.engine import runtime  # before DeepSpeed: the environment it reads at import

    # isort: split
    import deepspeed

    accelerator = deepspeed.get_accelerator()
    notice = runtime.extensions_notice()
    if notice and env_rank()[0] == 0:
        print(f"trainer: {notice}", file=sys.stderr, flush=True)
    quiet = contextlib.nullcontext() if build_notice else without_build_notice()
    with environment_ninja(), quiet:  # the CPU backend JIT-builds its shared-memory op here
        deepspeed.init_distributed()  # backend: the accelerator's (nccl on GPUs, gloo on CPU)
    rank, world = torch_dist.get_rank(), torch_dist.get_world_size()
    if accelerator.device_name() == "cpu":
        release_shared_memory_names(rank)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if accelerator.device_name() == "cpu":
        device = torch.device("cpu")
        torch.set_flush_denormal(True)  # denormals make CPU kernels crawl
    else:
        accelerator.set_device(local_rank)
        device = torch.device(accelerator.device_name(local_rank))
    return Dist(rank=rank, local_rank=local_rank, world_size=world, device=device)


def finish_distributed() -> None:
    """End a run that finished on every rank: wait for all ranks, then tear the process group down.

    Leaving it to interpreter exit lets its communication threads be destroyed while still running, which
    aborted a rank now and then after a successful ZeRO-3 run on CPU ("terminate called without an active
    exception", exit -6). Call only on the success path: the barrier needs every rank.
    """
    import torch.distributed as torch_dist

    if torch_dist.is_available() and torch_dist.is_initialized():
        torch_dist.barrier()
        torch_dist.destroy_process_group()


def accelerator_is_gpu() -> bool:
    from trainer.engine import runtime  # noqa: F401  (before DeepSpeed: the environment it reads at import)

    # isort: split
    import deepspeed

    return deepspeed.get_accelerator().device_name() != "cpu"
