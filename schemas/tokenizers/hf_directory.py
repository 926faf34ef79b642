"""The tokenizer of a Hugging Face tokenizer directory, built as ``transformers.AutoTokenizer`` builds it.

A continued-pre-training artifact must use exactly the checkpoint's tokenizer: ``build_shards --tokenizer-from DIR``
reads what ``AutoTokenizer.from_pretrained(DIR)`` reads (transformers 5) and gives the same ids for text (no special
tokens around it), or refuses the directory in one line naming the file and field; the trainer's ``--init`` and
``finetune`` read a checkpoint's tokenizer with it too. This module is the one place that reads a directory; what it
cannot read as transformers does, it refuses:

* **The class.** ``tokenizer_config.json``'s ``tokenizer_class``; else ``config.json``'s ``tokenizer_class`` or
  ``model_type`` (``bert``, ``distilbert``, ``electra``: BERT's class; ``roberta``); else a ``vocab.txt`` with a
  ``do_lower_case`` in the config is BERT's (the only class that reads a vocab.txt: SpanBERT's released model comes
  so; AutoTokenizer itself cannot load that directory, ``BertTokenizer.from_pretrained`` can); else the
  tokenizer.json as it is (transformers' ``TokenizersBackend``, also named ``PreTrainedTokenizerFast``). Any other
  class (XLMRoberta and T5 rebuild their Unigram from the files, Albert does not load from them, a name transformers
  does not know) and any other ``model_type`` are refused.
* **BERT's class** (``BertTokenizer``; ``DistilBertTokenizer`` and ``ElectraTokenizer`` are the same class, also
  lower-casing by default): transformers keeps only the vocabulary (``tokenizer.json``'s model, else ``vocab.txt``
  as ``tokenizers``' reader reads it: lines end at a line feed only, trailing whitespace trimmed) and builds
  ``WordPiece(vocab, unk_token)`` with its defaults (``##``, ``max_input_chars_per_word`` 100, whatever the file
  says), ``BertNormalizer(clean_text=True, handle_chinese_chars=tokenize_chinese_chars, strip_accents=strip_accents,
  lowercase=do_lower_case)`` (defaults true, true, unset: it follows the casing) and ``BertPreTokenizer``.
* **RoBERTa's class**: the vocabulary and merges (``tokenizer.json``'s model, else ``vocab.json`` + ``merges.txt``)
  in ``BPE(dropout=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False)`` (so
  ``ignore_merges``, ``byte_fallback`` and ``unk_token`` take their defaults), behind ``ByteLevel(add_prefix_space)``
  from the config (``families.family`` then refuses a prefix space), no normalizer.
* **Settings** the classes read must be JSON booleans (``"false"`` as a string makes transformers fail).
* **Added tokens**: the config's ``added_tokens_decoder`` when it has one (then ``special_tokens_map.json`` is not
  read either); else ``added_tokens.json`` (special when a role or an additional special token names it) and
  ``tokenizer.json``'s ``added_tokens``. They are added in id order, then each role's token that the vocabulary
  has, as a special added token; an added token that does not land on the id its file gives is refused.
* **The special token of each role**: the class's defaults (BERT's or RoBERTa's names), then
  ``special_tokens_map.json``, then the config's ``unk_token`` ... ``mask_token``.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from schemas.tokenizers.families import ROLE_NAMES, TokenizerError, named_roles, named_token
from schemas.tokenizers.files import Files, from_file, read_vocab_txt
from schemas.tokenizers.rust_calls import guarded

BERT_CLASSES = (
    "BertTokenizer",
    "BertTokenizerFast",
    "DistilBertTokenizer",
    "DistilBertTokenizerFast",
    "ElectraTokenizer",
    "ElectraTokenizerFast",
)
ROBERTA_CLASSES = ("RobertaTokenizer", "RobertaTokenizerFast")
AS_IS_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")  # tokenizer.json as it is
MODEL_TYPES = {
    "bert": "BertTokenizer",
    "distilbert": "DistilBertTokenizer",
    "electra": "ElectraTokenizer",
    "roberta": "RobertaTokenizer",
}
CLASSES = ", ".join((*BERT_CLASSES, *ROBERTA_CLASSES, *AS_IS_CLASSES))
CONFIG = "tokenizer_config.json"
# The settings the classes read, which must be JSON booleans (strip_accents may also be null: follow the casing).
BOOLEANS = ("do_lower_case", "tokenize_chinese_chars", "strip_accents", "add_prefix_space", "trim_offsets")
ADDED_TOKEN_FIELDS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


def _join(files: Files, directory: str, name: str) -> str:
    return files.join(directory.rstrip("/"), name)


def _exists(files: Files, path: str) -> bool:
    return files.exists(path)


def _json(files: Files, path: str) -> dict[str, Any]:
    raw = files.read(path)
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TokenizerError(f"{path}: not a JSON file: {e}") from None
    if not isinstance(value, dict):
        raise TokenizerError(f"{path}: not a JSON object")
    return value


def _tokenizer_class(files: Files, directory: str, config: dict[str, Any], has_vocab_txt: bool) -> str | None:
    """The class AutoTokenizer builds (None: the tokenizer.json as it is); unknown ones refused."""
    path, name = _join(files, directory, CONFIG), config.get("tokenizer_class")
    if name is None:
        model_path = _join(files, directory, "config.json")
        model = _json(files, model_path) if _exists(files, model_path) else {}
        path, name = model_path, model.get("tokenizer_class")
        if name is None and model.get("model_type") is not None:
            kind = model["model_type"]
            if kind not in MODEL_TYPES:
                raise TokenizerError(
                    f"{model_path}: model_type {kind!r}: its tokenizer is not supported (supported model types: "
                    f"{', '.join(MODEL_TYPES)}; or a {CONFIG} naming one of {CLASSES})"
                )
            return MODEL_TYPES[kind]
    if name is None:
        return "BertTokenizer" if has_vocab_txt and isinstance(config.get("do_lower_case"), bool) else None
    if name not in (*BERT_CLASSES, *ROBERTA_CLASSES, *AS_IS_CLASSES):
        raise TokenizerError(
            f"{path}: tokenizer_class {name!r}: not supported (transformers builds that class from the files its own "
            f"way, or cannot; supported: {CLASSES})"
        )
    return name


def _check_booleans(config: dict[str, Any], path: str) -> None:
    for key in BOOLEANS:
        value = config.get(key)
        if key in config and not isinstance(value, bool) and not (key == "strip_accents" and value is None):
            raise TokenizerError(f"{path}: {key} is {value!r}, not true or false (transformers fails on it)")


def _added_token(entry: object, where: str) -> dict[str, Any]:
    """An added token as a file writes it, checked as transformers' ``AddedToken(**entry)`` would take it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("content"), str) or not entry["content"]:
        raise TokenizerError(f"{where}: not an added token (an object with a non-empty content string)")
    unknown = sorted(set(entry) - set(ADDED_TOKEN_FIELDS) - {"id", "__type"})
    flags = [k for k in ADDED_TOKEN_FIELDS[1:] if k in entry and not isinstance(entry[k], bool)]
    if unknown or flags:
        raise TokenizerError(f"{where}: fields {', '.join(unknown + flags)} are not an added token's true/false flags")
    return {k: entry[k] for k in ADDED_TOKEN_FIELDS if k in entry}


