"""SpEx-BERT label spans and decoding for every task; Span Fine-tuning segmentation of real sentences with a
WikiText-2 n-gram dictionary, span padding/cutting, and the hierarchical CNN's shapes and masking."""

from __future__ import annotations

import pytest
import torch
from conftest import SHARED_DATA, wikitext2
from tokenizers import Tokenizer

from pipeline import build_ngram_dictionary
from schemas.segmenter import Segmenter
from trainer.config import ModelConfig
from trainer.finetuning import span_ft, spex
from trainer.finetuning.encoding import ModelTokenizer, encode
from trainer.finetuning.features import collate, glue_feature
from trainer.finetuning.glue import Example, read_tsv
from trainer.finetuning.heads import FineTuneModel
from trainer.finetuning.tasks import TASKS, buckets, get_task
from trainer.model import SpanBert

GLUE_TASKS = [t for t in TASKS.values() if t.kind != "qa"]
RTE_DEV = SHARED_DATA / "finetune" / "glue_rte" / "dev.tsv"


@pytest.fixture(scope="module")
def tokenizer(demo_artifact):
    return ModelTokenizer.of(Tokenizer.from_file(str(demo_artifact / "tokenizer.json")))


@pytest.fixture(scope="module")
def wikitext2_dictionary(tmp_path_factory):
    out = tmp_path_factory.mktemp("ngramdict") / "dict"
    build_ngram_dictionary.run(["--input", str(wikitext2("valid")), "--output", str(out)])
    return Segmenter.from_dictionary(str(out))


def rte_dev():
    if not RTE_DEV.exists():
        pytest.skip(f"real data not available: {RTE_DEV}")
    return read_tsv(get_task("rte"), str(RTE_DEV), "dev")[0]


# -- SpEx-BERT ---------------------------------------------------------------------------------------
def test_choices_text_as_the_paper_writes_it():
    assert get_task("rte").choices == "entailment or not?"
    assert get_task("sst2").choices == "negative or positive?"
    stsb = get_task("stsb").choices
    assert stsb.startswith("0.0 0.25 0.5 0.75 1.0 1.25") and stsb.endswith("4.75 5.0") and len(stsb.split()) == 21
    assert spex.gold_index(get_task("stsb"), 3.13) == 13 and buckets(get_task("stsb"))[13] == 3.25
    assert spex.gold_index(get_task("stsb"), 0.1) == 0 and spex.gold_index(get_task("stsb"), 5.0) == 20


@pytest.mark.parametrize("task", GLUE_TASKS, ids=lambda t: t.name)
def test_spex_gold_span_is_the_labels_words_and_decodes_back(task, tokenizer):
    text_a = "The new rights are nice enough, say the people of the city. " * 12  # long: must be truncated
    text_b = "The rights recently put in place are nowhere near enough." if task.is_pair else None
    _, char_spans = spex.choice_char_spans(task)
    checked = 0
    for choice in range(len(char_spans)):
        label = choice if task.kind == "classification" else buckets(task)[choice]
        f = spex.spex_feature(task, tokenizer, text_a, text_b, label, max_seq_len=128)
        assert len(f["input_ids"]) == 128  # truncated to fit, the choices kept whole
        s, e = f["start_positions"], f["end_positions"]
        words = task.label_words[choice] if task.kind == "classification" else task.choices.split()[choice]
        assert tokenizer.tokenizer.decode(f["input_ids"][s : e + 1]).replace(" ", "") == words.replace(" ", "")
        assert all(f["span_mask"][i] for i in range(s, e + 1)) and f["span_mask"][0] == 0
        sep = f["input_ids"].index(tokenizer.sep_id)
        assert sum(f["span_mask"]) == sep - 1  # the source text is everything between [CLS] and the first [SEP]
        if not task.is_pair:
            assert tokenizer.tokenizer.decode(f["input_ids"][1:sep]) == tokenizer.tokenizer.decode(
                encode(tokenizer, task.choices).ids
            )
        n = len(f["input_ids"])
        start, end = [0.0] * n, [0.0] * n
        start[s], end[e] = 3.0, 3.0
        decoded = spex.decode(f, start, end)
        assert decoded["choice"] == choice and decoded["free_is_choice"]
        assert spex.value_of(task, decoded["choice"]) == label
        checked += 1
    assert checked == task.num_labels if task.kind == "classification" else checked == 21


