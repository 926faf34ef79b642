"""The trainer on continuation rows (format 2.0: a word longer than a row goes on in rows whose ``word_start[0]`` is
false): every masking scheme takes the fragment a continuation row starts with as one word, two-segment inputs split
such rows at word starts, and a run on such an artifact trains. The artifact: the embedded demo corpus plus real long
words, rows of 6 tokens (--max-seq-len 8), so that always-available text has dozens of continuation rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from schemas.artifact import Artifact
from tests.conftest import DEMO_CORPUS, build
from tests.pipeline.test_long_words import LONG_WORD_BUILD, LONG_WORDS_TEXT
from tests.support.artifact_rows import all_rows
from tests.support.pretrain_runs import PRETRAIN, ds_config, metric, run
from trainer.data import segments
from trainer.masking import IGNORE_INDEX, SCHEMES, Masker, MaskingConfig, Rows

MAX_SEQ_LEN = 8


@pytest.fixture(scope="module")
def long_word_artifact(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("long-word-rows")
    corpus = root / "corpus.jsonl"
    extra = json.dumps({"id": "long-words", "text": LONG_WORDS_TEXT}) + "\n"
    corpus.write_text(DEMO_CORPUS.read_text(encoding="utf-8") + extra, encoding="utf-8")
    out = root / "artifact"
    m = build(corpus, out, *LONG_WORD_BUILD, "--num-shards", "3")
    assert m["counts"]["continuation_rows"] > 20
    return out


def _continuations(rows: Rows) -> tuple[list[int], list[int]]:
    """The continuation rows' sample ids, and the length of the fragment of a word each starts with."""
    ids, fragments = [], []
    for i in range(rows.num_rows):
        ws = rows.word_start[rows.offsets[i] : rows.offsets[i + 1]]
        if not ws[0]:
            ids.append(i)
            later = np.flatnonzero(ws[1:])
            fragments.append(int(later[0]) + 1 if len(later) else len(ws))
    return ids, fragments


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_masks_a_continuation_rows_fragment_as_one_word(long_word_artifact, scheme):
    """No unit starts inside the fragment; a unit starting at the row's start covers the whole fragment, or is the
    documented partial word of a row where no whole word fits its budget (``fill_empty_rows``: unit_words 0)."""
    art = Artifact.open(str(long_word_artifact))
    rows = all_rows(long_word_artifact)
    sample_ids, fragments = _continuations(rows)
    part = Rows.from_lists(
        [rows.input_ids[rows.offsets[i] : rows.offsets[i + 1]] for i in sample_ids],
        [rows.word_start[rows.offsets[i] : rows.offsets[i + 1]] for i in sample_ids],
        [[] for _ in sample_ids] if scheme in ("entity", "noun_phrase", "ngram") else None,
    )
    masker = Masker.from_artifact(MaskingConfig(scheme=scheme, seed=3), art, max_seq_len=MAX_SEQ_LEN)
    whole = partial = 0
    for epoch in range(20):
        m = masker.mask(part, np.array(sample_ids), epoch)
        assert m.word_start[part.offsets[:-1]].all()  # the fragment is the row's first word
        for r, f in enumerate(fragments):
            sel = m.unit_row == r
            starts, ends, words = m.unit_start[sel], m.unit_end[sel], m.unit_words[sel]
            if scheme == "subword":  # BERT's token masking: units are single tokens, words do not matter
                assert (ends - starts == 1).all()
                continue
            assert not ((starts > 0) & (starts < f)).any()
            at_start = starts == 0
            assert ((ends[at_start] >= f) | (words[at_start] == 0)).all()
            whole += int((at_start & (ends >= f) & (words > 0)).sum())
            partial += int((at_start & (ends < f)).sum())
        assert (m.labels[m.labels != IGNORE_INDEX] >= 0).all()
    if scheme != "subword":
        assert whole > 20  # whole fragments were masked as words
    print(f"{scheme}: {whole} whole fragments, {partial} partial words masked in {len(sample_ids)} rows x 20 epochs")