def _declared_added_tokens(
    files: Files, directory: str, config: dict[str, Any], named: dict[str, str], file_added: list
) -> list[tuple[int, dict[str, Any], str]]:
    """(id, added token, where it is declared), by id, from the files transformers reads them from."""
    out: list[tuple[int, dict[str, Any], str]] = []
    decoder = config.get("added_tokens_decoder")
    if decoder is not None:
        where = f"{_join(files, directory, CONFIG)}: added_tokens_decoder"
        if not isinstance(decoder, dict):
            raise TokenizerError(f"{where}: not an object of id -> added token")
        for key, entry in decoder.items():
            if not str(key).isdigit():
                raise TokenizerError(f"{where}: key {key!r} is not a token id")
            out.append((int(key), _added_token(entry, f"{where}[{key!r}]"), where))
        return sorted(out, key=lambda t: t[0])
    path = _join(files, directory, "added_tokens.json")
    if _exists(files, path):
        extra = config.get("additional_special_tokens") or config.get("extra_special_tokens") or []
        specials = set(named.values()) | {t for t in map(named_token, extra if isinstance(extra, list) else []) if t}
        for content, i in _json(files, path).items():
            if not isinstance(i, int) or isinstance(i, bool) or i < 0 or not content:
                raise TokenizerError(f"{path}: {content!r}: {i!r} is not a token id")
            special = content in specials
            out.append((i, {"content": content, "normalized": not special, "special": special}, path))
    for n, entry in enumerate(file_added):
        where = f"{_join(files, directory, 'tokenizer.json')}: added_tokens[{n}]"
        i = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(i, int) or isinstance(i, bool):
            raise TokenizerError(f"{where}: no id")
        out.append((i, _added_token(entry, where), where))
    return sorted(out, key=lambda t: t[0])


