"""Punkt sentence spans of one paragraph: exactly NLTK's ``PunktSentenceTokenizer.span_tokenize``, at less CPU.

NLTK 3.10.4 (``nltk/tokenize/punkt.py``) answers ``span_tokenize(text)`` through generators:
``_match_potential_end_contexts`` finds each candidate ``.?!`` and the word before it,
``_slices_from_text`` asks ``text_contains_sentbreak`` about each candidate's context (it word-tokenizes
the context into ``PunktToken`` objects and runs both annotation passes over them), and
``_realign_boundaries`` moves closing quotes and brackets onto the sentence before. NLTK compiles every
pattern with the third-party ``regex`` engine (``nltk.redos``), not ``re``: its ``\\s`` is Unicode's
White_Space, which, unlike ``re``'s ``\\s`` and ``str.isspace``, does not hold U+001C..U+001F.
``FastSpans.spans`` is that code in one loop per step, for the configuration we use:
``PunktLanguageVars`` and ``PunktToken`` as NLTK ships them, ``realign_boundaries=True``, any parameters.
It matches NLTK's period-context and word patterns with ``re``, their sources unchanged but for ``\\s`` and
``\\S``, spelled as ``regex`` reads them (``_as_re``; the tests check the spelling on every code point and the
matches on real and random text), and NLTK's realignment pattern with ``regex`` itself; both without
``nltk.redos``' wall-clock limit of 5 s per match, which only ever turns a slow paragraph into a
``TimeoutError`` and costs a clock per call. It leaves every decision it does not take below to NLTK's own
annotation methods, on NLTK's ``PunktToken`` with its patterns untimed likewise. ``supports`` checks that
configuration and NLTK's version; for anything else ``sentences.py`` uses NLTK's own ``span_tokenize``.

Why the result is the same, step by step (the tests compare both on real, crafted and random text):

* Candidates: a paragraph without ``.``, ``?`` or ``!`` has none, so it is one span (trailing whitespace
  cut by ``str.rstrip``) or none, as NLTK's last slice gives. Otherwise: NLTK's period-context pattern,
  every match of it (NLTK skips none: the inner periods of ``. . .`` are candidates too), the same
  preceding-word rule and the same de-overlapping. The last whitespace before a candidate is found with
  ``str.rfind`` over the same ASCII set (``string.whitespace``) and the same "index 0 counts as none"
  rule. The candidate's context (word + punctuation + ``after_tok``) is one contiguous slice of the text.
* Decision: ``text_contains_sentbreak`` returns True iff some token but the last has ``sentbreak`` set
  after both passes. Neither pass reads the layout flags, the first pass reads one token and the second a
  token and its successor (after the successor's first pass), so a token's verdict is a pure function of
  (token, next token): ``?`` and ``!`` always break (the first pass sets it, the second touches only
  period-final tokens), any other token not ending in ``.`` never does, most period-final tokens break
  whatever follows (``_always_breaks`` says which, per token), and for the rest NLTK's own
  ``_first_pass_annotation``/``_second_pass_annotation`` are run on the pair. The tokens are NLTK's word
  regex over each ``\\n``-separated line of the context that ``str.strip`` leaves non-empty: a line of
  U+001C..U+001F only is blank to NLTK yet gives tokens to the regex, so the test is not redundant.
  The common candidate needs no tokens: when the word before a ``.`` is ASCII letters only and White_Space
  follows the ``.`` (the ``next_tok`` branch) with a next token that neither starts with ``.`` nor with a
  character ``str.isspace`` calls space, the context's first token is that word with its period. The word
  regex starts a token at the first letter (no multi-character pattern starts with a letter, and letters
  may start a word), and its lazy ``\\S+?`` can stop only where its lookahead matches: never before a
  letter, and not before the ``.``, which is in no punctuation class and starts no ``--``/``..``/``. . .``
  run here (the character after it is White_Space and the next token does not start with ``.``); it
  stops at the White_Space after it (at the line's end when that is a line feed). The context does start
  at the word: the word start is found as NLTK finds it, and one carried over from an overlapping
  candidate, or NLTK's "index 0 counts as none", leaves a ``.?!`` or whitespace in the word, which then is
  not all letters. The next token adds at least one token: its first character is neither White_Space nor
  ``str.isspace``, so its line is not blank and the regex's last alternative ``\\S`` takes it if nothing
  longer does; so the first token is not the last, and NLTK's loop returns True at the next token when
  ``_always_breaks`` says so; otherwise the context is decided in full as above.
  Verdicts per context, per token and per pair are memoised (the parameters are read-only here: the
  orthographic context is a dict that answers 0 for an unseen type without storing it); the memos are
  bounded and cache pure functions only, so they change time, never results.
* Realigning closing quotes/brackets: NLTK's rule over a list; the realignment regex is tried only where a
  span starts with a character its class can match.
"""

