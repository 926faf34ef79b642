"""NSP pairs without a length leak (issue 25, item 2; trainer/data/segments.py): on WikiText-2 and the Wikipedia
sample, a classifier that sees only lengths cannot tell IsNext from NotNext (at most 52% accuracy), labels are
50/50, and 10% of the pairs have BERT's short target length; BERT's front/back truncation of the longer segment."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import WIKIPEDIA_SAMPLE, build

from tests.support.artifact_rows import all_rows
from trainer.data import segments
from trainer.masking import Rows


def _pairs(rows: Rows, seed: int, epochs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(A length, B length, label) of every row's pair in ``epochs`` epochs, the candidates drawn from all rows
    (the evaluation split's way), through segments.build_pairs."""
    a_all, b_all, lab_all, stats = [], [], [], {}
    R = rows.num_rows
    for epoch in range(epochs):
        draws = segments.pair_draws(seed, epoch, np.arange(R))
        cand = segments.other_positions(draws, np.zeros(R, np.int64), np.full(R, R, np.int64)).ravel()
        others = Rows.from_lists(
            [rows.input_ids[rows.offsets[j] : rows.offsets[j + 1]] for j in cand],
            [rows.word_start[rows.offsets[j] : rows.offsets[j + 1]] for j in cand],
        )
        others.sentence_start = np.concatenate(
            [rows.sentence_start[rows.offsets[j] : rows.offsets[j + 1]] for j in cand]
        )
        others.doc_id = rows.doc_id[cand]
        pairs, a_len, label = segments.build_pairs(
            rows, others, draws, max_seq_len=512, short_seq_prob=0.1, sep_id=3, stats=stats
        )
        a_all.append(a_len)
        b_all.append(np.diff(pairs.offsets) - a_len - 1)
        lab_all.append(label)
    return np.concatenate(a_all), np.concatenate(b_all), np.concatenate(lab_all), stats


def best_threshold_accuracy(x: np.ndarray, y: np.ndarray) -> float:
    """The best accuracy of any rule "label = (x > t)" or "label = (x <= t)" over all thresholds t."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    ones_left = np.concatenate([[0], np.cumsum(ys)])  # label-1 count among the first k
    k = np.arange(len(xs) + 1)
    valid = np.concatenate([[True], xs[1:] != xs[:-1], [True]])  # cut only between different values
    acc = (k - ones_left + (ys.sum() - ones_left)) / len(xs)  # first k say 0, the rest say 1
    acc = np.maximum(acc, 1 - acc)
    return float(acc[valid].max())


def _check_no_length_leak(rows: Rows) -> dict:
    epochs = -(-15_000 // rows.num_rows)  # >= 15,000 pairs: the best of all thresholds is then within ~1% of 50%
    a, b, label, stats = _pairs(rows, seed=11, epochs=epochs)
    n = len(label)
    print(
        f"{n} pairs, {stats}, mean length IsNext {(a + b)[label == 0].mean():.1f}, NotNext {(a + b)[label == 1].mean():.1f}"
    )
    assert n >= 15_000 and abs(label.mean() - 0.5) <= 0.02, (n, label.mean())
    total = a + b
    for name, x in (("total", total), ("A", a), ("B", b), ("B - A", b - a)):
        acc = best_threshold_accuracy(x, label)
        print(f"  length-only classifier on {name}: {100 * acc:.2f}%")
        assert acc <= 0.52, (name, acc)
    assert (a >= 1).all() and (b >= 1).all() and (total <= 509).all()
    short = (total < np.minimum(np.tile(np.diff(rows.offsets), epochs), 509)).mean()
    assert 0.05 <= short <= 0.15, short  # BERT's 10% short target lengths
    assert stats["pairs"] == n and stats["not_next"] == label.sum()
    return stats


def test_no_length_leak_on_wikitext2(wikitext2_artifact):
    stats = _check_no_length_leak(all_rows(wikitext2_artifact))
    assert stats["no_other_document"] <= stats["pairs"] // 1000  # counted (three candidates of one document)


@pytest.fixture(scope="module")
def wikipedia_artifact(tmp_path_factory) -> Path:
    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE}")
    import zstandard

    tmp = tmp_path_factory.mktemp("wikipedia_nsp")
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(f))
        lines = list(itertools.islice(reader, 400))
    assert all(json.loads(line)["text"] for line in lines)
    (tmp / "pages.jsonl").write_bytes(b"".join(lines))
    build(tmp / "pages.jsonl", tmp / "artifact", "--train-tokenizer", "--vocab-size", "8000", "--num-shards", "2")
    return tmp / "artifact"


def test_no_length_leak_on_the_wikipedia_sample(wikipedia_artifact):
    _check_no_length_leak(all_rows(wikipedia_artifact))


def test_truncation_is_berts_longer_segment_front_or_back():
    assert segments.truncate_pair(10, 4, 14, 0.5, 0.5) == (0, 0, 0, 0)
    cuts = [segments.truncate_pair(10, 4, 8, u, 0.5) for u in np.linspace(0.001, 0.999, 200)]
    assert all(fa + ba == 6 and fb == bb == 0 for fa, ba, fb, bb in cuts)  # only the longer one loses tokens
    fronts = [fa for fa, *_ in cuts]
    assert fronts == sorted(fronts) and min(fronts) <= 1 and max(fronts) >= 5  # Binomial(6, 1/2) by its CDF
    assert abs(np.mean(fronts) - 3) < 0.3
    fa, ba, fb, bb = segments.truncate_pair(7, 7, 10, 0.5, 0.5)
    assert fa + ba == 2 and fb + bb == 2  # ties go to B first, then they alternate