def _add_tokens(tok: Tokenizer, declared: list[tuple[int, dict[str, Any], str]], roles: dict[str, str]) -> None:
    """transformers' order: the declared added tokens by id, then each role's token the vocabulary holds (as a
    special added token); a declared token must land on its id."""
    tok.add_tokens([AddedToken(**token) for _, token, _ in declared])
    for i, token, where in declared:
        got = tok.token_to_id(token["content"])
        if got != i:
            raise TokenizerError(
                f"{where}: added token {token['content']!r} has id {i} there, but transformers gives it id {got}"
            )
    present = {t.content for t in tok.get_added_tokens_decoder().values()}
    roles_to_add = [t for t in dict.fromkeys(roles.values()) if t not in present and tok.token_to_id(t) is not None]
    tok.add_tokens([AddedToken(t, special=True) for t in roles_to_add])


def _bert(vocab: dict[str, int], config: dict[str, Any], roles: dict[str, str]) -> Tokenizer:
    """transformers' ``BertTokenizer`` over ``vocab``: WordPiece with its defaults, the config's normalizer."""
    strip_accents = config.get("strip_accents")
    tok = Tokenizer(models.WordPiece(vocab, unk_token=roles["unk"]))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=config.get("tokenize_chinese_chars", True),
        strip_accents=strip_accents,
        lowercase=config.get("do_lower_case", True),
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    cls, sep = roles["cls"], roles["sep"]
    if cls in vocab and sep in vocab:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
        )
    return tok


def _roberta(vocab: dict[str, int], merges: list[tuple[str, str]], config: dict[str, Any], roles: dict[str, str]):
    """transformers' ``RobertaTokenizer`` over ``vocab`` and ``merges``: byte-level BPE as the class builds it."""
    tok = Tokenizer(
        models.BPE(vocab, merges, dropout=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False)
    )
    prefix = config.get("add_prefix_space", False)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    tok.decoder = decoders.ByteLevel()
    cls, sep = roles["cls"], roles["sep"]
    if cls in vocab and sep in vocab:
        tok.post_processor = processors.RobertaProcessing(
            (sep, vocab[sep]), (cls, vocab[cls]), trim_offsets=config.get("trim_offsets", True), add_prefix_space=prefix
        )
    return tok


def _model_vocab(tokenizer_json: str, model: dict[str, Any], kind: str | None, expected: str) -> dict[str, int]:
    if model.get("type") != expected:
        raise TokenizerError(f"{tokenizer_json}: {kind} with a {model.get('type')} model (not supported)")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise TokenizerError(f"{tokenizer_json}: model.vocab is not an object of token -> id")
    return vocab


