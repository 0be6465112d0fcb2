"""spaCy's English tokenizer and sentencizer, reproduced without spaCy (for the reference definitions).

HF datatrove 0.10.1, the implementation FineWeb was built with, splits text
into words with ``spacy.blank("en")`` and into sentences with spaCy's
rule-based ``sentencizer`` (``datatrove.utils.word_tokenizers.SpaCyTokenizer``;
English is its default language). Its Gopher, C4 and FineWeb filters count
those words and sentences, so reproducing their decisions needs the same
segmentation. spaCy itself is not a dependency of the pipeline: it costs
about 1 MB/s per core on this project's text (twice the time of every
project heuristic together) and weighs ~40 MB in the worker image. This
module implements spaCy 3.8's algorithm (``spacy/tokenizer.pyx``:
``_tokenize_affixes``, ``_split_affixes``, ``_attach_tokens``,
``_apply_special_cases``; ``spacy/pipeline/sentencizer.pyx``: ``predict``)
in Python over the rule data copied from spaCy into
:mod:`beam_pipeline.filters.reference_rules`, and caches the tokens of each
whitespace-separated chunk, as spaCy does, so that a repeated word costs one
dict lookup.

``tests/test_heuristics_reference.py`` checks that the rule data equals the
pinned spaCy's and that the tokens and sentence counts are spaCy's on every
document of the reference fixture.

One simplification, documented in ``docs/filters.md``: spaCy's special-case
matcher (the pass that re-joins token sequences such as ``Mr`` ``.`` into a
special case) runs over the whole document, and a match that spans two
chunks can hide an overlapping match inside a chunk; here the pass runs
inside each chunk only. Only special cases that begin or end with an affix
character are concerned, and a cross-chunk match needs their tokens on both
sides of a space.
"""
from __future__ import annotations

import re
import unicodedata

from beam_pipeline.filters import reference_rules as _rules

SPACY_VERSION = _rules.SPACY_VERSION

_prefix_search = re.compile(_rules.PREFIX).search
_suffix_search = re.compile(_rules.SUFFIX).search
_infix_finditer = re.compile(_rules.INFIX).finditer
_url_match = re.compile(_rules.URL_MATCH).match
_SPECIALS: dict[str, tuple[str, ...]] = _rules.SPECIAL_CASES
_SENTENCE_PUNCT = frozenset(_rules.SENTENCE_PUNCT_CHARS)
_RUNS = re.compile(r"\s+|\S+")

#: Upper bound of the chunk cache (entries); it is cleared when full, like a generation.
CACHE_SIZE = 500_000


def _prefix_length(string: str) -> int:
    match = _prefix_search(string)
    return match.end() - match.start() if match is not None else 0


def _suffix_window() -> int | None:
    """Characters from the end a suffix match can span, if every suffix alternative but ``\\.\\.+`` is bounded.

    ``re`` tries a ``...$`` alternation at every position of the string; a
    search that starts this many characters before the end finds the same
    leftmost match (lookbehinds still see the whole string), unless the string
    ends with ``..``, the one unbounded alternative.
    """
    import re._parser as parser

    (op, (_, branches)), = parser.parse(_rules.SUFFIX).data
    widest = 0
    for branch in branches:
        low, high = branch.getwidth()
        if high >= parser.MAXREPEAT:
            if str(branch) != str(parser.parse(r"\.\.+$")):
                return None
            continue
        widest = max(widest, high)
    return widest


_SUFFIX_WINDOW = _suffix_window()


def _suffix_length(string: str) -> int:
    if _SUFFIX_WINDOW is not None and len(string) > _SUFFIX_WINDOW and not string.endswith(".."):
        match = _suffix_search(string, len(string) - _SUFFIX_WINDOW)
    else:
        match = _suffix_search(string)
    return match.end() - match.start() if match is not None else 0


def _split_chunk(string: str, specials: bool) -> list[str]:
    """Tokens of one chunk without whitespace (``_split_affixes`` + ``_attach_tokens``)."""
    if specials and string in _SPECIALS:
        return list(_SPECIALS[string])
    prefixes: list[str] = []
    suffixes: list[str] = []
    last_size = 0
    while string and len(string) != last_size:
        if specials and string in _SPECIALS:
            break
        last_size = len(string)
        pre_len = _prefix_length(string)
        if pre_len:
            prefix = string[:pre_len]
            minus_pre = string[pre_len:]
            if minus_pre and specials and minus_pre in _SPECIALS:
                string = minus_pre
                prefixes.append(prefix)
                break
        suf_len = _suffix_length(string[pre_len:])
        if suf_len:
            suffix = string[-suf_len:]
            minus_suf = string[:-suf_len]
            if minus_suf and specials and minus_suf in _SPECIALS:
                string = minus_suf
                suffixes.append(suffix)
                break
        if pre_len and suf_len and pre_len + suf_len <= len(string):
            string = string[pre_len:-suf_len]
            prefixes.append(prefix)
            suffixes.append(suffix)
        elif pre_len:
            string = minus_pre
            prefixes.append(prefix)
        elif suf_len:
            string = minus_suf
            suffixes.append(suffix)
    tokens = prefixes
    if string:
        if specials and string in _SPECIALS:
            tokens.extend(_SPECIALS[string])
        elif _url_match(string):
            tokens.append(string)
        else:
            start = 0
            for match in _infix_finditer(string):
                infix_start, infix_end = match.span()
                if infix_start == 0:
                    continue
                if infix_start != start:
                    tokens.append(string[start:infix_start])
                if infix_start != infix_end:
                    tokens.append(string[infix_start:infix_end])
                start = infix_end
            if string[start:]:
                tokens.append(string[start:])
    tokens.extend(reversed(suffixes))
    return tokens