# -- Span Fine-tuning segmentation --------------------------------------------------------------------
def test_real_sentences_segmented_by_the_wikitext2_dictionary(tokenizer, wikitext2_dictionary):
    ex = rte_dev()[0]
    assert ex.text_a.startswith("Dana Reeve, the widow of the actor Christopher Reeve")
    a = encode(tokenizer, ex.text_a)
    words = [w for w, _, _ in a.words()]
    multi = [" ".join(words[s:e]) for s, e in wikitext2_dictionary.segment(words) if e - s > 1]
    assert multi == [", the", "of the", ", has", ", according to"]
    f = glue_feature(get_task("rte"), "span-ft", tokenizer, ex, max_seq_len=128, segmenter=wikitext2_dictionary)
    spans = [[p for p, m in zip(idx, mask) if m] for idx, mask in zip(f["span_index"], f["span_token_mask"])]
    a_spans = [s for s in spans[:16] if s]
    assert len(a_spans) == 16 < f["spans_per_text"][0] and len(spans) == 32  # r = 16 per sentence: A's rest is cut
    flat = [p for s in a_spans for p in s]
    assert flat == list(range(1, len(flat) + 1))  # in order, contiguous, each token once, [CLS] in none
    b_start = f["token_type_ids"].index(1)
    assert [s for s in spans[16:] if s][0][0] == b_start  # B's spans start at B: the hypothesis is seen
    real = a_spans
    texts = [tokenizer.tokenizer.decode([f["input_ids"][p] for p in s]) for s in real]
    assert texts[:6] == ["Dana", "Reeve", ", the", "widow", "of the", "actor"]
    checked = 0
    for ex in rte_dev()[:40]:
        f = glue_feature(
            get_task("rte"),
            "span-ft",
            tokenizer,
            ex,
            max_seq_len=128,
            segmenter=wikitext2_dictionary,
            max_spans=256,
            max_span_len=64,
        )
        sep = [i for i, t in enumerate(f["input_ids"]) if t == tokenizer.sep_id]
        flat = [p for idx, mask in zip(f["span_index"], f["span_token_mask"]) for p, m in zip(idx, mask) if m]
        assert flat == [p for p in range(1, len(f["input_ids"])) if p not in sep]  # both texts, all tokens
        checked += 1
    assert checked == 40


def test_padding_cutting_and_random_segmentation():
    index, mask = span_ft.span_tensors([[(1, 3), (3, 10), (10, 11)]], max_spans=2, max_span_len=4)
    assert index == [[1, 2, 0, 0], [3, 4, 5, 6]] and mask == [[1, 1, 0, 0], [1, 1, 1, 1]]
    index, mask = span_ft.span_tensors([[(1, 2)]], max_spans=3, max_span_len=2)
    assert mask == [[1, 0], [0, 0], [0, 0]]
    # a pair: r per sentence, A's kept spans then B's, padding at the end
    index, mask = span_ft.span_tensors([[(1, 2), (2, 3), (3, 4)], [(5, 7)]], max_spans=2, max_span_len=2)
    assert index == [[1, 0], [2, 0], [5, 6], [0, 0]] and mask == [[1, 0], [1, 0], [1, 1], [0, 0]]
    tok_piece = span_ft.Piece("a b c d e f g", list(range(7)), [(2 * i, 2 * i + 1) for i in range(7)], list(range(7)))
    one = span_ft.segment_piece(tok_piece, 1, "random", rng=span_ft.random_for(1, "dev-2"))
    assert one == span_ft.segment_piece(tok_piece, 1, "random", rng=span_ft.random_for(1, "dev-2"))
    assert one[0][0] == 1 and one[-1][1] == 8 and all(a[1] == b[0] for a, b in zip(one, one[1:]))
    others = {
        tuple(span_ft.segment_piece(tok_piece, 1, "random", rng=span_ft.random_for(s, "dev-2"))) for s in range(20)
    }
    assert len(others) > 1