def test_two_segments_split_continuation_rows_at_word_starts(long_word_artifact):
    """--segments 2 (NSP): a continuation row has no sentence start at element 0; A and B each begin a word."""
    rows = all_rows(long_word_artifact)
    sample_ids, _ = _continuations(rows)
    R = rows.num_rows
    stats: dict[str, int] = {}
    checked = 0
    for epoch in range(3):
        draws = segments.pair_draws(5, epoch, np.arange(R))
        cand = segments.other_positions(draws, np.zeros(R, np.int64), np.full(R, R, np.int64)).ravel()
        others = Rows.from_lists(
            [rows.input_ids[rows.offsets[j] : rows.offsets[j + 1]] for j in cand],
            [rows.word_start[rows.offsets[j] : rows.offsets[j + 1]] for j in cand],
        )
        others.sentence_start = np.concatenate(
            [rows.sentence_start[rows.offsets[j] : rows.offsets[j + 1]] for j in cand]
        )
        others.doc_id = rows.doc_id[cand]
        pairs, a_len, _ = segments.build_pairs(
            rows, others, draws, max_seq_len=MAX_SEQ_LEN, short_seq_prob=0.1, sep_id=3, stats=stats
        )
        for i in sample_ids:
            ws = pairs.word_start[pairs.offsets[i] : pairs.offsets[i + 1]]
            assert ws[0] and ws[a_len[i]] and ws[a_len[i] + 1]  # A, [SEP], B each start a word
            assert pairs.input_ids[pairs.offsets[i] + a_len[i]] == 3
            checked += 1
    assert checked > 60 and stats["one_sentence"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("segments_count", ["1", "2"])
def test_an_artifact_with_continuation_rows_trains(long_word_artifact, tmp_path, segments_count):
    """A few optimizer steps of the tiny model on rows of 6 tokens, one python process (no launcher)."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        str(PRETRAIN),
        "--deepspeed_config",
        str(ds_config(tmp_path, 1)),
        "--data",
        str(long_word_artifact),
        "--output-dir",
        str(out),
        "--max-seq-len",
        str(MAX_SEQ_LEN),
        "--segments",
        segments_count,
        "--scheme",
        "whole_word",
        "--preset",
        "tiny",
        "--max-steps",
        "3",
        "--warmup-steps",
        "1",
        "--log-every",
        "1",
        "--eval-every",
        "3",
        "--eval-batches",
        "1",
        "--no-progress",
        "--num-workers",
        "0",
        "--seed",
        "7",
    ]
    proc = run(cmd)
    assert "done: 3 steps" in proc.stdout
    loss = metric(out, "train_loss")
    assert sorted(loss) == [1, 2, 3] and all(np.isfinite(v) for v in loss.values())


def test_the_loader_reads_1x_artifacts_and_refuses_a_continuation_row_in_one(tmp_path):
    from schemas import format as fmt
    from tests.trainer.test_trainer_data import MASK, cfg, synthetic_rows, take, write_artifact
    from trainer.data import build_train_loader

    rows = synthetic_rows(40)
    plain = write_artifact(tmp_path / "plain-1.0", [rows[:20], rows[20:]], version="1.0")
    assert len(take(build_train_loader(cfg(plain), MASK)[0], 5)) == 5  # 1.x artifacts stay readable
    rows[5]["word_start"][0] = False  # a continuation row (format 2.0) in the training shard
    ok = write_artifact(tmp_path / "2.0", [rows[:20], rows[20:]])
    assert len(take(build_train_loader(cfg(ok), MASK)[0], 5)) == 5
    old = write_artifact(tmp_path / "1.0", [rows[:20], rows[20:]], version="1.0")
    with pytest.raises(fmt.FormatError, match=r"starts inside a word \(word_start\[0\] false\), which a format 1.0"):
        take(build_train_loader(cfg(old), MASK)[0], 5)
