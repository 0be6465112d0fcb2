"""Heuristic quality signals: Gopher quality, Gopher repetition, C4 and FineWeb rules.

Every function returns named *scores* (fractions, counts, flags), never a
keep/drop verdict: the thresholds live in the policy (``docs/policy.md`` has
the published values as ready-made rules). A value is ``None`` where it is
undefined (no words, no lines) or where the rule does not apply to the
document's language; it is never invented.

Definitions shared by all families:

* *lines* are the non-empty lines of the text after stripping (blank lines
  are layout, not content); *paragraphs* are blocks separated by blank lines.
* *words* are whitespace-separated tokens with leading and trailing
  punctuation removed (tokens that were only punctuation are not words).
* Languages written without spaces between words (:data:`NO_SPACE_LANGUAGES`:
  Chinese, Japanese, Thai, ...) get ``None`` for every word-based score:
  whitespace tokens there are phrases, and a threshold tuned on English words
  would drop them all. Line- and character-based scores still apply.
* Stop-word counts exist only for languages with a configured list (by
  default English, the Gopher list); for other languages, or when the language
  is unknown, the count is ``None``.

Sources:

* Gopher: J. W. Rae et al., "Scaling Language Models: Methods, Analysis &
  Insights from Training Gopher", arXiv:2112.11446 (2021), Appendix A.1.1
  ("quality filters") and Table A1 (repetition thresholds). Reference
  implementations read: huggingface/datatrove ``gopher_quality_filter.py``,
  ``gopher_repetition_filter.py``; allenai/dolma ``gopher.py``.
* C4: C. Raffel et al., "Exploring the Limits of Transfer Learning with a
  Unified Text-to-Text Transformer", JMLR 21 (2020), section 2.2; reference
  implementation tensorflow/datasets ``text/c4_utils.py``.
* FineWeb: G. Penedo et al., "The FineWeb Datasets: Decanting the Web for the
  Finest Text Data at Scale", arXiv:2406.17557 (2024), section 3.3 (custom
  filters); reference implementation datatrove ``fineweb_quality_filter.py``.
"""

from __future__ import annotations

import re
import string
from itertools import filterfalse, repeat
from typing import Iterable

import numpy as np

from beam_pipeline.filters import ngram_repeats
from beam_pipeline.filters.paragraphs import split_paragraphs

#: Languages (lid.176 codes) whose script does not put spaces between words.
NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "wuu", "yue", "dz"})

#: Gopher's stop words (Rae et al. 2021, A.1.1): "the, be, to, of, and, that, have, with".
GOPHER_STOP_WORDS = {"en": ("the", "be", "to", "of", "and", "that", "have", "with")}

#: Characters stripped from the ends of a token to make a word.
PUNCTUATION = string.punctuation + "«»“”‘’„‚‹›…–—‐·•¡¿،؛؟۔।॥。、，！？：；（）【】《》〈〉「」『』〔〕"

#: Line-start bullets (Gopher counts lines "starting with a bullet point").
BULLETS = ("•", "‣", "⁃", "◦", "▪", "▫", "●", "○", "■", "□", "➢", "-", "*")

ELLIPSES = ("...", "…")

#: C4 keeps lines ending in one of these (its list is . ! ? "; tfds also accepts ');
#: sentence terminators of other scripts are added so the rule is not English-only.
TERMINAL_PUNCTUATION = (".", "!", "?", '"', "'", "”", "’", "。", "！", "？", "؟", "۔", "।", "॥", "჻", "።")

#: FineWeb's "stop chars" for the line punctuation ratio, with the same additions.
FINEWEB_STOP_CHARS = (".", "'", '"', "!", "?", "。", "！", "？", "؟", "۔", "।", "॥", "。", "”", "’")

#: C4 drops lines containing these (tfds ``c4_utils._POLICY_SUBSTRINGS``-style list).
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")

