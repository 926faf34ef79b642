"""Train a tokenizer of one of the three families on the input: ``build_shards --train-tokenizer wordpiece|bpe|unigram``.

* ``wordpiece``: BERT's (``tokenizer.train``);
* ``bpe``: a byte-level BPE as RoBERTa's: ``<s> <pad> </s> <unk> <mask>`` (ids 0-4), the GPT-2 pre-tokenizer
  (``ByteLevel`` with its regex, no prefix space), no normalizer, the 256 byte symbols in the alphabet; trained by
  ``tokenizers``' BpeTrainer, which gives the same bytes for the same word counts in any order (its merges are
  ranked by count, then by the pair's symbol ids, which follow the sorted alphabet and the merge order);
* ``unigram``: a Unigram as SentencePiece's: SentencePiece's default normalizer (``nmt_nfkc``: Nmt, NFKC, runs of
  spaces made one; ``Lowercase`` after them with ``--lowercase``), ``Metaspace`` (``▁``, split, prepended to every
  word), the same five special tokens, pieces of at most 16 characters. Trained by :func:`train_unigram` below, not
  by ``tokenizers``' UnigramTrainer: that one is not deterministic (it reads the words out of a hash map seeded per
  process, so the seed pieces' ties and the EM's float sums fall in another order each run: four runs on WikiText-2
  valid gave four different ``tokenizer.json``).

Every family's trainer is a function of the multiset of the input's words, so the same input gives the same bytes
in any document order, with any worker count (training runs in the launching process).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pipeline.tokenize import tokenizer
from schemas.format import SPECIAL_TOKENS
from schemas.tokenizers.families import METASPACE, ROLE_NAMES

log = logging.getLogger(__name__)

FAMILIES = ("wordpiece", "bpe", "unigram")  # what --train-tokenizer accepts; bare --train-tokenizer: the first
ROBERTA_ROLES = ROLE_NAMES["RoBERTa"]
SPECIALS = [
    ROBERTA_ROLES[r] for r in ("cls", "pad", "sep", "unk", "mask")
]  # RoBERTa's order: <s> <pad> </s> <unk> <mask>
MIN_FREQUENCY = 2  # as the WordPiece training: a merge seen once is not learnt
MAX_PIECE_CHARS = 16  # SentencePiece's max_sentencepiece_length
CHARACTER_COVERAGE = 0.9995  # SentencePiece's default: the rarest characters past it are <unk>
SEED_FACTOR = 4  # seed pieces per piece of the vocabulary asked for
SHRINK = 0.75  # SentencePiece's shrinking_factor: each pruning round keeps this share
EM_ROUNDS = 2  # re-estimations before each pruning round (SentencePiece's num_sub_iterations)
VITERBI_BATCH = 65_536  # distinct words encoded at a time


def _wrapped(tok: Tokenizer) -> Tokenizer:
    """The trainer's wrapping as the post-processor (``<s> A </s>``, ``<s> A </s> B </s>`` with type ids 0 and 1), as
    the WordPiece tokenizer has it with BERT's tokens."""
    cls, sep = ROBERTA_ROLES["cls"], ROBERTA_ROLES["sep"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))],
    )
    return tok


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=MIN_FREQUENCY,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(SPECIALS)
    return _wrapped(tok)


def unigram_shape(lowercase: bool) -> Tokenizer:
    """An empty Unigram tokenizer with the normalizer, pre-tokenizer and decoder of the trained ones."""
    steps = [normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence(steps + ([normalizers.Lowercase()] if lowercase else []))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    return tok


def _characters(words: Counter[str], vocab_size: int) -> list[str]:
    """The characters that are pieces: the most frequent ones up to ``CHARACTER_COVERAGE`` of all characters (ties
    by character), at most half of the vocabulary; the others become ``<unk>`` (SentencePiece's rule)."""
    counts: Counter[str] = Counter()
    for word, n in words.items():
        for c in word:
            counts[c] += n
    total = sum(counts.values())
    kept: list[str] = []
    covered = 0
    for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if kept and (covered >= CHARACTER_COVERAGE * total or len(kept) >= vocab_size // 2):
            break
        kept.append(c)
        covered += n
    return kept


def _viterbi_counts(pieces: list[str], scores: list[float], words: list[str], weights: np.ndarray) -> np.ndarray:
    """How often each piece is in the best segmentation of the words, each word counted ``weights`` times (integers:
    the sums are exact, whatever the order)."""
    model = Tokenizer(models.Unigram([(p, s) for p, s in zip(pieces, scores, strict=True)], unk_id=0))
    counts = np.zeros(len(pieces), dtype=np.int64)
    for start in range(0, len(words), VITERBI_BATCH):  # a batch of encodings in memory at a time
        encodings = model.encode_batch(words[start : start + VITERBI_BATCH], add_special_tokens=False)
        ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encodings])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        batch_weights = np.repeat(weights[start : start + VITERBI_BATCH], lengths)
        counts += np.bincount(ids, weights=batch_weights, minlength=len(pieces)).astype(np.int64)
    return counts


