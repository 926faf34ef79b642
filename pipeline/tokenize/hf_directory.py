"""The tokenizer of a Hugging Face tokenizer directory, built as ``transformers.AutoTokenizer`` builds it.

A continued-pre-training artifact must use exactly the checkpoint's tokenizer: ``build_shards --tokenizer-from DIR``
reads what ``AutoTokenizer.from_pretrained(DIR)`` reads (transformers 5) and gives the same ids:

* ``tokenizer_config.json`` names the class (``tokenizer_class``; else ``config.json``'s ``model_type`` ``bert``).
  For BERT's class, transformers rebuilds the normalizer from the config whatever ``tokenizer.json`` holds:
  ``BertNormalizer(clean_text=True, handle_chinese_chars=tokenize_chinese_chars, strip_accents=strip_accents,
  lowercase=do_lower_case)``, with transformers' defaults (``do_lower_case`` true, ``tokenize_chinese_chars``
  true, ``strip_accents`` unset: it follows the casing), behind ``BertPreTokenizer``; so does this module.
* ``tokenizer.json``, when present, gives the vocabulary (and, for other classes, the whole tokenizer as is);
  else ``vocab.txt`` (one WordPiece a line) for BERT's class, or ``vocab.json`` + ``merges.txt`` for RoBERTa's
  (a byte-level BPE as ``RobertaTokenizer`` builds it; ``add_prefix_space`` from the config, which
  ``families.family`` then refuses when true).
* The special token of each role: the class's defaults (BERT's or RoBERTa's names), then
  ``special_tokens_map.json``, then the config's ``unk_token`` ... ``mask_token``.
"""

from __future__ import annotations

import json
from typing import Any

from apache_beam.io.filesystems import FileSystems
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from pipeline.tokenize.families import ROLE_NAMES, SUPPORTED, TokenizerError, named_roles
from pipeline.tokenize.tokenizer import from_file, from_vocab

BERT_CLASSES = ("BertTokenizer", "BertTokenizerFast")
ROBERTA_CLASSES = ("RobertaTokenizer", "RobertaTokenizerFast")
CONFIG = "tokenizer_config.json"


def _join(directory: str, name: str) -> str:
    return FileSystems.join(directory.rstrip("/"), name)


def _exists(path: str) -> bool:
    return FileSystems.exists(path)


def _json(path: str) -> dict[str, Any]:
    with FileSystems.open(path) as f:
        raw = f.read()
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise TokenizerError(f"{path}: not a JSON file: {e}") from None
    if not isinstance(value, dict):
        raise TokenizerError(f"{path}: not a JSON object")
    return value


def _named_roles(directory: str, config: dict[str, Any]) -> dict[str, str]:
    """The special token of each role the directory names (``special_tokens_map.json``, then the config's own)."""
    path = _join(directory, "special_tokens_map.json")
    return named_roles(([_json(path)] if _exists(path) else []) + [config])  # the config's own entries win


def _tokenizer_class(directory: str, config: dict[str, Any]) -> str | None:
    name = config.get("tokenizer_class")
    if isinstance(name, str):
        return name
    path = _join(directory, "config.json")
    if _exists(path) and _json(path).get("model_type") == "bert":
        return "BertTokenizer"
    return None


def _bert_normalizer(config: dict[str, Any]) -> normalizers.Normalizer:
    strip_accents = config.get("strip_accents")
    return normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(config.get("tokenize_chinese_chars", True)),
        strip_accents=None if strip_accents is None else bool(strip_accents),
        lowercase=bool(config.get("do_lower_case", True)),
    )


def _roberta(vocab_json: str, merges_txt: str, config: dict[str, Any], roles: dict[str, str]) -> Tokenizer:
    """RobertaTokenizer's byte-level BPE from ``vocab.json`` + ``merges.txt``, built as transformers builds it."""
    vocab, merges = models.BPE.read_file(vocab_json, merges_txt)
    tok = Tokenizer(
        models.BPE(vocab, merges, dropout=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False)
    )
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(config.get("add_prefix_space", False)))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(dict.fromkeys(roles.values())))
    return tok


def from_directory(directory: str) -> tuple[Tokenizer, str, dict[str, str] | None]:
    """The tokenizer of ``directory``, which file gave its vocabulary (``tokenizer.json``, ``vocab.txt`` or
    ``vocab.json``), and the special token of each role it names (None: the tokenizer's own names decide)."""
    if not _exists(directory):
        raise TokenizerError(f"{directory}: no such directory")
    config_path = _join(directory, CONFIG)
    config = _json(config_path) if _exists(config_path) else {}
    named = _named_roles(directory, config)
    kind = _tokenizer_class(directory, config)
    bert, roberta = kind in BERT_CLASSES, kind in ROBERTA_CLASSES
    defaults = ROLE_NAMES["BERT"] if bert else ROLE_NAMES["RoBERTa"] if roberta else {}
    roles = {**defaults, **named} if named or defaults else None  # transformers' class defaults, then the files'
    vocab_json, merges_txt = _join(directory, "vocab.json"), _join(directory, "merges.txt")
    tokenizer_json, vocab_txt = _join(directory, "tokenizer.json"), _join(directory, "vocab.txt")
    if _exists(tokenizer_json):
        tok = from_file(tokenizer_json)
        if bert:
            model = json.loads(tok.to_str()).get("model") or {}
            if model.get("type") != "WordPiece":
                raise TokenizerError(f"{tokenizer_json}: {kind} with a {model.get('type')} model (not supported)")
            tok.normalizer = _bert_normalizer(config)
            tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        if roberta:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(config.get("add_prefix_space", False)))
        return tok, "tokenizer.json", roles
    if _exists(vocab_txt):
        if not bert:
            raise TokenizerError(
                f"{directory}: vocab.txt without a {CONFIG} naming BertTokenizer (its casing is unknown): "
                "give --vocab vocab.txt, with --lowercase for an uncased vocabulary"
            )
        tok = from_vocab(vocab_txt)
        tok.normalizer = _bert_normalizer(config)
        return tok, "vocab.txt", roles
    if _exists(vocab_json) and _exists(merges_txt):
        if not roberta:
            raise TokenizerError(
                f"{directory}: vocab.json + merges.txt without a {CONFIG} naming RobertaTokenizer "
                f"(tokenizer_class {kind}): not supported (supported: {SUPPORTED})"
            )
        return _roberta(vocab_json, merges_txt, config, roles or {}), "vocab.json", roles
    raise TokenizerError(f"{directory}: no tokenizer.json, vocab.txt, or vocab.json + merges.txt in it")
