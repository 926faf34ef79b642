"""Masking schemes and the collator: statistics on real WikiText-2, invariants, determinism, the preview CLI."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.ipc as ipc
import pytest
import torch

from schemas import format as fmt
from schemas.artifact import Artifact
from tests.trainer.test_trainer_data import synthetic_rows, write_artifact
from trainer import preview_masking
from trainer.masking import (
    ACTION_KEEP,
    ACTION_MASK,
    ACTION_RANDOM,
    IGNORE_INDEX,
    SCHEMES,
    Masker,
    MaskingConfig,
    Rows,
    masking_stats,
)

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


@pytest.fixture(scope="module")
def wiki(wikitext2_artifact):
    """(artifact, Rows of every row in sample-id order), read with plain pyarrow."""
    art = Artifact.open(str(wikitext2_artifact))
    ids, ws = [], []
    for rel in art.shard_paths:
        table = ipc.open_file(art.path(rel)).read_all()
        ids += table.column("input_ids").to_pylist()
        ws += table.column("word_start").to_pylist()
    assert len(ids) == art.manifest["counts"]["rows"] > 0
    return art, Rows.from_lists(ids, ws)


def subset(rows: Rows, idx) -> Rows:
    idx = list(idx)
    ids = [rows.input_ids[rows.offsets[i] : rows.offsets[i + 1]] for i in idx]
    ws = [rows.word_start[rows.offsets[i] : rows.offsets[i + 1]] for i in idx]
    spans = None
    if rows.span_offsets is not None:
        spans = [
            list(
                zip(
                    rows.span_starts[rows.span_offsets[i] : rows.span_offsets[i + 1]],
                    rows.span_ends[rows.span_offsets[i] : rows.span_offsets[i + 1]],
                )
            )
            for i in idx
        ]
    return Rows.from_lists(ids, ws, spans)


def plain_masker(cfg: MaskingConfig, vocab: int = 64, counts=None) -> Masker:
    counts = np.ones(vocab) if counts is None else counts
    return Masker(cfg, vocab_size=vocab, special_token_ids=SPECIAL, unigram_counts=counts)


# -- SpanBERT statistics on real text ---------------------------------------------------------
def test_span_masking_statistics_on_wikitext2(wiki):
    art, rows = wiki
    cfg = MaskingConfig(scheme="span", seed=11)
    masker = Masker.from_artifact(cfg, art)
    targets = maskable = 0
    words, actions = [], []
    for epoch in range(4):
        m = masker.mask(rows, np.arange(rows.num_rows), epoch)
        targets += int((m.labels != IGNORE_INDEX).sum())
        maskable += int(m.maskable.sum())
        words.append(m.unit_words)
        actions.append(m.unit_action)
    words, actions = np.concatenate(words), np.concatenate(actions)
    assert len(words) > 10_000
    assert abs(targets / maskable - 0.15) <= 0.01
    # Geo(0.2) truncated to 1..10 has mean 3.797. Accepted spans are a little shorter (the last span of a
    # row is taken with probability remaining/length; short rows clip lengths): allow 0.15.
    expected_mean = float((np.arange(1, 11) * cfg.span_length_pmf()).sum())
    assert abs(expected_mean - 3.797) < 1e-3
    assert abs(words.mean() - expected_mean) <= 0.15
    assert words.min() >= 1 and words.max() <= 10
    hist = np.bincount(words, minlength=11)[1:] / len(words)
    assert np.abs(hist - cfg.span_length_pmf()).max() <= 0.03  # the shape is the truncated geometric
    for action, share in ((ACTION_MASK, 0.8), (ACTION_RANDOM, 0.1), (ACTION_KEEP, 0.1)):
        assert abs((actions == action).mean() - share) <= 0.02


def _check_batch_invariants(masker: Masker, rows: Rows, m, batch, word_aligned: bool) -> int:
    """Assert the collator's invariants for one masked chunk; return the number of targets checked."""
    cfg = masker.cfg
    ids, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
    left, right, pos = batch["span_left"].numpy(), batch["span_right"].numpy(), batch["span_position"].numpy()
    att = batch["attention_mask"].numpy()
    B, T = ids.shape
    assert T % 8 == 0 and T <= masker.max_seq_len and batch["sample_id"].shape == (B,)
    checked = 0
    for b in range(B):
        orig = rows.input_ids[rows.offsets[b] : rows.offsets[b + 1]]
        n = len(orig)
        assert (
            ids[b, 0] == masker.cls_id and ids[b, n + 1] == masker.sep_id and (ids[b, n + 2 :] == masker.pad_id).all()
        )
        assert (att[b, : n + 2] == 1).all() and (att[b, n + 2 :] == 0).all()
        assert labels[b, 0] == IGNORE_INDEX and (labels[b, n + 1 :] == IGNORE_INDEX).all()
        t = np.flatnonzero(labels[b] != IGNORE_INDEX)
        checked += len(t)
        assert (labels[b, t] == orig[t - 1]).all()  # labels are the original tokens
        changed = np.flatnonzero(ids[b, 1 : n + 1] != orig) + 1
        assert np.isin(changed, t).all()  # only targets change
        was_mask = np.r_[False, orig == masker.mask_id, np.zeros(T - n - 1, bool)]
        assert np.isin(np.flatnonzero((ids[b] == masker.mask_id) & ~was_mask), t).all()  # [MASK] only at targets
        assert not np.isin(orig[t - 1], masker.forbidden_ids).any()
        nt = np.setdiff1d(np.arange(T), t)
        assert (left[b, nt] == 0).all() and (right[b, nt] == 0).all() and (pos[b, nt] == 0).all()
        # SBO: boundaries strictly outside the maximal masked run, never targets themselves, every position
        # between them a target with the same boundaries
        assert (
            (left[b, t] >= 0).all()
            and (left[b, t] < t).all()
            and (right[b, t] > t).all()
            and (right[b, t] <= n + 1).all()
        )
        assert (labels[b, left[b, t]] == IGNORE_INDEX).all() and (labels[b, right[b, t]] == IGNORE_INDEX).all()
        assert (pos[b, t] == np.minimum(t - left[b, t] - 1, cfg.max_span_positions - 1)).all()
        for lo, hi in set(zip(left[b, t].tolist(), right[b, t].tolist())):
            inside = np.arange(lo + 1, hi)
            assert (
                (labels[b, inside] != IGNORE_INDEX).all()
                and (left[b, inside] == lo).all()
                and (right[b, inside] == hi).all()
            )
        sel = m.unit_row == b
        ws = rows.word_start[rows.offsets[b] : rows.offsets[b + 1]]
        budget = max(int(np.floor(cfg.mask_ratio * int(m.maskable[b]) + 0.5)), 1)
        for s, e in zip(m.unit_start[sel].tolist(), m.unit_end[sel].tolist()):
            # one decision per unit: all of it is [MASK] or none of it is
            is_mask = ids[b, s + 1 : e + 1] == masker.mask_id
            assert is_mask.all() or not is_mask.any()
            if word_aligned:  # unit = complete words, except the one unit of a row no whole word fits in
                assert ws[s] and (e == n or ws[e] or (sel.sum() == 1 and e - s == budget))
    # units of a row never overlap
    for r in range(m.offsets.shape[0] - 1):
        sel = m.unit_row == r
        s, e = m.unit_start[sel], m.unit_end[sel]
        assert (s[1:] >= e[:-1]).all()
    return checked


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_keeps_the_invariants_on_wikitext2(wiki, scheme):
    art, rows = wiki
    masker = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=5), art)
    part = subset(rows, range(0, rows.num_rows, 4))
    if scheme in ("entity", "noun_phrase", "ngram"):
        part.span_starts, part.span_ends, part.span_offsets = (
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(part.num_rows + 1, np.int64),
        )
    m = masker.mask(part, np.arange(part.num_rows) * 4, epoch=2)
    batch = masker.collate(m)
    checked = _check_batch_invariants(masker, part, m, batch, word_aligned=scheme != "subword")
    assert checked > 1000
    stats = masking_stats(m)
    assert abs(stats["masked_ratio"] - 0.15) <= 0.01
    assert stats["candidate_units"] == 0  # no candidates in this artifact: whole budget to random words
    if scheme != "span":  # BERT's rule: a unit is skipped only when it no longer fits the budget
        skipped = 0
        for r in range(part.num_rows):
            covered = np.zeros(int(part.offsets[r + 1] - part.offsets[r]), bool)
            sel = m.unit_row == r
            for a, b in zip(m.unit_start[sel], m.unit_end[sel]):
                covered[a:b] = True
            left = int(np.floor(0.15 * int(m.maskable[r]) + 0.5)) - int(covered.sum())
            assert left >= 0
            ws = (
                part.word_start[part.offsets[r] : part.offsets[r + 1]]
                if scheme != "subword"
                else np.ones(len(covered), bool)
            )
            w = np.r_[np.flatnonzero(ws), len(covered)]
            free = [(a, b) for a, b in zip(w[:-1], w[1:]) if not covered[a:b].any()]
            assert all(b - a > left for a, b in free)
            skipped += len(free)
        assert skipped > 0


