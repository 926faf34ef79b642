"""The single-device model (trainer.model) and its configs (trainer.config): no DeepSpeed, CPU, seconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainer.config import ConfigError, ModelConfig, OptimConfig, RunConfig, WarmupLinearDecay, check_schedule
from trainer.masking import Masker, MaskingConfig, Rows
from trainer.model import IGNORE_INDEX, SpanBert

VOCAB = 300
SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def tiny(**overrides) -> ModelConfig:
    return ModelConfig.preset("tiny", vocab_size=VOCAB, **overrides)


def masked_batch(num_rows: int = 4, seed: int = 0, scheme: str = "span") -> dict[str, torch.Tensor]:
    """A batch from the real masking collator over random rows of varied lengths (so with padding)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 60, size=num_rows)
    ids = [rng.integers(5, VOCAB, size=n) for n in lengths]
    word_start = [np.concatenate([[True], rng.random(n - 1) < 0.7]) for n in lengths]
    masker = Masker(
        MaskingConfig(scheme=scheme, seed=seed),
        vocab_size=VOCAB,
        special_token_ids=SPECIAL,
        unigram_counts=np.ones(VOCAB),
        max_seq_len=128,
    )
    return masker(Rows.from_lists(ids, word_start), np.arange(num_rows), epoch=0)


def model_inputs(batch):
    return {k: batch[k] for k in ("input_ids", "attention_mask", "labels", "span_left", "span_right", "span_position")}


@pytest.fixture
def model() -> SpanBert:
    torch.manual_seed(0)
    return SpanBert(tiny()).eval()


# -- objective ------------------------------------------------------------------------------------
def test_mlm_loss_is_cross_entropy_over_target_positions_only(model):
    batch = masked_batch()
    targets = batch["labels"] != IGNORE_INDEX
    assert 0 < targets.sum() < batch["attention_mask"].sum()  # some, not all, positions are targets
    with torch.no_grad():
        out = model(**model_inputs(batch))
        full = model.mlm_logits(batch["input_ids"], batch["attention_mask"])  # [B, T, V] everywhere
    expected = F.cross_entropy(full[targets], batch["labels"][targets])
    torch.testing.assert_close(out["mlm_loss"], expected, rtol=1e-5, atol=1e-6)
    assert out["num_targets"].item() == targets.sum().item()
    assert out["mlm_correct"].item() == (full[targets].argmax(-1) == batch["labels"][targets]).sum().item()