TOP_NGRAM_SIZES = ngram_repeats.TOP_NGRAM_SIZES  # (2, 3, 4)
DUP_NGRAM_SIZES = ngram_repeats.DUP_NGRAM_SIZES  # (5, ..., 10)

_LETTER = re.compile(r"[^\W\d_]")


# --- text units ------------------------------------------------------------


def split_lines(text: str, pieces: list[str] | None = None) -> list[str]:
    """Non-empty lines, stripped (``pieces``: ``text.split("\\n")`` when the caller has it already)."""
    return list(filter(None, map(str.strip, text.split("\n") if pieces is None else pieces)))


def split_words(text: str, chunks: list[str] | None = None) -> list[str]:
    """Whitespace tokens with leading/trailing punctuation removed; empty ones dropped (``chunks``:
    ``text.split()`` when the caller has it already)."""
    return list(filter(None, map(str.strip, text.split() if chunks is None else chunks, repeat(PUNCTUATION))))


def uses_spaces(language: str | None) -> bool:
    return language not in NO_SPACE_LANGUAGES


def _fraction(part: float, whole: float) -> float | None:
    return None if whole == 0 else part / whole


# --- Gopher quality --------------------------------------------------------


def gopher_quality(
    text: str,
    language: str | None = None,
    stop_words: dict[str, Iterable[str]] | None = None,
    *,
    lines: list[str] | None = None,
    words: list[str] | None = None,
) -> dict:
    """Gopher's quality-filter signals (Rae et al. 2021, A.1.1).

    The paper keeps a document when: 50 <= words <= 100,000; mean word length
    in [3, 10]; hash and ellipsis to word ratios each <= 0.1; at most 90% of
    lines start with a bullet and at most 30% end with an ellipsis; at least
    80% of words contain an alphabetic character; at least two of the stop
    words occur. Columns:

    ``gopher_words``             words (``None`` for no-space languages)
    ``gopher_mean_word_length``  mean characters per word
    ``gopher_hash_ratio``        '#' per word
    ``gopher_ellipsis_ratio``    '...' and '…' per word
    ``gopher_bullet_lines``      share of lines starting with a bullet
    ``gopher_ellipsis_lines``    share of lines ending with an ellipsis
    ``gopher_alpha_words``       share of words with at least one letter
    ``gopher_stop_words``        stop-word occurrences (language with a list only)
    """
    stop_words = GOPHER_STOP_WORDS if stop_words is None else stop_words
    lines = split_lines(text) if lines is None else lines
    out = {
        "gopher_bullet_lines": _fraction(sum(map(str.startswith, lines, repeat(BULLETS))), len(lines)),
        "gopher_ellipsis_lines": _fraction(sum(map(str.endswith, lines, repeat(ELLIPSES))), len(lines)),
        "gopher_words": None,
        "gopher_mean_word_length": None,
        "gopher_hash_ratio": None,
        "gopher_ellipsis_ratio": None,
        "gopher_alpha_words": None,
        "gopher_stop_words": None,
    }
    if not uses_spaces(language):
        return out
    words = split_words(text) if words is None else words
    n = len(words)
    out["gopher_words"] = n
    if n:
        out["gopher_mean_word_length"] = sum(map(len, words)) / n
        out["gopher_hash_ratio"] = text.count("#") / n
        out["gopher_ellipsis_ratio"] = (text.count("...") + text.count("…")) / n
        mixed = list(filterfalse(str.isalpha, words))
        with_letter = n - len(mixed) + sum(1 for _ in filter(None, map(_LETTER.search, mixed)))
        out["gopher_alpha_words"] = with_letter / n
    if language in stop_words:
        listed = frozenset(stop_words[language])
        out["gopher_stop_words"] = sum(map(listed.__contains__, map(str.lower, words)))
    return out


# --- Gopher repetition -----------------------------------------------------


