"""Which tokenizers the job handles (the families whose rows are proved right), and who plays each special role.

The rules of the artifact's rows (``pipeline.tokenize``) and of fine-tuning's inputs (``trainer.finetuning``).

A family is supported when its rows are exact (the concatenated rows of a document are ``Tokenizer.encode`` of
its text without specials), every row starts at a word start of the pre-tokenizer's words, and a special token
written in the text stays text. Three families are:

* ``wordpiece``: a WordPiece model behind ``BertPreTokenizer``, with a ``BertNormalizer`` (any settings) or none;
  the sentence path and the chunk cache apply (``pipeline.tokenize.sentence_encoding``);
* ``byte_level_bpe`` (RoBERTa, GPT-2): a BPE model without dropout behind a ``ByteLevel`` pre-tokenizer with its
  regex and without ``add_prefix_space``, no normalizer. Encoded through a cache of chunks cut at the start of whitespace
  runs (``pipeline.tokenize.word_cache``, which proves those cuts; no sentence path); a text over
  ``pipeline.tokenize.encodings.ENCODE_PIECE_CHARS`` (``encodings`` below) is cut only at a line feed followed by a
  non-space character that does not start an added token the tokenizer matches in text (it splits those off first).
  Why that gives the same tokens: in the regex (``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``)
  only the two whitespace alternatives match a line feed, and only a literal space joins the word after it; a
  whitespace run ending in that line feed is matched as the run less its last character (``\\s+(?!\\S)``) and the
  line feed alone, and the run less its last character at the end of a piece is matched whole by ``\\s+(?!\\S)``
  too; the next piece starts with the line feed and a non-space, again the line feed alone
  (``tests/pipeline/test_byte_level_bpe.py`` checks every line feed of real text).

* ``unigram`` (SentencePiece style, what ``tokenizers``' ``SentencePieceUnigramTokenizer`` builds): a Unigram model
  without byte fallback behind a ``Metaspace`` pre-tokenizer (replacement ``▁``, ``split`` true, any
  ``prepend_scheme``), with no normalizer or one made of :data:`UNIGRAM_NORMALIZERS` (``Nmt``, ``NFC``, ``NFD``,
  ``NFKC``, ``NFKD``, ``Lowercase``, ``StripAccents``, ``Replace(Regex(" {2,}"), " ")``; not ``Precompiled``: its
  character map is data, any rule could hide in it). Encoded through a cache of chunks cut at runs of spaces between
  printable ASCII characters (``pipeline.tokenize.word_cache``, which proves those cuts). The ``▁`` of a word
  is inside its first piece, so a row that starts at a word start starts with its ``▁`` (or, for the first word of a
  text under ``prepend_scheme`` first/never, without one). Two rules of this family:

  - *Literal special tokens stay text.* The UnigramTrainer puts the special tokens into the model's vocabulary as
    ordinary pieces with score 0 (the highest a piece has: every other score is a log probability), so the Viterbi
    would pick ``<mask>`` inside text even once the added tokens are no longer matched. The text tokenizer
    (:func:`hide_special_pieces`) renames those pieces, same id and score, to their name followed by ``▁``: Metaspace
    with ``split`` cuts its input before every ``▁``, so no word the model sees holds a ``▁`` after its first
    character, and a piece holding one is never matched. Every other path is unchanged, so a text that does not hold
    the special string gets the ids it had; one that does is covered by the other pieces (the model inserts its unk
    piece wherever no piece of one character matches, so a path always exists; a model without an unk piece raises
    there, and the document is dead-lettered with the tokenizer's message). A very low score instead
    would not do: the model gives unknown characters the lowest score less 10, so it would lower that too, and a
    special piece would then beat the unk path around a character the vocabulary lacks.
  - *Long texts* (over ``encodings.ENCODE_PIECE_CHARS``) are cut only at a space (U+0020) between two printable
    non-space ASCII characters, not next to an added token the tokenizer matches in text, and only when no such token
    holds whitespace or strips it (``metaspace`` in ``encodings.text_pieces``; else the text is encoded whole:
    :func:`piece_cuts_allowed`). Why
    that gives the same tokens: the added tokens are matched the same way in the pieces (none can hold the cut's
    space); every accepted normalizer works per character (Nmt, Lowercase, StripAccents), per normalization segment
    (the NF forms: the space is a starter that neither decomposes nor composes with anything), or on runs of two or
    more spaces (the Replace), and the cut's space stays a lone space between two characters no normalizer makes
    whitespace, so the normalized text is the normalized pieces joined; the second piece then starts with ``▁``,
    which Metaspace neither prepends to again nor joins to the word before (it starts a word in the whole text too).
    A line feed is not such a cut: without Nmt it is not whitespace to Metaspace (it sits inside a word, and the
    piece after it gains a leading ``▁``), and where Nmt makes it a space, a space next to it is collapsed with it in
    the whole text but not in the pieces; either way the pieces gave more tokens than the whole text (the issue's
    588,126 instead of 588,125; WikiText-2 test joined, 1.2M characters, cut at a line feed: 373,958 instead of
    373,957 with SentencePiece's normalizer, 378,905 instead of 378,903 with NFKC alone). ``tests/pipeline/test_unigram.py`` checks
    every 11th allowed and every 5th refused cut of real text under five normalizer and prepend_scheme variants.

In every family a text over ``encodings.ENCODE_PIECE_CHARS`` is encoded whole when an added token the text tokenizer
matches holds whitespace or strips it (:func:`piece_cuts_allowed`): the cuts are at whitespace, and such a token
spans it in the whole text only (a WordPiece or byte-level BPE with an added ``"\n\n"`` gave other ids).

Anything else (Metaspace with another replacement, without split or inside a Sequence, Precompiled, WhitespaceSplit,
a prefix space) is refused in one line naming what was found.
Special tokens are named by role (pad, unk, cls, sep, mask): BERT's ``[PAD] [UNK] [CLS] [SEP] [MASK]`` or
RoBERTa's ``<pad> <unk> <s> </s> <mask>``, or what a tokenizer directory's config names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from tokenizers import Tokenizer
from tokenizers.normalizers import Normalizer

from schemas.format import SPECIAL_TOKENS

WORDPIECE = "wordpiece"
BYTE_LEVEL_BPE = "byte_level_bpe"
UNIGRAM = "unigram"
METASPACE = "\u2581"  # ▁
# The normalizers of the Unigram family's proofs (module docstring), as _component names them.
UNIGRAM_NORMALIZERS = ("Nmt", "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Replace(' {2,}', ' ')")
SUPPORTED = (
    "a WordPiece model behind BertPreTokenizer with a BertNormalizer or none, or a byte-level BPE "
    "(BPE behind ByteLevel without add_prefix_space, no normalizer, no dropout), or a Unigram without byte_fallback "
    f"behind Metaspace (replacement {METASPACE}, split) with a normalizer of {', '.join(UNIGRAM_NORMALIZERS)} or none"
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
    if kind == "Replace":
        pattern = config.get("pattern") or {}
        return f"Replace({next(iter(pattern.values()), None)!r}, {config.get('content')!r})"
    return kind


def _normalizers(config: dict | None) -> list[str]:
    """The members of a normalizer (a Sequence's, flattened; none for no normalizer), as _component names them."""
    if not config:
        return []
    members = config.get("normalizers")
    if config.get("type") == "Sequence" and isinstance(members, list):
        return [name for m in members for name in _normalizers(m)]
    return [_component(config)]


def lowercases(config: dict | None) -> bool:
    """Whether a normalizer (its JSON; a Sequence's members too) lower-cases: a ``Lowercase`` member, or a
    ``BertNormalizer`` with ``lowercase``. What the manifest's ``tokenizer.lowercase`` says."""
    if not config:
        return False
    members = config.get("normalizers")
    if config.get("type") == "Sequence" and isinstance(members, list):
        return any(lowercases(m) for m in members if isinstance(m, dict))
    return config.get("type") == "Lowercase" or (
        config.get("type") == "BertNormalizer" and bool(config.get("lowercase"))
    )


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
    if model == "Unigram" and pre == "Metaspace":
        unproved = [n for n in _normalizers(config.get("normalizer")) if n not in UNIGRAM_NORMALIZERS]
        if pre_config.get("replacement") != METASPACE:
            pre += f" with replacement {pre_config.get('replacement')!r}"
        elif not pre_config.get("split", True):
            pre += " without split"
        elif model_config.get("byte_fallback"):
            model += " with byte_fallback"
        elif unproved:
            norm += f" (not proved: {', '.join(unproved)})"
        else:
            return UNIGRAM
    raise TokenizerError(
        f"model {model}, pre-tokenizer {pre}, normalizer {norm}: not supported (supported: {SUPPORTED})"
    )


def hide_special_pieces(config: dict, tokens: set[str]) -> int:
    """Rename the Unigram pieces named in ``tokens`` (in a tokenizer's JSON ``config``, in place) to names the model
    never matches in text: the name followed by ``▁`` (more until no piece has it); same id, same score. Returns how
    many were renamed. Why that is exact, and not a low score, in the module docstring."""
    vocab = (config.get("model") or {}).get("vocab") or []
    taken = {entry[0] for entry in vocab}
    hidden = 0
    for entry in vocab:
        if entry[0] in tokens:
            name = entry[0] + METASPACE
            while name in taken:
                name += METASPACE
            taken.add(name)
            entry[0] = name
            hidden += 1
    return hidden


def piece_cuts_allowed(added_tokens: list[dict], normalizer: Normalizer | None = None) -> bool:
    """Whether a long text may be cut in pieces for the added tokens a text tokenizer matches (every family): none
    holds whitespace, holds a character that ``normalizer`` makes whitespace (when the token is matched in the
    normalized text, ``normalized`` true: ``"of\u200bthe"`` under Nmt is ``"of the"``), or strips whitespace; else
    long texts stay whole. Every family's cut is at whitespace of the raw text (a line feed or a space), which such
    a token would match across (``"\n\n"``, ``"New York"``, ``"of\u200bthe"`` matching the normalized
    ``"of the"``) or take into itself (``rstrip``) in the whole text but not in the pieces (module docstring). The
    character test is exact for the accepted normalizers: each works per character, per normalization segment (the
    NF forms: a segment's characters are a starter and what combines with it, and a character that becomes
    whitespace in a segment is whitespace alone too, as U+00A0 or U+2000..U+200A under NFKC) or on runs of spaces
    (the Replace, which keeps a space a space); so a token's normalized content holds whitespace exactly when one
    of its characters normalizes to some."""

    def spaced(token: dict) -> bool:
        content = str(token.get("content", ""))
        if any(c.isspace() for c in content):
            return True
        if normalizer is None or not token.get("normalized", True):
            return False
        return any(ch.isspace() for c in content for ch in normalizer.normalize_str(c))

    return not any(t.get("lstrip") or t.get("rstrip") or spaced(t) for t in added_tokens)


def special_roles(tok: Tokenizer, named: Mapping[str, str] | None = None) -> dict[str, str]:
    """The token of each role: what ``named`` (a tokenizer directory's files) names, the other roles from the first
    of :data:`ROLE_NAMES` whose five tokens the tokenizer has. A role token (unk aside) that is an added token not
    marked special is refused: the text tokenizer (:func:`text_config`) would still match it in text, and rows
    would hold the mask or separator id where the text wrote the string."""
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
    plain = {t.content for t in tok.get_added_tokens_decoder().values() if not t.special}
    unmarked = [f"{role} {token!r}" for role, token in roles.items() if role != "unk" and token in plain]
    if unmarked:
        raise TokenizerError(
            f'the special tokens {", ".join(unmarked)} are added tokens marked "special": false, so text holding '
            "them would get their ids (mark them special)"
        )
    return roles


def named_token(value: object) -> str | None:
    """A special token as a Hugging Face file writes it: a string, or an AddedToken object with ``content``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def named_roles(sources: list[dict]) -> dict[str, str]:
    """Role -> token as a Hugging Face directory's files name them (``<role>_token``), given their JSON in order:
    ``special_tokens_map.json``, then ``tokenizer_config.json`` (the later wins, as in transformers). Roles no file
    names are left out. The one rule for the pipeline's ``--tokenizer-from`` and the trainer's ``--init``."""
    named: dict[str, str] = {}
    for source in sources:
        for role in SPECIAL_TOKENS:
            token = named_token(source.get(f"{role}_token"))
            if token is not None:
                named[role] = token
    return named


def text_config(config: dict, roles: Mapping[str, str]) -> dict:
    """A tokenizer's JSON ``config`` (changed in place and returned) made into the tokenizer for text: special tokens
    written in a text are text. Special added tokens are no longer matched, except the unk role's (WikiText's
    ``<unk>``); a Unigram model's special pieces are renamed out of its Viterbi's reach (:func:`hide_special_pieces`).
    Same ids. The one rule for the artifact's rows and for fine-tuning's inputs."""
    unk = roles["unk"]
    added = config.get("added_tokens") or []
    config["added_tokens"] = [t for t in added if not t.get("special") or t.get("content") == unk]
    if (config.get("model") or {}).get("type") == "Unigram":
        hide_special_pieces(
            config, ({t.get("content") for t in added if t.get("special")} | set(roles.values())) - {unk}
        )
    return config


def text_tokenizer(config: dict, roles: Mapping[str, str]) -> Tokenizer:
    """The tokenizer for text (:func:`text_config` of ``config``, changed in place), built; a :class:`TokenizerError`
    in one line when it would give a plain added token another id. ``tokenizers`` numbers the added tokens beyond
    its model's vocabulary in their order, whatever ids the file gives, so a special added token dropped from that
    range shifts every later one down by one: the rows would hold the next token's id (``<ent>`` added as special,
    then ``<new>``, ``<old>``: ``<old>`` would get ``<new>``'s id). Such a tokenizer is refused, not shifted."""
    declared = {str(t.get("content")): t.get("id") for t in config.get("added_tokens") or []}
    tok = Tokenizer.from_str(json.dumps(text_config(config, roles)))
    kept = [str(t.get("content")) for t in config.get("added_tokens") or []]
    moved = [(c, declared[c], tok.token_to_id(c)) for c in kept if tok.token_to_id(c) != declared[c]]
    if moved:
        content, was, now = moved[0]
        dropped = sorted((i, c) for c, i in declared.items() if c not in kept and isinstance(i, int) and i < was)
        raise TokenizerError(
            f"the added token {content!r} (id {was}) follows the special added token(s) "
            f"{', '.join(repr(c) for _, c in dropped) or '?'}: spanprep reads special tokens written in text as text, "
            f"and without them the tokenizers library numbers {content!r} {now}; not supported (declare plain added "
            "tokens before special ones)"
        )
    return tok


