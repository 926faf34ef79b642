"""Packing rules: whole sentences, never over the limit, long sentences cut at word boundaries."""

import numpy as np

from pipeline.elements import TokenizedDocument
from pipeline.write.packing import pack_doc_sentences, pack_full_sentences, pack_ranges


def doc(sentence_lengths, word_every=1, doc_id="d", spans=None, labels=None):
    n = sum(sentence_lengths)
    ss = np.zeros(n, bool)
    ss[np.cumsum([0] + list(sentence_lengths[:-1]))] = True
    ws = np.zeros(n, bool)
    ws[::word_every] = True
    ws |= ss
    return TokenizedDocument(
        doc_id, "f", 1, 0, np.arange(n, dtype=np.uint16) % 50 + 5, ws, ss, spans=spans or {}, span_labels=labels or {}
    )


def test_whole_sentences_fill_rows_greedily():
    ranges, cut = pack_ranges(np.array([0, 4, 7, 9]), 12, np.ones(12, bool), limit=6)
    assert ranges == [(0, 4), (4, 9), (9, 12)] and cut == 0


def test_long_sentence_starts_a_row_and_is_cut_at_word_starts():
    ws = np.zeros(20, bool)
    ws[[0, 2, 3, 7, 9, 14, 18]] = True
    ranges, cut = pack_ranges(np.array([0, 2]), 20, ws, limit=6)
    # sentence [0, 2) stays alone; sentence [2, 20) is cut, each time at the last word start within 6 tokens
    assert ranges == [(0, 2), (2, 7), (7, 9), (9, 14), (14, 20)]
    assert cut == 1
    assert all(e - s <= 6 for s, e in ranges)
    assert all(ws[s] for s, _ in ranges)


def test_a_word_longer_than_a_row_is_cut_between_tokens():
    ws = np.zeros(10, bool)
    ws[0] = True
    ranges, _ = pack_ranges(np.array([0]), 10, ws, limit=4)
    assert ranges == [(0, 4), (4, 8), (8, 10)]


def test_doc_rows_partition_the_document_and_keep_sequence_numbers():
    d = doc([5, 9, 3, 2, 8], word_every=2)
    rows, stats = pack_doc_sentences(d, limit=8)
    assert np.array_equal(np.concatenate([r.ids for r in rows]), d.ids)
    assert [r.seq_index for r in rows] == list(range(len(rows)))
    assert all(1 <= len(r.ids) <= 8 for r in rows)
    assert stats["sentences_cut"] == 1


def test_spans_cut_by_a_row_boundary_are_dropped_and_counted():
    spans = {"entities": np.array([[0, 2], [3, 7], [8, 10]], np.int32)}
    d = doc([5, 5], spans=spans, labels={"entities": ["PERSON", "ORG", "GPE"]})
    rows, stats = pack_doc_sentences(d, limit=5)
    assert [r.spans["entities"].tolist() for r in rows] == [[[0, 2]], [[3, 5]]]
    assert [r.span_labels["entities"] for r in rows] == [["PERSON"], ["GPE"]]
    assert stats["dropped"] == {"entities": 1}


def test_full_sentences_cross_documents_with_a_separator_never_at_a_row_edge():
    docs = [doc([3, 3], doc_id="a"), doc([2], doc_id="b"), doc([4], doc_id="c")]
    rows, _ = pack_full_sentences(docs, limit=7, separator_id=3)
    flat = [r.ids.tolist() for r in rows]
    assert [r.doc_id for r in rows] == ["a", "b"]
    assert flat[0] == docs[0].ids.tolist()  # [a a a a a a] + sep would end the row: dropped
    assert flat[1] == docs[1].ids.tolist() + [3] + docs[2].ids.tolist()
    assert all(r.ids[0] != 3 and r.ids[-1] != 3 for r in rows)
    assert [r.seq_index for r in rows] == [0, 1]


