"""A Hugging Face checkpoint's tokenizer is read as ``transformers.AutoTokenizer`` reads its directory, by fine-tuning
and ``pretrain --init`` as by ``build_shards --tokenizer-from`` (one reader: ``schemas.tokenizers.hf_directory``), or
refused in one line (issue 32, item 3, the trainer's side). Before, the trainer read ``tokenizer.json`` or
``vocab.txt`` itself: added tokens in ``added_tokens.json`` were ignored (every later word split differently), a
``vocab.txt`` line holding U+2028 shifted every later id, and a DistilBert class (which lower-cases by default) kept a
cased tokenizer.json's casing. Compared on real WikiText-2 text with AutoTokenizer's ids."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import wikitext2_articles

from tests.support.hf_checkpoints import save_bert
from trainer import pretrain
from trainer.finetuning.checkpoint import CheckpointError, load_pretrained

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """(a cased BERT directory with vocab.txt and tokenizer_config.json, its vocab.txt, real text lines)."""
    from pipeline.tokenize.tokenizer import train

    root = tmp_path_factory.mktemp("ckpt_dirs")
    text = wikitext2_articles(4, root)
    lines = [line for line in text.read_text(encoding="utf-8").splitlines() if len(line.split()) > 8]
    tok = train(lines, vocab_size=1500, lowercase=False)
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    vocab_txt = root / "vocab.txt"
    vocab_txt.write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    model = save_bert(root / "model", len(vocab) + 8)  # room for added tokens
    return model, vocab_txt, lines[:200]


def _directory(tmp_path: Path, base, files: dict[str, object]) -> Path:
    model, vocab_txt, _ = base
    out = tmp_path / "ckpt"
    shutil.copytree(model, out)
    shutil.copy(vocab_txt, out / "vocab.txt")
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (out / name).write_text(text, encoding="utf-8")
    return out


def _size(base) -> int:
    return len(base[1].read_text(encoding="utf-8").splitlines())


def _vocab_with_line_separator(base) -> str:
    """vocab.txt with one token holding U+2028: transformers (and tokenizers' reader) split lines at line feeds only."""
    lines = base[1].read_text(encoding="utf-8").split("\n")
    lines[200] = lines[200] + "\u2028x"
    return "\n".join(lines)


VARIANTS = {
    "added_tokens.json": lambda base: {
        "tokenizer_config.json": {"do_lower_case": False},
        "added_tokens.json": {"of the": _size(base), "in the": _size(base) + 1},
    },
    "vocab.txt with U+2028": lambda base: {
        "tokenizer_config.json": {"do_lower_case": False},
        "vocab.txt": _vocab_with_line_separator(base),
    },
    "DistilBert class lower-cases by default": lambda base: {
        "tokenizer_config.json": {"tokenizer_class": "DistilBertTokenizer"},
    },
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_checkpoint_tokenizer_gives_autotokenizers_ids(tmp_path, base, variant):
    directory = _directory(tmp_path, base, VARIANTS[variant](base))
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    ours = load_pretrained(str(directory))[1]
    compared = 0
    for line in base[2]:
        expected = theirs(line, add_special_tokens=False)["input_ids"]
        assert ours.encode(line).ids == expected, (variant, line)
        compared += len(expected)
    assert compared > 5000


def test_a_checkpoint_with_a_tokenizer_class_transformers_rebuilds_is_refused(tmp_path, base, capsys):
    directory = _directory(tmp_path, base, {"tokenizer_config.json": {"tokenizer_class": "AlbertTokenizer"}})
    with pytest.raises(CheckpointError) as e:
        load_pretrained(str(directory))
    assert "AlbertTokenizer" in str(e.value) and len(str(e.value).splitlines()) == 1


def test_pretrain_init_from_a_checkpoint_whose_tokenizer_panics_is_one_line(tmp_path, base, demo_artifact, capsys):
    """A BPE merge whose result the vocabulary lacks makes the tokenizers library panic (a BaseException)."""
    config = {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "vocab": {"h": 0, "e": 1}, "merges": ["h e"]},
    }
    directory = _directory(tmp_path, base, {"tokenizer.json": config})
    args = ["--data", str(demo_artifact), "--init", str(directory), "--output-dir", str(tmp_path / "run"),
            "--max-steps", "1", "--no-progress"]  # fmt: skip
    capsys.readouterr()
    assert pretrain.main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "the tokenizers library panicked" in err[0], captured.err
    assert "Traceback" not in captured.err and "panicked at" not in captured.err


def test_a_checkpoint_with_a_plain_added_token_after_a_special_one_is_refused(tmp_path, base):
    """Fine-tuning reads special tokens in text as text (the rows' rule): dropping ``<ent>`` from the text tokenizer
    would renumber ``<new>`` to ``<ent>``'s id (attack round, F1); refused in one line."""
    n = _size(base)
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
    decoder = {
        str(n): {"content": "<ent>", "special": True, **flags},
        str(n + 1): {"content": "<new>", "special": False, **flags},
    }
    directory = _directory(
        tmp_path, base, {"tokenizer_config.json": {"do_lower_case": False, "added_tokens_decoder": decoder}}
    )
    theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert theirs.convert_tokens_to_ids("<new>") == n + 1  # what a shifted id would contradict
    with pytest.raises(CheckpointError) as e:
        load_pretrained(str(directory))
    message = str(e.value)
    assert len(message.splitlines()) == 1 and "the added token '<new>' (id " in message, message
    assert "follows the special added token(s)" in message
