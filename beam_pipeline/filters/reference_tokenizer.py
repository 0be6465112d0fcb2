"""spaCy's English tokenizer, reproduced without spaCy (for the reference definitions): a text's words.

HF datatrove 0.10.1, the implementation FineWeb was built with, splits text
into words with ``spacy.blank("en")`` and into sentences with spaCy's
rule-based ``sentencizer`` (``datatrove.utils.word_tokenizers.SpaCyTokenizer``;
English is its default language). Its Gopher, C4 and FineWeb filters count
those words and sentences, so reproducing their decisions needs the same
segmentation. spaCy itself is not a dependency of the pipeline: it costs
about 1 MB/s per core on this project's text (twice the time of every
project heuristic together) and weighs ~40 MB in the worker image. spaCy
3.8's algorithm is implemented in Python over the rule data copied from spaCy
into :mod:`beam_pipeline.filters.reference_rules`: the split of one chunk
(``spacy/tokenizer.pyx``: ``_tokenize_affixes``, ``split_affixes``,
``_attach_tokens``, ``apply_special_cases``) in
:mod:`.reference_affixes`, the sentencizer (``spacy/pipeline/sentencizer.pyx``:
``predict``) in :mod:`.reference_sentencizer`. This module caches the tokens of
each whitespace-separated chunk, as spaCy does, so that a repeated word costs
one dict lookup, with fast paths for the common shapes of chunk, and gives a
text's words and tokens (:func:`words`, :func:`word_ids`, :func:`tokens`).

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
from itertools import chain, filterfalse, repeat

import numpy as np

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.filters import reference_rules as _rules
from beam_pipeline.filters.reference_affixes import (
    CACHE_SIZE,
    PATTERN_PAIRS,
    RUNS,
    SPECIALS,
    apply_special_cases,
    split_affixes,
    split_chunk,
)

SPACY_VERSION = _rules.SPACY_VERSION
SENTENCE_PUNCT = frozenset(_rules.SENTENCE_PUNCT_CHARS)


class _Vocabulary:
    """Tokens interned as ints, and each chunk's token ids (spaCy caches chunks the same way).

    Each chunk also gets a chunk id, and its token ids are kept in flat
    arrays (``first[chunk id]`` is where its ``sizes[chunk id]`` token ids
    start in ``flat``), so that a document's token ids are one dict lookup
    per chunk and a few array operations (:meth:`token_ids`). ``classes``
    gives each chunk's sentence classes (:func:`token_class` of its tokens,
    one letter each) from its token ids (:class:`_ChunkClasses`).

    Renewed as a whole (a new *generation*, every id changes) before it
    would outgrow :data:`CACHE_SIZE` chunks, only between documents, so a
    document's ids are always consistent. A new generation starts with the
    chunks of the old one that a later document met again (``reused``; the
    corpus's frequent words, at most half the cache), their tokens carried
    over, so that they are not tokenized again (:meth:`_renew`).
    """

    def __init__(self):
        self.generation = 0
        self.clear()

    def clear(self) -> None:
        self.chunk_ids: dict[str, int] = {}
        self.classes = _ChunkClasses(self)
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []
        self.token_classes: list[str] = []
        self.first = np.zeros(1024, np.int64)
        self.sizes = np.zeros(1024, np.int64)
        self.reused = np.zeros(1024, bool)
        self.flat = np.zeros(4096, np.int64)
        self.flat_size = 0
        self.generation += 1

    def fill(self, chunks: list[str]) -> None:
        """Tokenize the chunks not cached yet (``chunks`` may repeat, and hold cached ones); new tokens get
        ids in order of first appearance. Every pass but the tokenizer's is a C-level ``map``."""
        missing = list(filterfalse(self.chunk_ids.__contains__, dict.fromkeys(chunks)))
        if not missing:
            return
        if len(self.chunk_ids) + len(missing) > CACHE_SIZE:
            self._renew(chunks)
            missing = list(filterfalse(self.chunk_ids.__contains__, dict.fromkeys(chunks)))
        split = list(map(_tokenize_chunk, missing))
        self._add(missing, list(chain.from_iterable(split)), np.fromiter(map(len, split), np.int64, len(split)))

    def _renew(self, chunks: list[str]) -> None:
        """A new generation holding the reused chunks of this one (the first ``CACHE_SIZE // 2``), with the
        tokens they have, when they and the new ones of ``chunks`` fit; else an empty one."""
        reused = np.flatnonzero(self.reused[: len(self.chunk_ids)])[: CACHE_SIZE // 2]
        kept = list(map(list(self.chunk_ids).__getitem__, reused.tolist()))
        token_ids = self.tokens_of(reused)[0].tolist()
        tokens = list(map(self.strings.__getitem__, token_ids))
        classes = dict(zip(tokens, map(self.token_classes.__getitem__, token_ids)))
        sizes = self.sizes[reused]
        self.clear()
        kept_set = dict.fromkeys(kept)
        new = sum(1 for _ in filterfalse(kept_set.__contains__, dict.fromkeys(chunks)))
        if kept and len(kept) + new <= CACHE_SIZE:
            self._add(kept, tokens, sizes, classes)

    def _add(self, chunks: list[str], tokens: list[str], sizes: np.ndarray, classes: dict | None = None) -> None:
        """Cache ``chunks`` (not cached yet, distinct), whose tokens are ``tokens`` (concatenated, ``sizes``
        of them per chunk); ``classes``: the sentence class of tokens known already."""
        ids, strings = self.ids, self.strings
        new = list(filterfalse(ids.__contains__, dict.fromkeys(tokens)))
        if new:
            ids.update(zip(new, range(len(strings), len(strings) + len(new))))
            strings.extend(new)
            self.token_classes.extend(map(token_class, new) if classes is None else map(classes.__getitem__, new))
        flat = np.array(list(map(ids.__getitem__, tokens)), np.int64)
        ends = np.cumsum(sizes)
        start = len(self.chunk_ids)
        end = start + len(chunks)
        self.chunk_ids.update(zip(chunks, range(start, end)))
        if end > len(self.sizes):
            self.first = _grown(self.first, end)
            self.sizes = _grown(self.sizes, end)
            self.reused = _grown(self.reused, end)
        if self.flat_size + len(flat) > len(self.flat):
            self.flat = _grown(self.flat, self.flat_size + len(flat))
        self.sizes[start:end] = sizes
        self.first[start:end] = self.flat_size + ends - sizes
        self.flat[self.flat_size : self.flat_size + len(flat)] = flat
        self.flat_size += len(flat)

    def chunk_ids_of(self, chunks: list[str]) -> np.ndarray:
        """The chunk ids of ``chunks``, tokenizing the ones not cached yet."""
        found = np.fromiter(map(self.chunk_ids.get, chunks, repeat(-1)), np.int64, len(chunks))
        if found.size and found.min() < 0:
            self.reused[found[found >= 0]] = True  # met again: kept by the next generation
            at = np.flatnonzero(found < 0).tolist()
            generation = self.generation
            missing = [chunks[i] for i in at]
            self.fill(missing)
            if generation == self.generation:
                found[at] = list(map(self.chunk_ids.__getitem__, missing))
            else:  # a new generation holds only the missing chunks: add the others, every id changed
                self.fill(chunks)
                found = np.fromiter(map(self.chunk_ids.__getitem__, chunks), np.int64, len(chunks))
        else:
            self.reused[found] = True
        return found

    def token_ids(self, chunk_ids: np.ndarray) -> np.ndarray:
        """The token ids of a sequence of chunks (by chunk id), concatenated."""
        return self.tokens_of(chunk_ids)[0]

    def tokens_of(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the token ids of a sequence of chunks, concatenated; where each chunk's tokens end in them), by
        one compiled loop (:func:`_gather_tokens`) instead of the half-dozen numpy passes a gather of
        variable-length slices takes (each a few microseconds on a document's few hundred chunks)."""
        return _gather_tokens(np.asarray(chunk_ids, np.int64), self.first, self.sizes, self.flat)


class _ChunkClasses:
    """The sentence classes of each cached chunk (:func:`token_class` of its tokens, one letter each), as a
    read-only mapping made from the chunk's token ids when asked (only the counts from strings ask:
    :func:`sentence_count`, :func:`sentence_total`; ``score`` counts from token ids, so the classes are not
    made for every chunk tokenized). ``""`` (what is between two spaces, a whitespace token) is ``W``."""

    def __init__(self, vocabulary: _Vocabulary):
        self.vocabulary = vocabulary

    def _of(self, chunk: str) -> str | None:
        if not chunk:
            return "W"
        vocabulary = self.vocabulary
        chunk_id = vocabulary.chunk_ids.get(chunk)
        if chunk_id is None:
            return None
        first = int(vocabulary.first[chunk_id])
        ids = vocabulary.flat[first : first + int(vocabulary.sizes[chunk_id])].tolist()
        return "".join(map(vocabulary.token_classes.__getitem__, ids))

    def get(self, chunk: str, default: str) -> str:
        classes = self._of(chunk)
        return default if classes is None else classes

    def __getitem__(self, chunk: str) -> str:
        classes = self._of(chunk)
        if classes is None:
            raise KeyError(chunk)
        return classes

    def __contains__(self, chunk: str) -> bool:
        return not chunk or chunk in self.vocabulary.chunk_ids


@compiled
def _gather_tokens(chunk_ids, first, sizes, flat):  # pragma: no cover - compiled; tests compare
    """(``flat[first[c] : first[c] + sizes[c]]`` for each chunk id ``c`` of ``chunk_ids``, concatenated; the
    running total of their sizes), as :meth:`_Vocabulary.tokens_of` returns them
    (``test_gathered_tokens_equal_the_numpy_gather`` compares with the numpy gather)."""
    ends = np.empty(chunk_ids.shape[0], np.int64)
    total = 0
    for k in range(chunk_ids.shape[0]):
        total += sizes[chunk_ids[k]]
        ends[k] = total
    out = np.empty(total, np.int64)
    at = 0
    for k in range(chunk_ids.shape[0]):
        start = first[chunk_ids[k]]
        for j in range(sizes[chunk_ids[k]]):
            out[at] = flat[start + j]
            at += 1
    return out, ends


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` copied into one of at least ``size`` elements (doubling, so that growing is amortized)."""
    grown = np.zeros(max(size, 2 * len(array)), array.dtype)
    grown[: len(array)] = array
    return grown


VOCABULARY = _Vocabulary()


#: A word between brackets or quotes and followed by punctuation: ``(word),`` ``"word"`` ``word;``. These
#: characters are affixes whatever letters stand next to them, one token each (tested).
_LEADING, _TRAILING = '([{"', ',;:)]}!?"'
_WORD_IN_PUNCTUATION = re.compile(f"([{re.escape(_LEADING)}]*)(.+?)([{re.escape(_TRAILING)}]*)")


def _word_in_punctuation(chunk: str) -> list[str] | None:
    """The tokens of a word in brackets/quotes/punctuation, or None when the chunk is not one (or a special
    case could be involved): what :func:`split_chunk` gives, without its loop."""
    match = _WORD_IN_PUNCTUATION.fullmatch(chunk)
    if match is None:
        return None
    lead, core, trail = match.groups()
    if not core.isalpha() or not (lead or trail):
        return None
    end = len(chunk)
    for i in range(len(lead) + 1):  # every string the affix loop can look up
        for j in range(len(trail) + 1):
            if chunk[i : end - j] in SPECIALS:
                return None
    return [*lead, core, *trail]


def _alphabetic_runs(string: str) -> list[str]:
    """The maximal runs of letters (``str.isalpha``) of ``string``."""
    runs, run = [], []
    for character in string:
        if character.isalpha():
            run.append(character)
        elif run:
            runs.append("".join(run))
            run = []
    if run:
        runs.append("".join(run))
    return runs


#: Every run of letters of a special case: a chunk whose only run of letters is not one of these can
#: contain no special case, whatever its other characters.
_SPECIAL_LETTER_RUNS = frozenset(run for string in SPECIALS for run in _alphabetic_runs(string))
#: A word between characters that are no letter, digit or underscore: ``word.`` ``(word).`` ``“word”``
#: ``Word。`` (the letters are checked with ``str.isalpha``); both fast paths need this shape.
_AFFIXED_WORD = re.compile(r"(\W*)([^\W\d_]+)(\W*)")
_affixes_memo: dict[tuple[str, str, str], tuple[list[str], list[str]] | None] = {}


def _affixes_around_a_word(lead: str, last_letters: str, trail: str) -> tuple[list[str], list[str]] | None:
    """(prefixes, suffixes) that ``split_affixes`` cuts from ``lead + word + trail`` when ``word`` is three
    letters or more ending in ``last_letters`` and no special case is involved, or None when they do not
    consume ``lead`` and ``trail`` exactly.

    They do not depend on the rest of the word: a prefix starts with a
    character of ``lead`` and is made of no letters (``US$``, ``C$``, ``A$``
    would need a ``$`` in the word); a suffix of ``trail`` looks back at most
    two characters (:func:`_suffix_geometry`), and a suffix that would start
    inside the word (a unit, a currency) needs a digit before it. So the loop
    runs on a stand-in word of three letters with the same last two
    (``tests/test_heuristics_reference.py`` compares with the general loop on
    every chunk of the reference fixture and generated ones).
    """
    word = "a" + last_letters
    prefixes, left, suffixes = split_affixes(lead + word + trail, specials=False)
    if left != word:
        return None
    return prefixes, suffixes[::-1]


def _word_with_affixes(lead: str, word: str, trail: str) -> list[str] | None:
    """The tokens of ``lead + word + trail`` (a match of :data:`_AFFIXED_WORD`) when ``word`` is three letters
    or more with affixes around it, or None when it is not, a special case could be involved, or its
    affixes are not all cut (then :func:`split_chunk` decides). The affixes' split is memoized by (affixes,
    last two letters)."""
    if not (lead or trail) or len(word) < 3 or not word.isalpha() or word in _SPECIAL_LETTER_RUNS:
        return None
    key = (lead, word[-2:], trail)
    try:
        affixes = _affixes_memo[key]
    except KeyError:
        affixes = _affixes_memo[key] = _affixes_around_a_word(*key)
        if len(_affixes_memo) >= CACHE_SIZE:
            _affixes_memo.clear()
    if affixes is None:
        return None
    prefixes, suffixes = affixes
    return [*prefixes, word, *suffixes]


def _affixed_word(chunk: str) -> list[str] | None:
    """:func:`_word_with_affixes` of a chunk, None when it has not the shape of :data:`_AFFIXED_WORD`."""
    shape = _AFFIXED_WORD.fullmatch(chunk)
    return None if shape is None else _word_with_affixes(*shape.groups())


def _tokenize_chunk(chunk: str) -> tuple[str, ...]:
    if (chunk.isalpha() or (chunk.isascii() and chunk.isdigit())) and chunk not in SPECIALS:
        return (chunk,)  # no affix or infix rule matches letters only (tested over Unicode)
    split = None
    shape = _AFFIXED_WORD.fullmatch(chunk)
    if shape is not None:  # a word with affixes around it: maybe a fast path
        split = _word_with_affixes(*shape.groups())
        if split is None:
            split = _word_in_punctuation(chunk)
    if split is None:
        split = split_chunk(chunk, specials=True)
    if len(split) > 1 and not PATTERN_PAIRS.isdisjoint(zip(split, split[1:])):
        split = apply_special_cases(split)
    return tuple(split)


def chunk_tokens(chunk: str) -> tuple[str, ...]:
    """spaCy's tokens of one whitespace-free chunk."""
    chunk_id = VOCABULARY.chunk_ids.get(chunk)
    if chunk_id is None:
        VOCABULARY.fill([chunk])
        chunk_id = VOCABULARY.chunk_ids[chunk]
    first = int(VOCABULARY.first[chunk_id])
    ids = VOCABULARY.flat[first : first + int(VOCABULARY.sizes[chunk_id])].tolist()
    return tuple(map(VOCABULARY.strings.__getitem__, ids))


def word_ids(text: str, chunks: list[str] | None = None) -> np.ndarray:
    """The ids (in :data:`VOCABULARY`) of datatrove's English words of ``text``: spaCy's tokens minus
    whitespace tokens. Fast: one dict lookup per whitespace-separated chunk seen before. ``chunks``:
    ``text.split()`` when the caller has it already."""
    chunks = text.split() if chunks is None else chunks
    return VOCABULARY.token_ids(VOCABULARY.chunk_ids_of(chunks))


def words(text: str) -> list[str]:
    """datatrove's ``split_into_words(text)`` for English: spaCy's tokens minus whitespace tokens."""
    ids = word_ids(text).tolist()  # first: it may start a new generation of the vocabulary
    strings = VOCABULARY.strings
    return [strings[i] for i in ids]


def tokens(text: str) -> list[str]:
    """Every spaCy token of ``text``, whitespace tokens included (``[t.text for t in nlp(text)]``)."""
    out: list[str] = []
    for index, match in enumerate(RUNS.finditer(text)):
        run = match.group()
        if run[0].isspace():
            if index and run[0] == " ":
                run = run[1:]
            if run:
                out.extend(chunk_tokens(run))
        else:
            out.extend(chunk_tokens(run))
    return out


def token_class(token: str) -> str:
    """'F' a sentence-final character, 'P' other punctuation (spaCy ``is_punct``: every character in a
    Unicode P* category), 'W' anything else (words, numbers, symbols, whitespace tokens)."""
    if token in SENTENCE_PUNCT:
        return "F"
    if token.isalnum():  # letters and digits are in no P* category: a word, without a look at each character
        return "W"
    return "P" if all(unicodedata.category(c).startswith("P") for c in token) else "W"
