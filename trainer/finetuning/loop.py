"""Fine-tuning with DeepSpeed: data, model, training, evaluation, and what a run writes.

Every rank reads and featurises the same files (deterministic), trains on its slice of each global batch and
evaluates its slice of the dev features; rank 0 gathers the outputs, scores them and writes. The DeepSpeed
set-up is pre-training's (``trainer.engine``: distributed init, the JSON's checks, no weight decay on biases
and LayerNorms, the monitor under RUN_DIR) with the fine-tuning schedule (linear warmup, linear decay).

Order: in epoch e the examples are permuted by a generator seeded with (seed, e); the global batch k takes
positions k*G .. k*G+G-1 of the epoch's order (wrapping around at the end, so every step is full); rank r gets
every world_size-th feature of it. Dropout is seeded per (seed, step, micro-batch, rank). So a run is a pure
function of its inputs, options and number of ranks.

RUN_DIR/metrics.json (rank 0, at the end): the task, head, the source model, data accounting (rows read, used,
bad by reason, per split), steps, the last training losses, and the evaluation metrics (x 100). QA also writes
RUN_DIR/predictions.json (``{question id: answer text}``, SQuAD's format); GLUE tasks RUN_DIR/predictions.jsonl.
RUN_DIR/bad_rows.jsonl: every rejected input row with its reason.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from schemas.segmenter import Segmenter
from trainer.config import OptimConfig, WarmupLinearDecay, dumps
from trainer.engine import (
    Dist,
    accelerator_is_gpu,
    env_rank,
    environment_ninja,
    finish_distributed,
    init_distributed,
    load_deepspeed_json,
    parameter_groups,
    resolve_deepspeed_config,
)
from trainer.finetuning import spex, squad, squad_metric
from trainer.finetuning.encoding import ModelTokenizer
from trainer.finetuning.eta import elapsed_and_eta
from trainer.finetuning.features import collate, glue_feature
from trainer.finetuning.glue import DataError, read_tsv, write_bad_rows
from trainer.finetuning.heads import FineTuneModel
from trainer.finetuning.metrics import glue_metrics
from trainer.finetuning.options import FinetuneConfig
from trainer.finetuning.tasks import Task, get_task
from trainer.model import SpanBert


def _path(cfg: FinetuneConfig, task: Task, split: str) -> str:
    given = cfg.train_file if split == "train" else cfg.dev_file
    if given:
        return given
    if task.default_files.get(split) and cfg.data_dir:
        return os.path.join(cfg.data_dir, task.default_files[split])
    raise DataError(
        f"no {split} file: give --{split}-file" + (" or --data-dir" if task.default_files.get(split) else "")
    )


class Data:
    """Examples and features of both splits (the same on every rank)."""

    def __init__(self, cfg: FinetuneConfig, task: Task, tokenizer: ModelTokenizer, max_seq_len: int):
        self.cfg, self.task, self.bad = cfg, task, {}
        self.segmenter = None
        if cfg.head == "span-ft" and cfg.segmentation == "ngram":
            self.segmenter = Segmenter.from_dictionary(cfg.ngram_dictionary)
        self.files = {split: _path(cfg, task, split) for split in ("train", "dev")}
        # split -> its examples: squad.QAExample for QA tasks, glue.Example for the others
        self.examples: dict[str, list[Any]] = {}
        self.features: dict[str, list[dict]] = {}
        for split, limit in (("train", cfg.max_train_examples), ("dev", cfg.max_eval_examples)):
            if task.kind == "qa":
                questions, bad = squad.read_squad(self.files[split], task.name, split)
                questions = questions[:limit] if limit else questions
                self.examples[split], self.bad[split] = questions, bad
                feats = squad.qa_features(
                    questions,
                    tokenizer,
                    max_seq_len=max_seq_len,
                    doc_stride=cfg.doc_stride,
                    max_query_len=cfg.max_query_len,
                    training=split == "train",
                    bad=bad,
                )
            else:
                examples, bad = read_tsv(task, self.files[split], split)
                examples = examples[:limit] if limit else examples
                self.examples[split], self.bad[split] = examples, bad
                feats = [
                    glue_feature(
                        task,
                        cfg.head,
                        tokenizer,
                        ex,
                        max_seq_len=max_seq_len,
                        segmentation=cfg.segmentation,
                        segmenter=self.segmenter,
                        max_spans=cfg.max_spans,
                        max_span_len=cfg.max_span_len,
                        seed=cfg.seed,
                    )
                    for ex in examples
                ]
            if not feats:
                raise DataError(f"{self.files[split]}: no usable {split} examples ({bad.summary()})")
            self.features[split] = feats

    def summary(self) -> dict:
        out = {}
        for split in ("train", "dev"):
            out[split] = {
                "file": self.files[split],
                **self.bad[split].summary(),
                "examples": len(self.examples[split]),
                "features": len(self.features[split]),
            }
            spans = [f["num_spans"] for f in self.features[split] if "num_spans" in f]
            if spans:
                out[split]["mean_spans"] = round(sum(spans) / len(spans), 3)
                per_text = [f["spans_per_text"] for f in self.features[split]]
                out[split]["inputs_with_spans_cut"] = sum(any(n > self.cfg.max_spans for n in t) for t in per_text)
                if self.task.is_pair:
                    out[split]["pairs_second_text_without_span"] = sum(t[1] == 0 for t in per_text)
        return out


def _order(n: int, seed: int, epoch: int) -> list[int]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g).tolist()


@dataclass
class Setup:
    """Everything resolved and checked before any process group exists (errors here are one-line messages)."""

    cfg: FinetuneConfig
    task: Task
    data: Data
    encoder: SpanBert
    tokenizer: ModelTokenizer
    source: dict
    optim: OptimConfig
    ds_path: str
    ds: dict
    world_size: int
    global_batch: int
    steps_per_epoch: int
    max_steps: int
    max_seq_len: int


def prepare(
    cfg: FinetuneConfig, optim_flags: dict, encoder: SpanBert, tokenizer: ModelTokenizer, source: dict
) -> Setup:
    task = get_task(cfg.task)
    max_seq_len = min(cfg.resolved_max_seq_len, encoder.config.max_position_embeddings)
    data = Data(cfg, task, tokenizer, max_seq_len)
    on_gpu = accelerator_is_gpu()
    ds_path, ds_raw = load_deepspeed_json(cfg.deepspeed_config, on_gpu)
    _, _, world = env_rank()
    # The schedule is not part of the DeepSpeed JSON: resolve (and check) it first, then count the steps.
    optim = OptimConfig(**{**optim_flags, "lr": cfg.lr, "warmup_steps": 0})
    ds = resolve_deepspeed_config(ds_path, ds_raw, optim, cfg.output_dir, on_gpu)
    global_batch = ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * world
    steps_per_epoch = math.ceil(len(data.features["train"]) / global_batch)
    max_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    optim = replace(optim, warmup_steps=int(cfg.warmup_ratio * max_steps))
    return Setup(
        cfg=cfg,
        task=task,
        data=data,
        encoder=encoder,
        tokenizer=tokenizer,
        source=source,
        optim=optim,
        ds_path=ds_path,
        ds=ds,
        world_size=world,
        global_batch=global_batch,
        steps_per_epoch=steps_per_epoch,
        max_steps=max_steps,
        max_seq_len=max_seq_len,
    )


class FineTuner:
    def __init__(self, setup: Setup):
        import deepspeed

        s = self.setup = setup
        self.cfg, self.task, self.data, self.source = s.cfg, s.task, s.data, s.source
        self.max_seq_len, self.global_batch = s.max_seq_len, s.global_batch
        self.steps_per_epoch, self.max_steps, self.ds = s.steps_per_epoch, s.max_steps, s.ds
        self.dist: Dist = init_distributed()
        if self.dist.world_size != s.world_size:
            raise RuntimeError(
                f"the environment said {s.world_size} ranks, torch.distributed has {self.dist.world_size}"
            )
        self.micro, self.accum = s.ds["train_micro_batch_size_per_gpu"], s.ds["gradient_accumulation_steps"]
        self.pad_id = s.tokenizer.pad_id  # the pad role's token (RoBERTa's <pad> is 1, not the model's default 0)
        self.regression = s.task.kind == "regression"
        torch.manual_seed(s.cfg.seed)  # the head's initialisation: identical on every rank
        model = FineTuneModel(
            s.encoder,
            s.cfg.head,
            num_labels=s.task.num_labels,
            regression=self.regression,
            segmentation=s.cfg.segmentation,
        )
        self.parameters = {
            "encoder": sum(p.numel() for p in model.encoder.parameters()),
            "head": model.head_parameters(),
        }
        logging.getLogger("DeepSpeed").setLevel(s.cfg.log_level.upper())
        schedule = WarmupLinearDecay(s.optim.warmup_steps or 0, s.max_steps)
        with environment_ninja():
            self.engine, _, _, self.scheduler = deepspeed.initialize(
                model=model,
                model_parameters=parameter_groups(model, s.optim.weight_decay),
                config=s.ds,
                lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule),
            )

    def _print(self, message: str) -> None:
        if self.dist.is_main:
            print(message, flush=True)

    def _bar(self, total: int, desc: str):
        # a bar on a terminal only: in a log file it is a line of carriage returns; there the --log-every lines tell it
        if not (self.dist.is_main and self.cfg.progress and sys.stderr.isatty()):
            return None
        from tqdm import tqdm

        return tqdm(
            total=total,
            desc=desc,
            unit="step" if desc == "train" else "batch",
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=1.0,
        )

    def _batch(self, feats: list[dict]) -> dict[str, torch.Tensor]:
        batch = collate(feats, self.pad_id, self.regression)
        return {k: v.to(self.dist.device) for k, v in batch.items()}

    def train(self) -> list[dict]:
        feats, n = self.data.features["train"], len(self.data.features["train"])
        G, world, rank = self.global_batch, self.dist.world_size, self.dist.rank
        log, window, bar = [], [], self._bar(self.max_steps, "train")
        self.engine.train()
        started = time.monotonic()
        for step in range(self.max_steps):
            epoch, k = divmod(step, self.steps_per_epoch)
            order = _order(n, self.cfg.seed, epoch)
            mine = [order[(k * G + j) % n] for j in range(G)][rank::world]
            loss_sum = torch.zeros((), dtype=torch.float64)
            for m in range(self.accum):
                batch = self._batch([feats[i] for i in mine[m * self.micro : (m + 1) * self.micro]])
                torch.manual_seed(((self.cfg.seed * 1_000_003 + step) * 257 + m) * 65_537 + rank)
                out = self.engine(**batch)
                self.engine.backward(out["loss"])
                self.engine.step()
                loss_sum += out["loss"].detach().double().cpu()
            torch.distributed.all_reduce(loss_sum)
            loss = loss_sum.item() / (self.accum * world)
            window.append(loss)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            if (step + 1) % self.cfg.log_every == 0 or step + 1 == self.max_steps:
                mean = sum(window) / len(window)
                lr = self.scheduler.get_last_lr()[0]
                events = [("finetune/train_loss", mean, step + 1), ("finetune/lr", lr, step + 1)]
                self.engine.monitor.write_events(events)
                log.append({"step": step + 1, "loss": round(mean, 6)})
                if bar is None:
                    eta = elapsed_and_eta(time.monotonic() - started, step + 1, self.max_steps)
                    self._print(f"step {step + 1}/{self.max_steps}: loss {mean:.4f}, lr {lr:.3g}, {eta}")
                window = []
        if bar is not None:
            bar.close()
        return log

    @torch.no_grad()
    def predict(self) -> dict[int, dict]:
        """feature index -> outputs (lists), gathered on rank 0 (other ranks get {})."""
        feats = self.data.features["dev"]
        world, rank = self.dist.world_size, self.dist.rank
        per_rank = math.ceil(len(feats) / world)
        mine = list(range(rank, len(feats), world))
        mine += [-1] * (per_rank - len(mine))  # every rank runs the same number of forwards (ZeRO-3 gathers)
        size = self.cfg.eval_batch_size or self.micro
        bar = self._bar(math.ceil(per_rank / size), "eval")
        self.engine.eval()
        outputs: dict[int, dict] = {}
        for b in range(0, per_rank, size):
            ids = mine[b : b + size]
            out = self.engine(
                **{
                    k: v
                    for k, v in self._batch([feats[max(i, 0)] for i in ids]).items()
                    if k not in ("labels", "start_positions", "end_positions")
                }
            )
            for row, i in enumerate(ids):
                if i < 0:
                    continue
                width = len(feats[i]["input_ids"])
                outputs[i] = {k: v[row][:width].tolist() if k != "logits" else v[row].tolist() for k, v in out.items()}
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        gathered = [None] * world
        torch.distributed.all_gather_object(gathered, outputs)
        self.engine.train()
        if not self.dist.is_main:
            return {}
        merged: dict[int, dict] = {}
        for part in gathered:
            merged.update(part or {})
        assert len(merged) == len(feats), (len(merged), len(feats))
        return merged

    def score(self, outputs: dict[int, dict]) -> tuple[dict, object]:
        task, feats, examples = self.task, self.data.features["dev"], self.data.examples["dev"]
        if task.kind == "qa":
            order = range(len(feats))
            predictions = squad.decode(
                examples,
                feats,
                [outputs[i]["start_logits"] for i in order],
                [outputs[i]["end_logits"] for i in order],
                n_best=self.cfg.n_best,
                max_answer_len=self.cfg.max_answer_len,
                version2=task.name == "squad2",
                null_threshold=self.cfg.null_threshold,
            )
            golds = [(ex.qid, ex.gold_texts) for ex in examples]  # every dev entry, as the official scripts
            return squad_metric.evaluate(golds, predictions, version2=task.name == "squad2"), predictions
        gold = [ex.label for ex in examples]
        extra = {}
        if self.cfg.head == "spex":
            decoded = [
                spex.decode(feats[i], outputs[i]["start_logits"], outputs[i]["end_logits"]) for i in range(len(feats))
            ]
            pred = [spex.value_of(task, d["choice"]) for d in decoded]
            extra["spex_free_span_is_choice"] = round(
                100.0 * sum(d["free_is_choice"] for d in decoded) / len(decoded), 4
            )
        elif self.regression:
            pred = [outputs[i]["logits"][0] for i in range(len(feats))]
        else:
            pred = [max(range(task.num_labels), key=lambda c: (outputs[i]["logits"][c], -c)) for i in range(len(feats))]
        metrics = glue_metrics(task.metrics, pred, gold)
        metrics.update(extra, examples=len(gold))
        rows = [{"uid": ex.uid, "label": ex.label, "prediction": p} for ex, p in zip(examples, pred)]
        return metrics, rows

    def write(self, train_log: list[dict], metrics: dict, predictions, seconds: float) -> dict:
        cfg, out_dir = self.cfg, self.cfg.output_dir
        result = {
            "task": self.task.name,
            "head": cfg.head,
            "init": self.source,
            "segmentation": cfg.segmentation if cfg.head == "span-ft" else None,
            "data": self.data.summary(),
            "world_size": self.dist.world_size,
            "global_batch_size": self.global_batch,
            "max_seq_len": self.max_seq_len,
            "steps": self.max_steps,
            "epochs": round(self.max_steps / self.steps_per_epoch, 4),
            "seed": cfg.seed,
            "parameters": {
                **self.parameters,
                "head_fraction": round(self.parameters["head"] / self.parameters["encoder"], 6),
            },
            "train_loss": train_log,
            "eval": metrics,
            "main_metric": self.task.main_metric,
            "seconds": round(seconds, 1),
        }
        with open(os.path.join(out_dir, "metrics.json"), "w") as f:
            f.write(dumps(result))
        if self.task.kind == "qa":
            with open(os.path.join(out_dir, "predictions.json"), "w", encoding="utf-8") as f:
                json.dump(predictions, f, ensure_ascii=False, indent=1, sort_keys=True)
        else:
            with open(os.path.join(out_dir, "predictions.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in predictions)
        write_bad_rows(os.path.join(out_dir, "bad_rows.jsonl"), self.data.bad)
        return result


def run(setup: Setup) -> dict | None:
    """Train, evaluate, write; every rank calls this. Returns metrics.json's content on rank 0."""
    start = time.perf_counter()
    cfg = setup.cfg
    ft = FineTuner(setup)
    if ft.dist.is_main:
        os.makedirs(cfg.output_dir, exist_ok=True)
        with open(os.path.join(cfg.output_dir, "config.json"), "w") as f:
            f.write(
                dumps(
                    {
                        "finetune": cfg,
                        "optim": setup.optim,
                        "deepspeed": ft.ds,
                        "init": setup.source,
                        "world_size": ft.dist.world_size,
                    }
                )
            )
        for split, bad in ft.data.bad.items():
            s = bad.summary()
            ft._print(
                f"{split}: {s['read']} rows read, {s['used']} used, {s['bad']} bad"
                + (f" {s['by_reason']} (RUN_DIR/bad_rows.jsonl)" if s["bad"] else "")
            )
        ft._print(
            f"{cfg.task}/{cfg.head}: {len(ft.data.features['train'])} training features, {ft.max_steps} steps "
            f"of {ft.global_batch} on {ft.dist.world_size} rank(s); head {ft.parameters['head']:,} parameters "
            f"({100 * ft.parameters['head'] / ft.parameters['encoder']:.2f}% of the encoder's)"
        )
    train_log = ft.train()
    outputs = ft.predict()
    result = None
    if ft.dist.is_main:
        metrics, predictions = ft.score(outputs)
        ft.engine.monitor.write_events(
            [(f"finetune/eval_{k}", float(v), ft.max_steps) for k, v in metrics.items() if isinstance(v, (int, float))]
        )
        result = ft.write(train_log, metrics, predictions, time.perf_counter() - start)
        ft._print(
            f"eval {cfg.task}/{cfg.head}: "
            + "  ".join(f"{k} {v}" for k, v in metrics.items())
            + f"  -> {os.path.join(cfg.output_dir, 'metrics.json')}"
        )
    finish_distributed()
    return result
