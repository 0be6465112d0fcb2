"""The *reference* definitions: the scores behind HF datatrove 0.10.1's Gopher, C4 and FineWeb filters.

FineWeb (Penedo et al. 2024, arXiv:2406.17557) was built with datatrove's
``GopherRepetitionFilter``, ``GopherQualityFilter``, ``C4QualityFilter`` (a
port of TensorFlow Datasets' ``c4_utils.clean_page``, Raffel et al. 2020) and
``FineWebQualityFilter``. Each function here returns the quantities those
filters compare with their thresholds, computed the way datatrove computes
them, so that the policy rules of the ``reference`` presets
(:mod:`beam_pipeline.filters.presets`) keep and drop what datatrove keeps and
drops with its default arguments (English). The project's own definitions
(:mod:`beam_pipeline.filters.heuristics`) differ on purpose in places;
``docs/filters.md`` lists every difference and why.

Every column starts with ``ref_``. What datatrove does, in short:

* *words* are spaCy's English tokens (:mod:`.reference_tokenizer`),
  punctuation tokens included; Gopher's word count and mean length use the
  tokens with a character outside datatrove's punctuation set;
* *lines* are ``text.splitlines()`` (Gopher quality, C4),
  ``re.split("\\n+", text)`` (Gopher repetition) or the non-blank pieces of
  ``text.split("\\n")`` (FineWeb); nothing is stripped unless stated;
* repetition fractions are over ``len(text)``;
* stop words: *distinct* stop words among the tokens, case-sensitive.

The stop-word count needs the document's language like the project's (a list
per language, ``heuristics.stop_words``); everything else is computed for
every document, whatever its language, as datatrove does with its default
``language=english``.
"""

from __future__ import annotations

import re
from itertools import compress, filterfalse, repeat
from operator import and_, itemgetter, not_, or_
from typing import Iterable

import numpy as np

from beam_pipeline.filters import ngram_repeats, reference_sentencizer, reference_tokenizer
from beam_pipeline.filters import reference_rules as _rules
from beam_pipeline.filters.ngram_repeats import DUP_NGRAM_SIZES, TOP_NGRAM_SIZES
from beam_pipeline.filters.reference_sentencizer import sentence_total

GOPHER_QUALITY_COLUMNS = (
    "ref_gopher_words",
    "ref_gopher_mean_word_length",
    "ref_gopher_hash_ratio",
    "ref_gopher_ellipsis_ratio",
    "ref_gopher_bullet_lines",
    "ref_gopher_ellipsis_lines",
    "ref_gopher_alpha_words",
    "ref_gopher_stop_words",
)
GOPHER_REPETITION_COLUMNS = (
    "ref_rep_dup_line_frac",
    "ref_rep_dup_line_char_frac",
    "ref_rep_dup_para_frac",
    "ref_rep_dup_para_char_frac",
    *(f"ref_rep_top_{n}gram" for n in TOP_NGRAM_SIZES),
    *(f"ref_rep_dup_{n}gram" for n in DUP_NGRAM_SIZES),
)
C4_COLUMNS = ("ref_c4_sentences", "ref_c4_kept_lines", "ref_c4_lorem_ipsum", "ref_c4_curly_bracket")
FINEWEB_COLUMNS = (
    "ref_fw_line_punct_ratio",
    "ref_fw_short_line_ratio",
    "ref_fw_dup_line_char_frac",
    "ref_fw_newline_ratio",
)
COLUMNS = GOPHER_QUALITY_COLUMNS + GOPHER_REPETITION_COLUMNS + C4_COLUMNS + FINEWEB_COLUMNS

