"""``build_shards --tokenizer-from DIR``: an artifact whose rows are exactly what ``transformers.AutoTokenizer``
makes of a Hugging Face tokenizer directory (ids and word starts), cased and uncased, on WikiText-2 and the
Wikipedia sample; and the trainer's export of its tokenizer loads back in AutoTokenizer as the same tokenizer."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
from pathlib import Path

import pyarrow.ipc as ipc
import pytest
import zstandard

from pipeline import build_shards
from pipeline.elements import Document
from pipeline.read.records import ReaderOptions, read_file
from pipeline.tokenize import tokenizer
from pipeline.verify import verify
from schemas.artifact import Artifact
from tests.conftest import WIKIPEDIA_SAMPLE, build, wikitext2
from trainer.export import write_tokenizer_files

transformers = pytest.importorskip("transformers")


def _wikipedia_lines(directory: Path, n: int) -> Path | None:
    """The first ``n`` articles of the Wikipedia sample as a plain JSONL file (None without ../shared)."""
    if not WIKIPEDIA_SAMPLE.exists():
        return None
    path = directory / "wikipedia.jsonl"
    with open(WIKIPEDIA_SAMPLE, "rb") as f:
        reader = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8")
        path.write_text("".join(itertools.islice(reader, n)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path | None]:
    directory = tmp_path_factory.mktemp("corpus")
    return {"wikitext": wikitext2("valid"), "wikipedia": _wikipedia_lines(directory, 300)}


@pytest.fixture(scope="module")
def uncased_vocab(corpus) -> list[str]:
    """An uncased WordPiece vocabulary trained here on WikiText-2 (as a vocab.txt gives it: id = line)."""
    docs = _documents(corpus)
    tok = tokenizer.train([d.text for d in docs], vocab_size=6000, lowercase=True)
    return [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]


def _documents(corpus: dict[str, Path | None], unk: str = "[UNK]") -> list[Document]:
    """The documents as the job reads them (WikiText's <unk> becomes the tokenizer's unk token)."""
    docs = [
        d
        for d in read_file(str(corpus["wikitext"]), ReaderOptions(input_format="wikitext", wikitext_unk=unk))
        if isinstance(d, Document)
    ]
    if corpus["wikipedia"] is not None:
        docs += [d for d in read_file(str(corpus["wikipedia"]), ReaderOptions()) if isinstance(d, Document)]
    return docs


def _build(corpus, directory: Path, out: Path, *extra: str) -> dict:
    inputs = [corpus["wikitext"]]
    manifest = build(inputs, out, "--input-format", "wikitext", "--tokenizer-from", str(directory), *extra)
    if corpus["wikipedia"] is not None:
        build([corpus["wikipedia"]], out.with_name(out.name + "-wikipedia"), "--tokenizer-from", str(directory), *extra)
    return manifest


def _rows(artifact: Path, column: str = "input_ids") -> dict[str, list]:
    """Each document's rows, concatenated."""
    by_doc: dict[str, list] = {}
    for shard in sorted((artifact / "shards").glob("*.arrow")):
        for row in ipc.open_file(shard).read_all().select(["doc_id", column]).to_pylist():
            by_doc.setdefault(row["doc_id"], []).extend(row[column])
    return by_doc