# -- the hierarchical CNN -----------------------------------------------------------------------------
def reference(cnn, hidden, spans):
    """Equations 1-2 on the real spans only, one sequence at a time."""
    out = []
    for b, seq_spans in enumerate(spans):
        vecs = []
        for s in seq_spans:
            x = hidden[b, s].T.unsqueeze(0)  # [1, H, len]
            vecs.append(torch.relu(cnn.conv1(x)).max(dim=2).values[0])
        c = torch.stack(vecs).T.unsqueeze(0)
        out.append(torch.relu(cnn.conv2(c)).max(dim=2).values[0])
    return torch.stack(out)


def test_cnn_shapes_and_padding_never_wins_the_max_pool():
    torch.manual_seed(0)
    H, T = 8, 12
    cnn = span_ft.HierarchicalCNN(H)
    spans = [[[1, 2], [3], [4, 5, 6]], [[1], [2, 3, 4, 5]]]
    index, mask = zip(
        *(span_ft.span_tensors([[(s[0], s[-1] + 1) for s in seq]], max_spans=4, max_span_len=3) for seq in spans)
    )
    index, mask = torch.tensor(index), torch.tensor(mask)
    hidden = torch.randn(2, T, H)
    out = cnn(hidden, index, mask)
    assert out.shape == (2, H)
    cut = [[s[:3] for s in seq] for seq in spans]  # l = 3 cuts [2, 3, 4, 5] to [2, 3, 4]
    torch.testing.assert_close(out, reference(cnn, hidden, cut))
    # Padding positions point at token 0 ([CLS]) and the unused tokens: huge values there change nothing.
    poisoned = hidden.clone()
    poisoned[:, 0] = 1e6
    poisoned[:, 7:] = 1e6
    poisoned[1, 5] = 1e6  # cut from the last span
    torch.testing.assert_close(cnn(poisoned, index, mask), out)
    # With ReLU outputs >= 0, a padding span set to large negative values would lose anyway; check the opposite:
    # an input without spans gives zeros, not -inf.
    empty = cnn(hidden, index, torch.zeros_like(mask))
    assert torch.equal(empty, torch.zeros(2, H))
    plain = span_ft.HierarchicalCNN(H, segmentation="none")
    token_mask = torch.zeros(2, T, dtype=torch.long)
    token_mask[:, 1:6] = 1
    base = plain(hidden, token_mask=token_mask)
    outside = hidden.clone()
    outside[token_mask == 0] = 1e6  # [CLS], [SEP], padding
    torch.testing.assert_close(plain(outside, token_mask=token_mask), base)
    assert base.shape == (2, H) and (base > 0).any()


def test_model_heads_outputs_and_extra_parameters(tokenizer, wikitext2_dictionary):
    cfg = ModelConfig.preset(
        "tiny", vocab_size=tokenizer.tokenizer.get_vocab_size(), hidden_dropout=0.0, attention_dropout=0.0
    )
    ex = [
        Example("a", "The widow of the actor has died.", "He had an accident.", 1),
        Example("b", "It rains in the city.", "It is dry.", 0),
    ]
    task = get_task("rte")
    for head in ("cls", "spex", "span-ft"):
        torch.manual_seed(0)
        model = FineTuneModel(SpanBert(cfg), head, num_labels=2)
        feats = [glue_feature(task, head, tokenizer, e, max_seq_len=64, segmenter=wikitext2_dictionary) for e in ex]
        batch = collate(feats, pad_id=cfg.pad_token_id)
        out = model(**batch)
        assert out["loss"].ndim == 0 and torch.isfinite(out["loss"])
        if head == "spex":
            assert out["start_logits"].shape == batch["input_ids"].shape
            assert (out["start_logits"][batch["span_mask"] == 0] <= -1e4).all()  # outside the source text
        else:
            assert out["logits"].shape == (2, 2)
    base = FineTuneModel(SpanBert(ModelConfig.preset("base", vocab_size=28996)), "span-ft")
    frac = base.head_parameters() / sum(p.numel() for p in base.encoder.parameters())
    assert 0.025 < frac < 0.04  # the paper: "only 3 percent of the total parameters"