_PUNCTUATION = frozenset(_rules.PUNCTUATION) | frozenset(_rules.TERMINAL_PUNCTUATION)
_TERMINAL = tuple(_rules.TERMINAL_PUNCTUATION)
#: ``line.endswith(_TERMINAL)`` is ``line[-1] in _TERMINAL_CHARACTERS`` for a non-empty line (every entry is one
#: character): one set lookup instead of ~160 suffix comparisons.
_TERMINAL_CHARACTERS = frozenset(_TERMINAL)
assert all(len(character) == 1 for character in _TERMINAL)
_CITATION = re.compile(_rules.C4_CITATION)
_PARAGRAPH_BREAK = re.compile(r"\n\n+")  # as \n{2,}, three times faster (a literal prefix for sre)
_POLICY = re.compile("|".join(map(re.escape, _rules.C4_POLICY_SUBSTRINGS))).search
_GOPHER_STOP_WORDS = {"en": _rules.GOPHER_STOP_WORDS}


def _fraction(part: float, whole: float) -> float | None:
    return None if whole == 0 else part / whole


# --- per-token properties, kept next to the tokenizer's vocabulary -----------------------


class _TokenProperties:
    """Length, "symbolic" (only datatrove punctuation), "alphabetic" and sentence class
    (:data:`.reference_sentencizer.SENTENCE_CODES`) of every interned token, as arrays indexed by token id;
    extended as the vocabulary grows, reset with its generation."""

    def __init__(self):
        self.generation = -1
        self.masks_generation = -1
        self.masks: dict[int, tuple[Iterable[str], frozenset[str], np.ndarray, int]] = {}

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        vocabulary = reference_tokenizer.VOCABULARY
        if self.generation != vocabulary.generation:
            self.generation = vocabulary.generation
            self.size = 0
            self.lengths = np.zeros(1024, np.int64)
            self.symbolic = np.zeros(1024, bool)
            self.alpha = np.zeros(1024, bool)
            self.sentence = np.zeros(1024, np.uint8)
        strings = vocabulary.strings
        if len(strings) > self.size:
            new = strings[self.size :]
            end = len(strings)
            if end > len(self.lengths):
                capacity = max(end, 2 * len(self.lengths))
                for name in ("lengths", "symbolic", "alpha", "sentence"):
                    old = getattr(self, name)
                    grown = np.zeros(capacity, old.dtype)
                    grown[: self.size] = old[: self.size]
                    setattr(self, name, grown)
            self.lengths[self.size : end] = np.fromiter(map(len, new), np.int64, len(new))
            self.symbolic[self.size : end] = np.fromiter(map(_PUNCTUATION.issuperset, new), bool, len(new))
            self.alpha[self.size : end] = np.fromiter(
                (token.isalpha() or any(map(str.isalpha, token)) for token in new), bool, len(new)
            )
            classes = vocabulary.token_classes[self.size : end]
            codes = reference_sentencizer.SENTENCE_CODES
            self.sentence[self.size : end] = np.fromiter(map(codes.__getitem__, classes), np.uint8, len(classes))
            self.size = end
        return self.lengths, self.symbolic, self.alpha, self.sentence

    def member_mask(self, words: Iterable[str]) -> np.ndarray:
        """A bool per interned token id (up to the vocabulary's size now): the token is one of ``words``.
        Kept per word list (by its identity) and generation, extended as the vocabulary grows (in an array
        grown by doubling, as the properties' arrays: a copy of the whole mask for every document that
        brings new tokens would cost a pass over the vocabulary each)."""
        self.arrays()  # a new generation resets the masks
        if self.masks_generation != self.generation:
            self.masks_generation, self.masks = self.generation, {}
        key = id(words)
        kept = self.masks.get(key)
        if kept is None or kept[0] is not words:
            if len(self.masks) >= 8:  # a caller passing a new list each time: no more than 8 masks kept
                self.masks.clear()
            kept = self.masks[key] = (words, frozenset(words), np.zeros(1024, bool), 0)
        words, members, mask, filled = kept
        if filled < self.size:
            new = reference_tokenizer.VOCABULARY.strings[filled : self.size]
            end = filled + len(new)
            if end > len(mask):
                grown = np.zeros(max(end, 2 * len(mask)), bool)
                grown[:filled] = mask[:filled]
                mask = grown
            mask[filled:end] = np.fromiter(map(members.__contains__, new), bool, len(new))
            filled = end
            self.masks[key] = (words, members, mask, filled)
        return mask[:filled]