def gopher_repetition(
    text: str, language: str | None = None, *, lines: list[str] | None = None, words: list[str] | None = None
) -> dict:
    """Gopher's repetition signals (Rae et al. 2021, A.1.1 and Table A1).

    Published thresholds (remove above): duplicate line fraction 0.30,
    duplicate paragraph fraction 0.30, duplicate line character fraction
    0.20, duplicate paragraph character fraction 0.20; top 2/3/4-gram
    character fraction 0.20/0.18/0.16; duplicate 5..10-gram character fraction
    0.15, 0.14, 0.13, 0.12, 0.11, 0.10. Columns:

    ``rep_dup_line_frac`` / ``rep_dup_para_frac``  share of lines (paragraphs)
        that repeat an earlier one
    ``rep_dup_line_char_frac`` / ``rep_dup_para_char_frac``  their characters
        over the characters of all lines (paragraphs)
    ``rep_top_{2,3,4}gram``  characters covered by the most frequent n-gram
        (counted once per occurrence, capped at 1) over the characters of all
        words; 0 when no n-gram repeats
    ``rep_dup_{5..10}gram``  characters of words covered by any n-gram that
        occurs more than once (every occurrence, each word once) over the
        characters of all words

    n-grams are over words (see module doc); ``None`` when there are no words
    or for no-space languages. n-grams are compared by a 64-bit rolling hash
    of word ids (a collision needs ~2^32 distinct n-grams in one document).
    """
    out = {}
    lines = split_lines(text) if lines is None else lines
    for unit, parts in (("line", lines), ("para", split_paragraphs(text))):
        dups, dup_chars = _repeats(parts)
        out[f"rep_dup_{unit}_frac"] = _fraction(dups, len(parts))
        out[f"rep_dup_{unit}_char_frac"] = _fraction(dup_chars, sum(map(len, parts)))
    if not uses_spaces(language):
        words = []
    elif words is None:
        words = split_words(text)
    out.update(ngram_repetition(words))
    return out


def _repeats(parts: list[str]) -> tuple[int, int]:
    """(elements that repeat an earlier one, their characters).

    Every element but the first of each distinct value repeats an earlier
    one, so both numbers are "all minus distinct"."""
    distinct = set(parts)
    return len(parts) - len(distinct), sum(map(len, parts)) - sum(map(len, distinct))


def ngram_repetition(words: list[str]) -> dict:
    """The n-gram part of :func:`gopher_repetition` for a list of words.

    Words get ids (the position of their first occurrence) and lengths, and
    the scores are one compiled loop (:mod:`.ngram_repeats`): an n-gram can
    repeat only where the two (n-1)-grams inside it repeat, so each size
    hashes and counts only the *candidates* left by the size before (at size
    1, the words that occur twice); the others occur once and count neither
    for the top n-gram (a top count of 1 scores 0) nor as duplicates.
    ``tests/test_heuristics_fast_paths.py`` compares the columns with a
    straightforward count over every n-gram and with the numpy version the
    loop replaced.
    """
    if not words:
        return dict.fromkeys(_NGRAM_COLUMNS)
    ids, lengths = ngram_repeats.word_ids(words)
    return dict(zip(_NGRAM_COLUMNS, ngram_repeats.project_scores(ids, lengths)))


_NGRAM_COLUMNS = tuple(f"rep_top_{n}gram" for n in TOP_NGRAM_SIZES) + tuple(f"rep_dup_{n}gram" for n in DUP_NGRAM_SIZES)


def _line_flags(flags: Iterable[bool], n_lines: int) -> np.ndarray:
    return np.fromiter(flags, dtype=bool, count=n_lines)


# --- C4 ------------------------------------------------------------------------


