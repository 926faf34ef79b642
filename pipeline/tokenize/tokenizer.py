"""The WordPiece tokenizer of an artifact: load, build from a vocab.txt, or train; describe.

Whatever its source, the tokenizer ends up as one Hugging Face ``tokenizers`` JSON string that
the job ships to its workers (``DoFn.setup`` rebuilds it) and writes to ``ARTIFACT/tokenizer.json``.
Truncation and padding are always disabled: rows are cut by the packer, never by the tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pipeline.files import BEAM_FILES
from schemas.format import SPECIAL_TOKENS  # BERT's special tokens, by role: what this module builds and trains
from schemas.tokenizers.families import (
    WORDPIECE,
    TokenizerError,
    family,
    lowercases,
    special_roles,
    text_tokenizer,
)
from schemas.tokenizers.files import read_vocab_txt
from schemas.tokenizers.rust_calls import guarded

log = logging.getLogger(__name__)

# SpanBERT used a cased vocabulary of about 29k WordPieces (BERT-base-cased has 28,996).
DEFAULT_VOCAB_SIZE = 28996


def _bert_pipeline(tok: Tokenizer, lowercase: bool) -> Tokenizer:
    # clean_text removes control characters, handle_chinese_chars isolates CJK characters;
    # accents are stripped only when lowercasing, as in BERT.
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _add_post_processor(tok: Tokenizer) -> Tokenizer:
    cls, sep = SPECIAL_TOKENS["cls"], SPECIAL_TOKENS["sep"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))],
    )
    return tok


def from_vocab(path: str, lowercase: bool = False) -> Tokenizer:
    """A BERT WordPiece tokenizer from a ``vocab.txt`` (local or any Beam filesystem; read as transformers reads it:
    ``schemas.tokenizers.files.read_vocab_txt``) with BERT's special tokens."""
    vocab = read_vocab_txt(path, BEAM_FILES)
    missing = [f"{role} {t}" for role, t in SPECIAL_TOKENS.items() if t not in vocab]
    if missing:
        raise TokenizerError(f"{path}: vocabulary lacks the special tokens {', '.join(missing)}")
    tok = Tokenizer(models.WordPiece(vocab, unk_token=SPECIAL_TOKENS["unk"], max_input_chars_per_word=100))
    tok.add_special_tokens(list(SPECIAL_TOKENS.values()))
    return _add_post_processor(_bert_pipeline(tok, lowercase))


class _Continuation(dict):
    """``str.translate`` table: a character inside a word -> a private-use twin of it.

    Plane-0 characters map to plane 15, plane-1 characters to plane 16 (both private use); rarer
    characters are left as they are (they only occur as single-character CJK words here).
    """

    def __missing__(self, c: int) -> int:
        if c < 0xFFFE:
            v = 0xF0000 + c
        elif 0x10000 <= c < 0x1FFFE:
            v = 0x100000 + (c - 0x10000)
        else:
            v = c
        self[c] = v
        return v


_CONTINUATION = _Continuation()


def _is_private(c: str) -> bool:
    return ord(c) >= 0xF0000


def _from_private(token: str) -> str:
    out = []
    for ch in token:
        c = ord(ch)
        if 0xF0000 <= c < 0x100000:
            out.append(chr(c - 0xF0000))
        elif c >= 0x100000:
            out.append(chr(c - 0x100000 + 0x10000))
        else:
            out.append(ch)
    return "".join(out)


def train(
    texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE, lowercase: bool = False, min_frequency: int = 2
) -> Tokenizer:
    """Train a BERT-style WordPiece vocabulary on ``texts``; the same texts give the same bytes.

    ``tokenizers``' own WordPiece trainer is not deterministic: it numbers the ``##``
    continuation symbols in hash-map order, and those numbers break ties between equally
    frequent merges, so two runs on the same text differ. Here every character inside a word
    is first replaced by a private-use twin, so continuation symbols are ordinary characters
    of the alphabet (which the trainer sorts), the BPE trainer learns the merges, and the
    twins become ``##`` pieces again: the WordPiece training procedure, with deterministic ties.
    """
    shaper = _bert_pipeline(Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk"])), lowercase)
    normalizer, pre_tokenizer = shaper.normalizer, shaper.pre_tokenizer

    def words(text: str) -> str:
        pieces = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
        return " ".join(w[0] + w[1:].translate(_CONTINUATION) for w, _ in pieces if not any(_is_private(c) for c in w))

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS.values()),
        show_progress=False,
    )
    bpe.train_from_iterator((words(t) for t in texts), trainer)
    vocab: dict[str, int] = {}
    for token, _ in sorted(bpe.get_vocab().items(), key=lambda kv: kv[1]):
        if token not in SPECIAL_TOKENS.values() and _is_private(token[0]):
            token = "##" + _from_private(token)
        else:
            token = _from_private(token)
        vocab.setdefault(token, len(vocab))
    tok = Tokenizer(models.WordPiece(vocab, unk_token=SPECIAL_TOKENS["unk"], max_input_chars_per_word=100))
    tok.add_special_tokens(list(SPECIAL_TOKENS.values()))
    return _add_post_processor(_bert_pipeline(tok, lowercase))