from __future__ import annotations

import re
from importlib.metadata import version

from nltk.tokenize.punkt import PunktLanguageVars, PunktSentenceTokenizer, PunktToken

NLTK_VERSION = "3.10.4"  # the version whose code this module adapts

# A candidate's word that is all ASCII letters (the shortcut of ``FastSpans._accept``).
_ASCII_LETTERS = re.compile("[A-Za-z]+")
# ``string.whitespace`` minus the space: what ``_get_last_whitespace_index`` also treats as a word break.
_OTHER_ASCII_SPACE = "\t\n\r\x0b\x0c"
# NLTK's realignment pattern, and the characters its class matches (one of them starts every match).
_REALIGN_PATTERN = r'["\')\]}\u2018\u2019\u201c\u201d\xab\xbb]+?(?:\s+|(?=--)|$)'
_CLOSERS = frozenset("\"')]}\u2018\u2019\u201c\u201d\xab\xbb")
_NUMBER_TYPE = "##number##"
# ``regex``'s ``\s`` (Unicode's White_Space) and ``\S`` in ``re``: ``re``'s ``\s`` (``str.isspace``) also holds
# U+001C..U+001F.
_WHITE_SPACE = r"[^\S\x1c-\x1f]"
_NOT_WHITE_SPACE = r"[\S\x1c-\x1f]"
_MEMO_LIMIT = 1 << 16


def _untimed(pattern):
    """The ``regex`` pattern an ``nltk.redos.TimedPattern`` calls, without the wall-clock limit it adds."""
    return pattern._rx


class _Token(PunktToken):
    """NLTK's ``PunktToken``, its code unchanged, matching its own ``regex`` patterns without the wall-clock limit
    (a limit costs a clock per call: 17 us to make a token with it, 5 without)."""

    __slots__ = ()
    _RE_ELLIPSIS = _untimed(PunktToken._RE_ELLIPSIS)
    _RE_NUMERIC = _untimed(PunktToken._RE_NUMERIC)
    _RE_INITIAL = _untimed(PunktToken._RE_INITIAL)
    _RE_ALPHA = _untimed(PunktToken._RE_ALPHA)


def _as_re(pattern) -> re.Pattern[str]:
    """An NLTK pattern for ``re``: its source with ``\\s`` and ``\\S`` spelled as the ``regex`` engine reads them
    (neither appears inside a character class or after a backslash in the patterns this is used for)."""
    if pattern.flags & (re.IGNORECASE | re.DOTALL | re.ASCII | re.LOCALE):
        raise ValueError(f"FastSpans does not adapt this NLTK pattern's flags: {pattern!r}")
    source = pattern.pattern.replace(r"\S", "\0").replace(r"\s", _WHITE_SPACE).replace("\0", _NOT_WHITE_SPACE)
    return re.compile(source, pattern.flags & (re.VERBOSE | re.MULTILINE))


def supports(tok: PunktSentenceTokenizer) -> bool:
    """Whether ``tok`` is configured exactly as this module's adaptation assumes."""
    return (
        type(tok) is PunktSentenceTokenizer
        and type(tok._lang_vars) is PunktLanguageVars
        and tok._Token is PunktToken
        and version("nltk") == NLTK_VERSION
    )