def c4(text: str, language: str | None = None, min_words_per_line: int = 3, *, lines: list[str] | None = None) -> dict:
    """C4's cleaning signals (Raffel et al. 2020, 2.2; tfds ``c4_utils``).

    C4 keeps only lines that end in terminal punctuation and have at least 3
    words, drops lines mentioning "javascript" and cookie/terms-of-use lines,
    and drops pages containing "lorem ipsum" or a curly bracket, and pages
    left with fewer than 5 sentences (tfds: 3 lines). Here nothing is
    removed; the columns say what C4 would do:

    ``c4_terminal_punct_lines``  share of lines ending in terminal punctuation
        (not an ellipsis)
    ``c4_short_lines``  share of lines with fewer than ``min_words_per_line``
        words (``None`` for no-space languages)
    ``c4_javascript_lines`` / ``c4_policy_lines``  lines C4 would remove for
        "javascript" / policy phrases (case-insensitive)
    ``c4_lorem_ipsum`` / ``c4_curly_bracket``  page-level flags
    ``c4_kept_lines``  lines that survive all of C4's line rules
    """
    lines = split_lines(text) if lines is None else lines
    spaced = uses_spaces(language)
    n_lines = len(lines)
    lower_text = text.lower()
    ends = _line_flags(map(str.endswith, lines, repeat(TERMINAL_PUNCTUATION)), n_lines)
    ends &= ~_line_flags(map(str.endswith, lines, repeat(ELLIPSES)), n_lines)
    words = np.fromiter(map(len, map(str.split, lines)), dtype=np.int64, count=n_lines)
    few = (words < min_words_per_line) if spaced else np.zeros(n_lines, dtype=bool)
    # A phrase in no line is not in the text (lowercasing depends on context only for the Greek sigma),
    # so the lines are lowercased one by one only when the text has the phrase.
    has_js = np.zeros(n_lines, dtype=bool)
    if "javascript" in lower_text:
        has_js = _line_flags(("javascript" in line.lower() for line in lines), n_lines)
    has_policy = np.zeros(n_lines, dtype=bool)
    policies = [phrase for phrase in POLICY_SUBSTRINGS if phrase in lower_text]
    if policies:
        has_policy = _line_flags((any(p in line.lower() for p in policies) for line in lines), n_lines)
    kept = ends & ~few & ~has_js & ~has_policy & (words > 0)
    return {
        "c4_terminal_punct_lines": _fraction(int(np.count_nonzero(ends)), n_lines),
        "c4_short_lines": _fraction(int(np.count_nonzero(few)), n_lines) if spaced else None,
        "c4_javascript_lines": int(np.count_nonzero(has_js)),
        "c4_policy_lines": int(np.count_nonzero(has_policy)),
        "c4_lorem_ipsum": "lorem ipsum" in lower_text,
        "c4_curly_bracket": "{" in text,
        "c4_kept_lines": int(np.count_nonzero(kept)),
    }


# --- FineWeb -----------------------------------------------------------------


def fineweb(
    text: str,
    language: str | None = None,
    short_line_chars: int = 30,
    *,
    lines: list[str] | None = None,
    words: list[str] | None = None,
) -> dict:
    """FineWeb's custom filters (Penedo et al. 2024, 3.3).

    FineWeb removes a document when at most 12% of its lines end with
    punctuation, when at least 67% of lines are 30 characters or shorter, when
    duplicated lines hold at least 10% of the characters, or when there are
    more than 0.3 newlines per word. Columns:

    ``fw_line_punct_ratio``   share of lines ending in a stop character
    ``fw_short_line_ratio``   share of lines of at most ``short_line_chars`` characters
    ``fw_dup_line_char_frac`` characters of repeated lines (after the first
        occurrence) over the characters of the text without newlines
    ``fw_newline_ratio``      newlines per word (``None`` without words or for
        no-space languages)
    """
    lines = split_lines(text) if lines is None else lines
    _, dup_chars = _repeats(lines)
    chars = len(text) - text.count("\n")
    if uses_spaces(language):
        words = len(split_words(text) if words is None else words)
    else:
        words = 0
    return {
        "fw_line_punct_ratio": _fraction(sum(map(str.endswith, lines, repeat(FINEWEB_STOP_CHARS))), len(lines)),
        "fw_short_line_ratio": _fraction(sum(map(short_line_chars.__ge__, map(len, lines))), len(lines)),
        "fw_dup_line_char_frac": _fraction(dup_chars, chars),
        "fw_newline_ratio": _fraction(text.count("\n"), words) if uses_spaces(language) else None,
    }