def _spec_from_state(packed: bytes, source: str, lowercase: bool, family: str, roles) -> TokenizerSpec:
    return TokenizerSpec(zlib.decompress(packed).decode("utf-8"), source, lowercase, family, roles)


@dataclass(frozen=True)
class TokenizerSpec:
    """Everything workers and the manifest need to know about the tokenizer, picklable."""

    json: str
    source: str  # file | vocab | directory | trained
    lowercase: bool
    family: str = WORDPIECE  # schemas/tokenizers/families.py
    roles: tuple[tuple[str, str], ...] = tuple(SPECIAL_TOKENS.items())  # (role, token) of pad unk cls sep mask

    def __reduce__(self):
        # Beam pickles every DoFn that holds the spec (twice: its check at construction, then the graph) and
        # bz2-compresses the pickle, then decompresses it for every bundle processor a worker builds: a 1.2 MB
        # byte-level BPE cost ~1 s of a 7 s job that way. The JSON travels zlib-compressed (a quarter of the size, and
        # bz2 works in proportion to its input), compressed once per spec (``_packed``).
        return _spec_from_state, (
            self._packed,
            self.source,
            self.lowercase,
            self.family,
            self.roles,
        )

    @cached_property
    def _packed(self) -> bytes:
        return zlib.compress(self.json.encode("utf-8"), 6)

    @property
    def special_tokens(self) -> dict[str, str]:
        return dict(self.roles)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.json.encode("utf-8")).hexdigest()

    def load(self) -> Tokenizer:
        return Tokenizer.from_str(self.json)

    def load_for_text(self) -> Tokenizer:
        """The tokenizer that encodes documents: special tokens written in the text are plain text.

        ``[MASK]``, ``[SEP]``, ``[CLS]``, ``[PAD]`` (RoBERTa's ``<mask>`` ..., and any other special added
        token) typed in a document are split like any other text (``[``, ``MA``, ``##SK``, ``]``), so rows
        never hold their ids; only the unk role's token is still matched (WikiText's ``<unk>`` becomes it).
        Same ids, same vocabulary: the tokens stay in the vocabulary, the text is just no longer scanned for them.
        A Unigram model also holds them as pieces its Viterbi would pick: those are renamed out of reach
        (``families.hide_special_pieces``; same ids and scores).
        """
        return text_tokenizer(json.loads(self.json), self.special_tokens)

    def describe(self) -> dict:
        tok = self.load()
        ids = {name: tok.token_to_id(token) for name, token in self.roles}
        return {
            "file": "tokenizer.json",
            "sha256": self.sha256,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "lowercase": self.lowercase,
            "source": self.source,
            "special_tokens": self.special_tokens,
            "special_token_ids": ids,
        }


def make_spec(
    tok: Tokenizer, source: str, lowercase: bool | None = None, roles: Mapping[str, str] | None = None
) -> TokenizerSpec:
    """Check that the job handles the tokenizer (``families.family``), find its special tokens by role (``roles``
    names them, else a known set of names), disable truncation/padding, and freeze the tokenizer to JSON. The text
    tokenizer encodes a probe text here, so a tokenizer that makes Rust panic when it encodes is refused now, in one
    line, and not in a worker. ``lowercase`` (None: whether the normalizer lower-cases) goes to the manifest."""
    kind = family(tok)
    found = special_roles(tok, roles)
    tok.no_truncation()
    tok.no_padding()
    if lowercase is None:
        lowercase = lowercases(json.loads(tok.to_str()).get("normalizer"))
    spec = TokenizerSpec(json=tok.to_str(), source=source, lowercase=lowercase, family=kind, roles=tuple(found.items()))
    text_tok = guarded(spec.load_for_text, TokenizerError)  # refuses one whose added tokens' ids would move
    guarded(
        lambda: text_tok.encode(_PROBE, add_special_tokens=False),
        lambda message: TokenizerError(f"it fails on a probe text: {message}"),
    )
    return spec


# Letters, digits, punctuation, accents, CJK, spaces and a line feed: a first encode that reaches every component.
_PROBE = "Probe text 123, naïve café.\n  An 漢字 sentence: [x] <y>; done!"