def _merges(tokenizer_json: str, model: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for n, merge in enumerate(model.get("merges") or []):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise TokenizerError(f"{tokenizer_json}: model.merges[{n}] is not a pair of tokens")
        out.append((pair[0], pair[1]))
    return out


def _read_bpe_files(files: Files, vocab_json: str, merges_txt: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """``vocab.json`` + ``merges.txt`` read by ``tokenizers``' own reader (what transformers hands them to)."""
    vocab = _json(files, vocab_json)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()):
        raise TokenizerError(f"{vocab_json}: not an object of token -> id")
    return guarded(
        lambda: models.BPE.read_file(vocab_json, merges_txt),
        lambda message: TokenizerError(f"{merges_txt}: not a merges file for {vocab_json}: {message}"),
    )


def from_directory(directory: str, files: Files) -> tuple[Tokenizer, str, dict[str, str] | None]:
    """The tokenizer of ``directory``, which file gave its vocabulary (``tokenizer.json``, ``vocab.txt`` or
    ``vocab.json``), and the special token of each role it names (None: the tokenizer's own names decide). The files
    are read by ``files`` (``schemas.tokenizers.files``: the jobs read through Beam, the trainer local paths)."""
    if not _exists(files, directory):
        raise TokenizerError(f"{directory}: no such directory")
    config_path = _join(files, directory, CONFIG)
    config = _json(files, config_path) if _exists(files, config_path) else {}
    vocab_json, merges_txt = _join(files, directory, "vocab.json"), _join(files, directory, "merges.txt")
    tokenizer_json, vocab_txt = _join(files, directory, "tokenizer.json"), _join(files, directory, "vocab.txt")
    has_json = _exists(files, tokenizer_json)
    # the vocab.txt rule applies without a tokenizer.json only
    kind = _tokenizer_class(files, directory, config, _exists(files, vocab_txt) and not has_json)
    _check_booleans(config, config_path)
    bert, roberta = kind in BERT_CLASSES, kind in ROBERTA_CLASSES
    # with an added_tokens_decoder, transformers reads no special_tokens_map.json
    special_map = _join(files, directory, "special_tokens_map.json")
    legacy = "added_tokens_decoder" not in config and _exists(files, special_map)
    named = named_roles(([_json(files, special_map)] if legacy else []) + [config])  # the config's own entries win
    defaults = ROLE_NAMES["BERT"] if bert else ROLE_NAMES["RoBERTa"] if roberta else {}
    roles = {**defaults, **named} if named or defaults else None  # transformers' class defaults, then the files'
    file_config = json.loads(from_file(tokenizer_json, files).to_str()) if has_json else {}
    if has_json and bert:
        tok, source = (
            _bert(_model_vocab(tokenizer_json, file_config.get("model") or {}, kind, "WordPiece"), config, roles or {}),
            "tokenizer.json",
        )
    elif has_json and roberta:
        model = file_config.get("model") or {}
        vocab = _model_vocab(tokenizer_json, model, kind, "BPE")
        tok, source = _roberta(vocab, _merges(tokenizer_json, model), config, roles or {}), "tokenizer.json"
    elif has_json:
        tok, source = from_file(tokenizer_json, files), "tokenizer.json"
        file_config["added_tokens"] = []  # already in it
    elif bert and _exists(files, vocab_txt):
        tok, source = _bert(read_vocab_txt(vocab_txt, files), config, roles or {}), "vocab.txt"
    elif roberta and _exists(files, vocab_json) and _exists(files, merges_txt):
        tok, source = _roberta(*_read_bpe_files(files, vocab_json, merges_txt), config, roles or {}), "vocab.json"
    elif _exists(files, vocab_txt):
        raise TokenizerError(
            f"{directory}: vocab.txt without a {CONFIG} naming BertTokenizer or giving do_lower_case (its casing is "
            "unknown): give --vocab vocab.txt, with --lowercase for an uncased vocabulary"
        )
    elif _exists(files, vocab_json) and _exists(files, merges_txt):
        raise TokenizerError(
            f"{directory}: vocab.json + merges.txt without a {CONFIG} naming RobertaTokenizer "
            f"(tokenizer_class {kind}): not supported"
        )
    else:
        raise TokenizerError(f"{directory}: no tokenizer.json, vocab.txt, or vocab.json + merges.txt in it")
    declared = _declared_added_tokens(files, directory, config, named, file_config.get("added_tokens") or [])
    _add_tokens(tok, declared, roles or {})
    return tok, source, roles