def test_special_tokens_inside_rows_are_never_masked():
    rng = np.random.default_rng(3)
    ids, ws = [], []
    for _ in range(64):
        n = int(rng.integers(20, 120))
        row = rng.integers(5, 64, n)
        special = rng.random(n) < 0.1
        row[special] = rng.choice([0, 2, 3, 4], special.sum())
        w = (rng.random(n) < 0.6) | special | np.r_[False, special[:-1]]  # specials are words of their own
        w[0] = True
        ids.append(row)
        ws.append(w)
    for scheme in SCHEMES:
        rows = Rows.from_lists(ids, ws, [[] for _ in ids])
        masker = plain_masker(MaskingConfig(scheme=scheme))
        m = masker.mask(rows, np.arange(64), 0)
        target = m.labels != IGNORE_INDEX
        special = np.isin(m.original_ids, [0, 2, 3, 4])
        assert special.sum() > 0 and target.sum() > 0
        assert not (target & special).any()
        assert (m.input_ids[special] == m.original_ids[special]).all()
        _check_batch_invariants(masker, rows, m, masker.collate(m), word_aligned=scheme != "subword")


# -- determinism -----------------------------------------------------------------------------
def _per_sample(m, batch) -> dict[int, tuple]:
    out = {}
    for b, sid in enumerate(batch["sample_id"].tolist()):
        n = int(m.offsets[b + 1] - m.offsets[b]) + 2
        out[sid] = tuple(
            batch[k][b, :n].numpy().tobytes()
            for k in ("input_ids", "labels", "span_left", "span_right", "span_position")
        )
    return out


