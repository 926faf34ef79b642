"""``--train-tokenizer wordpiece|bpe|unigram`` (issue 43): the family asked is the family trained (``bpe`` trained a
WordPiece before, exit 0), deterministic in document order and worker count, loaded by ``transformers`` with the
artifact's ids on held-out WikiText-2 text."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.ipc as ipc
import pytest
from tokenizers import Tokenizer

from pipeline import build_shards
from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import training
from schemas.tokenizers.families import BYTE_LEVEL_BPE, UNIGRAM, family, special_roles
from tests.conftest import build, wikitext2_articles

FAMILY = {"bpe": BYTE_LEVEL_BPE, "unigram": UNIGRAM}
ROBERTA_IDS = {"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4}  # <s> <pad> </s> <unk> <mask>
SMALL = ["--input-format", "wikitext", "--vocab-size", "1500", "--num-shards", "2"]


def _texts(path: Path) -> list[str]:
    return [d.text for d in read_file(str(path), ReaderOptions(input_format="wikitext")) if isinstance(d, Document)]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    """The first 12 articles of WikiText-2 valid (training) and the first 6 of WikiText-2 test (held out)."""
    directory = tmp_path_factory.mktemp("families")
    return wikitext2_articles(12, directory), wikitext2_articles(6, directory, "test")


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_training_is_a_function_of_the_words_not_of_their_order(kind, corpora):
    texts = _texts(corpora[0])
    assert len(texts) == 12
    first = training.train(kind, texts, 1500, lowercase=False)
    again = training.train(kind, texts[::-1], 1500, lowercase=False)
    assert first.to_str() == again.to_str()
    assert family(first) == FAMILY[kind] and first.get_vocab_size() == 1500
    roles = special_roles(first)
    assert {role: first.token_to_id(token) for role, token in roles.items()} == ROBERTA_IDS


def test_unigram_is_sentencepieces_shape():
    config = json.loads(
        training.train("unigram", ["Ａ  café\u00a0au lait, twice.", "café au lait"] * 3, 60, True).to_str()
    )
    kinds = [n["type"] for n in config["normalizer"]["normalizers"]]
    assert kinds == ["Nmt", "NFKC", "Replace", "Lowercase"]
    assert config["pre_tokenizer"]["type"] == "Metaspace" and config["pre_tokenizer"]["prepend_scheme"] == "always"
    pieces = [p for p, _ in config["model"]["vocab"]]
    assert "▁café" in pieces and "Ａ" not in pieces and "a" in pieces  # NFKC made the fullwidth A an a (lower-cased)
    # the smallest size the job accepts ends, with the specials and the most frequent characters
    tiny = training.train("unigram", ["café au lait"] * 3, 6, False)
    assert 6 <= tiny.get_vocab_size() < 12


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_build_trains_the_family_asked_the_same_with_two_workers_and_transformers_reads_its_ids(
    kind, corpora, tmp_path
):
    transformers = pytest.importorskip("transformers")
    train, held_out = corpora
    one = build(train, tmp_path / "one", "--train-tokenizer", kind, *SMALL)
    two = build(
        train,
        tmp_path / "two",
        "--train-tokenizer",
        kind,
        *SMALL,
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        "2",
    )
    tokenizer_json = (tmp_path / "one" / "tokenizer.json").read_bytes()
    assert (tmp_path / "two" / "tokenizer.json").read_bytes() == tokenizer_json
    shards = sorted(p.name for p in (tmp_path / "one" / "shards").glob("*.arrow"))
    assert len(shards) == 2
    for name in shards:
        assert (tmp_path / "two" / "shards" / name).read_bytes() == (tmp_path / "one" / "shards" / name).read_bytes()
    trained = Tokenizer.from_str(tokenizer_json.decode())
    assert family(trained) == FAMILY[kind]
    # WikiText's <unk> is read as the family's <unk> while training, as in the build (it was BERT's [UNK]: the
    # vocabulary learnt pieces such as "▁[UNK]," and "UNK" that no row ever used)
    assert trained.token_to_id("<unk>") == 3 and not [t for t in trained.get_vocab() if "UNK" in t]
    assert one["tokenizer"]["special_token_ids"] == two["tokenizer"]["special_token_ids"] == ROBERTA_IDS

    # Held-out text: the rows of an artifact built with the trained tokenizer are what transformers gives.
    held = build(held_out, tmp_path / "held", "--tokenizer", str(tmp_path / "one" / "tokenizer.json"), *SMALL)
    rows: dict[str, list[int]] = {}
    for shard in sorted((tmp_path / "held" / "shards").glob("*.arrow")):
        for row in ipc.open_file(shard).read_all().to_pylist():
            rows.setdefault(row["doc_id"], []).extend(row["input_ids"])
    texts = _texts(held_out)
    assert len(rows) == len(texts) == held["counts"]["documents_written"] == 6

    from trainer.export import write_tokenizer_files

    export = tmp_path / "export"
    export.mkdir()
    write_tokenizer_files(tokenizer_json.decode(), one["tokenizer"], 512, str(export))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "one" / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(str(export))
    doc_ids = sorted(rows)  # the reader numbers a file's documents in order
    checked = 0
    for doc_id, text in zip(doc_ids, texts, strict=True):
        assert fast(text, add_special_tokens=False)["input_ids"] == rows[doc_id], doc_id
        assert auto(text, add_special_tokens=False)["input_ids"] == rows[doc_id], doc_id
        checked += len(rows[doc_id])
    assert checked == held["counts"]["tokens"] > 10_000


@pytest.mark.parametrize(
    "args,message",
    [
        (["--train-tokenizer", "sentencepiece"], "--train-tokenizer 'sentencepiece': choose one of wordpiece, bpe"),
        (["--train-tokenizer", "bpe", "--lowercase"], "--lowercase does not apply to --train-tokenizer bpe"),
    ],
)
def test_a_family_that_cannot_be_trained_is_one_line_exit_2(args, message, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("Some text.\n")
    argv = ["--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out"), *args]
    assert build_shards.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_training_reports_its_reading_as_wordpiece_training_does(kind, caplog, tmp_path):
    import logging

    from tests.conftest import DEMO_CORPUS

    argv = ["--input", str(DEMO_CORPUS), "--output", str(tmp_path / "out"), "--train-tokenizer", kind]
    o, _ = build_shards._parse([*argv, "--vocab-size", "500"])
    size = DEMO_CORPUS.stat().st_size
    with caplog.at_level(logging.INFO, logger="pipeline.build_shards"):
        spec = build_shards._load_tokenizer(o, [str(DEMO_CORPUS)], size, every_s=1e-9)  # a line at every document
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tokenizer training: ")]
    assert len(lines) == 40, lines[-3:]
    assert lines[-1].startswith(
        f"tokenizer training: 40 documents, {size / 1e6:.1f} of {size / 1e6:.1f} MB read (100.0%)"
    )
    assert spec.family == FAMILY[kind] and spec.source == "trained"


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_an_input_without_a_document_to_train_on_is_one_line_exit_2(kind, tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": ""}\n{"id": "b"}\n')
    argv = ["--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out"), "--train-tokenizer", kind]
    assert build_shards.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("build_shards: error:")] == [
        "build_shards: error: no valid document in the input to train a tokenizer on (every record was rejected)"
    ]
