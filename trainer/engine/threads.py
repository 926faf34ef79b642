"""How many threads a one-process CPU run gives torch.

torch starts with one intra-op thread per core. A run of ``trainer/pretrain.py`` or ``trainer/finetune.py`` without
the ``deepspeed`` launcher also has its DataLoader worker processes (``--num-workers``, each busy masking) and its own
Python work (the loop, collation, the tokenizer), so torch's threads and these compete for the same cores, and a
thread that loses waits at every operation: on a busy 2-core machine 30 steps of the tiny preset took 7.8 times as
long as with ``OMP_NUM_THREADS=1``. The rule (docs/TRAINING.md, "Threads in a one-process CPU run"):

    threads = max(1, cores - data workers - 1)

``cores`` is what this process may run on (``os.sched_getaffinity``); the 1 is the process's own Python work. On 2
cores that is 1 thread whatever the workers; on 16 cores with 2 workers, 13. The tokenizers' Rust pool needs no
core of its own: pre-training reads token ids, and fine-tuning encodes its texts one at a time (``encode``, not
``encode_batch``) before the first step. ``--cpu-threads N`` sets the number; without it ``OMP_NUM_THREADS``
(which torch reads when it is imported) is kept. Runs on a GPU and runs of several ranks (the documented CPU launches
give them ``OMP_NUM_THREADS=1``) keep torch's own choice unless ``--cpu-threads`` is given.
"""

from __future__ import annotations

import os

CPU_THREADS_HELP = (
    "torch's threads in a one-process CPU run (default: the cores this process may use, less one per data worker, "
    "less one; OMP_NUM_THREADS if set; docs/TRAINING.md, threads)"
)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def choose_cpu_threads(cores: int, data_workers: int) -> int:
    """The rule in the module docstring: leave a core to each data worker and one to the process's own Python."""
    return max(1, cores - max(0, data_workers) - 1)


def check_cpu_threads(flag: int | None) -> None:
    """Refuse a ``--cpu-threads`` below 1 (ValueError); needs no torch, so the entry points check it first."""
    if flag is not None and flag < 1:
        raise ValueError(f"--cpu-threads {flag}: must be at least 1")


def set_cpu_threads(flag: int | None, data_workers: int, *, one_process: bool, on_gpu: bool) -> str | None:
    """Apply ``--cpu-threads`` or the rule; return the line that says what was chosen and why (None: left alone)."""
    check_cpu_threads(flag)
    import torch  # here: the entry points take CPU_THREADS_HELP for their parser before torch is imported

    if flag is not None:
        threads, why = flag, "--cpu-threads"
    elif not one_process or on_gpu:
        return None
    elif os.environ.get("OMP_NUM_THREADS"):
        return f"threads: torch {torch.get_num_threads()} (OMP_NUM_THREADS; --cpu-threads N to change)"
    else:
        cores = available_cores()
        threads = choose_cpu_threads(cores, data_workers)
        why = f"{cores} cores - {data_workers} data workers - 1 for this process; --cpu-threads N to change"
    torch.set_num_threads(threads)
    return f"threads: torch {torch.get_num_threads()} ({why})"