_PROPERTIES = _TokenProperties()


class _Tokens:
    """A document's words (spaCy tokens) as token ids, with their lengths and properties; ``chunk_ends``:
    where the tokens of each chunk of ``text.split()`` end, when known (then :meth:`line_sentences` counts)."""

    def __init__(self, ids: np.ndarray, chunk_ends: np.ndarray | None = None):
        self.count = len(ids)
        self.ids = ids
        self.chunk_ends = chunk_ends
        lengths, symbolic, alpha, sentence = _PROPERTIES.arrays()
        self.lengths = lengths[self.ids]
        self.symbolic = symbolic[self.ids]
        self.alpha = alpha[self.ids]
        self.sentence = sentence[self.ids] if chunk_ends is not None else None

    def line_sentences(self, text: str, numbers: list[int]) -> int | None:
        """:func:`.reference_sentencizer.line_sentences` of the lines numbered ``numbers`` of ``text`` (these
        tokens' text), or None when the chunk ends are not known or do not match."""
        if self.chunk_ends is None or self.sentence is None:  # both known, or neither
            return None
        return reference_sentencizer.line_sentences(text, numbers, self.sentence, self.chunk_ends)

    def distinct_members(self, words: Iterable[str]) -> int:
        """How many distinct tokens of ``words`` occur (their ids compared one by one in the tests), from one pass
        over the token ids with a mask of the vocabulary (:meth:`_TokenProperties.member_mask`)."""
        mask = _PROPERTIES.member_mask(words)
        return len(set(self.ids[mask[self.ids]].tolist()))


# --- Gopher quality ------------------------------------------------------------------


def gopher_quality(
    text: str,
    tokens: _Tokens,
    language: str | None,
    stop_words: dict[str, Iterable[str]] | None = None,
    lines: list[str] | None = None,
    stripped: list[str] | None = None,
) -> dict:
    """datatrove ``GopherQualityFilter.filter`` (Rae et al. 2021, A.1.1), as scores.

    ``ref_gopher_words``             tokens with a non-punctuation character (datatrove: < 50, > 100,000)
    ``ref_gopher_mean_word_length``  their mean length (< 3, > 10)
    ``ref_gopher_hash_ratio``        ``text.count('#')`` per token, punctuation tokens included (> 0.1)
    ``ref_gopher_ellipsis_ratio``    ``...`` and ``…`` per token (> 0.1)
    ``ref_gopher_bullet_lines``      share of ``splitlines()`` lines whose ``lstrip()`` starts with • or - (> 0.9)
    ``ref_gopher_ellipsis_lines``    share of lines whose ``rstrip()`` ends with ... or … (> 0.3)
    ``ref_gopher_alpha_words``       share of tokens with an alphabetic character (< 0.8)
    ``ref_gopher_stop_words``        distinct stop words among the tokens, case-sensitive (< 2)
    """
    stop_words = _GOPHER_STOP_WORDS if stop_words is None else stop_words
    n_tokens = tokens.count
    words_mask = ~tokens.symbolic
    n_words = int(np.count_nonzero(words_mask))
    lines = text.splitlines() if lines is None else lines
    # a line's lstrip() starts, and its rstrip() ends, as its strip() (no bullet or ellipsis is whitespace)
    stripped = list(map(str.strip, lines)) if stripped is None else stripped
    ellipses = text.count("...") + text.count("…")
    # a line can only end with an ellipsis the text holds: without one, no pass over the lines
    ellipsis_lines = sum(map(str.endswith, stripped, repeat(("...", "…")))) if ellipses else 0
    out = {
        "ref_gopher_words": n_words,
        "ref_gopher_mean_word_length": int(tokens.lengths[words_mask].sum()) / n_words if n_words else None,
        "ref_gopher_hash_ratio": _fraction(text.count("#"), n_tokens),
        "ref_gopher_ellipsis_ratio": _fraction(ellipses, n_tokens),
        "ref_gopher_bullet_lines": _fraction(sum(map(str.startswith, stripped, repeat(("•", "-")))), len(lines)),
        "ref_gopher_ellipsis_lines": _fraction(ellipsis_lines, len(lines)),
        "ref_gopher_alpha_words": _fraction(int(np.count_nonzero(tokens.alpha)), n_tokens),
        "ref_gopher_stop_words": None,
    }
    if language in stop_words:
        out["ref_gopher_stop_words"] = tokens.distinct_members(stop_words[language])
    return out