def _assert_exact(corpus, directory: Path, out: Path, unk: str = "[UNK]") -> int:
    """Every document's rows, concatenated, are AutoTokenizer(DIR)'s ids of its cleaned text; verify passes."""
    auto = transformers.AutoTokenizer.from_pretrained(str(directory))
    artifacts = [out] + ([out.with_name(out.name + "-wikipedia")] if corpus["wikipedia"] is not None else [])
    rows: dict[str, list] = {}
    starts: dict[str, list] = {}
    for artifact in artifacts:
        report = verify(str(artifact))
        assert report.ok, report.problems
        rows.update(_rows(artifact))
        starts.update(_rows(artifact, "word_start"))
    # the trainer's export writes tokenizer files that AutoTokenizer reads back to the same tokenizer
    exported = out.with_name(out.name + "-export")
    exported.mkdir()
    art = Artifact.open(str(out))
    write_tokenizer_files(art.tokenizer_json(), art.manifest["tokenizer"], 512, str(exported))
    reloaded = transformers.AutoTokenizer.from_pretrained(str(exported))
    checked = words = 0
    for doc in _documents(corpus, unk):
        encoding = auto(doc.text, add_special_tokens=False)
        expected = encoding["input_ids"]
        assert rows[doc.doc_id] == expected, doc.doc_id
        assert reloaded(doc.text, add_special_tokens=False)["input_ids"] == expected, doc.doc_id
        w = encoding.word_ids()
        assert starts[doc.doc_id] == [i == 0 or w[i] != w[i - 1] for i in range(len(w))], doc.doc_id
        checked += len(expected)
        words += sum(starts[doc.doc_id])
    assert checked > 200_000 and words > 100_000
    return checked