def test_sbo_loss_uses_boundary_encodings_and_span_position(model):
    """Recompute the SBO loss with explicit per-target loops over (row, position): the model's flat gather must agree."""
    batch = masked_batch(seed=1)
    with torch.no_grad():
        out = model(**model_inputs(batch))
        hidden = model.encode(batch["input_ids"], batch["attention_mask"])
        logits, labels = [], []
        B, T = batch["input_ids"].shape
        for b in range(B):
            for t in range(T):
                if batch["labels"][b, t] == IGNORE_INDEX:
                    continue
                left, right = batch["span_left"][b, t], batch["span_right"][b, t]
                assert left < t < right  # the boundaries lie outside the span, around the target
                y = model.sbo_head(hidden[b, left][None], hidden[b, right][None], batch["span_position"][b, t][None])
                logits.append(model.mlm_head.decoder(y)[0])
                labels.append(batch["labels"][b, t])
    assert len(labels) > 0
    expected = F.cross_entropy(torch.stack(logits), torch.stack(labels))
    torch.testing.assert_close(out["sbo_loss"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["loss"], out["mlm_loss"] + out["sbo_loss"])


def test_sbo_head_is_the_papers_two_layer_gelu_layernorm(model):
    torch.manual_seed(3)
    H = model.config.hidden_size
    left, right = torch.randn(5, H), torch.randn(5, H)
    position = torch.tensor([0, 1, 2, 3, 31])
    head = model.sbo_head
    with torch.no_grad():
        x = torch.cat([left, right, head.position_embeddings.weight[position]], dim=-1)
        h = F.layer_norm(
            F.gelu(x @ head.layer1.dense.weight.T + head.layer1.dense.bias),
            (H,),
            head.layer1.LayerNorm.weight,
            head.layer1.LayerNorm.bias,
            eps=model.config.layer_norm_eps,
        )
        y = F.layer_norm(
            F.gelu(h @ head.layer2.dense.weight.T + head.layer2.dense.bias),
            (H,),
            head.layer2.LayerNorm.weight,
            head.layer2.LayerNorm.bias,
            eps=model.config.layer_norm_eps,
        )
        torch.testing.assert_close(head(left, right, position), y)
    assert head.layer1.dense.in_features == 3 * H and head.layer1.dense.out_features == H
    assert head.position_embeddings.num_embeddings == model.config.sbo_max_span_positions


def test_heads_project_only_target_positions_to_the_vocabulary(model):
    """The decoder (the V-wide projection) sees M rows per head, never B x T."""
    batch = masked_batch(seed=2)
    seen = []
    hook = model.mlm_head.decoder.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    with torch.no_grad():
        out = model(**model_inputs(batch))
    hook.remove()
    M = int(out["num_targets"])
    B, T = batch["input_ids"].shape
    assert M < B * T
    assert seen == [(M, VOCAB), (M, VOCAB)]  # once for MLM, once for SBO


def test_loss_and_gradients_ignore_non_target_labels(model):
    """Whatever the labels say off target (they are -100 there), only target positions feed the loss."""
    batch = masked_batch(seed=4)
    other = dict(batch)
    noise = batch["labels"].clone()
    off = noise == IGNORE_INDEX
    other["span_left"] = batch["span_left"].masked_fill(off, 1)  # garbage SBO fields off target
    other["span_right"] = batch["span_right"].masked_fill(off, 2)
    other["span_position"] = batch["span_position"].masked_fill(off, 7)
    with torch.no_grad():
        a, b = model(**model_inputs(batch)), model(**model_inputs(other))
    torch.testing.assert_close(a["loss"], b["loss"])


def test_batch_without_targets_gives_zero_loss_and_finite_gradients():
    torch.manual_seed(0)
    m = SpanBert(tiny()).train()
    batch = masked_batch(seed=5)
    batch["labels"] = torch.full_like(batch["labels"], IGNORE_INDEX)
    out = m(**model_inputs(batch))
    out["loss"].backward()
    assert out["loss"].item() == 0.0 and out["num_targets"].item() == 0
    assert "mlm_correct" not in out  # no argmax over the vocabulary in training steps
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_objective_mlm_has_no_sbo_head():
    torch.manual_seed(0)
    m = SpanBert(tiny(objective="mlm")).eval()
    assert m.sbo_head is None
    with torch.no_grad():
        out = m(**model_inputs(masked_batch()))
    assert "sbo_loss" not in out
    torch.testing.assert_close(out["loss"], out["mlm_loss"])
    sbo_params = SpanBert(tiny()).num_parameters() - m.num_parameters()
    H = m.config.hidden_size
    assert sbo_params == 32 * H + (3 * H * H + H + 2 * H) + (H * H + H + 2 * H)


def test_padding_does_not_change_real_positions(model):
    torch.manual_seed(1)
    ids = torch.randint(5, VOCAB, (1, 12))
    padded = torch.cat([ids, torch.zeros(1, 8, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 12), torch.zeros(1, 8)], dim=1).long()
    with torch.no_grad():
        alone = model.mlm_logits(ids, torch.ones_like(ids))
        with_pad = model.mlm_logits(padded, mask)
    torch.testing.assert_close(with_pad[:, :12], alone, rtol=1e-4, atol=1e-5)


# -- tied weights -----------------------------------------------------------------------------------
def test_decoder_weight_is_the_word_embedding_matrix_and_stays_tied_through_training():
    torch.manual_seed(0)
    m = SpanBert(tiny()).train()
    assert m.mlm_head.decoder.weight is m.embeddings.word_embeddings.weight
    names = [n for n, p in m.named_parameters() if p is m.embeddings.word_embeddings.weight]
    assert names == ["embeddings.word_embeddings.weight"]  # one Parameter, counted once
    n_distinct = sum(p.numel() for p in {id(p): p for _, p in m.named_parameters(remove_duplicate=False)}.values())
    assert m.num_parameters() == n_distinct
    before = m.embeddings.word_embeddings.weight.detach().clone()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    out = m(**model_inputs(masked_batch()))
    out["loss"].backward()
    opt.step()
    assert not torch.equal(before, m.embeddings.word_embeddings.weight)
    assert m.mlm_head.decoder.weight is m.embeddings.word_embeddings.weight
    sd = m.state_dict()
    assert sd["mlm_head.decoder.weight"].data_ptr() == sd["embeddings.word_embeddings.weight"].data_ptr()


def test_decoder_gradient_reaches_the_embedding_matrix():
    """Only the output side is used (labels on positions whose input token never occurs): the embedding rows of
    those label ids still get gradient, through the tied decoder."""
    torch.manual_seed(0)
    m = SpanBert(tiny()).train()
    ids = torch.full((1, 10), 7)
    ids[0, 0], ids[0, -1] = 2, 3
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 4] = 250  # token 250 is not in the input
    zeros = torch.zeros_like(ids)
    out = m(ids, torch.ones_like(ids), labels, zeros + 3, zeros + 5, zeros)
    out["loss"].backward()
    assert m.embeddings.word_embeddings.weight.grad[250].abs().sum() > 0


# -- configs ----------------------------------------------------------------------------------------
def test_presets_have_bert_sizes():
    assert (ModelConfig.preset("base").hidden_size, ModelConfig.preset("base").num_layers) == (768, 12)
    large = ModelConfig.preset("large")
    assert (large.hidden_size, large.num_layers, large.num_heads, large.intermediate_size) == (1024, 24, 16, 4096)
    m = SpanBert(ModelConfig.preset("base", vocab_size=30522, objective="mlm"))
    assert 108e6 < m.num_parameters() < 111e6  # BERT-base without the pooler: ~109.5M


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: ModelConfig(hidden_size=65, num_heads=2), "multiple of model.num_heads"),
        (lambda: ModelConfig(objective="sbo"), "model.objective"),
        (lambda: ModelConfig(vocab_size=100, pad_token_id=100), "pad_token_id"),
        (lambda: ModelConfig(hidden_dropout=1.0), "hidden_dropout"),
        (lambda: ModelConfig.preset("huge"), "unknown model preset"),
        (lambda: OptimConfig(lr=0), "optim.lr"),
        (lambda: OptimConfig(adam_beta2=1.0), "adam_beta2"),
        (lambda: RunConfig(data="a", output_dir="b", max_steps=0), "max_steps"),
        (lambda: RunConfig(data="", output_dir="b", max_steps=3), "--data"),
        (
            lambda: check_schedule(OptimConfig(warmup_steps=10), RunConfig(data="a", output_dir="b", max_steps=10)),
            "--warmup-steps",
        ),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(make, words):
    with pytest.raises(ConfigError, match=words):
        make()


def test_warmup_then_linear_decay():
    f = WarmupLinearDecay(warmup_steps=4, total_steps=10)
    factors = [f(i) for i in range(10)]  # LambdaLR index i = optimizer step i + 1
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]  # the first step already learns
    assert all(a > b for a, b in zip(factors[3:], factors[4:]))  # strictly decreasing afterwards
    assert factors[-1] == pytest.approx(1 / 7) and f(10) == 0.0