# --- Gopher repetition ---------------------------------------------------------------


def _repeats(parts: list[str]) -> tuple[int, int]:
    """datatrove ``find_duplicates``: (elements equal to an earlier one, their characters).

    Every element but the first of each distinct value is a repeat, so both
    numbers are "all minus distinct"."""
    distinct = set(parts)
    return len(parts) - len(distinct), sum(map(len, parts)) - sum(map(len, distinct))


def _line_repeats(text: str, pieces: list[str]) -> tuple[int, int, int]:
    """(repeats, elements, characters of the repeats) of ``re.split('\\n+', text)`` from
    ``pieces = text.split('\\n')``.

    The regex split is the pieces without the empty ones, except an empty
    first and last element when the text starts or ends with a newline. The
    characters are all minus distinct (empty elements weigh nothing); the text has ``len(pieces) - 1``
    newlines."""
    empty_ends = text.startswith("\n") + text.endswith("\n")
    elements = len(pieces) - pieces.count("") + empty_ends
    distinct = set(pieces)
    n_distinct = len(distinct) - ("" in distinct) + (empty_ends > 0)
    return elements - n_distinct, elements, len(text) - (len(pieces) - 1) - sum(map(len, distinct))


def gopher_repetition(text: str, tokens: _Tokens, pieces: list[str] | None = None) -> dict:
    """datatrove ``GopherRepetitionFilter.filter`` (Rae et al. 2021, Table A1), as scores.

    ``ref_rep_dup_para_frac`` / ``_char_frac``  paragraphs (``re.split('\\n{2,}', text.strip())``)
        equal to an earlier one, and their characters over ``len(text)`` (> 0.3 / > 0.2)
    ``ref_rep_dup_line_frac`` / ``_char_frac``  the same for ``re.split('\\n+', text)`` (> 0.3 / > 0.2)
    ``ref_rep_top_{2,3,4}gram``  ``len(' '.join(g)) * count(g) / len(text)`` for the most frequent
        token n-gram ``g`` (the first seen among equals; a count of 1 counts) (> 0.20, 0.18, 0.16)
    ``ref_rep_dup_{5..10}gram``  characters of n-grams that repeat an n-gram seen before, scanning
        left to right and jumping over a repeat once counted (datatrove ``find_all_duplicate``),
        over ``len(text)`` (> 0.15 ... 0.10)

    All ``None`` for an empty text (datatrove drops it as "empty"). n-grams are
    compared by a 64-bit hash of their tokens (a collision needs ~2^32
    distinct n-grams in one document).
    """
    if not text:
        return dict.fromkeys(GOPHER_REPETITION_COLUMNS)
    pieces = text.split("\n") if pieces is None else pieces
    length = len(text)
    out = {}
    paragraphs = _PARAGRAPH_BREAK.split(text.strip())
    dups, chars = _repeats(paragraphs)
    out["ref_rep_dup_para_frac"] = dups / len(paragraphs)
    out["ref_rep_dup_para_char_frac"] = chars / length
    dups, lines, chars = _line_repeats(text, pieces)
    out["ref_rep_dup_line_frac"] = dups / lines
    out["ref_rep_dup_line_char_frac"] = chars / length
    out.update(_ngram_scores(tokens, length))
    return {name: out[name] for name in GOPHER_REPETITION_COLUMNS}