def _reference_pack_ranges(sentence_starts, n_tokens, word_start, limit):
    """The packing rule one sentence at a time (the loop pack_ranges replaced), for comparison."""
    from pipeline.write.packing import _cut_long

    if n_tokens == 0:
        return [], 0
    bounds = np.asarray(sentence_starts, dtype=np.int64)
    if bounds.size == 0 or bounds[0] != 0:
        bounds = np.concatenate(([0], bounds))
    ends = np.append(bounds[1:], n_tokens)
    rows, cut, row_start, row_end = [], 0, 0, 0
    for s, e in zip(bounds.tolist(), ends.tolist()):
        if e - s > limit:
            cut += 1
            if row_end > row_start:
                rows.append((row_start, row_end))
            pieces = _cut_long(s, e, word_start, limit)
            rows.extend(pieces[:-1])
            row_start, row_end = pieces[-1]
        elif e - row_start > limit:
            rows.append((row_start, row_end))
            row_start, row_end = s, e
        else:
            row_end = e
    if row_end > row_start:
        rows.append((row_start, row_end))
    return rows, cut


def test_pack_ranges_equals_the_sentence_by_sentence_rule_on_random_documents():
    rng = np.random.default_rng(0)
    compared = long_cases = 0
    for _ in range(3000):
        limit = int(rng.integers(1, 40))
        lengths = rng.integers(1, 3 * limit + 2, size=int(rng.integers(0, 30)))
        n = int(lengths.sum())
        starts = np.cumsum(np.concatenate(([0], lengths[:-1]))) if len(lengths) else np.zeros(0, np.int64)
        if len(starts) and rng.random() < 0.3:
            starts = starts[1:]  # the first sentence start may be missing
        ws = rng.random(n) < rng.random()
        expected = _reference_pack_ranges(starts, n, ws, limit)
        assert pack_ranges(starts, n, ws, limit) == expected, (limit, lengths.tolist())
        compared += 1
        long_cases += expected[1] > 0
    assert compared == 3000 and long_cases > 500


def test_a_word_longer_than_a_row_starts_its_own_row_and_its_continuation_rows_are_counted():
    """Format 2.0: the row before the long word ends at its start; the word fills whole rows; the row holding its
    rest goes on with the words after it. Rows starting inside the word are counted (manifest counts)."""
    ws = np.zeros(14, bool)
    ws[[0, 2, 11, 12]] = True  # words of 2, 9, 1 and 2 tokens in one sentence
    d = TokenizedDocument("d", "f", 1, 0, np.arange(14, dtype=np.uint16) + 5, ws, ws & (np.arange(14) == 0))
    rows, stats = pack_doc_sentences(d, limit=4)
    assert [(r.ids[0] - 5, len(r.ids)) for r in rows] == [(0, 2), (2, 4), (6, 4), (10, 4)]
    assert [bool(r.word_start[0]) for r in rows] == [True, True, False, False]
    assert not any(r.sentence_start[0] for r in rows[2:])
    assert (stats["continuation_rows"], stats["long_words"]) == (2, 1)
    # FULL-SENTENCES: the same word after another document; the separator never starts or ends a row
    other = TokenizedDocument(
        "c", "f", 0, 0, np.array([1, 2, 3], np.uint16), np.ones(3, bool), np.eye(1, 3, dtype=bool)[0]
    )
    rows, stats = pack_full_sentences([other, d], limit=4, separator_id=99)
    assert [r.word_start[0] for r in rows].count(False) == stats["continuation_rows"] == 2 and stats["long_words"] == 1
    assert np.array_equal(np.concatenate([r.ids for r in rows if r.doc_id == "d"]), d.ids)


def test_a_candidate_over_a_long_word_is_dropped_and_the_ones_beside_it_stay_in_their_rows():
    ws = np.zeros(14, bool)
    ws[[0, 2, 11, 12]] = True  # words of 2, 9, 1 and 2 tokens in one sentence: rows [0,2) [2,6) [6,10) [10,14)
    spans = {"ngrams": np.array([[0, 2], [2, 12], [11, 14]], np.int32)}
    d = TokenizedDocument(
        "d", "f", 1, 0, np.arange(14, dtype=np.uint16) + 5, ws, ws & (np.arange(14) == 0), spans=spans
    )
    rows, stats = pack_doc_sentences(d, limit=4)
    assert [r.spans["ngrams"].tolist() for r in rows] == [[[0, 2]], [], [], [[1, 4]]]  # in the continuation row
    assert stats["dropped"] == {"ngrams": 1} and stats["continuation_rows"] == 2