@pytest.mark.parametrize("scheme", ["span", "whole_word", "subword"])
def test_masks_are_a_pure_function_of_seed_epoch_and_sample_id(wiki, scheme):
    art, rows = wiki
    masker = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=2), art)
    a_idx = list(range(0, 40))
    b_idx = list(range(39, 19, -1)) + list(range(100, 130))  # other order, other neighbours
    a = _per_sample(ma := masker.mask(subset(rows, a_idx), np.array(a_idx), 3), masker.collate(ma))
    b = _per_sample(mb := masker.mask(subset(rows, b_idx), np.array(b_idx), 3), masker.collate(mb))
    common = sorted(set(a) & set(b))
    assert len(common) == 20
    assert all(a[i] == b[i] for i in common)
    again = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=2), art)
    c = _per_sample(mc := again.mask(subset(rows, a_idx), np.array(a_idx), 3), again.collate(mc))
    assert c == a
    d = _per_sample(md := masker.mask(subset(rows, a_idx), np.array(a_idx), 4), masker.collate(md))
    assert all(d[i][1] != a[i][1] for i in a_idx)  # new masks every epoch (labels differ for every row)
    other = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=3), art)
    e = _per_sample(me := other.mask(subset(rows, a_idx), np.array(a_idx), 3), other.collate(me))
    assert all(e[i][1] != a[i][1] for i in a_idx)