def word_continuing_ids(tokenizer: Tokenizer) -> np.ndarray | None:
    """Per token id, whether the token can only continue a word (a row starting with it starts inside a word):
    WordPiece's ``##`` tokens behind ``BertPreTokenizer``, which never begin one of its words; a Unigram's pieces
    without a leading ``▁`` behind ``Metaspace`` (split, ``prepend_scheme`` always: every word of the text starts
    with its ``▁``, and no later piece of a word holds one), but its unk piece. Added tokens never. None for other
    tokenizers (their word starts are not a property of the token)."""
    config = json.loads(tokenizer.to_str())
    model, pre = config.get("model") or {}, config.get("pre_tokenizer") or {}
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    continuing = np.zeros(size, dtype=bool)
    prefix = model.get("continuing_subword_prefix")
    if model.get("type") == "WordPiece" and pre.get("type") == "BertPreTokenizer" and prefix:
        for token, i in tokenizer.get_vocab(with_added_tokens=False).items():
            if token.startswith(prefix) and 0 <= i < size:
                continuing[i] = True
    elif (
        model.get("type") == "Unigram"
        and pre.get("type") == "Metaspace"
        and pre.get("replacement") == METASPACE
        and pre.get("split", True)
        and pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True) else "never") == "always"
    ):
        pieces = [str(entry[0]) for entry in model.get("vocab") or []][:size]  # by id: a piece may be there twice
        continuing[: len(pieces)] = [not piece.startswith(METASPACE) for piece in pieces]
        if isinstance(model.get("unk_id"), int) and 0 <= model["unk_id"] < size:
            continuing[model["unk_id"]] = False
    else:
        return None
    continuing[[i for i in tokenizer.get_added_tokens_decoder() if 0 <= i < size]] = False
    return continuing