def _ngram_scores(tokens: _Tokens, text_length: int) -> dict:
    """Top and duplicate n-gram scores (datatrove ``find_top_duplicate``, ``find_all_duplicate``) from
    64-bit rolling hashes of token ids, in one compiled loop (:mod:`.ngram_repeats`).

    An n-gram can repeat only where the two (n-1)-grams inside it repeat, so
    each size looks at the *candidates* of the size before (at size 1, tokens
    that occur twice) and hashes and counts only those positions; once there
    is none, no longer n-gram repeats either (the top n-gram is then the
    first, which occurs once). The duplicate scan visits only the positions
    whose n-gram occurs more than once: only those can be "seen before", and
    a position in between only moves datatrove's scan one token forward.
    """
    scores = ngram_repeats.datatrove_scores(tokens.ids, tokens.lengths, text_length)
    return dict(zip(_NGRAM_COLUMNS, scores))


def _ngram_column(n: int) -> str:
    return f"ref_rep_top_{n}gram" if n in TOP_NGRAM_SIZES else f"ref_rep_dup_{n}gram"


_NGRAM_COLUMNS = tuple(map(_ngram_column, TOP_NGRAM_SIZES + DUP_NGRAM_SIZES))


# --- C4 ------------------------------------------------------------------------------


def _c4_lines(lines: list[str]):
    """(line, outcome) for datatrove ``C4QualityFilter`` with its defaults over ``text.splitlines()``;
    outcome is 'kept', 'lorem_ipsum' or 'curly_bracket' (lines C4 removes are not yielded).

    datatrove's three first line tests (a word over 1,000 characters, no
    terminal punctuation after removing citations, fewer than 3 words) only
    remove the line, so they run cheapest first; the word count is of the line
    before citations are removed, as in datatrove.
    """
    end_punctuation, ellipsis = _rules.C4_END_PUNCTUATION, _rules.C4_ELLIPSIS
    stripped = list(map(str.strip, lines))
    # only a line that ends in punctuation or has a citation to remove can end in punctuation after it
    ending = map(str.endswith, stripped, repeat(end_punctuation))
    citing = map(str.__contains__, stripped, repeat("["))
    for line in compress(stripped, map(or_, ending, citing)):
        cited = _CITATION.sub("", line) if "[" in line else line
        if not cited.endswith(end_punctuation) or cited.endswith(ellipsis):
            continue
        if len(line.split(None, 2)) < 3:  # fewer than 3 words (without splitting the whole line)
            continue
        if len(line) > 1000 and any(len(word) > 1000 for word in line.split()):
            continue
        line = cited
        lower = line.lower()
        if "lorem ipsum" in lower:
            yield line, "lorem_ipsum"
            continue
        if "javascript" in lower:
            continue
        if "{" in line:
            yield line, "curly_bracket"
            continue
        if _POLICY(lower):
            continue
        yield line, "kept"