# -- replacement tokens, candidates, config ---------------------------------------------------
def test_random_replacements_follow_the_unigram_distribution_without_specials():
    counts = np.zeros(64)
    counts[[10, 11]] = [3000, 1000]
    counts[[0, 2, 3, 4]] = 1e9  # special tokens are frequent in some corpora; never drawn
    masker = plain_masker(MaskingConfig(scheme="subword", mask_prob=0.0, random_prob=1.0, keep_prob=0.0), counts=counts)
    rows = Rows.from_lists([np.full(200, 20)] * 50, [np.ones(200, bool)] * 50)
    m = masker.mask(rows, np.arange(50), 0)
    target = m.labels != IGNORE_INDEX
    drawn = m.input_ids[target]
    assert len(drawn) == 50 * 30
    assert set(np.unique(drawn).tolist()) == {10, 11}
    assert abs((drawn == 10).mean() - 0.75) <= 0.04


def _candidate_rows(num_rows: int, with_candidates: bool, rng) -> tuple[Rows, list[list[tuple[int, int]]]]:
    """Rows of 200 one-token words; candidate spans of 1-3 words, some overlapping each other."""
    ids, ws, spans = [], [], []
    for _ in range(num_rows):
        ids.append(rng.integers(5, 64, 200))
        ws.append(np.ones(200, bool))
        s = []
        if with_candidates:
            starts = np.sort(rng.choice(198, 60, replace=False))
            s = sorted({(int(a), int(min(a + rng.integers(1, 4), 200))) for a in starts})
        spans.append(s)
    return Rows.from_lists(ids, ws, spans), spans


@pytest.mark.parametrize("scheme", ["entity", "noun_phrase", "ngram"])
def test_candidate_schemes_take_half_the_budget_from_candidates(scheme):
    rng = np.random.default_rng(1)
    rows, spans = _candidate_rows(40, True, rng)
    fallback, _ = _candidate_rows(10, False, rng)
    masker = plain_masker(MaskingConfig(scheme=scheme, seed=4))
    budget = int(np.floor(0.15 * 200 + 0.5))  # 30
    m = masker.mask(rows, np.arange(40), 0)
    checked = 0
    for r in range(40):
        sel = m.unit_row == r
        cand = m.unit_candidate[sel]
        length = m.unit_end[sel] - m.unit_start[sel]
        assert length.sum() == budget  # one-token words fill the budget exactly
        assert length[cand].sum() == 15  # half of it from candidate spans (1-token candidates fill exactly)
        units = set(zip(m.unit_start[sel][cand].tolist(), m.unit_end[sel][cand].tolist()))
        assert units <= set(spans[r]) and (length[~cand] == 1).all()
        checked += len(units)
    assert checked > 0
    _check_batch_invariants(masker, rows, m, masker.collate(m), word_aligned=True)
    f = masker.mask(fallback, np.arange(100, 110), 0)
    assert (
        not f.unit_candidate.any()
        and np.bincount(f.unit_row, weights=f.unit_end - f.unit_start).tolist() == [budget] * 10
    )
    with pytest.raises(ValueError, match="needs the rows' "):
        masker.mask(Rows.from_lists([np.arange(5, 15)], [np.ones(10, bool)]), np.arange(1), 0)