def _tokenize_without_specials(text: str) -> list[str]:
    """``Tokenizer._tokenize_affixes(text, False)``: the phrase patterns of the special-case matcher."""
    tokens = []
    for index, match in enumerate(_RUNS.finditer(text)):
        run = match.group()
        if run[0].isspace():
            if index and run[0] == " ":
                run = run[1:]
            if run:
                tokens.append(run)
        else:
            tokens.extend(_split_chunk(run, specials=False))
    return tokens


def _matcher_patterns() -> dict[str, list[tuple[tuple[str, ...], str]]]:
    """First token -> [(pattern tokens, special case)] for the special cases spaCy re-joins after splitting."""
    patterns: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for string in _SPECIALS:
        if not (_prefix_length(string) or any(True for _ in _infix_finditer(string)) or _suffix_length(string)
                or " " in string):
            continue
        tokens = tuple(_tokenize_without_specials(string))
        if len(tokens) > 1 and "".join(tokens) == string:
            patterns.setdefault(tokens[0], []).append((tokens, string))
    return patterns


_PATTERNS = _matcher_patterns()


def _apply_special_cases(tokens: list[str]) -> list[str]:
    """spaCy's special-case matcher pass inside one chunk: longest match first, then leftmost."""
    matches = []
    for start, token in enumerate(tokens):
        for pattern, string in _PATTERNS.get(token, ()):
            end = start + len(pattern)
            if tuple(tokens[start:end]) == pattern:
                matches.append((start, end, string))
    if not matches:
        return tokens
    matches.sort(key=lambda m: (m[1] - m[0], -m[0]))
    seen: set[int] = set()
    chosen = []
    for start, end, string in reversed(matches):
        if start not in seen and end - 1 not in seen:
            chosen.append((start, end, string))
        seen.update(range(start, end))
    out, at = [], 0
    for start, end, string in sorted(chosen):
        out.extend(tokens[at:start])
        out.extend(_SPECIALS[string])
        at = end
    out.extend(tokens[at:])
    return out


_cache: dict[str, tuple[str, ...]] = {}


def chunk_tokens(chunk: str) -> tuple[str, ...]:
    """spaCy's tokens of one whitespace-free chunk (cached)."""
    tokens = _cache.get(chunk)
    if tokens is None:
        if (chunk.isalpha() or (chunk.isascii() and chunk.isdigit())) and chunk not in _SPECIALS:
            tokens = (chunk,)       # no affix or infix rule matches letters only (tested over Unicode)
        else:
            split = _split_chunk(chunk, specials=True)
            if len(split) > 1:
                split = _apply_special_cases(split)
            tokens = tuple(split)
        if len(_cache) >= CACHE_SIZE:
            _cache.clear()
        _cache[chunk] = tokens
    return tokens


def words(text: str) -> list[str]:
    """datatrove's ``split_into_words(text)`` for English: spaCy's tokens minus whitespace tokens."""
    get = _cache.get
    out: list[str] = []
    extend = out.extend
    for chunk in text.split():
        tokens = get(chunk)
        extend(chunk_tokens(chunk) if tokens is None else tokens)
    return out


def tokens(text: str) -> list[str]:
    """Every spaCy token of ``text``, whitespace tokens included (``[t.text for t in nlp(text)]``)."""
    out: list[str] = []
    for index, match in enumerate(_RUNS.finditer(text)):
        run = match.group()
        if run[0].isspace():
            if index and run[0] == " ":
                run = run[1:]
            if run:
                out.extend(chunk_tokens(run))
        else:
            out.extend(chunk_tokens(run))
    return out


_punct_cache: dict[str, bool] = {}


def _is_punct(token: str) -> bool:
    """spaCy's ``Lexeme.is_punct``: every character is in a Unicode punctuation category."""
    value = _punct_cache.get(token)
    if value is None:
        value = all(unicodedata.category(c).startswith("P") for c in token)
        if len(_punct_cache) >= CACHE_SIZE:
            _punct_cache.clear()
        _punct_cache[token] = value
    return value


def sentence_count(text: str) -> int:
    """Sentences of spaCy's ``sentencizer`` in ``text`` (datatrove: ``len(split_into_sentences(text))``).

    A sentence starts at the first token and at every token that is neither
    punctuation nor a sentence-final character and follows a sentence-final
    character (``.``, ``!``, ``?``, ``。`` ...). datatrove's splitting returns
    one part for a text without tokens, so the count is at least 1.
    """
    count = 1
    seen_period = False
    for token in tokens(text):
        final = token in _SENTENCE_PUNCT
        if seen_period and not final and not _is_punct(token):
            count += 1
            seen_period = False
        elif final:
            seen_period = True
    return count