def _c4_kept_at(
    lines: list[str], text: str, stripped: list[str] | None = None
) -> tuple[list[str], bool, bool, list[int]]:
    """(kept lines, a line has "lorem ipsum", a line has "{", the kept lines' numbers in ``lines``) of
    :func:`_c4_lines`, the kept lines in order, with C-level ``map``/``compress`` passes over all lines
    instead of a Python loop per line.

    ``text`` (the lines' text) decides which passes are needed: without ``[``
    no line has a citation to remove, so a line is the same before and after;
    the lowered kept lines are searched once for "lorem ipsum", "javascript"
    and the policy phrases (each ASCII, so a line holding one makes the
    joined lines hold it too), and only a document that has one takes the
    per-line checks. ``tests/test_heuristics_fast_paths.py`` compares with
    :func:`_c4_lines` on every sample document and crafted lines.
    """
    end_punctuation, ellipsis = _rules.C4_END_PUNCTUATION, _rules.C4_ELLIPSIS
    stripped = list(map(str.strip, lines)) if stripped is None else stripped
    if "[" in text:
        ending = map(str.endswith, stripped, repeat(end_punctuation))
        candidates = list(map(or_, ending, map(str.__contains__, stripped, repeat("["))))
        originals = list(compress(stripped, candidates))
        cited = list(map(_cited, originals))
        punctuated = list(map(str.endswith, cited, repeat(end_punctuation)))
    else:  # no citation: the line as is
        candidates = list(map(str.endswith, stripped, repeat(end_punctuation)))
        originals = cited = list(compress(stripped, candidates))
        punctuated = repeat(True)
    unended = map(not_, map(str.endswith, cited, repeat(ellipsis)))
    worded = map((2).__lt__, map(len, map(str.split, originals, repeat(None), repeat(2))))
    passing = list(map(and_, map(and_, punctuated, unended), worded))
    if max(map(len, originals), default=0) > 1000:  # a line over 1,000 characters may hold a long word
        passing = list(map(and_, passing, map(_no_long_word, originals)))
    kept = list(compress(cited, passing))
    numbers = list(compress(compress(range(len(stripped)), candidates), passing))
    lower = "\n".join(kept).lower()
    if "lorem ipsum" in lower or "javascript" in lower or any(map(lower.__contains__, _POLICY_WORDS)):
        kept_lines, kept_numbers, lorem, curly = [], [], False, False
        for line, number in zip(kept, numbers):  # the per-line content checks of _c4_lines
            line_lower = line.lower()
            if "lorem ipsum" in line_lower:
                lorem = True
            elif "javascript" in line_lower:
                continue
            elif "{" in line:
                curly = True
            elif not _POLICY(line_lower):
                kept_lines.append(line)
                kept_numbers.append(number)
        return kept_lines, lorem, curly, kept_numbers
    if "{" not in text:
        return kept, False, False, numbers
    unbracketed = list(map(not_, map(str.__contains__, kept, repeat("{"))))
    return list(compress(kept, unbracketed)), False, not all(unbracketed), list(compress(numbers, unbracketed))


def _cited(line: str) -> str:
    return _CITATION.sub("", line) if "[" in line else line


def _no_long_word(line: str) -> bool:
    return len(line) <= 1000 or all(len(word) <= 1000 for word in line.split())


#: A line holds a C4 policy phrase only if it holds one of these (each phrase holds one).
_POLICY_WORDS = ("cookie", "terms of use", "privacy policy")


def c4(
    text: str, lines: list[str] | None = None, stripped: list[str] | None = None, tokens: _Tokens | None = None
) -> dict:
    """datatrove ``C4QualityFilter`` (tfds ``c4_utils.clean_page``; Raffel et al. 2020, 2.2), as scores.

    Lines are ``splitlines()``, stripped; a line is removed when it has a word
    over 1,000 characters, does not end in . ? ! " ' (after removing
    ``[1]``-style citations) or ends in ``...``, has fewer than 3 words, or
    mentions "javascript" or a cookie/terms-of-use phrase. Of the rest:

    ``ref_c4_lorem_ipsum``    a line contains "lorem ipsum" (C4 drops the page)
    ``ref_c4_curly_bracket``  a line contains "{" (C4 drops the page)
    ``ref_c4_kept_lines``     lines kept
    ``ref_c4_sentences``      spaCy sentencizer sentences in the kept lines (C4: < 5 drops the page)

    (:func:`_c4_kept_at` computes what :func:`_c4_lines` yields; ``tokens``: the text's, when the caller has
    them, so that the sentences are counted from them, :func:`_kept_sentences`.)
    """
    lines = text.splitlines() if lines is None else lines
    stripped = list(map(str.strip, lines)) if stripped is None else stripped
    kept_lines, lorem, curly, numbers = _c4_kept_at(lines, text, stripped)
    return {
        "ref_c4_sentences": _kept_sentences(text, kept_lines, numbers, stripped, tokens),
        "ref_c4_kept_lines": len(kept_lines),
        "ref_c4_lorem_ipsum": lorem,
        "ref_c4_curly_bracket": curly,
    }