@pytest.fixture(scope="module")
def candidate_artifacts(tmp_path_factory):
    """{column: artifact dir} built from the first 3 articles of WikiText-2 valid with real candidates:
    spaCy entities and noun phrases, and dictionary n-grams (dictionary built from the same text)."""
    from pipeline import build_ngram_dictionary
    from pipeline.candidates import spacy_spans
    from tests.conftest import build, wikitext2_articles

    tmp = tmp_path_factory.mktemp("candidates")
    text = wikitext2_articles(3, tmp)
    common = ["--input-format", "wikitext", "--train-tokenizer", "--vocab-size", "4000", "--num-shards", "2"]
    build(
        text,
        tmp / "spacy",
        *common,
        "--mask-candidates",
        "entities,noun_phrases",
        "--spacy-model",
        spacy_spans.default_spacy_model(),
    )
    build_ngram_dictionary.run(
        ["--input", str(text), "--output", str(tmp / "dict"), "--min-count", "3", "--runner", "FnApiRunner"]
    )
    build(text, tmp / "ngrams", *common, "--mask-candidates", "ngrams", "--ngram-dictionary", str(tmp / "dict"))
    return {"entity_spans": tmp / "spacy", "noun_phrase_spans": tmp / "spacy", "ngram_spans": tmp / "ngrams"}


@pytest.mark.parametrize("scheme", ["entity", "noun_phrase", "ngram"])
def test_candidate_schemes_on_real_candidates_follow_the_greedy_budget_rule(candidate_artifacts, scheme):
    cfg = MaskingConfig(scheme=scheme, seed=9)
    art = Artifact.open(str(candidate_artifacts[cfg.candidate_column]))
    ids, ws, spans = [], [], []
    for rel in art.shard_paths:
        table = ipc.open_file(art.path(rel)).read_all()
        ids += table.column("input_ids").to_pylist()
        ws += table.column("word_start").to_pylist()
        for row in table.column(cfg.candidate_column).to_pylist():
            spans.append([(c["start"], c["end"]) for c in row if c.get("label") not in cfg.excluded_entity_labels])
    rows = Rows.from_lists(ids, ws, spans)
    masker = Masker.from_artifact(cfg, art)
    m = masker.mask(rows, np.arange(rows.num_rows), 0)
    _check_batch_invariants(masker, rows, m, masker.collate(m), word_aligned=True)
    checked_candidates = checked_words = 0
    for r in range(rows.num_rows):
        sel = m.unit_row == r
        cand = m.unit_candidate[sel]
        units = list(zip(m.unit_start[sel].tolist(), m.unit_end[sel].tolist()))
        taken = {u for u, c in zip(units, cand) if c}
        assert taken <= set(spans[r])
        budget = int(np.floor(0.15 * int(m.maskable[r]) + 0.5))
        cand_tokens = sum(e - s for s, e in taken)
        cbudget = int(np.floor(0.5 * budget + 0.5))
        assert cand_tokens <= cbudget
        # BERT's rule: a candidate was skipped only because it no longer fitted (real spans never overlap)
        for s, e in set(spans[r]) - taken:
            assert e - s > cbudget - cand_tokens
            checked_candidates += 1
        # the rest of the budget went to whole words, also by the rule
        covered = np.zeros(len(ids[r]), bool)
        for s, e in units:
            covered[s:e] = True
        left = budget - int(covered.sum())
        assert left >= 0
        w = np.r_[np.flatnonzero(ws[r]), len(ids[r])]
        for s, e in zip(w[:-1], w[1:]):
            if not covered[s:e].any():
                assert e - s > left
                checked_words += 1
        checked_candidates += len(taken)
    assert checked_candidates > 0 and checked_words > 0
    assert m.unit_candidate.sum() > 0 and (~m.unit_candidate).sum() > 0
    stats = masking_stats(m)
    assert abs(stats["masked_ratio"] - 0.15) <= 0.01


def test_span_lengths_and_span_positions_are_clipped():
    rng = np.random.default_rng(0)
    rows = Rows.from_lists([rng.integers(5, 64, 300) for _ in range(30)], [rng.random(300) < 0.3 for _ in range(30)])
    masker = plain_masker(MaskingConfig(scheme="span", max_span_words=3, max_span_positions=2))
    m = masker.mask(rows, np.arange(30), 0)
    assert len(m.unit_words) > 0 and m.unit_words.max() == 3 and m.unit_words.min() == 1
    t = m.labels != IGNORE_INDEX
    assert m.span_position[t].max() == 1 and ((m.unit_end - m.unit_start) > 2).any()
    ones = plain_masker(MaskingConfig(scheme="span", geometric_p=1.0)).mask(rows, np.arange(30), 0)
    assert len(ones.unit_words) > 0 and (ones.unit_words == 1).all()


