"""A run's weights are checked before every save (trainer/engine/divergence.py): a step's loss is computed before its
update, so an update that overflowed the weights shows in the weights only, and a save of them would hand the next
run an all-NaN "last good" checkpoint (attack round on issue 32, F3: ``--lr inf`` saved one and exited 0; that rate
is now refused, and this guard covers any other overflow). Real gloo process groups of 2 ranks, a real model."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import torch

from tests.conftest import free_port
from trainer.config import ModelConfig
from trainer.engine.divergence import Diverged, stops_on, weights_finite
from trainer.model import SpanBert


def _rank(rank: int, port: int, poison_rank: int | None, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = SpanBert(ModelConfig(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                                     max_position_embeddings=32))  # fmt: skip
        if rank == poison_rank:
            with torch.no_grad():
                next(iter(model.parameters()))[0, 0] = float("inf")
        out.put((rank, weights_finite(model, "cpu")))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("poison_rank", [None, 0, 1])
def test_every_rank_learns_whether_any_rank_holds_weights_that_are_not_finite(poison_rank):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, poison_rank, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    answers = dict(out.get(timeout=5) for _ in procs)
    assert answers == {0: poison_rank is None, 1: poison_rank is None}


def test_a_divergence_ends_the_block_and_is_reported_once():
    reported: list[Exception] = []
    with stops_on(Diverged, reported.append) as caught:
        raise Diverged("the weights are not finite after step 3")
    assert [str(e) for e in caught] == ["the weights are not finite after step 3"] and reported == caught
    with stops_on(Diverged, reported.append) as caught:
        pass
    assert caught == [] and len(reported) == 1