def _alternative(piece: str, logp: dict[str, float], floor: float) -> float:
    """The best log probability of ``piece`` segmented into the other pieces (its characters always are pieces or the
    unknown one, scored ``floor``: the lowest score less 10, as the model scores it)."""
    best = [0.0] + [-math.inf] * len(piece)
    for end in range(1, len(piece) + 1):
        for start in range(max(0, end - MAX_PIECE_CHARS), end):
            sub = piece[start:end]
            if sub == piece:
                continue
            score = logp.get(sub, floor if end - start == 1 else None)
            if score is not None and best[start] + score > best[end]:
                best[end] = best[start] + score
    return best[-1]


def train_unigram(texts: Iterable[str], vocab_size: int, lowercase: bool = False) -> Tokenizer:
    """A SentencePiece-style Unigram (:func:`unigram_shape`) trained on ``texts``; the same words, the same bytes.

    SentencePiece's procedure with Viterbi counts in its E-step (each word counted in its best segmentation, as
    ``tokenizers``' Unigram model gives it, integer counts): seed pieces are the vocabulary of a BPE trained on the
    normalized words (``SEED_FACTOR`` times the size asked; BpeTrainer is deterministic), with every kept character;
    then, until the size is reached, ``EM_ROUNDS`` re-estimations (score = log of the piece's share of all pieces
    used) and a pruning round that keeps ``SHRINK`` of the multi-character pieces, those whose removal would cost the
    most (count times the score lost to the best segmentation without the piece; ties by the piece). Pieces come out
    by score, ties by the piece; the special tokens first, score 0, as the UnigramTrainer puts them."""
    shape = unigram_shape(lowercase)
    normalizer, pre_tokenizer = shape.normalizer, shape.pre_tokenizer
    assert normalizer is not None and pre_tokenizer is not None
    words: Counter[str] = Counter()

    def joined() -> Iterator[str]:
        for text in texts:
            pieces = [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]
            words.update(pieces)
            yield " ".join(pieces)

    seed = Tokenizer(models.BPE())
    seed.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    seed.train_from_iterator(
        joined(),
        trainers.BpeTrainer(
            vocab_size=SEED_FACTOR * vocab_size,
            min_frequency=MIN_FREQUENCY,
            max_token_length=MAX_PIECE_CHARS,
            show_progress=False,
        ),
    )
    target = vocab_size - len(SPECIALS)
    characters = _characters(words, vocab_size)
    kept = set(characters)
    multi = sorted(p for p in seed.get_vocab() if len(p) > 1 and p not in SPECIALS and all(c in kept for c in p))
    log.info("unigram training: %d distinct words, %d seed pieces", len(words), len(characters) + len(multi))
    order = sorted(words, key=lambda w: (-words[w], w))
    weights = np.fromiter((words[w] for w in order), dtype=np.int64, count=len(order))
    pieces = characters + multi
    scores = [0.0] * len(pieces)  # the first Viterbi: fewest pieces
    while True:
        for _ in range(EM_ROUNDS):
            counts = _viterbi_counts(["<unk>"] + pieces, [0.0] + scores, order, weights)[1:]
            total = int(counts.sum()) + len(pieces)
            scores = [math.log((int(n) + 1) / total) for n in counts]  # +1: a piece unused this round stays finite
        if len(pieces) <= target or len(pieces) == len(characters):  # characters stay, even past a tiny size
            break
        logp = dict(zip(pieces, scores, strict=True))
        floor = min(scores) - 10.0
        n_chars = len(characters)
        loss = [
            (int(counts[i]) * (scores[i] - _alternative(p, logp, floor)), p)
            for i, p in enumerate(pieces)
            if i >= n_chars
        ]
        keep = max(target - n_chars, int(len(loss) * SHRINK))
        survivors = {p for _, p in sorted(loss, key=lambda lp: (-lp[0], lp[1]))[:keep]}
        pieces = characters + [p for p in pieces[n_chars:] if p in survivors]
        log.info("unigram training: pruned to %d pieces (%d asked)", len(pieces), target)
        scores = [logp[p] for p in pieces]
    ranked = sorted(zip(pieces, scores, strict=True), key=lambda ps: (-ps[1], ps[0]))
    vocab = [(t, 0.0) for t in SPECIALS] + ranked
    tok = unigram_shape(lowercase)
    tok.model = models.Unigram(vocab, unk_id=SPECIALS.index(ROBERTA_ROLES["unk"]), byte_fallback=False)
    tok.add_special_tokens(SPECIALS)
    return _wrapped(tok)


def unk_token(kind: str) -> str:
    """The unknown token of the family ``kind`` trains (what WikiText's ``<unk>`` is read as, kept)."""
    return SPECIAL_TOKENS["unk"] if kind == "wordpiece" else ROBERTA_ROLES["unk"]


def train(kind: str, texts: Iterable[str], vocab_size: int, lowercase: bool) -> Tokenizer:
    """The tokenizer of family ``kind`` (one of :data:`FAMILIES`) trained on ``texts``."""
    if kind == "wordpiece":
        return tokenizer.train(texts, vocab_size=vocab_size, lowercase=lowercase)
    if kind == "bpe":
        if lowercase:
            raise ValueError("--lowercase does not apply to --train-tokenizer bpe (a byte-level BPE has no normalizer)")
        return train_byte_level_bpe(texts, vocab_size)
    if kind == "unigram":
        return train_unigram(texts, vocab_size, lowercase)
    raise ValueError(f"--train-tokenizer {kind}: choose one of {', '.join(FAMILIES)}")
