"""Which tokenizers the job handles (the families whose rows are proved right), and who plays each special role.

A family is supported when its rows are exact (the concatenated rows of a document are ``Tokenizer.encode`` of
its text without specials), every row starts at a word start of the pre-tokenizer's words, and a special token
written in the text stays text. Two families are:

* ``wordpiece``: a WordPiece model behind ``BertPreTokenizer``, with a ``BertNormalizer`` (any settings) or none;
  the sentence path and the chunk cache apply (``sentence_encoding``);
* ``byte_level_bpe`` (RoBERTa, GPT-2): a BPE model without dropout behind a ``ByteLevel`` pre-tokenizer with its
  regex and without ``add_prefix_space``, no normalizer. Encoded whole (no sentence path, no cache); a text over
  ``encodings.ENCODE_PIECE_CHARS`` is cut only at a line feed followed by a non-space character that does not
  start an added token the tokenizer matches in text (it splits those off first). Why that gives
  the same tokens: in the regex (``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``)
  only the two whitespace alternatives match a line feed, and only a literal space joins the word after it; a
  whitespace run ending in that line feed is matched as the run less its last character (``\\s+(?!\\S)``) and the
  line feed alone, and the run less its last character at the end of a piece is matched whole by ``\\s+(?!\\S)``
  too; the next piece starts with the line feed and a non-space, again the line feed alone
  (``tests/pipeline/test_byte_level_bpe.py`` checks every line feed of real text).

Anything else (Unigram/Metaspace, WhitespaceSplit, a prefix space) is refused in one line naming what was found.
Special tokens are named by role (pad, unk, cls, sep, mask): BERT's ``[PAD] [UNK] [CLS] [SEP] [MASK]`` or
RoBERTa's ``<pad> <unk> <s> </s> <mask>``, or what a tokenizer directory's config names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tokenizers import Tokenizer

from schemas.format import SPECIAL_TOKENS

WORDPIECE = "wordpiece"
BYTE_LEVEL_BPE = "byte_level_bpe"
SUPPORTED = (
    "a WordPiece model behind BertPreTokenizer with a BertNormalizer or none, or a byte-level BPE "
    "(BPE behind ByteLevel without add_prefix_space, no normalizer, no dropout)"
)
# Known sets of special-token names, by role, tried in this order when nothing names them.
ROLE_NAMES: dict[str, dict[str, str]] = {
    "BERT": dict(SPECIAL_TOKENS),
    "RoBERTa": {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"},
}


class TokenizerError(ValueError):
    pass


def _component(config: dict | None) -> str:
    """A normalizer's or pre-tokenizer's type as its JSON names it; a Sequence with its members."""
    if not config:
        return "none"
    kind = str(config.get("type"))
    members = config.get("normalizers") or config.get("pretokenizers")
    if kind == "Sequence" and isinstance(members, list):
        return f"Sequence[{', '.join(_component(m) for m in members)}]"
    return kind


def family(tok: Tokenizer) -> str:
    """The family of ``tok``, or :class:`TokenizerError` naming its model, pre-tokenizer and normalizer."""
    config = json.loads(tok.to_str())
    model_config = config.get("model") or {}
    model = str(model_config.get("type"))
    pre_config = config.get("pre_tokenizer") or {}
    pre, norm = _component(pre_config), _component(config.get("normalizer"))
    if model == "WordPiece" and pre == "BertPreTokenizer" and norm in ("none", "BertNormalizer"):
        return WORDPIECE
    if model == "BPE" and pre == "ByteLevel" and norm == "none":
        if pre_config.get("add_prefix_space"):
            pre += " with add_prefix_space"
        elif not pre_config.get("use_regex", True):
            pre += " without its regex"
        elif model_config.get("dropout") is not None:
            model += " with dropout"
        else:
            return BYTE_LEVEL_BPE
    raise TokenizerError(
        f"model {model}, pre-tokenizer {pre}, normalizer {norm}: not supported (supported: {SUPPORTED})"
    )


def special_roles(tok: Tokenizer, named: Mapping[str, str] | None = None) -> dict[str, str]:
    """The token of each role: what ``named`` (a tokenizer directory's files) names, the other roles from the first
    of :data:`ROLE_NAMES` whose five tokens the tokenizer has."""
    base = next(
        (names for names in ROLE_NAMES.values() if all(tok.token_to_id(t) is not None for t in names.values())), {}
    )
    roles = {role: (named or {}).get(role) or base.get(role, "") for role in SPECIAL_TOKENS}
    missing = [
        f"{role} {token!r}" if token else role
        for role, token in roles.items()
        if not token or tok.token_to_id(token) is None
    ]
    if missing:
        known = "; ".join(f"{name}'s {' '.join(names.values())}" for name, names in ROLE_NAMES.items())
        raise TokenizerError(f"the tokenizer lacks the special tokens {', '.join(missing)} (known sets: {known})")
    return roles