# --- all of them ---------------------------------------------------------------

#: The project's columns, family by family (the ``ref_*`` columns are the reference definitions:
#: :mod:`beam_pipeline.filters.heuristics_reference`).
PROJECT_COLUMNS = (
    "gopher_words",
    "gopher_mean_word_length",
    "gopher_hash_ratio",
    "gopher_ellipsis_ratio",
    "gopher_bullet_lines",
    "gopher_ellipsis_lines",
    "gopher_alpha_words",
    "gopher_stop_words",
    "rep_dup_line_frac",
    "rep_dup_line_char_frac",
    "rep_dup_para_frac",
    "rep_dup_para_char_frac",
    *(f"rep_top_{n}gram" for n in TOP_NGRAM_SIZES),
    *(f"rep_dup_{n}gram" for n in DUP_NGRAM_SIZES),
    "c4_terminal_punct_lines",
    "c4_short_lines",
    "c4_javascript_lines",
    "c4_policy_lines",
    "c4_lorem_ipsum",
    "c4_curly_bracket",
    "c4_kept_lines",
    "fw_line_punct_ratio",
    "fw_short_line_ratio",
    "fw_dup_line_char_frac",
    "fw_newline_ratio",
)
DEFINITIONS = ("project", "reference")


def definition_of(column: str) -> str | None:
    """'project' or 'reference' for a heuristics column, None for another name."""
    from beam_pipeline.filters.heuristics_reference import COLUMNS

    if column in COLUMNS:
        return "reference"
    return "project" if column in PROJECT_COLUMNS else None


def score(
    text: str,
    language: str | None = None,
    *,
    stop_words: dict[str, Iterable[str]] | None = None,
    min_words_per_line: int = 3,
    short_line_chars: int = 30,
    default_language: str | None = None,
    definitions: Iterable[str] = DEFINITIONS,
) -> dict:
    """Every heuristic column for one document (the ``heuristics`` layer row, minus ids).

    ``language`` is the document's language (the ``language`` layer's
    ``lang``); ``default_language`` stands in when it is None (a corpus known
    to be in one language can skip language identification). ``definitions``
    selects the families' definitions computed: ``project`` (this module) and
    ``reference`` (datatrove's, :mod:`beam_pipeline.filters.heuristics_reference`);
    the columns of one left out are None.
    """
    from beam_pipeline.filters import heuristics_reference

    if language is None:
        language = default_language
    definitions = frozenset(definitions)
    unknown = sorted(definitions - set(DEFINITIONS))
    if unknown:
        raise ValueError(f"unknown definition(s) {', '.join(unknown)}; definitions: {', '.join(DEFINITIONS)}")
    # the splits both definitions use, made once
    pieces = text.split("\n")
    chunks = text.split()
    if "project" in definitions:
        lines = split_lines(text, pieces)
        words = split_words(text, chunks) if uses_spaces(language) else []
        out = {
            **gopher_quality(text, language, stop_words, lines=lines, words=words),
            **gopher_repetition(text, language, lines=lines, words=words),
            **c4(text, language, min_words_per_line, lines=lines),
            **fineweb(text, language, short_line_chars, lines=lines, words=words),
        }
    else:
        out = dict.fromkeys(PROJECT_COLUMNS)
    if "reference" in definitions:
        out.update(heuristics_reference.score(text, language, stop_words=stop_words, pieces=pieces, chunks=chunks))
    else:
        out.update(dict.fromkeys(heuristics_reference.COLUMNS))
    return out