def test_collate_pads_to_a_multiple_of_8():
    masker = plain_masker(MaskingConfig(scheme="subword"))
    rows = Rows.from_lists([[10, 11, 12], [10] * 9], [[True] * 3, [True] * 9])
    batch = masker(rows, np.array([5, 6]), 0)
    assert batch["input_ids"].shape == (2, 16)
    assert all(v.dtype.is_floating_point is False and v.dtype.itemsize == 8 for v in batch.values())
    assert (
        batch["input_ids"][0, :6].tolist()[0] == 2
        and batch["input_ids"][0, 4] == 3
        and (batch["input_ids"][0, 5:] == 0).all()
    )
    assert batch["attention_mask"].sum(1).tolist() == [5, 11]
    assert batch["sample_id"].tolist() == [5, 6]


def test_chunk_collation_equals_batch_collation_in_one_storage():
    rng = np.random.default_rng(2)
    lengths = rng.integers(5, 200, 21)
    ids = [rng.integers(5, 64, int(k)) for k in lengths]
    ws = [np.r_[True, rng.random(int(k) - 1) < 0.5] for k in lengths]
    rows = Rows.from_lists(ids, ws)
    masker = plain_masker(MaskingConfig(scheme="span"))
    m = masker.mask(rows, np.arange(21) + 1000, 1)
    chunk = masker.collate_chunk(m, 8)
    assert [b["sample_id"].shape[0] for b in chunk] == [8, 8, 5]
    storages = {t.untyped_storage().data_ptr() for b in chunk for t in b.values()}
    assert len(storages) == 1
    for j, b in enumerate(chunk):
        ref = masker.collate(m, 8 * j, min(8 * j + 8, 21))
        assert b.keys() == ref.keys()
        for k in b:
            assert torch.equal(b[k], ref[k]), k


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(scheme="spans"), "scheme must be one of subword, whole_word, span"),
        (dict(mask_ratio=0.0), r"mask_ratio must be in \(0, 1\)"),
        (dict(geometric_p=0.0), r"geometric_p must be in \(0, 1\]"),
        (dict(mask_prob=0.7), "mask_prob \\+ random_prob \\+ keep_prob must be 1"),
        (dict(max_span_words=0), "max_span_words must be an integer >= 1"),
        (dict(max_span_positions=2.5), "max_span_positions must be an integer >= 1"),
        (dict(seed=2**32), r"seed must be an integer in \[0, 2\*\*32\)"),
        (dict(mask_ratio="0.15"), "mask_ratio must be a number"),
    ],
)
def test_masking_config_is_validated(kw, message):
    with pytest.raises(ValueError, match=message):
        MaskingConfig(**kw)
    with pytest.raises(TypeError):
        MaskingConfig("span")  # keyword-only


