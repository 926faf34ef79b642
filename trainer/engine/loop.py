"""The training loop: ``deepspeed.initialize``, optimizer steps, evaluation, logging to the monitor, and saving
and resuming checkpoints (with the data loader's position).

In: a :class:`~trainer.engine.setup.TrainSetup` (``prepare``). Out: checkpoints in ``RUN_DIR/checkpoints``, the
monitor in ``RUN_DIR/monitor/*.csv`` (train_loss.csv, train_lr.csv, eval_mlm_acc.csv, ...) and
``RUN_DIR/tensorboard/``, progress on rank 0's stdout.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator

import torch

from trainer.config import CHECKPOINT_META_FILE, CHECKPOINT_TOKENIZER_FILE, WarmupLinearDecay, dumps, to_jsonable
from trainer.engine import runtime  # noqa: F401  (before DeepSpeed is imported: the environment it reads)
from trainer.engine.checkpoints import (
    TAG_PREFIX,
    checkpoint_dir,
    checkpoint_tags,
    latest_tag,
    remove_universal_checkpoints,
    repair_universal_load,
)
from trainer.engine.distributed import Dist, environment_ninja, finish_distributed, init_distributed
from trainer.engine.divergence import Diverged, divergence_line, stops_on, weights_finite
from trainer.engine.ds_config import parameter_groups
from trainer.engine.elastic import universal_checkpoint
from trainer.engine.evaluate import MODEL_INPUTS, SourceCounts, eval_metrics, eval_sums, to_device
from trainer.engine.resume_check import checkpoint_record
from trainer.engine.resume_point import write_latest
from trainer.engine.setup import TrainSetup, write_resolved_config
from trainer.engine.signals import StopRequested, protect_workers
from trainer.model import SpanBert

# Peak dense bf16 TFLOP/s per accelerator, for model FLOPs utilisation (GPU only; --peak-tflops overrides).
PEAK_TFLOPS = {
    "H200": 989.0,
    "H100": 989.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "A10G": 125.0,
    "L4": 121.0,
    "V100": 125.0,
}


class Trainer:
    def __init__(self, setup: TrainSetup, dist: Dist):
        self.s = setup
        self.dist = dist
        self.run_dir = setup.run.output_dir
        self.ckpt_dir = checkpoint_dir(self.run_dir)
        self.micro = setup.deepspeed["train_micro_batch_size_per_gpu"]
        self.accum = setup.deepspeed["gradient_accumulation_steps"]
        cache, tok = setup.train_loader.dataset.shard_cache, setup.artifact.manifest["tokenizer"]
        self.tokenizer_json = setup.artifact.tokenizer_json(cache.read_file(tok["file"], tok) if cache else None)
        self.step = 0
        self.source_counts = SourceCounts(getattr(setup.train_loader.dataset, "names", []))  # a mixture's sources

    # -- set-up --------------------------------------------------------------------------------
    def build(self) -> None:
        import deepspeed

        s = self.s
        logging.getLogger("DeepSpeed").setLevel(s.run.log_level.upper())
        torch.manual_seed(s.run.seed)  # identical initial weights on every rank
        model = SpanBert(s.model)
        if s.init is not None:  # continued pre-training: the checkpoint's weights over the fresh initialisation
            s.init.apply(model)
            self._print(s.init.describe())
        if s.optim.warmup_steps is None:
            raise RuntimeError("the schedule was not resolved: warmup_steps is unset (config.resolve_schedule)")
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
        for loader in self.eval_loader.values() if isinstance(self.eval_loader, dict) else [self.eval_loader]:
            protect_workers(loader)

    # -- checkpoints -----------------------------------------------------------------------------
    def _meta(self, data_state: dict) -> dict:
        art = self.s.artifact
        return {
            **checkpoint_record(art, self.s.options(self.dist.world_size), data_state),
            "step": self.step,
            "model": to_jsonable(self.s.model),
            "tokenizer": art.manifest["tokenizer"],
            "max_seq_len": art.manifest.get("max_seq_len"),
            "artifact": art.uri,
            "world_size": self.dist.world_size,
            "zero_stage": self.s.deepspeed.get("zero_optimization", {}).get("stage", 0),
            "global_batch_size": self.micro * self.accum * self.dist.world_size,
            "deepspeed_config_file": self.s.deepspeed_path,
            **({"source_counts": self.source_counts.state()} if self.source_counts.names else {}),
        }

    def save(self, data_state: dict) -> str:
        """Save a checkpoint of this step; :class:`Diverged` (nothing written) when the weights are not finite."""
        if not weights_finite(self.engine.module, self.dist.device):
            raise Diverged(f"the weights are not finite after step {self.step}")
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

        client_state = {
            "step": self.step,
            "data": data_state,
            "world_size": self.dist.world_size,
            "source_counts": self.source_counts.state(),
            # what DeepSpeed's ds_to_universal requires of a checkpoint (data parallelism only here)
            UNIVERSAL_CHECKPOINT_INFO: {UNIVERSAL_CHECKPOINT_VERSION_KEY: UNIVERSAL_CHECKPOINT_VERSION_VALUE},
        }
        # `latest` is ours to write (resume_point.py): atomically, once every rank has written its files.
        self.engine.save_checkpoint(self.ckpt_dir, tag=tag, client_state=client_state, save_latest=False)
        torch.distributed.barrier()
        if self.dist.is_main:
            write_latest(self.ckpt_dir, tag)
            remove_universal_checkpoints(self.ckpt_dir)  # an elastic resume's conversion is superseded
            if self.s.run.keep_checkpoints:  # tags beyond this step: left by a run resumed before them, not counted
                tags = [t for t in checkpoint_tags(self.ckpt_dir) if t[0] <= self.step]
                for _, old in tags[: -self.s.run.keep_checkpoints]:
                    if old != tag:
                        shutil.rmtree(os.path.join(self.ckpt_dir, old), ignore_errors=True)
        return tag

    def resume(self) -> bool:
        point = self.s.resume_point
        if point is None or point.tag is None:
            return False
        tag = point.tag
        load_tag = tag
        elastic = self.s.elastic
        if elastic is not None and elastic.tag != tag:
            raise RuntimeError(f"{self.ckpt_dir}: resuming {tag}, but the elastic resume was planned for {elastic.tag}")
        groups = None
        if elastic is not None and elastic.universal:
            stage = self.s.deepspeed.get("zero_optimization", {}).get("stage", 0)
            load_tag = universal_checkpoint(self.ckpt_dir, tag, self.s.elastic, stage, self.dist.is_main, self._print)
            groups = [{k: v for k, v in g.items() if k not in ("params", "lr")} for g in self.optimizer.param_groups]
        path, client = self.engine.load_checkpoint(self.ckpt_dir, tag=load_tag)
        if path is None:
            raise RuntimeError(f"{self.ckpt_dir}/{load_tag}: DeepSpeed could not load the checkpoint")
        if groups is not None:
            repair_universal_load(self.optimizer, groups)
        self.step = int(client["step"])
        # The loader's state is global (epoch, consumed samples), the same on every rank.
        self.train_loader.load_state_dict(client["data"])
        self.source_counts.load(client.get("source_counts"))
        self._apply_schedule()
        return True

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
        # a bar on a terminal only: in a log file it is a line of carriage returns; there the --log-every lines tell it
        if self.dist.is_main and run.progress and sys.stderr.isatty():
            from tqdm import tqdm

            progress = tqdm(
                total=run.max_steps,
                initial=self.step,
                desc="train",
                unit="step",
                dynamic_ncols=True,
                mininterval=1.0,
                file=sys.stderr,
            )
        self._progress = progress
        self.engine.train()
        window = _Window()
        data_state = self.train_loader.state_dict()
        # The workers fork inside the signal context. Closing the iterator on the way out, whatever the way, stops
        # them: they ignore SIGTERM (signals.py), so a live iterator at interpreter exit hangs it in their join.
        with (
            StopRequested() as stop,
            contextlib.closing(iter(self.train_loader)) as batches,
            stops_on(Diverged, self._diverged) as diverged,
        ):
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
                if not math.isfinite(totals["loss"]):  # the same sums on every rank: every rank stops here
                    raise Diverged(f"the training loss is {totals['loss']} at step {self.step}")
                self.source_counts.absorb(totals)
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
        code = 1 if diverged else 0
        if progress is not None:
            progress.close()
        if self.step >= run.max_steps and not code:
            self._print(f"done: {self.step} steps; checkpoint {self.ckpt_dir}/{latest_tag(self.ckpt_dir)}")
        return code

    def _diverged(self, what: Exception) -> None:
        if self.dist.is_main:
            print(divergence_line(what, self.ckpt_dir), file=sys.stderr, flush=True)

    # Per-step statistics; DEVICE_STATS accumulate on the device, so a step synchronises once (at the all-reduce).
    DEVICE_STATS = ("loss", "mlm_loss", "sbo_loss", "tokens", "targets", "nsp_loss")
    HOST_STATS = ("sequences", "padded_tokens", "micro_batches", "stop")

    def _train_step(self, batches: Iterator[dict]) -> tuple[torch.Tensor, dict[str, float]]:
        device_sums = torch.zeros(len(self.DEVICE_STATS), dtype=torch.float64, device=self.dist.device)
        host = dict(sequences=0.0, padded_tokens=0.0, micro_batches=float(self.accum), stop=0.0)
        self.source_counts.zero(host)
        for micro in range(self.accum):
            batch = next(batches)
            self.source_counts.add_batch(batch, host)
            inputs = to_device({k: batch[k] for k in MODEL_INPUTS if k in batch}, self.dist.device)
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
        keys = list(host)  # HOST_STATS, then a mixture's per-source counts
        host_t = torch.tensor([host[k] for k in keys], dtype=torch.float64, device=self.dist.device)
        t = torch.cat([device_sums, host_t])
        torch.distributed.all_reduce(t)
        return dict(zip(list(self.DEVICE_STATS) + keys, t.tolist()))

    def _log_train(self, w: _Window) -> None:
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
        self.monitor.write_events(events + self.source_counts.events(self.step))
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

    def _evaluate(self) -> dict[str, float]:
        """Evaluate on the held-out shards (a mixture: every source, eval/NAME/..., and their pool, eval/...)."""
        self.engine.eval()
        loaders = self.eval_loader if isinstance(self.eval_loader, dict) else {"": self.eval_loader}
        sums = {f"eval/{name}" if name else "eval": eval_sums(self.engine, loader, self.s.run.eval_batches,
                                                                self.dist.device) for name, loader in loaders.items()}  # fmt: skip
        if "eval" not in sums:  # a mixture's pool
            sums["eval"] = {k: sum(part[k] for part in sums.values()) for k in next(iter(sums.values()))}
        self.engine.train()
        result: dict[str, float] = {}
        for prefix, part in sums.items():
            result = eval_metrics(part, self.s.model.use_sbo, self.s.model.nsp)
            if not result:
                self._print(f"{prefix}: the held-out split yielded no targets")
                continue
            self.monitor.write_events([(f"{prefix}/{k}", v, self.step) for k, v in result.items()])
            self._print(
                f"{prefix} step {self.step}: " + "  ".join(f"{k} {v:.4f}" for k, v in result.items())
                + f"  ({int(part['targets'])} targets)"
            )  # fmt: skip
        return result

    def _print(self, message: str) -> None:
        if not self.dist.is_main:
            return
        progress = getattr(self, "_progress", None)
        if progress is not None:
            progress.write(message, file=sys.stdout)
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


def train(setup: TrainSetup) -> int:
    """Run (or resume) training as configured; every rank calls this after :func:`init_distributed`."""
    dist = init_distributed(build_notice=setup.run.log_level in ("debug", "info"))
    trainer = Trainer(setup, dist)
    checks = getattr(setup.train_loader.dataset, "shard_checks", None)
    if checks and dist.local_rank == 0:  # one line per node: each node checks its shards into its own caches
        how = (
            f"size-checked {checks['size']}; the node-local --cache-dir {setup.data.cache_dir} checks each shard's "
            "sha256 as it fills it"
            if setup.data.cache_dir
            else f"hashed {checks['hashed']}, found {checks['cached']} verified on this node, size-checked {checks['size']}"
        )
        print(
            f"shards match the manifest (--verify-shards {setup.data.verify_shards}): rank {dist.rank} {how}",
            flush=True,
        )
    trainer.build()
    if setup.run.resume:
        if setup.resume_point is not None and setup.resume_point.note:
            trainer._print(setup.resume_point.note)
        if trainer.resume():
            tag = setup.resume_point.tag if setup.resume_point is not None else None
            message = f"resumed from {trainer.ckpt_dir}/{tag} at step {trainer.step}"
            e = setup.elastic
            if e is not None:
                batch = setup.resolved(dist.world_size)["global_batch_size"]
                message += (
                    f" (saved by {e.saved_world_size} ranks, now {e.world_size}"
                    + (" via the universal checkpoint" if e.universal else "")
                    + "; global batch "
                    + (
                        f"{e.saved_global_batch} -> {batch}"
                        if e.saved_global_batch not in (None, batch)
                        else str(batch)
                    )
                    + " sequences; the sample stream continues where it stopped)"
                )
            trainer._print(message)
            for change in setup.resume_changes:
                trainer._print(f"resume: option changed since the checkpoint, accepted: {change}")
        else:
            trainer._print(f"--resume: no checkpoint in {trainer.ckpt_dir}; starting at step 0")
    write_resolved_config(setup, dist)
    code = trainer.train()
    finish_distributed()
    return code
