"""Sentence-by-sentence encoding without offsets gives exactly what the whole-document path gives."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from pipeline.elements import Document, Source, TokenizedDocument
from pipeline.read.clean import clean_text
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer
from pipeline.tokenize.encodings import Encoded
from pipeline.tokenize.sentence_encoding import CUT_MARKER, SentenceEncoder
from pipeline.tokenize.sentences import sentence_spans
from pipeline.tokenize.tokenized_documents import _TokenizeFn
from tests.conftest import WIKIPEDIA_SAMPLE, wikitext2

FRAGMENTS = [
    "The",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "Dr.",
    "Smith",
    "e.g.",
    "U.S.",
    "3.14",
    "1,000",
    "naïve",
    "café",
    "e\u0301t\u00e9",
    "Ångström",
    "straße",
    "東京",
    "タワー",
    "中文字",
    "word-with-hyphens",
    "(parenthetical)",
    '"quoted."',
    "'single.'",
    "[UNK]",
    "<unk>",
    "[MASK]",
    "[SEP]",
    "[CLS]",
    "[PAD]",
    "#hash",
    "##tag",
    "@user",
    "http://x.y/z",
    "a" * 120,
    "Unbreakablewordwithoutanyspace",
    "x\u200by",
    "soft\u00adhyphen",
    "emoji\U0001f600",
    "\u0301lead",
]
ENDINGS = [
    ". ",
    "! ",
    "? ",
    ".\n",
    ".\n\n",
    ". \n \n",
    ".\t",
    ".\u00a0",
    ".\u3000",
    ".\u2028",
    ".\u2029",
    ".) ",
    '." ',
    ".Next ",
    "... ",
    " ",
    " ",
    " ",
    ", ",
    "; ",
    "\n",
    " \x01 ",
    "\r\n",
    ".\x0b",
    ".\x85",
    ".\u202f",
    ".\u2003",
]


def generated_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = [rng.choice(["", " ", "\n", "\u00a0", "\u3000 "])]
        for _ in range(rng.randint(3, 60)):
            parts.append(rng.choice(FRAGMENTS))
            parts.append(rng.choice(ENDINGS))
        text, _ = clean_text("".join(parts))  # as the readers give it
        if text.strip():
            texts.append(text)
    return texts


def _outputs(spec, docs: list[Document], sentence_path: bool) -> list:
    fn = _TokenizeFn(spec, "int32")
    fn.setup()
    if not sentence_path:
        fn._sentences = None
    else:
        assert fn._sentences is not None
    out = []
    for i in range(0, len(docs), 32):
        out.extend(fn.process(docs[i : i + 32]))
    out.extend(o.value for o in fn.finish_bundle())  # the last batch is emitted when the bundle ends
    fn.teardown()
    return out


def _assert_same(spec, docs: list[Document]) -> int:
    """Both paths give identical documents; returns how many documents the sentence path took."""
    fast, whole = _outputs(spec, docs, True), _outputs(spec, docs, False)
    assert len(fast) == len(whole) == len(docs)
    for a, b in zip(fast, whole):
        assert type(a) is type(b)
        if isinstance(a, TokenizedDocument):
            assert a.doc_id == b.doc_id
            assert a.ids.dtype == b.ids.dtype and a.ids.tobytes() == b.ids.tobytes(), a.doc_id
            assert a.word_start.tolist() == b.word_start.tolist(), a.doc_id
            assert a.sentence_start.tolist() == b.sentence_start.tolist(), a.doc_id
    encoder = SentenceEncoder.for_tokenizer(spec.load_for_text())
    return sum(encoder.applies(d.text, sentence_spans(d.text)) for d in docs)


def _docs(texts: list[str]) -> list[Document]:
    return [Document(f"d{i}", t, Source("mem", i + 1, 0)) for i, t in enumerate(texts)]


@pytest.mark.parametrize("lowercase", [False, True])
def test_generated_edge_cases_are_identical_on_both_paths(lowercase):
    texts = generated_texts(400, seed=7)
    spec = tokenizer.make_spec(tokenizer.train(texts, vocab_size=600, lowercase=lowercase), "trained")
    took = _assert_same(spec, _docs(texts))
    # both paths were exercised: most documents qualify, the ones with unsafe cuts fall back
    assert 0 < took < len(texts), took


def test_vocab_txt_tokenizer_with_unknown_words(tmp_path):
    texts = generated_texts(150, seed=11)
    vocab = list(tokenizer.SPECIAL_TOKENS.values()) + [
        "the",
        "quick",
        "brown",
        ".",
        ",",
        "##s",
        "##e",
        "a",
        "##a",
        "#",
        "(",
        ")",
    ]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    spec = tokenizer.make_spec(tokenizer.from_vocab(str(path)), "vocab")
    assert _assert_same(spec, _docs(texts)) > 0


def test_real_wikitext_and_wikipedia_are_identical_on_both_paths():
    opts = ReaderOptions(input_format="wikitext")
    docs = [r for r in read_file(str(wikitext2("valid")), opts) if isinstance(r, Document)]
    if WIKIPEDIA_SAMPLE.exists():
        wiki = ReaderOptions(input_format="jsonl")
        docs += list(
            itertools.islice((r for r in read_file(str(WIKIPEDIA_SAMPLE), wiki) if isinstance(r, Document)), 300)
        )
    spec = tokenizer.make_spec(tokenizer.train([d.text for d in docs], vocab_size=4000), "trained")
    took = _assert_same(spec, docs)
    assert len(docs) > 50 and took >= 0.9 * len(docs), (took, len(docs))


def test_tokenizers_outside_the_proof_keep_the_whole_document_path():
    base = tokenizer.train(["Some text. More text here."] * 10, vocab_size=100)
    assert SentenceEncoder.for_tokenizer(base) is not None
    other = Tokenizer.from_str(base.to_str())
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    assert SentenceEncoder.for_tokenizer(other) is None
    spaced = Tokenizer.from_str(base.to_str())
    spaced.add_tokens(["New York"])  # an added token could straddle a cut between sentences
    assert SentenceEncoder.for_tokenizer(spaced) is None
    assert SentenceEncoder.for_tokenizer(Tokenizer(models.BPE())) is None


def test_cuts_outside_safe_whitespace_are_refused():
    text = "One sentence.\u2028Another one. A third."
    sent = sentence_spans(text)
    enc = SentenceEncoder.for_tokenizer(tokenizer.train([text] * 5, vocab_size=100))
    assert len(sent) >= 2 and not enc.applies(text, sent)
    text = "First one.  Second one.\n\nThird."
    assert enc.applies(text, sentence_spans(text))
    assert not enc.applies(text, [(0, 5), (5, len(text))])  # a cut inside a word
    assert not enc.applies(text, [])
    assert enc.applies('Ha?!"Yes.', [(0, 3), (3, 10)])  # touching, punctuation on both sides
    assert not enc.applies("See [UNK] here.", [(0, 6), (6, 15)])  # a cut inside an added token


def _stripped_pieces(text: str, cuts: list[int]) -> list[tuple[int, int]]:
    """``text`` cut at ``cuts``, each piece without its leading and trailing whitespace (as Punkt gives spans)."""
    out = []
    for a, b in zip([0] + cuts, cuts + [len(text)]):
        piece = text[a:b]
        lead = len(piece) - len(piece.lstrip())
        if piece.strip():
            out.append((a + lead, a + len(piece.rstrip())))
    return out


def test_random_cuts_are_accepted_only_where_the_tokens_agree():
    """Property test of the rule itself: arbitrary cuts, accepted ones must reproduce the whole-text encoding."""
    texts = generated_texts(300, seed=3)
    tok = tokenizer.make_spec(tokenizer.train(texts, vocab_size=600), "trained").load_for_text()
    encoder = SentenceEncoder.for_tokenizer(tok)
    rng = random.Random(5)
    accepted = refused_and_different = 0
    for text in texts:
        whole = Encoded.of(tok.encode(text, add_special_tokens=False))
        whole_starts = (
            np.concatenate([[True], whole.words[1:] != whole.words[:-1]]) if len(whole.ids) else np.zeros(0, bool)
        )
        near = [i for i in range(1, len(text)) if not (text[i - 1].isalnum() and text[i].isalnum())]
        for _ in range(6):
            # mostly where Punkt could cut (next to spaces or punctuation), sometimes anywhere
            pool = near if near and rng.random() < 0.8 else range(1, len(text))
            cuts = sorted(set(rng.choices(pool, k=rng.randint(1, 3))))
            sent = _stripped_pieces(text, cuts)
            if not sent:
                continue
            [(ids, word_start, _)] = encoder.encode([text], [sent])
            same = ids.tolist() == whole.ids.tolist() and word_start.tolist() == whole_starts.tolist()
            if encoder.applies(text, sent):
                assert same, (text, sent)
                accepted += 1
            elif not same:
                refused_and_different += 1
    # the rule accepted real cases, and what it refused includes cuts that really change the tokens
    assert accepted > 50 and refused_and_different > 50, (accepted, refused_and_different)


def test_a_text_holding_the_cut_marker_takes_the_whole_document_path():
    texts = ["First one. Second" + CUT_MARKER + " one. Third.", "Plain text. More of it here."]
    spec = tokenizer.make_spec(tokenizer.train(texts * 5, vocab_size=100), "trained")
    encoder = SentenceEncoder.for_tokenizer(spec.load_for_text(), cache_bytes=0)
    sent = sentence_spans(texts[0])
    assert len(sent) == 3 and not encoder.applies(texts[0], sent)
    with pytest.raises(ValueError):  # its markers are not its cuts
        encoder.encode([texts[0]], [sent])
    # the chunk cache cuts the marker at its hyphens, so no chunk holds it and its ids are the text's own
    [(ids, _, _)] = SentenceEncoder.for_tokenizer(spec.load_for_text()).encode([texts[0]], [sent])
    assert ids.tolist() == spec.load_for_text().encode(texts[0], add_special_tokens=False).ids
    assert _assert_same(spec, _docs(texts)) == 1  # only the second took the sentence path; both paths agree


def test_more_encoder_threads_give_the_same_documents_in_the_same_order():
    texts = generated_texts(300, seed=13)
    spec = tokenizer.make_spec(tokenizer.train(texts, vocab_size=600), "trained")
    docs = _docs(texts)

    def run(threads: int) -> list:
        fn = _TokenizeFn(spec, "int32", encoder_threads=threads)
        fn.setup()
        out = []
        for i in range(0, len(docs), 16):
            out.extend(fn.process(docs[i : i + 16]))
        out.extend(o.value for o in fn.finish_bundle())
        fn.teardown()
        return out

    one, three = run(1), run(3)
    assert len(one) == len(three) == len(docs)
    for a, b in zip(one, three):
        assert (
            a.doc_id == b.doc_id
            and a.ids.tobytes() == b.ids.tobytes()
            and a.sentence_start.tobytes() == b.sentence_start.tobytes()
        )
