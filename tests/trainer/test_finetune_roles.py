"""Fine-tuning a model whose special tokens are not BERT's names: a byte-level BPE artifact (RoBERTa's ``<s> </s>
<pad> <mask> <unk>``, so cls 0, pad 1, sep 2) pre-trained a few steps, then fine-tuned on real RTE and XQuAD from the
DeepSpeed checkpoint and from its Hugging Face export (``python -m trainer.export``). Inputs start with the cls role's
id and are separated by the sep role's, padding is the pad role's id, words and answers carry no leading space (a
byte-level BPE token holds the space before its word), and the runs write their metrics. The same for a
SentencePiece-style Unigram (Metaspace) artifact with RoBERTa's names, and the feature checks on BERT's WordPiece
too. Skips without ../shared."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SHARED_DATA, build, free_port, wikitext2, wikitext2_articles
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from pipeline import build_ngram_dictionary
from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from schemas.segmenter import Segmenter
from tests.support.pretrain_runs import PRETRAIN, REPO, ds_config, run_env
from trainer.finetuning import squad
from trainer.finetuning.checkpoint import CheckpointError, load_pretrained
from trainer.finetuning.encoding import ModelTokenizer, encode
from trainer.finetuning.features import collate, glue_feature
from trainer.finetuning.glue import Example, read_tsv
from trainer.finetuning.tasks import get_task

pytestmark = pytest.mark.slow

DATA = SHARED_DATA / "finetune"
RTE_TRAIN = DATA / "glue_rte" / "train.tsv"
XQUAD = DATA / "squad_format_xquad_en" / "xquad.en.json"
ROBERTA = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}
ORDER = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids: cls 0, pad 1, sep 2 (BERT's [PAD] would be 0)
TIMEOUT = 600


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**run_env(), "MASTER_PORT": str(free_port())}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _pretrained(tmp: Path, tok: Tokenizer) -> dict:
    """An artifact of 8 WikiText-2 articles with ``tok``, 3 pre-training steps on it and the Hugging Face export."""
    tok.save(str(tmp / "tokenizer.json"))
    artifact = tmp / "artifact"
    corpus = wikitext2_articles(8, tmp)
    build(
        corpus, artifact, "--input-format", "wikitext", "--tokenizer", str(tmp / "tokenizer.json"), "--num-shards", "2"
    )
    run = tmp / "run"
    _run(
        [sys.executable, str(PRETRAIN), "--data", str(artifact), "--preset", "tiny", "--max-steps", "3"]
        + ["--warmup-steps", "1", "--lr", "5e-3", "--eval-every", "0", "--no-progress", "--num-workers", "1"]
        + ["--deepspeed_config", str(ds_config(tmp, 1)), "--output-dir", str(run)]
    )
    _run([sys.executable, "-m", "trainer.export", str(run / "checkpoints"), "--out", str(tmp / "hf")])
    ids = {role: tok.token_to_id(token) for role, token in ROBERTA.items()}
    assert (ids["cls"], ids["pad"], ids["sep"]) == (0, 1, 2)
    return {"run": run, "hf": tmp / "hf", "ids": ids, "tmp": tmp}


def _real_data() -> None:
    if not (RTE_TRAIN.exists() and XQUAD.exists()):
        pytest.skip(f"real data not available: {DATA}")


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> dict:
    """A byte-level BPE (RoBERTa's) trained on WikiText-2, pre-trained on and exported (:func:`_pretrained`)."""
    _real_data()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        special_tokens=ORDER,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_wikitext_texts(), trainer)
    return _pretrained(tmp_path_factory.mktemp("ft_roles_bpe"), tok)


@pytest.fixture(scope="module")
def unigram(tmp_path_factory) -> dict:
    """A SentencePiece-style Unigram behind Metaspace (words split at spaces only, tokens start with ``▁``; its
    special tokens are pieces of its model too) with RoBERTa's names, pre-trained on and exported."""
    _real_data()
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=3000, special_tokens=ORDER, unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(_wikitext_texts(), trainer)
    return _pretrained(tmp_path_factory.mktemp("ft_roles_unigram"), tok)


def _wikitext_texts() -> list[str]:
    opts = ReaderOptions(input_format="wikitext", wikitext_unk="<unk>")
    return [d.text for d in read_file(str(wikitext2("valid")), opts) if isinstance(d, Document)]