def _write_directory(directory: Path, vocab: list[str], config: dict | None, tokenizer_json: str | None = None) -> Path:
    directory.mkdir()
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    if tokenizer_json is not None:
        (directory / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    return directory


def _digests(artifact: Path) -> dict[str, str]:
    return {
        str(p.relative_to(artifact)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(artifact.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


@pytest.mark.slow
def test_uncased_vocab_txt_directory_gives_autotokenizers_ids_and_the_cache_changes_nothing(
    tmp_path, corpus, uncased_vocab
):
    directory = _write_directory(
        tmp_path / "uncased", uncased_vocab, {"tokenizer_class": "BertTokenizer", "do_lower_case": True}
    )
    manifest = _build(corpus, directory, tmp_path / "a")
    assert manifest["tokenizer"]["lowercase"] is True and manifest["tokenizer"]["source"] == "directory"
    _assert_exact(corpus, directory, tmp_path / "a")
    _build(corpus, directory, tmp_path / "b", "--encode-cache-mb", "0")
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    if corpus["wikipedia"] is not None:
        assert _digests(tmp_path / "a-wikipedia") == _digests(tmp_path / "b-wikipedia")


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        {"tokenizer_class": "BertTokenizer", "do_lower_case": False},  # cased
        {"tokenizer_class": "BertTokenizerFast", "do_lower_case": True, "strip_accents": False},  # keeps accents
        {"tokenizer_class": "BertTokenizer"},  # transformers' default: do_lower_case true
    ],
)
def test_vocab_txt_directory_follows_the_configs_casing(tmp_path, corpus, uncased_vocab, config):
    directory = _write_directory(tmp_path / "dir", uncased_vocab, config)
    manifest = _build(corpus, directory, tmp_path / "a")
    assert manifest["tokenizer"]["lowercase"] is config.get("do_lower_case", True)
    _assert_exact(corpus, directory, tmp_path / "a")


@pytest.mark.slow
def test_tokenizer_json_directory_as_is_or_recased_by_a_bert_config(tmp_path, corpus):
    docs = _documents(corpus)
    cased = tokenizer.train([d.text for d in docs[:60]], vocab_size=6000).to_str()
    vocab = [t for t, _ in sorted(json.loads(cased)["model"]["vocab"].items(), key=lambda kv: kv[1])]
    as_is = _write_directory(tmp_path / "as-is", vocab, None, cased)
    manifest = _build(corpus, as_is, tmp_path / "a")
    assert manifest["tokenizer"]["lowercase"] is False
    _assert_exact(corpus, as_is, tmp_path / "a")
    # transformers rebuilds BERT's normalizer from the config: this cased tokenizer.json encodes uncased
    recased = _write_directory(tmp_path / "recased", vocab, {"tokenizer_class": "BertTokenizer"}, cased)
    manifest = _build(corpus, recased, tmp_path / "b")
    assert manifest["tokenizer"]["lowercase"] is True
    _assert_exact(corpus, recased, tmp_path / "b")


@pytest.mark.slow
def test_roberta_vocab_json_and_merges_directory_gives_autotokenizers_ids(tmp_path, corpus):
    """A RoBERTa directory (vocab.json + merges.txt + tokenizer_config.json): transformers' RobertaTokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=5000,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([d.text for d in _documents(corpus, "<unk>")[:60]], trainer)
    directory = tmp_path / "roberta"
    directory.mkdir()
    bpe.model.save(str(directory))  # vocab.json, merges.txt
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
    manifest = _build(corpus, directory, tmp_path / "a")
    assert manifest["tokenizer"]["special_tokens"] == {
        "cls": "<s>",
        "sep": "</s>",
        "pad": "<pad>",
        "unk": "<unk>",
        "mask": "<mask>",
    }
    _assert_exact(corpus, directory, tmp_path / "a", unk="<unk>")


@pytest.mark.parametrize(
    "files,message",
    [
        ({"vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n"}, "vocab.txt without a tokenizer_config.json"),
        (
            {"vocab.json": "{}", "merges.txt": "#version: 0.2\n"},
            "vocab.json + merges.txt without a tokenizer_config.json naming RobertaTokenizer",
        ),
        (
            {
                "vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n",
                "tokenizer_config.json": json.dumps({"tokenizer_class": "BertTokenizer", "mask_token": "<mask>"}),
            },
            "the tokenizer lacks the special tokens mask '<mask>'",
        ),
        ({"README.md": "nothing here"}, "no tokenizer.json, vocab.txt, or vocab.json + merges.txt"),
        ({"tokenizer_config.json": "{not json"}, "tokenizer_config.json: not a JSON file"),
    ],
)
def test_directories_it_cannot_read_exactly_are_refused_in_one_line(tmp_path, capsys, files, message):
    directory = tmp_path / "dir"
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    (tmp_path / "in.txt").write_text("Some text.\n")
    argv = ["--input", str(tmp_path / "in.txt"), "--input-format", "text", "--output", str(tmp_path / "out")]
    assert build_shards.main(argv + ["--tokenizer-from", str(directory), "--runner", "FnApiRunner"]) == 2
    captured = capsys.readouterr().err
    err = [line for line in captured.splitlines() if " INFO " not in line]
    assert "Traceback" not in captured and len(err) == 1, captured
    assert err[0].startswith(f"build_shards: error: --tokenizer-from {directory}: ") and message in err[0], err


@pytest.mark.parametrize(
    "in_json,config", [(True, {}), (False, {"add_prefix_space": True}), (True, {"add_prefix_space": False})]
)
def test_roberta_class_takes_add_prefix_space_from_its_config_as_transformers_does(tmp_path, corpus, in_json, config):
    """transformers rebuilds RobertaTokenizer's ByteLevel pre-tokenizer from the config (default: no prefix space)
    whatever tokenizer.json holds; so does --tokenizer-from (and a prefix space is then refused)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from pipeline.files import BEAM_FILES
    from schemas.tokenizers import hf_directory

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=in_json)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe.train_from_iterator(
        [d.text for d in _documents(corpus, "<unk>")[:5]],
        trainers.BpeTrainer(vocab_size=800, special_tokens=specials, show_progress=False),
    )
    bpe.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer", **config}))
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    ours, _, roles = hf_directory.from_directory(str(tmp_path), BEAM_FILES)
    expected = json.loads(auto.backend_tokenizer.to_str())["pre_tokenizer"]["add_prefix_space"]
    assert (
        json.loads(ours.to_str())["pre_tokenizer"]["add_prefix_space"]
        is expected
        is config.get("add_prefix_space", False)
    )
    text = _documents(corpus, "<unk>")[0].text[:3000]
    assert ours.encode(text, add_special_tokens=False).ids == auto(text, add_special_tokens=False)["input_ids"]
    assert roles is not None and roles["mask"] == "<mask>" and roles["cls"] == "<s>"
