"""Bi-sequence BERT with next sentence prediction (issue 12): pairs built at load time (trainer/data/segments.py), the
NSP head, and a real 2-rank CPU run (tiny preset, span masking + SBO + NSP) that trains, resumes, evaluates NSP
accuracy and exports to Hugging Face `BertForPreTraining`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest
import torch
from conftest import free_port

from schemas.artifact import Artifact
from tests.support.pretrain_runs import DEEPSPEED, PRETRAIN, REPO, TIMEOUT, ds_config, metric, resume_from, run, run_env
from trainer.config import ConfigError, ModelConfig
from trainer.data import DataConfig, build_eval_loader, build_train_loader
from trainer.masking import IGNORE_INDEX, MaskingConfig
from trainer.model import SpanBert


def _rows_by_sample_id(artifact_dir: Path) -> tuple[list[list[int]], list[str], list[list[bool]]]:
    art = Artifact.open(str(artifact_dir))
    ids, docs, sents = [], [], []
    for rel in art.shard_paths:
        table = ipc.open_file(art.path(rel)).read_all()
        ids += table.column("input_ids").to_pylist()
        docs += table.column("doc_id").to_pylist()
        sents += table.column("sentence_start").to_pylist()
    return ids, docs, sents


def _find(row: list[int], part: list[int], start: int = 0) -> int | None:
    """The first position >= start where ``part`` occurs in ``row``, or None."""
    r = np.asarray(row)
    for p in np.flatnonzero(r[start:] == part[0]).tolist():
        if r[start + p : start + p + len(part)].tolist() == part:
            return start + p
    return None


def _pairs(batch, sep_id: int):
    """Per row: (sample id, A tokens, B tokens, label, token types, sequence length) of the *original* tokens."""
    out = []
    ids, labels = batch["input_ids"], batch["labels"]
    orig = torch.where(labels != IGNORE_INDEX, labels, ids)
    for r in range(ids.shape[0]):
        n = int(batch["attention_mask"][r].sum())
        seq = orig[r, :n].tolist()
        seps = [i for i, t in enumerate(seq) if t == sep_id]
        assert seps[-1] == n - 1 and len(seps) >= 2
        a_end = seps[0]
        out.append(
            (
                int(batch["sample_id"][r]),
                seq[1:a_end],
                seq[a_end + 1 : n - 1],
                int(batch["next_sentence_label"][r]),
                batch["token_type_ids"][r, :].tolist(),
                n,
                a_end,
            )
        )
    return out


@pytest.mark.parametrize("scheme", ["span", "whole_word", "subword"])
def test_pairs_follow_bert_and_keep_the_masking_invariants(wikitext2_artifact, scheme):
    rows, docs, sents = _rows_by_sample_id(wikitext2_artifact)
    cfg = DataConfig(artifact=str(wikitext2_artifact), seed=5, micro_batch_size=8, num_workers=0, segments=2)
    loader, ds = build_train_loader(cfg, MaskingConfig(scheme=scheme, seed=5))
    sep = ds.masker.sep_id
    full = cfg.max_seq_len - 3
    it = iter(loader)
    labels, short, long_isnext = [], 0, 0
    other_doc = a_front = whole = untruncated = 0
    for _ in range(60):
        batch = next(it)
        lab, left, right = batch["labels"], batch["span_left"], batch["span_right"]
        t = (lab != IGNORE_INDEX).nonzero(as_tuple=True)
        assert len(t[0]) > 0 and (lab[t] != sep).all()  # [SEP] is never a target
        # SBO boundaries are observed tokens (the [SEP] between A and B is one)
        assert (lab.gather(1, left)[t] == IGNORE_INDEX).all() and (lab.gather(1, right)[t] == IGNORE_INDEX).all()
        for sid, a, b, label, types, n, a_end in _pairs(batch, sep):
            row = rows[sid]
            labels.append(label)
            assert 1 <= len(a) and 1 <= len(b) and len(a) + len(b) <= full
            a0 = _find(row, a)
            assert a0 is not None  # A = a stretch of the row (BERT cuts the longer segment at its front or back)
            a_front += a0 > 0
            if a0 == 0 and len(a) + len(b) == min(len(row), full) and label == 0:
                whole += sents[sid][len(a)] if len(a) < len(row) else True  # untruncated: A ends at a sentence
                untruncated += 1
            assert types[: a_end + 1] == [0] * (a_end + 1) and types[a_end + 1 : n] == [1] * (n - a_end - 1)
            assert sum(types[n:]) == 0
            if label == 0:
                b0 = _find(row, b, a0 + len(a))
                assert b0 is not None  # B continues A (after A's end)
                long_isnext += 1
                short += len(a) + len(b) < min(len(row), full)
            else:
                assert _find(row, b, a0 + len(a)) is None or len(b) < 3
                # B is a stretch of another document's row
                hits = [j for j in range(len(rows)) if docs[j] != docs[sid] and _find(rows[j], b) is not None]
                other_doc += bool(hits)
        if len(labels) >= 200:
            break
    labels = np.array(labels)
    assert len(labels) >= 200 and abs(labels.mean() - 0.5) <= 0.1
    assert other_doc == labels.sum() > 0
    assert long_isnext > 50 and 0 < short / long_isnext <= 0.2  # BERT's 10% short sequences (few samples: loose)
    assert a_front > 0 and untruncated > 20 and whole >= 0.9 * untruncated  # front cuts happen; A: whole sentences
    # (unless the row has no sentence start to split at)


def test_short_sequences_are_drawn_with_probability_0_1_and_pairs_are_deterministic(wikitext2_artifact):
    from trainer.data import segments

    rows, docs, sents = _rows_by_sample_id(wikitext2_artifact)
    draws = segments.pair_draws(5, 0, np.arange(len(rows)))
    assert draws.shape == (len(rows), segments.PAIR_DRAWS)
    assert abs((draws[:, 0] < 0.1).mean() - 0.1) <= 0.03 and abs((draws[:, 2] < 0.5).mean() - 0.5) <= 0.05
    assert np.array_equal(draws, segments.pair_draws(5, 0, np.arange(len(rows))))
    assert not np.array_equal(draws, segments.pair_draws(5, 1, np.arange(len(rows))))  # new pairs every epoch
    # the same sample gets the same pair whatever the micro batch size and the number of ranks
    cfg = dict(artifact=str(wikitext2_artifact), seed=5, num_workers=0, segments=2)
    seen: dict[int, tuple] = {}
    compared = 0
    for mb, world in ((8, 1), (4, 2)):
        for rank in range(world):
            loader, ds = build_train_loader(
                DataConfig(micro_batch_size=mb, **cfg), MaskingConfig(seed=5), rank=rank, world_size=world
            )
            it = iter(loader)
            for _ in range(32 // (mb * world) * 2):
                batch = next(it)
                for p in _pairs(batch, ds.masker.sep_id):
                    key = (tuple(p[1]), tuple(p[2]), p[3])
                    if p[0] in seen:
                        assert seen[p[0]] == key
                        compared += 1
                    seen[p[0]] = key
    assert compared >= 16


def test_eval_pairs_are_fixed(wikitext2_artifact):
    cfg = DataConfig(artifact=str(wikitext2_artifact), seed=5, micro_batch_size=4, num_workers=0, segments=2)
    loader, _ = build_eval_loader(cfg, MaskingConfig(seed=5))
    a = [b["next_sentence_label"].tolist() + b["input_ids"][:, :32].ravel().tolist() for b in loader]
    b = [b["next_sentence_label"].tolist() + b["input_ids"][:, :32].ravel().tolist() for b in loader]
    assert len(a) > 0 and a == b


def test_nsp_head_loss_and_accuracy():
    torch.manual_seed(0)
    model = SpanBert(ModelConfig.preset("tiny", vocab_size=100, nsp=True))
    ids = torch.randint(5, 100, (4, 16))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 3] = ids[:, 3]
    types = (torch.arange(16) > 8).long().expand(4, 16)
    nsl = torch.tensor([0, 1, 1, 0])
    batch = dict(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        labels=labels,
        span_left=torch.full_like(ids, 2),
        span_right=torch.full_like(ids, 4),
        span_position=torch.zeros_like(ids),
        token_type_ids=types,
        next_sentence_label=nsl,
    )
    out = model(**batch)
    model.eval()
    with torch.no_grad():
        ev = model(**batch)
        expected = torch.nn.functional.cross_entropy(model.nsp_logits(ids, batch["attention_mask"], types), nsl)
        correct = (model.nsp_logits(ids, batch["attention_mask"], types).argmax(-1) == nsl).sum()
    assert ev["nsp_loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert ev["loss"].item() == pytest.approx((ev["mlm_loss"] + ev["sbo_loss"] + ev["nsp_loss"]).item(), rel=1e-6)
    assert int(ev["nsp_correct"]) == int(correct) and int(ev["num_pairs"]) == 4
    out["loss"].backward()
    assert model.nsp_head.seq_relationship.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="next_sentence_label"):
        model(**{k: v for k, v in batch.items() if k != "next_sentence_label"})
    with pytest.raises(ConfigError, match="type-vocab-size"):
        ModelConfig(nsp=True, type_vocab_size=0)


def test_nsp_export_mapping_gives_bert_for_pretraining_our_logits():
    transformers = pytest.importorskip("transformers")
    from trainer.export import hf_config, to_hf_state_dict

    torch.manual_seed(0)
    model = SpanBert(ModelConfig.preset("tiny", vocab_size=300, nsp=True)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    conf = hf_config(model.config)
    assert conf["architectures"] == ["BertForPreTraining"]
    hf = transformers.BertForPreTraining(
        transformers.BertConfig(**{k: v for k, v in conf.items() if k != "architectures"})
    ).eval()
    result = hf.load_state_dict(to_hf_state_dict(model.state_dict(), model.config), strict=False)
    assert not result.unexpected_keys and set(result.missing_keys) <= {
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
    }
    ids = torch.randint(5, 300, (3, 20))
    types = (torch.arange(20) > 9).long().expand(3, 20)
    with torch.no_grad():
        theirs = hf(input_ids=ids, token_type_ids=types)
        torch.testing.assert_close(theirs.prediction_logits, model.mlm_logits(ids, None, types), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(
            theirs.seq_relationship_logits, model.nsp_logits(ids, None, types), rtol=1e-4, atol=1e-5
        )


def test_nsp_needs_two_segments(demo_artifact, tmp_path):
    from trainer import engine, pretrain

    args = pretrain.build_parser().parse_args(
        [
            "--data",
            str(demo_artifact),
            "--preset",
            "tiny",
            "--max-steps",
            "5",
            "--output-dir",
            str(tmp_path / "run"),
            "--nsp",
        ]
    )
    engine.default_single_process_env(args.local_rank)
    with pytest.raises(ConfigError, match="--segments 2"):
        engine.prepare(args)


# -- a real 2-rank run ------------------------------------------------------------------------------
NSP_RUN = ["--preset", "tiny", "--lr", "5e-3", "--log-every", "1", "--eval-every", "2", "--eval-batches", "2",
           "--no-progress", "--num-workers", "1", "--seed", "3", "--segments", "2", "--nsp", "--scheme", "span",
           "--objective", "mlm+sbo", "--save-every", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def nsp_run(demo_artifact, tmp_path_factory) -> Path:
    """2 CPU ranks, ZeRO-2, 6 steps (no --warmup-steps: the 1% default); then the same run resumed from its step-4
    checkpoint in a new directory (tests/e2e/test_pretrain.py's way, with tests/support/pretrain_runs.py). Returns the resumed run; ``full`` is beside it."""
    tmp = tmp_path_factory.mktemp("nsp_run")

    def cmd(run_dir: Path) -> list[str]:
        return [
            str(DEEPSPEED),
            "--num_gpus",
            "2",
            "--master_port",
            str(free_port()),
            str(PRETRAIN),
            "--deepspeed_config",
            str(ds_config(tmp, 2)),
            "--data",
            str(demo_artifact),
            "--output-dir",
            str(run_dir),
            *NSP_RUN,
            "--max-steps",
            "6",
        ]

    full = run(cmd(tmp / "full"))
    assert "done: 6 steps" in full.stdout
    resume_from(tmp / "full", "global_step4", tmp / "resumed")
    resumed = run([*cmd(tmp / "resumed"), "--resume"])
    assert "resumed from" in resumed.stdout and "at step 4" in resumed.stdout and "done: 6 steps" in resumed.stdout
    return tmp / "resumed"


@pytest.mark.slow
def test_two_rank_nsp_run_trains_resumes_and_evaluates_nsp(nsp_run):
    full = nsp_run.parent / "full"
    resolved = json.loads((full / "config.json").read_text())
    assert resolved["world_size"] == 2 and resolved["model"]["nsp"] is True and resolved["data"]["segments"] == 2
    assert resolved["optim"]["warmup_steps"] == 0  # 1% of 6 steps, rounded
    nsp = metric(full, "train_nsp_loss")
    assert sorted(nsp) == list(range(1, 7)) and all(0 < v < 5 for v in nsp.values())
    assert sorted(metric(full, "train_sbo_loss")) == list(range(1, 7))
    acc = metric(full, "eval_nsp_acc")
    assert sorted(acc) == [2, 4, 6] and all(0.0 <= v <= 1.0 for v in acc.values())
    assert sorted(metric(full, "eval_nsp_loss")) == [2, 4, 6]
    events = b"".join(p.read_bytes() for p in (full / "tensorboard").rglob("*tfevents*"))
    assert b"eval/nsp_acc" in events and b"train/nsp_loss" in events
    # the resumed run continues exactly: same pairs, masks and losses as the uninterrupted run
    for name in ("train_loss", "train_nsp_loss"):
        a, b = metric(full, name), metric(nsp_run, name)
        assert sorted(b) == [5, 6]
        assert [b[s] for s in (5, 6)] == pytest.approx([a[s] for s in (5, 6)], rel=1e-6, abs=0), name
    assert metric(nsp_run, "eval_nsp_acc")[6] == metric(full, "eval_nsp_acc")[6]
    assert metric(nsp_run, "eval_nsp_loss")[6] == pytest.approx(metric(full, "eval_nsp_loss")[6], rel=1e-6)


@pytest.mark.slow
def test_nsp_run_exports_to_bert_for_pretraining(nsp_run, demo_artifact, tmp_path):
    transformers = pytest.importorskip("transformers")
    from trainer.export import load_model

    out = tmp_path / "hf"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.export", str(nsp_run / "checkpoints"), "--out", str(out)],
        cwd=REPO,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    hf = transformers.BertForPreTraining.from_pretrained(str(out)).eval()
    ours, meta = load_model(str(nsp_run / "checkpoints"))
    assert meta["step"] == 6 and ours.config.nsp
    cfg = DataConfig(artifact=str(demo_artifact), seed=3, micro_batch_size=4, num_workers=0, segments=2)
    batch = next(iter(build_eval_loader(cfg, MaskingConfig(seed=3))[0]))
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        theirs = hf(**inputs)
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(
            theirs.prediction_logits[real], ours.mlm_logits(**inputs)[real], rtol=1e-4, atol=1e-5
        )
        torch.testing.assert_close(theirs.seq_relationship_logits, ours.nsp_logits(**inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scheme", ["entity", "span", "whole_word", "subword"])
def test_pairs_carry_candidate_spans_and_every_scheme_masks_them(scheme):
    from trainer.data import segments
    from trainer.masking import Masker, Rows

    R, n = 40, 40
    ids = [list(range(5 + r * n, 5 + (r + 1) * n)) for r in range(R)]  # every token id names (row, position)
    ws = [[p % 2 == 0 for p in range(n)] for _ in range(R)]
    spans = [[(0, 2), (12, 16), (30, 32)] for _ in range(R)]  # one-word spans fit the 3-token candidate budget
    rows = Rows.from_lists(ids, ws, spans)
    rows.sentence_start = np.tile(np.arange(n) % 10 == 0, R)
    rows.doc_id = np.array([f"doc{r // 2}" for r in range(R)], dtype=object)  # two rows per document
    pick = [
        (r + 1 + c) % R for r in range(R) for c in range(segments.OTHER_CANDIDATES)
    ]  # candidate 0: same doc half the time
    others = Rows.from_lists([ids[j] for j in pick], [ws[j] for j in pick], [spans[j] for j in pick])
    others.sentence_start, others.doc_id = np.tile(np.arange(n) % 10 == 0, len(pick)), rows.doc_id[pick]
    draws = segments.pair_draws(0, 0, np.arange(R))
    pairs, a_len, label = segments.build_pairs(rows, others, draws, max_seq_len=64, short_seq_prob=0.1, sep_id=3)
    assert 0 < label.sum() < R
    kept = whole = 0
    for i in range(R):
        seq = pairs.input_ids[pairs.offsets[i] : pairs.offsets[i + 1]]
        k = int(a_len[i])
        a0 = int(seq[0]) - 5 - i * n  # A is a stretch of row i (its front may be cut)
        assert seq[k] == 3 and 0 <= a0 and (seq[:k] == np.arange(seq[0], seq[0] + k)).all()
        if a0 == 0 and len(seq) == n + 1:  # not truncated: A ends at a sentence start
            assert k % 10 == 0
            whole += 1
        src = (seq[k + 1] - 5) // n
        assert (rows.doc_id[src] != rows.doc_id[i]) == bool(label[i])
        for s, e in zip(
            pairs.span_starts[pairs.span_offsets[i] : pairs.span_offsets[i + 1]].tolist(),
            pairs.span_ends[pairs.span_offsets[i] : pairs.span_offsets[i + 1]].tolist(),
        ):
            assert not (s <= k < e)  # never across [SEP]
            row, pos = divmod(int(seq[s]) - 5, n)
            assert (pos, pos + e - s) in spans[row] and (seq[s:e] == np.arange(seq[s], seq[s] + e - s)).all()
            kept += 1
    assert kept > R and whole > R // 2
    masker = Masker(
        MaskingConfig(scheme=scheme, seed=2),
        vocab_size=5 + R * n,
        special_token_ids={"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4},
        unigram_counts=np.ones(5 + R * n),
        max_seq_len=64,
    )
    m = masker.mask(pairs, np.arange(R), 0)
    targets = m.labels != IGNORE_INDEX
    assert targets.sum() > 0 and not (m.original_ids[targets] == 3).any()
    assert ((m.unit_start > a_len[m.unit_row]) | (m.unit_end <= a_len[m.unit_row])).all()  # no unit holds the [SEP]
    if scheme == "entity":
        assert m.unit_candidate.sum() > 0
    batch = masker.collate(m)
    segments.add_pair_fields([batch], a_len, label)
    assert batch["token_type_ids"].sum(1).tolist() == (np.diff(pairs.offsets) - a_len).tolist()  # B and its [SEP]


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(segments=3), "segments must be 1 or 2"),
        (dict(segments=2, max_seq_len=4), "max_seq_len >= 5"),
        (dict(short_seq_prob=1.5), "short_seq_prob"),
    ],
)
def test_segment_options_are_validated(kw, words):
    with pytest.raises(ValueError, match=words):
        DataConfig(artifact="a", **kw)


def test_resume_refuses_another_number_of_segments(demo_artifact):
    """A loader position saved with two-segment inputs cannot continue a one-segment stream (or back)."""
    cfg = dict(artifact=str(demo_artifact), seed=3, micro_batch_size=4, num_workers=0)
    _, two = build_train_loader(DataConfig(segments=2, **cfg), MaskingConfig(seed=3))
    _, one = build_train_loader(DataConfig(**cfg), MaskingConfig(seed=3))
    state = two.state_dict()
    assert state["segments"] == 2
    with pytest.raises(ValueError, match="segments: saved 2, now 1"):
        one.load_state_dict(state)
    legacy = {k: v for k, v in one.state_dict().items() if k != "segments"}  # written before the field existed
    one.load_state_dict(legacy)
    with pytest.raises(ValueError, match="segments: saved 1, now 2"):
        two.load_state_dict(legacy)