@pytest.fixture(scope="module", params=["byte_level_bpe", "unigram", "wordpiece"])
def model_tokenizer(request) -> ModelTokenizer:
    """The tokenizer of the byte-level BPE or the Unigram checkpoint as fine-tuning loads it, or the demo artifact's
    cased WordPiece: fine-tuning reads words and answers from offsets and word ids, whatever the family."""
    if request.param == "wordpiece":
        _real_data()
        return ModelTokenizer.of(Tokenizer.from_file(str(request.getfixturevalue("demo_artifact") / "tokenizer.json")))
    return load_pretrained(
        str(request.getfixturevalue("bpe" if request.param == "byte_level_bpe" else "unigram")["run"])
    )[1]


@pytest.mark.parametrize("family", ["bpe", "unigram"])
@pytest.mark.parametrize("init", ["run", "hf"])
def test_roles_come_from_the_checkpoint_and_from_the_export(request, family, init):
    source = request.getfixturevalue(family)
    _, tokenizer, info = load_pretrained(str(source[init]))
    assert dict(tokenizer.ids) == source["ids"] and info["special_tokens"] == ROBERTA
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id) == (0, 2, 1)


def test_a_role_without_a_token_is_refused_in_one_line(bpe, tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(bpe["hf"], hf)
    config = json.loads((hf / "tokenizer_config.json").read_text())
    config["cls_token"] = "<cls>"  # not in the vocabulary
    (hf / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        load_pretrained(str(hf))
    assert "cls '<cls>'" in str(e.value) and "\n" not in str(e.value)
    # the names the export wrote are what decides: here the directory's own names, not RoBERTa's known set
    config["cls_token"] = "</s>"
    (hf / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_pretrained(str(hf))[1].cls_id == bpe["ids"]["sep"]


def test_a_config_without_pad_token_id_pads_with_the_pad_role(bpe, tmp_path):
    """The embedding's padding index is the tokenizer's pad (RoBERTa's <pad> is 1), not BERT's default 0 (<s>)."""
    hf = tmp_path / "hf"
    shutil.copytree(bpe["hf"], hf)
    config = json.loads((hf / "config.json").read_text())
    assert config.pop("pad_token_id") == bpe["ids"]["pad"]
    (hf / "config.json").write_text(json.dumps(config))
    encoder, tokenizer, _ = load_pretrained(str(hf))
    assert encoder.config.pad_token_id == tokenizer.pad_id == 1


@pytest.fixture(scope="module")
def dictionary(tmp_path_factory) -> Segmenter:
    out = tmp_path_factory.mktemp("ngramdict") / "dict"
    build_ngram_dictionary.run(["--input", str(wikitext2("valid")), "--output", str(out)])
    return Segmenter.from_dictionary(str(out))


def test_pairs_start_with_cls_separate_with_sep_and_pad_with_pad(model_tokenizer, dictionary):
    task, tok = get_task("rte"), model_tokenizer
    examples = read_tsv(task, str(RTE_TRAIN), "train")[0][:24]
    specials = {tok.ids[role] for role in ("cls", "sep", "pad", "mask")}  # unk is an ordinary token of text
    checked = padded = multi_word = whole_sources = 0
    for head in ("cls", "spex", "span-ft"):
        feats = [glue_feature(task, head, tok, ex, max_seq_len=96, segmenter=dictionary) for ex in examples]
        for ex, f in zip(examples, feats):
            ids = f["input_ids"]
            assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id
            seps = [i for i, t in enumerate(ids) if t == tok.sep_id]
            assert len(seps) == 2 and f["token_type_ids"].index(1) == seps[0] + 1
            assert not specials & set(ids[1 : seps[0]] + ids[seps[0] + 1 : seps[1]])
            if head == "spex":  # the gold span is the label's word (its token holds the space before it)
                text = tok.tokenizer.decode(ids[f["start_positions"] : f["end_positions"] + 1])
                assert text.strip() == task.label_words[ex.label]
                if len(ids) < 96:  # not truncated: the source is sentence 1, a space, the choices, as one text
                    assert ids[1 : seps[0]] == tok.encode(ex.text_a + " " + task.choices).ids
                    whole_sources += 1
            if head == "span-ft":
                words = [w for w, _, _ in encode(tok, ex.text_a).words()]
                assert words and all(w and w == w.strip() for w in words)
                multi_word += sum(e - s > 1 for s, e in dictionary.segment(words))
            checked += 1
        batch = collate(feats, tok.pad_id)
        pad = batch["attention_mask"] == 0
        assert (batch["input_ids"][pad] == tok.pad_id).all() and (batch["input_ids"][~pad] != tok.pad_id).all()
        padded += int(pad.sum())
    assert (
        checked == 3 * 24 and padded > 0 and multi_word > 0 and whole_sources > 0
    )  # dictionary n-grams match words (no leading space)


def test_special_tokens_written_in_the_text_stay_text(model_tokenizer):
    """As in pre-training's rows: ``</s>`` or ``[SEP]`` in a sentence is text, never the sep role's id (a Unigram
    model's special pieces too: renamed out of its reach, as the pipeline's text tokenizer does)."""
    tok = model_tokenizer
    literal = "Literal <s> , </s> , <pad> , <mask> , [CLS] , [SEP] , [PAD] and [MASK] in text ."
    roles = {tok.ids[r] for r in ("cls", "sep", "pad", "mask")}
    ex = Example("x", literal, "The hypothesis says </s> [SEP] too .", 0)
    checked = 0
    for head in ("cls", "spex"):
        ids = glue_feature(get_task("rte"), head, tok, ex, max_seq_len=128)["input_ids"]
        assert [i for i, t in enumerate(ids) if t in roles] == [0, ids.index(tok.sep_id), len(ids) - 1]
        checked += 1
    qa = squad.QAExample("q", "Where is </s> ?", literal, [("</s>", literal.index("</s>"))])
    (f,) = squad.qa_features([qa], tok, max_seq_len=128, doc_stride=64, max_query_len=32, training=True)
    seps = [f["token_type_ids"].index(1) - 1, len(f["input_ids"]) - 1]
    assert [i for i, t in enumerate(f["input_ids"]) if t in roles] == [0, *seps]
    assert literal[f["token_offsets"][f["start_positions"]][0] : f["token_offsets"][f["end_positions"]][1]] == "</s>"
    assert checked == 2


def _edge(context: str, inside: int, outside: int) -> bool:
    """The answer's end between characters ``inside`` (its own) and ``outside`` is a word edge of every family: the
    text ends, or whitespace, or a letter or digit meets a character that is neither."""
    if outside < 0 or outside >= len(context) or context[outside].isspace():
        return True
    return context[inside].isalnum() != context[outside].isalnum()


def _token_boundaries(tokenizer: ModelTokenizer, text: str) -> tuple[set[int], set[int]]:
    """Where the tokens' characters start and end (a token's offsets less the whitespace it carries)."""
    starts, ends = set(), set()
    for s, e in tokenizer.encode(text).offsets:
        piece = text[s:e]
        if piece.strip():
            starts.add(s + len(piece) - len(piece.lstrip()))
            ends.add(e - (len(piece) - len(piece.rstrip())))
    return starts, ends


def test_squad_gold_spans_map_back_to_the_answer_text(model_tokenizer):
    """The training target's characters, as decoding maps tokens back (from its first word's start to its last
    word's end), are exactly the answer when both of its ends are word edges (:func:`_edge`) and token boundaries;
    otherwise (a byte-level BPE token can be ``",`` or ``).``, a Unigram one ``s.`` or ``(1``, XQuAD has an answer
    ``2,70`` of ``2,700``) they extend the answer only inside the words at its ends, never over whitespace (a
    token's leading space is not the answer's)."""
    examples, bad = squad.read_squad(str(XQUAD), "squad1", "train")
    examples = examples[:300]
    feats = squad.qa_features(
        examples, model_tokenizer, max_seq_len=192, doc_stride=64, max_query_len=48, training=True, bad=bad
    )
    exact = inside = 0
    boundaries: dict[str, tuple[set[int], set[int]]] = {}
    for f in feats:
        assert f["input_ids"][0] == model_tokenizer.cls_id
        seps = [i for i, t in enumerate(f["input_ids"]) if t == model_tokenizer.sep_id]
        assert seps == [f["token_type_ids"].index(1) - 1, len(f["input_ids"]) - 1]
        s, e = f["start_positions"], f["end_positions"]
        if s == 0:
            continue  # the window does not hold the answer: the target is [CLS]
        ex = examples[f["example_index"]]
        answer, a0 = ex.answers[0]
        a1 = a0 + len(answer)
        g0, g1 = f["token_offsets"][s][0], f["token_offsets"][e][1]
        context = ex.context
        starts, ends = boundaries.setdefault(context, _token_boundaries(model_tokenizer, context))
        if _edge(context, a0, a0 - 1) and _edge(context, a1 - 1, a1) and a0 in starts and a1 in ends:
            assert context[g0:g1] == answer, (context[g0:g1], answer)
            exact += 1
        else:
            assert g0 <= a0 and a1 <= g1 and not any(c.isspace() for c in context[g0:a0] + context[a1:g1])
            inside += 1
    assert exact > 100 and exact > 5 * inside, (exact, inside)


@pytest.mark.parametrize(
    "family,init,task",
    [("bpe", "run", "rte"), ("bpe", "run", "squad1"), ("bpe", "hf", "rte"), ("bpe", "hf", "squad1")]
    + [("unigram", "run", "squad1"), ("unigram", "hf", "rte")],
)
def test_fine_tuning_runs_and_writes_metrics(request, tmp_path, family, init, task):
    source = request.getfixturevalue(family)
    out = tmp_path / "out"
    head = "span" if task == "squad1" else "spex" if init == "hf" else "cls"
    extra = ["--train-file", str(XQUAD), "--max-seq-len", "192", "--doc-stride", "64"] if task == "squad1" else []
    _run(
        [sys.executable, str(REPO / "trainer" / "finetune.py"), "--init", str(source[init]), "--task", task]
        + ["--head", head, "--data-dir", str(DATA), *extra, "--max-train-examples", "24", "--max-eval-examples", "16"]
        + ["--epochs", "1", "--lr", "1e-3", "--log-every", "1", "--no-progress", "--output-dir", str(out)]
        + ["--deepspeed_config", str(ds_config(source["tmp"], 1))]
    )
    m = json.loads((out / "metrics.json").read_text())
    assert m["init"]["special_tokens"] == ROBERTA and m["head"] == head and m["data"]["train"]["examples"] == 24
    assert m["steps"] > 0 and len(m["train_loss"]) == m["steps"]
    if task == "squad1":
        assert m["eval"]["questions"] == 16 and m["eval"]["missing_predictions"] == 0
        predictions = json.loads((out / "predictions.json").read_text())
        assert len(predictions) == 16 and all(p == p.strip() for p in predictions.values())  # no leading space
    else:
        assert m["eval"]["examples"] == 16 and 0 <= m["eval"]["accuracy"] <= 100
    assert os.path.getsize(out / "bad_rows.jsonl") == 0


def test_characters_the_normalizer_makes_spaces_are_in_no_word_and_no_answer():
    """A SentencePiece normalizer (Nmt, as ``SentencePieceUnigramTokenizer`` builds it) makes the invisible U+200B..
    U+200F and U+FEFF spaces, so Metaspace cuts a word there and a token's offsets hold the character (real Wikipedia:
    ``V_(α)\u200b, called``, Persian ``قرعه\u200cکشی``): like a space it is in no word, so decoding never predicts it
    (SQuAD's scoring would not strip it), and an answer right after it maps back to exactly its text."""
    import io
    import itertools
    import unicodedata

    import zstandard
    from tokenizers import SentencePieceUnigramTokenizer

    from tests.conftest import WIKIPEDIA_SAMPLE

    if not WIKIPEDIA_SAMPLE.exists():
        pytest.skip(f"real data not available: {WIKIPEDIA_SAMPLE}")
    sp = SentencePieceUnigramTokenizer()  # Nmt, NFKC, spaces collapsed; Metaspace
    sp.train_from_iterator(
        _wikitext_texts(), vocab_size=3000, special_tokens=ORDER, unk_token="<unk>", show_progress=False
    )
    tok = ModelTokenizer.of(Tokenizer.from_str(sp._tokenizer.to_str()))
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        pages = [json.loads(line)["text"] for line in itertools.islice(reader, 2300)]
    invisible = [p for page in pages for p in page.split("\n") if any(unicodedata.category(c) == "Cf" for c in p)]
    words = 0
    for paragraph in invisible:
        for word, _, _ in encode(tok, paragraph).words():
            assert unicodedata.category(word[0]) != "Cf" and unicodedata.category(word[-1]) != "Cf", word
            words += 1
    assert len(invisible) >= 3 and words > 100, (len(invisible), words)
    examples = []
    for paragraph in invisible + ["It was built in \u200b1990 by the \ufeffParis city council."]:
        for j, c in enumerate(paragraph[:-1]):
            if c in "\u200b\u200c\u200d\u200e\u200f\ufeff" and not paragraph[j + 1].isspace():  # Nmt: a space
                answer = "".join(itertools.takewhile(lambda ch: not ch.isspace(), paragraph[j + 1 :]))
                examples.append(squad.QAExample(f"q{len(examples)}", "Which word?", paragraph, [(answer, j + 1)]))
    feats = squad.qa_features(examples, tok, max_seq_len=384, doc_stride=128, max_query_len=32, training=True)
    checked = 0
    for f in feats:
        if f["start_positions"]:
            ex = examples[f["example_index"]]
            answer, start = ex.answers[0]
            s, e = f["token_offsets"][f["start_positions"]][0], f["token_offsets"][f["end_positions"]][1]
            assert (s, ex.context[s:e]) == (start, answer)
            checked += 1
    assert checked >= 5, checked
