"""Tokenizers the job refuses at the start in one line, exit 2, no traceback (issue 32 items 6 and 8 and its small
items, issue 33 item 6): a role token that text would match, files that make the tokenizers library panic or are
not what their name says; and the messages and manifest fields that named the wrong thing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer, normalizers

from pipeline import build_shards, verify
from pipeline.tokenize import tokenizer
from tests.conftest import wikitext2

MSG = "build_shards: error: "


@pytest.fixture(scope="module")
def wordpiece() -> dict:
    text = wikitext2("valid").read_text(encoding="utf-8")[:300_000]
    return json.loads(tokenizer.train([text], vocab_size=2000).to_str())


def _refused(tmp_path: Path, capsys, option: str, path: Path) -> str:
    """build_shards' one error line for ``option path`` (exit 2, no traceback, no Rust panic report)."""
    (tmp_path / "in.txt").write_text("Some text.\n")
    argv = ["--input", str(tmp_path / "in.txt"), "--input-format", "text", "--output", str(tmp_path / "out")]
    assert build_shards.main(argv + [option, str(path), "--runner", "FnApiRunner"]) == 2
    captured = capsys.readouterr().err
    err = [line for line in captured.splitlines() if " INFO " not in line]
    assert "Traceback" not in captured and "panicked at" not in captured and len(err) == 1, captured
    assert err[0].startswith(MSG), err
    return err[0]


def _panicking(config: dict) -> dict:
    """A BPE model whose merge makes a token the vocabulary lacks: tokenizers panics while it loads it."""
    config = json.loads(json.dumps(config))
    config["model"] = {"type": "BPE", "vocab": {"h": 0, "e": 1}, "merges": ["h e"]}
    config["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    config["normalizer"] = None
    return config


def test_a_tokenizer_config_given_to_tokenizer_says_what_it_is(tmp_path, capsys):
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": False}))
    line = _refused(tmp_path, capsys, "--tokenizer", path)
    assert f"{path}: a tokenizer_config.json (transformers' settings), not a tokenizer.json" in line
    assert "--tokenizer-from DIR" in line


def test_a_role_token_marked_not_special_is_refused(tmp_path, capsys, wordpiece):
    """[MASK] re-added as a plain added token: text holding it would get the mask id in rows."""
    config = json.loads(json.dumps(wordpiece))
    for added in config["added_tokens"]:
        if added["content"] == "[MASK]":
            added["special"] = False
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    line = _refused(tmp_path, capsys, "--tokenizer", path)
    assert "the special tokens mask '[MASK]' are added tokens marked \"special\": false" in line


def test_a_tokenizer_that_panics_is_refused_in_one_line(tmp_path, capsys, wordpiece):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_panicking(wordpiece)))
    line = _refused(tmp_path, capsys, "--tokenizer", path)
    assert f"{path}: not a Hugging Face tokenizers JSON file: the tokenizers library panicked:" in line
    directory = tmp_path / "dir"
    directory.mkdir()
    shutil.copy(path, directory / "tokenizer.json")
    line = _refused(tmp_path, capsys, "--tokenizer-from", directory)
    assert "tokenizer.json: not a Hugging Face tokenizers JSON file: the tokenizers library panicked:" in line


def test_verify_reports_a_tokenizer_that_panics_in_one_line(tmp_path, capsys, wikitext2_artifact, wordpiece):
    artifact = tmp_path / "artifact"
    shutil.copytree(wikitext2_artifact, artifact)
    data = json.dumps(_panicking(wordpiece)).encode("utf-8")
    (artifact / "tokenizer.json").write_bytes(data)
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["tokenizer"]["sha256"] = hashlib.sha256(data).hexdigest()
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert verify.main([str(artifact)]) == 1
    captured = capsys.readouterr().err
    assert "Traceback" not in captured and "panicked at" not in captured, captured
    fails = [line for line in captured.splitlines() if line.startswith("FAIL ")]
    assert any("tokenizer.json: not a tokenizers JSON file: the tokenizers library panicked" in f for f in fails), fails


@pytest.mark.parametrize(
    "files,message",
    [
        ({"vocab.json": "[1, 2]", "merges.txt": "#version: 0.2\na b\n"}, "vocab.json: not a JSON object"),
        (
            {"vocab.json": json.dumps({"a": 0, "b": 1, "<s>": 2}), "merges.txt": "#version: 0.2\na\n"},
            "merges.txt: not a merges file for ",
        ),
        ({"vocab.json": json.dumps({"a": "x"}), "merges.txt": ""}, "vocab.json: not an object of token -> id"),
    ],
)
def test_roberta_files_that_are_not_what_they_say_are_refused(tmp_path, capsys, files, message):
    directory = tmp_path / "dir"
    directory.mkdir()
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
    for name, text in files.items():
        (directory / name).write_text(text)
    assert message in _refused(tmp_path, capsys, "--tokenizer-from", directory)


def test_vocab_txt_errors_name_the_files_own_line_numbers(tmp_path, capsys):
    """Lines end at line feeds only: a U+2028 inside line 2 no longer shifts the numbers (it made line 4 'line 5')."""
    path = tmp_path / "vocab.txt"
    path.write_bytes("[PAD]\na\u2028b\n[UNK]\n[UNK]\n".encode())
    assert "vocab.txt: line 4: token '[UNK]' already appears on line 3" in _refused(tmp_path, capsys, "--vocab", path)
    path.write_bytes(b"[PAD]\n[UNK]\n\xff\xfe\n")
    assert "vocab.txt: line 3: not UTF-8 (byte 0xff at column 1)" in _refused(tmp_path, capsys, "--vocab", path)


def test_a_missing_special_token_is_named_with_its_role(tmp_path, capsys):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MSK]\na\n")
    assert "vocabulary lacks the special tokens mask [MASK]" in _refused(tmp_path, capsys, "--vocab", path)


def test_the_manifest_says_lowercase_for_a_normalizer_that_lowercases(wordpiece):
    from tests.pipeline.test_unigram import _train

    tok = Tokenizer.from_str(_train({"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}))
    tok.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC(), normalizers.Lowercase()])
    assert tokenizer.make_spec(tok, "file").describe()["lowercase"] is True
    tok.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC()])
    assert tokenizer.make_spec(tok, "file").describe()["lowercase"] is False