# -- preview CLI -----------------------------------------------------------------------------
def test_preview_masking_writes_examples_and_prints_statistics(wikitext2_artifact, tmp_path, capsys):
    out = tmp_path / "masked.arrow"
    stats = preview_masking.run(
        ["--data", str(wikitext2_artifact), "--scheme", "span", "--num", "50", "--seed", "3", "--out", str(out)]
    )
    printed = capsys.readouterr().out
    for text in ("masked ratio", "mean span length", "masked / replaced / kept", "words"):
        assert text in printed
    table = ipc.open_file(str(out)).read_all()
    assert table.num_rows == 50 and table.column_names[:5] == [
        "sample_id",
        "original_ids",
        "masked_ids",
        "labels",
        "word_start",
    ]
    targets = 0
    for row in table.to_pylist():
        o, mk, lab, ws = (np.array(row[k]) for k in ("original_ids", "masked_ids", "labels", "word_start"))
        assert len(o) == len(mk) == len(lab) == len(ws)
        assert o[0] == 2 and o[-1] == 3 and ws[0] and ws[-1]
        t = lab != IGNORE_INDEX
        targets += int(t.sum())
        assert (lab[t] == o[t]).all() and (mk[~t] == o[~t]).all()
    assert targets == stats["targets"] > 0
    assert abs(stats["masked_ratio"] - 0.15) <= 0.01
    assert "targets with a masked SBO boundary" in printed
    assert stats["targets_checked"] == targets and stats["masked_boundary_targets"] == 0
    # same seed, same file contents; the statistics printed are those of the file
    stats2 = preview_masking.run(
        ["--data", str(wikitext2_artifact), "--num", "50", "--seed", "3", "--out", str(tmp_path / "again.arrow")]
    )
    assert ipc.open_file(str(tmp_path / "again.arrow")).read_all().equals(table) and stats2["targets"] == targets


def test_preview_masking_explains_a_missing_or_incomplete_artifact(tmp_path, capsys):
    with pytest.raises(SystemExit, match="preview_masking: error: .*does not exist"):
        preview_masking.run(["--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.arrow")])
    art = write_artifact(tmp_path / "a", [synthetic_rows(5)])
    (art / fmt.MANIFEST_FILE).unlink()
    with pytest.raises(SystemExit, match="incomplete artifact"):
        preview_masking.run(["--data", str(art), "--out", str(tmp_path / "x.arrow")])
    shutil.rmtree(art)


# -- Issue 12: SBO over maximal masked runs, exact budgets on short rows ----------------------------
FIDELITY_SCHEMES = ("span", "whole_word", "subword")


@pytest.fixture(scope="module")
def short_rows(tmp_path_factory):
    """(artifact, Rows) of 20 WikiText-2 articles packed into 14-token rows (--max-seq-len 16)."""
    from tests.conftest import WIKITEXT2_BUILD, build, wikitext2_articles

    tmp = tmp_path_factory.mktemp("short_rows")
    build(wikitext2_articles(20, tmp), tmp / "artifact", *WIKITEXT2_BUILD, "--max-seq-len", "16")
    art = Artifact.open(str(tmp / "artifact"))
    ids, ws = [], []
    for rel in art.shard_paths:
        table = ipc.open_file(art.path(rel)).read_all()
        ids += table.column("input_ids").to_pylist()
        ws += table.column("word_start").to_pylist()
    assert max(len(r) for r in ids) == 14
    return art, Rows.from_lists(ids, ws)


@pytest.mark.parametrize("scheme", FIDELITY_SCHEMES)
@pytest.mark.parametrize("length", ["512", "14"])
def test_no_mlm_target_has_a_masked_sbo_boundary_on_real_text(wiki, short_rows, scheme, length):
    from trainer.masking.sbo_targets import boundary_stats

    art, rows = wiki if length == "512" else short_rows
    masker = Masker.from_artifact(
        MaskingConfig(scheme=scheme, seed=12), art, max_seq_len=512 if length == "512" else 16
    )
    checked = touching = 0
    for epoch in range(3):
        m = masker.mask(rows, np.arange(rows.num_rows), epoch)
        stats = boundary_stats(m.labels, m.span_left, m.span_right, m.offsets)
        checked += stats["targets_checked"]
        assert stats["masked_boundary_targets"] == 0, stats
        # the case the fix is about does occur: units that touch, so their runs are longer than a unit
        same = (m.unit_row[1:] == m.unit_row[:-1]) & (m.unit_start[1:] == m.unit_end[:-1])
        touching += int(same.sum())
        # positions count from the run's first token, so a run's tokens are numbered 0, 1, 2, ...
        t = np.flatnonzero(m.labels != IGNORE_INDEX)
        row = np.searchsorted(m.offsets, t, side="right") - 1
        local = t - m.offsets[row]
        assert (m.span_position[t] == np.minimum(local - m.span_left[t], masker.cfg.max_span_positions - 1)).all()
    assert checked > 1000 and touching > 0