class FastSpans:
    """``list(tok.span_tokenize(text))`` for a tokenizer ``supports`` accepts, computed more cheaply."""

    def __init__(self, tok: PunktSentenceTokenizer) -> None:
        if not supports(tok):
            raise ValueError(f"FastSpans needs NLTK {NLTK_VERSION}'s PunktSentenceTokenizer as shipped, got {tok!r}")
        lang_vars = tok._lang_vars
        if lang_vars.re_boundary_realignment.pattern != _REALIGN_PATTERN:
            raise ValueError(f"NLTK's realignment pattern is not the one FastSpans adapts: {tok!r}")
        self._tok = tok
        self._params = tok._params
        self._period = _as_re(lang_vars.period_context_re())
        self._words = _as_re(lang_vars._word_tokenizer_re())
        self._realign = _untimed(lang_vars.re_boundary_realignment)
        self._sent_end_chars = tuple(lang_vars.sent_end_chars)
        self._collocation_firsts = frozenset(first for first, _ in self._params.collocations)
        self._contexts: dict[str, bool] = {}
        self._always: dict[str, bool] = {}
        self._pairs: dict[tuple[str, str], bool] = {}

    def spans(self, text: str, offset: int = 0) -> list[tuple[int, int]]:
        """Sentence spans of ``text``, exactly as ``span_tokenize`` yields them, shifted by ``offset``."""
        if "." not in text and "?" not in text and "!" not in text:  # no candidate: one span, or none
            end = len(text.rstrip())
            return [(offset, offset + end)] if end > 0 else []
        spans = self._realigned(text, self._raw_spans(text))
        return [(offset + start, offset + end) for start, end in spans] if offset else spans

    def _raw_spans(self, text: str) -> list[tuple[int, int]]:
        """``_match_potential_end_contexts`` + ``_slices_from_text`` in one pass over the regex matches."""
        other_space = [c for c in _OTHER_ASCII_SPACE if c in text]
        spans: list[tuple[int, int]] = []
        last_break = 0
        prev = None  # the pending candidate's match; it is decided once the next one cannot overlap it
        prev_start = prev_stop = 0  # its word slice: [word start, punctuation offset)
        for m in self._period.finditer(text):
            p = m.start()
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
            and not text[next_tok].isspace()
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
        """NLTK's ``text_contains_sentbreak``: does a token other than the last break a sentence?"""
        if "\n" in context:
            tokens = [t for line in context.split("\n") if line.strip() for t in self._words.findall(line)]
        elif context.strip():
            tokens = self._words.findall(context)
        else:
            return False
        for i in range(len(tokens) - 1):
            tok = tokens[i]
            if tok in self._sent_end_chars and tok != ".":
                return True
            if tok[-1] == "." and (self._always_breaks(tok) or self._pair_breaks(tok, tokens[i + 1])):
                return True
        return False

    def _always_breaks(self, tok: str) -> bool:
        """Whether a period-final ``tok`` breaks whatever token follows it.

        True when the first pass sets ``sentbreak`` and none of the second-pass rules that can clear it may
        fire: a collocation (the token's type starts no known collocation), initials and numbers (it is
        neither). The other second-pass rules only ever set ``sentbreak``. For the common ``letters.`` (two
        or more ASCII letters) the token's properties are read off directly: the first pass breaks unless
        the letters are a known abbreviation (the token is no sentence-end character, no ellipsis, not
        ``..``-final, and has no ``-``), its type is the letters lower-cased (no digit, so not a number) and
        it is no initial (that is one letter and a period).
        """
        verdict = self._always.get(tok)
        if verdict is None:
            stem = tok[:-1]
            if len(stem) >= 2 and stem.isascii() and stem.isalpha():
                type_ = stem.lower()
                sentbreak, initial_or_number = type_ not in self._params.abbrev_types, False
            else:
                token = _Token(tok)
                self._tok._first_pass_annotation(token)
                type_ = token.type_no_period
                sentbreak, initial_or_number = bool(token.sentbreak), bool(token.is_initial) or type_ == _NUMBER_TYPE
            verdict = bool(sentbreak and type_ not in self._collocation_firsts and not initial_or_number)
            if len(self._always) >= _MEMO_LIMIT:
                self._always.clear()
            self._always[tok] = verdict
        return verdict

    def _pair_breaks(self, tok: str, next_tok: str) -> bool:
        """``sentbreak`` of a period-final token after both passes, given the token after it."""
        key = (tok, next_tok)
        verdict = self._pairs.get(key)
        if verdict is None:
            first, second = _Token(tok), _Token(next_tok)
            self._tok._first_pass_annotation(first)
            self._tok._first_pass_annotation(second)
            self._tok._second_pass_annotation(first, second)
            verdict = bool(first.sentbreak)
            if len(self._pairs) >= _MEMO_LIMIT:
                self._pairs.clear()
            self._pairs[key] = verdict
        return verdict

    def _realigned(self, text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """``_realign_boundaries``: move closing quotes/brackets that start a sentence onto the one before."""
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
            if follow_start < follow_end and text[follow_start] in _CLOSERS:
                m = self._realign.match(text[follow_start:follow_end])
            if m:
                out.append((start, follow_start + len(m.group().rstrip())))
                realign = m.end()
            else:
                realign = 0
                if start < end:
                    out.append((start, end))
        return out
