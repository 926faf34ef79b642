"""`trainer/pretrain.py` with two observation points, for tests/e2e/test_elastic_resume.py.

Run exactly like the trainer (``python tests/support/elastic_probe.py ARGS`` or ``deepspeed ... tests/support/elastic_probe.py ARGS``);
it calls ``trainer.pretrain.main`` unchanged and, in the directory ``$SPANPREP_PROBE_DIR``, records

* ``samples_rank{R}.jsonl``: one line per optimizer step of rank R, ``{"step": S, "micro_batches": [[sample ids]]}``,
  the ``sample_id`` column of every micro-batch the training loop took from the loader (a mixture's batches add
  ``"sources": [[source index]]``);
* ``resumed_state.pt`` (rank 0, when ``--resume`` loaded a checkpoint; not with ``SPANPREP_PROBE_SAMPLES_ONLY=1``): the step, the learning rate, the loader's
  state, the optimizer's parameter groups (without their parameters), the Adam ``step`` of every optimizer state
  (with the tensor's id, to tell shared tensors apart), and for every parameter the full (consolidated over the
  ranks) fp32 master weight and Adam ``exp_avg`` / ``exp_avg_sq``, read with DeepSpeed's
  ``safe_get_full_fp32_param`` / ``safe_get_full_optimizer_state`` right after the load, before any training step;
* ``node_rank{R}.json``: what rank R's loader did to the shards before training: the shard checks
  (``{"size", "hashed", "cached"}``), the shard cache's fills (downloads, each checked by its sha256) and its directory,
  its ``LOCAL_RANK``, and the verified-shard cache directory (``$SPANPREP_CACHE_DIR``).

``SPANPREP_PROBE_DUMP_STATE=0`` leaves ``resumed_state.pt`` out (DeepSpeed's ``safe_get_full_optimizer_state`` only
answers after a universal-checkpoint load or a step, not right after a ZeRO-1/2 resume on the same ranks).
With ``SPANPREP_PROBE_DIE_AT_STEP=N`` in its environment, a rank SIGKILLs itself when it is about to train step N (a
node lost without notice; tests/e2e/test_two_nodes.py sets it for one node's rank only).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from schemas.quick_exit import quick_exit  # noqa: E402
from trainer import engine, pretrain  # noqa: E402

OUT = Path(os.environ["SPANPREP_PROBE_DIR"])


def _record_samples() -> None:
    train_step = engine.Trainer._train_step
    die_at = int(os.environ.get("SPANPREP_PROBE_DIE_AT_STEP") or 0)

    def recording_train_step(self, batches):
        if self.step + 1 == die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        taken, sources = [], []

        def tap():
            for batch in batches:  # pulls one micro-batch per next(): nothing extra is consumed
                taken.append(batch["sample_id"].tolist())
                if "source" in batch:
                    sources.append(batch["source"].tolist())
                yield batch

        out = train_step(self, tap())
        record = {"step": self.step + 1, "micro_batches": taken, **({"sources": sources} if sources else {})}
        with open(OUT / f"samples_rank{self.dist.rank}.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        _write_node_record(self)
        return out

    engine.Trainer._train_step = recording_train_step


def _write_node_record(trainer) -> None:
    """The rank's ``node_rank{R}.json`` (rewritten after every step: the shard cache fills shards as they are read)."""
    dataset = trainer.s.train_loader.dataset
    cache = dataset.shard_cache
    record = {
        "rank": trainer.dist.rank,
        "local_rank": trainer.dist.local_rank,
        "shard_checks": dataset.shard_checks,
        "cache_fills": None if cache is None else cache.fills,
        "cache_dir": trainer.s.data.cache_dir,
        "verified_dir": os.environ.get("SPANPREP_CACHE_DIR"),
    }
    (OUT / f"node_rank{trainer.dist.rank}.json").write_text(json.dumps(record))


def _dump_resumed_state() -> None:
    resume = engine.Trainer.resume

    def dumping_resume(self):
        loaded = resume(self)
        if loaded:
            from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

            params = {}
            zero = self.engine.zero_optimization_stage() > 0
            for name, p in self.engine.module.named_parameters():  # every rank, same order (ZeRO-3 gathers)
                if zero:
                    params[name] = {
                        "fp32": safe_get_full_fp32_param(p),
                        "exp_avg": safe_get_full_optimizer_state(p, "exp_avg"),
                        "exp_avg_sq": safe_get_full_optimizer_state(p, "exp_avg_sq"),
                    }
                else:  # no ZeRO, fp32: the torch optimizer holds the module's own parameters
                    state = self.optimizer.state[p]
                    params[name] = {"fp32": p, "exp_avg": state["exp_avg"], "exp_avg_sq": state["exp_avg_sq"]}
            if self.dist.is_main:
                groups = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
                torch.save(
                    {
                        "step": self.step,
                        "lr": self.scheduler.get_last_lr(),
                        "world_size": self.dist.world_size,
                        "param_groups": groups,
                        "adam_steps": [
                            (id(st["step"]), float(st["step"]))
                            for st in getattr(self.optimizer, "optimizer", self.optimizer).state.values()
                            if "step" in st
                        ],
                        "data": self.train_loader.state_dict(),
                        "params": {
                            k: {s: t.detach().float().cpu().clone() for s, t in v.items()} for k, v in params.items()
                        },
                    },
                    OUT / "resumed_state.pt",
                )
        return loaded

    engine.Trainer.resume = dumping_resume


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    _record_samples()
    # the state dump needs a load DeepSpeed can report on (read right after a universal load: elastic resume)
    if not os.environ.get("SPANPREP_PROBE_SAMPLES_ONLY") and os.environ.get("SPANPREP_PROBE_DUMP_STATE", "1") != "0":
        _dump_resumed_state()
    quick_exit(pretrain.main(sys.argv[1:]))  # as trainer/pretrain.py exits