def test_boundary_stats_count_masked_boundaries():
    from trainer.masking.sbo_targets import boundary_stats

    # one row of 6 tokens; targets at 1, 2 (content), boundaries of token 1 point at token 2's position
    labels = np.array([-100, 7, 8, -100, -100, -100])
    left = np.array([0, 1, 1, 0, 0, 0])  # content token j is position j + 1
    right = np.array([0, 3, 4, 0, 0, 0])  # token 1's right boundary = position 3 = content token 2, a target
    stats = boundary_stats(labels, left, right, np.array([0, 6]))
    assert stats == {"targets_checked": 2, "masked_boundary_targets": 1, "masked_boundary_share": 0.5}


@pytest.mark.parametrize("scheme", FIDELITY_SCHEMES)
def test_short_rows_get_targets_within_their_budget(short_rows, scheme):
    art, rows = short_rows
    masker = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=3), art, max_seq_len=16)
    checked = 0
    for epoch in range(4):
        m = masker.mask(rows, np.arange(rows.num_rows), epoch)
        targets = np.bincount(
            np.repeat(np.arange(rows.num_rows), np.diff(m.offsets))[m.labels != IGNORE_INDEX], minlength=rows.num_rows
        )
        content = m.maskable
        big = content >= 8
        checked += int(big.sum())
        assert (targets[big] >= 1).all(), f"{int((targets[big] == 0).sum())} rows without targets"
        assert (targets[big] <= 0.4 * content[big]).all()
        budget = np.maximum(np.floor(0.15 * content + 0.5), 1)
        assert (targets[content > 0] <= budget[content > 0]).all()  # never past the budget
    assert checked > 500


@pytest.mark.parametrize("scheme", FIDELITY_SCHEMES)
def test_512_token_statistics_stay_spanbert_s(wiki, scheme):
    art, rows = wiki
    long = [i for i in range(rows.num_rows) if rows.offsets[i + 1] - rows.offsets[i] >= 500]
    part = subset(rows, long)
    masker = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=21), art)
    targets = maskable = 0
    words, actions = [], []
    for epoch in range(3):
        m = masker.mask(part, np.asarray(long), epoch)
        targets += int((m.labels != IGNORE_INDEX).sum())
        maskable += int(m.maskable.sum())
        words.append(m.unit_words)
        actions.append(m.unit_action)
    words, actions = np.concatenate(words), np.concatenate(actions)
    assert len(long) > 100 and len(words) > 5000
    assert abs(targets / maskable - 0.15) <= 0.01
    if scheme == "span":
        assert abs(words.mean() - 3.8) <= 0.3
    for action, share in ((ACTION_MASK, 0.8), (ACTION_RANDOM, 0.1), (ACTION_KEEP, 0.1)):
        assert abs((actions == action).mean() - share) <= 0.02


def test_a_row_whose_words_are_all_longer_than_the_budget_gets_part_of_one_word():
    # 10 tokens in two 5-token words: budget round(1.5) = 2, no whole word fits
    rows = Rows.from_lists([np.arange(10, 20)] * 50, [[True, False, False, False, False] * 2] * 50)
    for scheme in ("span", "whole_word"):
        masker = plain_masker(MaskingConfig(scheme=scheme, seed=1))
        m = masker.mask(rows, np.arange(50), 0)
        assert len(m.unit_row) == 50 and (np.bincount(m.unit_row) == 1).all()
        assert (
            (m.unit_end - m.unit_start == 2).all() and np.isin(m.unit_start, [0, 5]).all() and (m.unit_words == 0).all()
        )
        assert set(m.unit_start.tolist()) == {0, 5}  # either word
        again = masker.mask(rows, np.arange(50), 0)
        assert np.array_equal(again.input_ids, m.input_ids) and np.array_equal(again.labels, m.labels)