def test_regression_and_single_sentence_inputs(tokenizer):
    cfg = ModelConfig.preset(
        "tiny", vocab_size=tokenizer.tokenizer.get_vocab_size(), hidden_dropout=0.0, attention_dropout=0.0
    )
    stsb = get_task("stsb")
    ex = [
        Example("a", "A woman is riding a horse.", "A man is playing a guitar.", 0.5),
        Example("b", "A man plays a guitar.", "A man is playing a guitar.", 4.6),
    ]
    for head in ("cls", "span-ft"):
        feats = [glue_feature(stsb, head, tokenizer, e, max_seq_len=64, segmentation="random") for e in ex]
        batch = collate(feats, pad_id=cfg.pad_token_id, regression=True)
        assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == pytest.approx([0.5, 4.6])
        model = FineTuneModel(SpanBert(cfg), head, regression=True, segmentation="random")
        out = model(**batch)
        assert out["logits"].shape == (2, 1)
        assert out["loss"].item() == pytest.approx(((out["logits"].squeeze(-1) - batch["labels"]) ** 2).mean().item())
    f = spex.spex_feature(stsb, tokenizer, ex[1].text_a, ex[1].text_b, 4.6, max_seq_len=128)
    assert (
        tokenizer.tokenizer.decode(f["input_ids"][f["start_positions"] : f["end_positions"] + 1]).replace(" ", "")
        == "4.5"
    )
    n = len(f["input_ids"])
    start, end = [0.0] * n, [0.0] * n
    start[1], end[2] = 5.0, 5.0  # the paper's free decoding: "0 ." is no choice's span
    assert spex.decode(f, start, end)["free_is_choice"] is False
    sst = get_task("sst2")
    f = glue_feature(
        sst,
        "span-ft",
        tokenizer,
        Example("c", "a charming and often affecting journey", None, 1),
        max_seq_len=64,
        segmentation="none",
    )
    assert f["token_mask"] == [0] + [1] * (len(f["input_ids"]) - 2) + [0] and set(f["token_type_ids"]) == {0}


def test_options_refuse_what_cannot_run():
    from trainer.config import ConfigError
    from trainer.finetuning.options import FinetuneConfig

    base = dict(init="x", output_dir="y", task="rte")
    with pytest.raises(ConfigError, match="needs --ngram-dictionary"):
        FinetuneConfig(**base, head="span-ft")
    with pytest.raises(ValueError, match="--head span does not fit task rte"):
        FinetuneConfig(**base, head="span")
    with pytest.raises(ConfigError, match="--null-threshold applies to squad2 only"):
        FinetuneConfig(init="x", output_dir="y", task="squad1", head="span", null_threshold=1.0)
    assert FinetuneConfig(init="x", output_dir="y", task="squad2", head="span").resolved_max_seq_len == 512
    assert FinetuneConfig(**base, head="span-ft", segmentation="none").resolved_max_seq_len == 128


def test_span_budget_is_per_sentence_so_every_hypothesis_gets_spans(tokenizer, wikitext2_dictionary):
    """Issue 25, item 3: r spans per sentence. On RTE dev, a budget shared by the pair (A's spans first) left the
    second sentence of most pairs without any span; per sentence, none is left without."""
    task, pairs, shared_starved, starved = get_task("rte"), 0, 0, 0
    for ex in rte_dev():
        f = glue_feature(task, "span-ft", tokenizer, ex, max_seq_len=128, segmenter=wikitext2_dictionary)
        n_a, n_b = f["spans_per_text"]
        ka, kb = min(n_a, 16), min(n_b, 16)
        assert [sum(m) > 0 for m in f["span_token_mask"]] == [True] * (ka + kb) + [False] * (32 - ka - kb)
        slots = zip(f["span_index"][ka : ka + kb], f["span_token_mask"][ka : ka + kb])
        b_positions = {p for idx, m in slots for p, x in zip(idx, m) if x}
        assert all(f["token_type_ids"][p] == 1 for p in b_positions)  # B's slots hold B's tokens
        starved += n_b > 0 and not b_positions
        shared_starved += n_a >= 16  # the old shared budget: A's first 16 spans took every slot
        pairs += 1
    print(f"RTE dev: second sentence without a span: shared budget {shared_starved}/{pairs}, per sentence {starved}")
    assert pairs == 277 and starved == 0 and shared_starved > pairs // 2