def _kept_sentences(text: str, kept: list[str], numbers: list[int], stripped: list[str], tokens: _Tokens | None) -> int:
    """``sentence_total(kept)``: the kept lines that are their stripped line (no citation removed) counted
    from the text's tokens (:meth:`_Tokens.line_sentences`), the others from their strings."""
    if tokens is None:
        return sentence_total(kept)
    if "[" in text:  # a line whose citations were removed is not the text's line: counted from its string
        same = list(map(str.__eq__, kept, map(stripped.__getitem__, numbers)))
        if not all(same):
            changed = list(compress(kept, map(not_, same)))
            from_tokens = tokens.line_sentences(text, list(compress(numbers, same)))
            return sentence_total(kept) if from_tokens is None else from_tokens + sentence_total(changed)
    from_tokens = tokens.line_sentences(text, numbers)
    return sentence_total(kept) if from_tokens is None else from_tokens


def c4_kept_text(text: str) -> str:
    """The text C4 keeps: its kept lines joined by newlines (datatrove sets ``doc.text`` to this)."""
    return "\n".join(line for line, outcome in _c4_lines(text.splitlines()) if outcome == "kept").strip()


# --- FineWeb -------------------------------------------------------------------------


def fineweb(text: str, tokens: _Tokens, pieces: list[str] | None = None) -> dict:
    """datatrove ``FineWebQualityFilter`` (Penedo et al. 2024, 3.3), as scores.

    Lines are the pieces of ``text.split('\\n')`` that are not blank, unstripped.

    ``ref_fw_line_punct_ratio``    share ending in a terminal punctuation character (< 0.12 drops)
    ``ref_fw_short_line_ratio``    share of at most 30 characters (> 0.67)
    ``ref_fw_dup_line_char_frac``  characters of lines equal to an earlier one over the characters
        of the text without newlines (> 0.01)
    ``ref_fw_newline_ratio``       newlines per token (> 0.3)

    All ``None`` without a non-blank line (datatrove drops the document as "empty").
    """
    pieces = text.split("\n") if pieces is None else pieces
    lines = list(filterfalse(str.isspace, filter(None, pieces)))
    if not lines:
        return dict.fromkeys(FINEWEB_COLUMNS)
    newlines = len(pieces) - 1  # text.count("\n"), without a pass over the text
    return {
        "ref_fw_line_punct_ratio": sum(map(_TERMINAL_CHARACTERS.__contains__, map(itemgetter(-1), lines))) / len(lines),
        "ref_fw_short_line_ratio": sum(map((30).__ge__, map(len, lines))) / len(lines),
        "ref_fw_dup_line_char_frac": _repeats(lines)[1] / (len(text) - newlines),
        "ref_fw_newline_ratio": _fraction(newlines, tokens.count),
    }


# --- all of them -------------------------------------------------------------------------


def score(
    text: str,
    language: str | None = None,
    *,
    stop_words: dict[str, Iterable[str]] | None = None,
    pieces: list[str] | None = None,
    chunks: list[str] | None = None,
) -> dict:
    """Every reference column for one document (``pieces``: ``text.split("\\n")``, ``chunks``:
    ``text.split()``, when the caller has them already)."""
    vocabulary = reference_tokenizer.VOCABULARY
    tokens = _Tokens(*vocabulary.tokens_of(vocabulary.chunk_ids_of(text.split() if chunks is None else chunks)))
    lines = text.splitlines()
    stripped = list(map(str.strip, lines))
    pieces = text.split("\n") if pieces is None else pieces
    return {
        **gopher_quality(text, tokens, language, stop_words, lines, stripped),
        **gopher_repetition(text, tokens, pieces),
        **c4(text, lines, stripped, tokens),
        **fineweb(text, tokens, pieces),
    }
