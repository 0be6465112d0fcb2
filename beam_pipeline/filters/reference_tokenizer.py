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
from itertools import chain, filterfalse, repeat

import numpy as np

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.filters import reference_rules as _rules
from beam_pipeline.filters.code_points import code_points

SPACY_VERSION = _rules.SPACY_VERSION

_prefix_match = re.compile(_rules.PREFIX).match
_suffix_search = re.compile(_rules.SUFFIX).search


def _first_characters(items) -> list[tuple[int, int]] | None:
    """Code point ranges (low, high) of every character a match of ``items`` (sre parse items) can start
    with, or None when that is not simply a set of literals and ranges."""
    return _edge_characters(items, 0)


def _last_characters(items) -> list[tuple[int, int]] | None:
    """Code point ranges (low, high) of every character a match of ``items`` (sre parse items, without a
    final ``$``) can end with, or None when that is not simply a set of literals and ranges."""
    return _edge_characters(items, -1)


def _edge_characters(items, edge: int) -> list[tuple[int, int]] | None:
    """:func:`_first_characters` (``edge`` 0) or :func:`_last_characters` (``edge`` -1): the item at that
    end of ``items``, zero-width assertions aside, read down to its literals and ranges."""
    import re._constants as c

    items = [item for item in items if item[0] not in (c.ASSERT, c.ASSERT_NOT)]  # zero width
    if not items:
        return None
    op, av = items[edge]
    if op is c.LITERAL:
        return [(av, av)]
    if op is c.IN:
        out = []
        for kind, value in av:
            if kind is c.LITERAL:
                out.append((value, value))
            elif kind is c.RANGE:
                out.append(value)
            else:
                return None
        return out
    if op is c.BRANCH:
        out = []
        for branch in av[1]:
            found = _edge_characters(branch.data if hasattr(branch, "data") else branch, edge)
            if found is None:
                return None
            out.extend(found)
        return out
    if op is c.SUBPATTERN:
        return _edge_characters(av[-1].data, edge)
    if op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1:
        return _edge_characters(av[2].data, edge)
    return None


def _starts() -> tuple[re.Pattern | None, frozenset[str] | None]:
    """(a class matching every character an infix can start with, the characters a prefix can start with),
    each None when the patterns do not allow computing it."""
    import re._constants as constants
    import re._parser as parser

    infix = _first_characters(parser.parse(_rules.INFIX).data)
    infix_class = (
        None
        if infix is None
        else re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in infix) + "]")
    )
    prefix_items = parser.parse(_rules.PREFIX).data
    prefix = None
    if prefix_items and prefix_items[0] == (constants.AT, constants.AT_BEGINNING):
        first = _first_characters(prefix_items[1:])
        if first is not None:
            prefix = frozenset(chr(code) for lo, hi in first for code in range(lo, hi + 1))
    return infix_class, prefix


_INFIX_START, _PREFIX_START = _starts()
_infix_match = re.compile(_rules.INFIX).match


def _ascii_class(pattern: re.Pattern | None) -> re.Pattern | None:
    """The ASCII characters of the one-character class ``pattern``, as a class of their own.

    ``re`` tests a character against a class with code points above U+FFFF
    range by range (no bitmap), ~200 ns per character for the infix class; an
    ASCII string (most code-like chunks) only needs the class's ASCII
    characters, which ``re`` tests with a bitmap.
    """
    if pattern is None:
        return None
    characters = [chr(code) for code in range(128) if pattern.fullmatch(chr(code))]
    return re.compile("[" + "".join(map(re.escape, characters)) + "]" if characters else "(?!)")


_INFIX_START_ASCII = _ascii_class(_INFIX_START)
_url_match = re.compile(_rules.URL_MATCH).match


def _infix_spans(string: str) -> list[tuple[int, int]]:
    """The spans of ``re.finditer(INFIX, string)``: a match can only start at a character an infix can
    start with, so only those positions are tried (a match never is empty, so the next search starts at
    its end, as finditer's)."""
    if _INFIX_START is None:
        return [m.span() for m in re.finditer(_rules.INFIX, string)]
    spans = []
    search = (_INFIX_START_ASCII if string.isascii() and _INFIX_START_ASCII is not None else _INFIX_START).search
    start = search(string)
    while start is not None:
        match = _infix_match(string, start.start())
        if match is not None:
            spans.append(match.span())
            start = search(string, match.end())
        else:
            start = search(string, start.start() + 1)
    return spans


_SPECIALS: dict[str, tuple[str, ...]] = _rules.SPECIAL_CASES
_SENTENCE_PUNCT = frozenset(_rules.SENTENCE_PUNCT_CHARS)
_RUNS = re.compile(r"\s+|\S+")

#: Upper bound of the chunk cache (entries); it is cleared when full, like a generation.
CACHE_SIZE = 500_000


def _prefix_length(string: str) -> int:
    if _PREFIX_START is not None and string[:1] not in _PREFIX_START:
        return 0
    match = _prefix_match(string)  # every prefix alternative starts with ^
    return match.end() if match is not None else 0


def _suffix_geometry() -> tuple[int, int] | None:
    """(widest bounded suffix match, widest lookbehind) of the suffix pattern, or None if unusable.

    ``re`` tries a ``...$`` alternation at every position of the string. Every
    alternative but ``\\.\\.+$`` matches at most the first number of characters
    and looks at most the second number further back, so for a string that
    does not end with ``..`` the leftmost match depends only on that many last
    characters: :func:`_suffix_length` searches them once per distinct tail.
    """
    import re._constants as constants
    import re._parser as parser

    def lookbehind(items) -> int:
        widest = 0
        for op, av in items:
            if op in (constants.ASSERT, constants.ASSERT_NOT):
                direction, sub = av
                if direction < 0:
                    widest = max(widest, sub.getwidth()[1])
                widest = max(widest, lookbehind(sub.data))
            elif op is constants.BRANCH:
                widest = max([widest] + [lookbehind(b.data) for b in av[1]])
            elif op is constants.SUBPATTERN:
                widest = max(widest, lookbehind(av[-1].data))
            elif op in (constants.MAX_REPEAT, constants.MIN_REPEAT):
                widest = max(widest, lookbehind(av[2].data))
        return widest

    ((op, (_, branches)),) = parser.parse(_rules.SUFFIX).data
    if op is not constants.BRANCH:
        return None
    widest = 0
    for branch in branches:
        high = branch.getwidth()[1]
        if high >= constants.MAXREPEAT:
            if str(branch) != str(parser.parse(r"\.\.+$")):
                return None
            continue
        widest = max(widest, high)
    behind = lookbehind(parser.parse(_rules.SUFFIX).data)
    return (widest, behind) if behind < constants.MAXREPEAT else None


_SUFFIX_GEOMETRY = _suffix_geometry()
_suffix_memo: dict[str, int] = {}


def _suffix_endings() -> tuple[frozenset[str], frozenset[str]] | None:
    """(every character a suffix can end with, the characters whose only suffixes are that character
    alone, with one alternative that always matches it), or None when the pattern does not allow knowing.

    Every alternative of the suffix pattern ends with ``$``, so the leftmost
    match of a string ends at its end: a string whose last character ends no
    alternative has no suffix; one whose last character ends only one-character
    alternatives, one of them without a lookbehind, has a one-character
    suffix. :func:`_suffix_length` answers those without a search.
    """
    import re._constants as c
    import re._parser as parser

    ((op, (_, branches)),) = parser.parse(_rules.SUFFIX).data
    if op is not c.BRANCH:
        return None
    endings: set[str] = set()
    longer: set[str] = set()
    single: set[str] = set()
    for branch in branches:
        items = list(branch.data)
        if not items or items[-1] != (c.AT, c.AT_END):
            return None
        body = items[:-1]
        last = _last_characters(body)
        if last is None:
            return None
        characters = {chr(code) for low, high in last for code in range(low, high + 1)}
        endings |= characters
        if branch.getwidth()[1] > 1:
            longer |= characters
        elif len(body) == 1 and body[0][0] in (c.LITERAL, c.IN):  # one character, no lookbehind
            single |= characters
    return frozenset(endings), frozenset(single - longer)


_SUFFIX_ENDINGS = _suffix_endings()
_SUFFIX_ENDS, _SUFFIX_ONE = _SUFFIX_ENDINGS if _SUFFIX_ENDINGS is not None else (None, frozenset())


def _suffix_length(string: str) -> int:
    """The length of the suffix pattern's leftmost match in ``string`` (0 without one): by the string's
    last character when that decides (:func:`_suffix_endings`), else searched once per distinct tail
    (:func:`_suffix_geometry`)."""
    if _SUFFIX_ENDS is not None:
        last = string[-1:]
        if last not in _SUFFIX_ENDS:
            return 0
        if last in _SUFFIX_ONE:
            return 1
    return _suffix_length_searched(string)


def _suffix_length_searched(string: str) -> int:
    """:func:`_suffix_length` by a search of the pattern (once per distinct tail, memoized)."""
    if _SUFFIX_GEOMETRY is None or string.endswith(".."):
        match = _suffix_search(string)
        return match.end() - match.start() if match is not None else 0
    window, behind = _SUFFIX_GEOMETRY
    tail = string[-(window + behind) :]
    length = _suffix_memo.get(tail)
    if length is None:
        match = _suffix_search(tail, max(0, len(tail) - window))
        length = match.end() - match.start() if match is not None else 0
        if len(_suffix_memo) >= CACHE_SIZE:
            _suffix_memo.clear()
        _suffix_memo[tail] = length
    return length


def _split_affixes(string: str, specials: bool) -> tuple[list[str], str, list[str]]:
    """spaCy's ``_split_affixes``: (prefixes, what is left, suffixes in the order they were cut, from the end).

    Its loop stops as soon as an iteration cuts nothing; a string whose first character starts no prefix
    (:func:`_starts`) and whose last ends no suffix (:func:`_suffix_endings`) is one where it cuts nothing,
    so the loop stops there without trying the patterns (most chunks reach one after a cut or two, or are
    one; ``test_affix_and_infix_loops_equal_spacys`` compares with spaCy's loop as written).
    """
    prefixes: list[str] = []
    suffixes: list[str] = []
    last_size = 0
    while string and len(string) != last_size:
        if (
            _PREFIX_START is not None
            and _SUFFIX_ENDS is not None
            and string[0] not in _PREFIX_START
            and string[-1] not in _SUFFIX_ENDS
        ):
            break  # no prefix can start, no suffix end, here: the loop would cut nothing and stop
        if specials and string in _SPECIALS:
            break
        if string.isalpha():
            break  # no affix rule matches letters only (tested over Unicode): the loop would stop here
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
    return prefixes, string, suffixes


def _split_chunk(string: str, specials: bool) -> list[str]:
    """Tokens of one chunk without whitespace (``_split_affixes`` + ``_attach_tokens``)."""
    if specials and string in _SPECIALS:
        return list(_SPECIALS[string])
    prefixes, string, suffixes = _split_affixes(string, specials)
    tokens = prefixes
    if string:
        if specials and string in _SPECIALS:
            tokens.extend(_SPECIALS[string])
        elif string.isalnum():
            tokens.append(string)  # infixes consume no letter or digit (tested over Unicode)
        else:
            tokens.extend(_split_infixes(string))
    tokens.extend(reversed(suffixes))
    return tokens


def _split_infixes(string: str) -> list[str]:
    """The tokens of what the affix loop left (not a special case): the string whole when it is a URL, else
    cut at its infixes (an infix at its start is not cut).

    spaCy tries the URL pattern first; it is tried here only when an infix would cut the string (a URL has a
    dot), since without one the string stays whole either way: the URL pattern is the costlier search on
    dotted identifiers such as ``module.name`` (``test_affix_and_infix_loops_equal_spacys`` compares).
    """
    spans = [span for span in _infix_spans(string) if span[0]]
    if not spans or ("." in string and _url_match(string)):
        return [string]
    tokens = []
    start = 0
    for infix_start, infix_end in spans:
        if infix_start != start:
            tokens.append(string[start:infix_start])
        if infix_start != infix_end:
            tokens.append(string[infix_start:infix_end])
        start = infix_end
    if string[start:]:
        tokens.append(string[start:])
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


def _matcher_patterns() -> dict[tuple[str, str], list[tuple[tuple[str, ...], str]]]:
    """First two tokens -> [(pattern tokens, special case)] for the special cases spaCy re-joins after
    splitting (in the order of the special cases: a pattern can only match where its first two tokens do, so
    looking patterns up by the pair finds the matches a lookup by the first token would, in the same order)."""
    patterns: dict[tuple[str, str], list[tuple[tuple[str, ...], str]]] = {}
    for string in _SPECIALS:
        if not (_prefix_length(string) or _infix_spans(string) or _suffix_length(string) or " " in string):
            continue
        tokens = tuple(_tokenize_without_specials(string))
        if len(tokens) > 1 and "".join(tokens) == string:
            patterns.setdefault((tokens[0], tokens[1]), []).append((tokens, string))
    return patterns


_PATTERNS = _matcher_patterns()
_PATTERN_PAIRS = frozenset(_PATTERNS)


def _apply_special_cases(tokens: list[str]) -> list[str]:
    """spaCy's special-case matcher pass inside one chunk: longest match first, then leftmost."""
    matches = []
    for start, pair in enumerate(zip(tokens, tokens[1:])):
        for pattern, string in _PATTERNS.get(pair, ()):
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


class _Vocabulary:
    """Tokens interned as ints, and each chunk's token ids (spaCy caches chunks the same way).

    Each chunk also gets a chunk id, and its token ids are kept in flat
    arrays (``first[chunk id]`` is where its ``sizes[chunk id]`` token ids
    start in ``flat``), so that a document's token ids are one dict lookup
    per chunk and a few array operations (:meth:`token_ids`). ``classes``
    gives each chunk's sentence classes (:func:`_token_class` of its tokens,
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
            self.token_classes.extend(map(_token_class, new) if classes is None else map(classes.__getitem__, new))
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
    """The sentence classes of each cached chunk (:func:`_token_class` of its tokens, one letter each), as a
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
    case could be involved): what :func:`_split_chunk` gives, without its loop."""
    match = _WORD_IN_PUNCTUATION.fullmatch(chunk)
    if match is None:
        return None
    lead, core, trail = match.groups()
    if not core.isalpha() or not (lead or trail):
        return None
    end = len(chunk)
    for i in range(len(lead) + 1):  # every string the affix loop can look up
        for j in range(len(trail) + 1):
            if chunk[i : end - j] in _SPECIALS:
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
_SPECIAL_LETTER_RUNS = frozenset(run for string in _SPECIALS for run in _alphabetic_runs(string))
#: A word between characters that are no letter, digit or underscore: ``word.`` ``(word).`` ``“word”``
#: ``Word。`` (the letters are checked with ``str.isalpha``); both fast paths need this shape.
_AFFIXED_WORD = re.compile(r"(\W*)([^\W\d_]+)(\W*)")
_affixes_memo: dict[tuple[str, str, str], tuple[list[str], list[str]] | None] = {}


def _affixes_around_a_word(lead: str, last_letters: str, trail: str) -> tuple[list[str], list[str]] | None:
    """(prefixes, suffixes) that ``_split_affixes`` cuts from ``lead + word + trail`` when ``word`` is three
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
    prefixes, left, suffixes = _split_affixes(lead + word + trail, specials=False)
    if left != word:
        return None
    return prefixes, suffixes[::-1]


def _word_with_affixes(lead: str, word: str, trail: str) -> list[str] | None:
    """The tokens of ``lead + word + trail`` (a match of :data:`_AFFIXED_WORD`) when ``word`` is three letters
    or more with affixes around it, or None when it is not, a special case could be involved, or its
    affixes are not all cut (then :func:`_split_chunk` decides). The affixes' split is memoized by (affixes,
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
    if (chunk.isalpha() or (chunk.isascii() and chunk.isdigit())) and chunk not in _SPECIALS:
        return (chunk,)  # no affix or infix rule matches letters only (tested over Unicode)
    split = None
    shape = _AFFIXED_WORD.fullmatch(chunk)
    if shape is not None:  # a word with affixes around it: maybe a fast path
        split = _word_with_affixes(*shape.groups())
        if split is None:
            split = _word_in_punctuation(chunk)
    if split is None:
        split = _split_chunk(chunk, specials=True)
    if len(split) > 1 and not _PATTERN_PAIRS.isdisjoint(zip(split, split[1:])):
        split = _apply_special_cases(split)
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


_SENTENCE_BREAK = re.compile("F[FP]*W")


def _token_class(token: str) -> str:
    """'F' a sentence-final character, 'P' other punctuation (spaCy ``is_punct``: every character in a
    Unicode P* category), 'W' anything else (words, numbers, symbols, whitespace tokens)."""
    if token in _SENTENCE_PUNCT:
        return "F"
    if token.isalnum():  # letters and digits are in no P* category: a word, without a look at each character
        return "W"
    return "P" if all(unicodedata.category(c).startswith("P") for c in token) else "W"


def _chunk_classes(chunks: list[str]) -> list[str]:
    """The token classes of each chunk (made when the chunk is tokenized)."""
    try:
        return list(map(VOCABULARY.classes.__getitem__, chunks))
    except KeyError:  # a chunk not tokenized yet
        VOCABULARY.fill(chunks)
        return list(map(VOCABULARY.classes.__getitem__, chunks))


def _one_sentence(line: str) -> bool:
    """True when ``line`` has no sentence-final character but maybe its last one (see sentence_count):
    an ASCII line can only have . ! ? (str.find); another one is a set check of its characters (four times
    faster than searching the class of every sentence-final character with a regex)."""
    end = len(line) - 1
    if line.isascii():
        return line.find(".", 0, end) < 0 and line.find("!", 0, end) < 0 and line.find("?", 0, end) < 0
    return _SENTENCE_PUNCT.isdisjoint(line[:end])


def sentence_total(lines: list[str]) -> int:
    """``sum(map(sentence_count, lines))`` in one pass: the lines joined by `` \\n `` and cut at single
    spaces, every piece's token classes taken from the chunk cache (a separator ``\\n`` and a piece not
    cached get ``|``, which no sentence break spans; the empty piece between two spaces is a whitespace
    token, W), and the class string searched once. When some piece is not a cached chunk (a tab, a chunk
    not tokenized yet) or a line ends with a space, :func:`_sentence_total_by_line` counts."""
    if not lines:
        return 0
    joined = " \n ".join(lines)
    if not joined.endswith(" ") and "  \n" not in joined:  # a line's last single space is no token
        classes = "".join(map(VOCABULARY.classes.get, joined.split(" "), repeat("|")))
        if classes.count("|") == len(lines) - 1:  # only the separators: every piece was cached
            return len(lines) + len(_SENTENCE_BREAK.findall(classes))
    return _sentence_total_by_line(lines)


def _sentence_total_by_line(lines: list[str]) -> int:
    """``sum(map(sentence_count, lines))`` in one pass: the token classes of every line, joined by ``|``
    (which no sentence break spans), searched once; lines of single-spaced chunks take their classes
    from the chunk cache."""
    classes: list[str] = []
    cached = VOCABULARY.classes.__getitem__
    for line in lines:
        if _one_sentence(line):
            continue  # one sentence (see sentence_count)
        chunks = line.split()
        if " ".join(chunks) == line:
            try:
                classes.append("".join(map(cached, chunks)))
            except KeyError:  # a chunk not classed yet
                classes.append("".join(_chunk_classes(chunks)))
        else:
            classes.append("".join(_spaced_classes(line, _chunk_classes(chunks))))
    return len(lines) + len(_SENTENCE_BREAK.findall("|".join(classes)))


def _spaced_classes(text: str, chunk_classes: list[str]):
    """The token classes of ``text`` from its chunks' classes (``text.split()`` order) and its whitespace
    runs: a run left after spaCy's one separating space is whitespace tokens, class W (:func:`tokens`);
    one W stands for several, since a W cannot start a sentence break."""
    classes = iter(chunk_classes)
    for index, run in enumerate(_RUNS.findall(text)):
        if run[0].isspace():
            if len(run) > 1 or index == 0 or run != " ":
                yield "W"
        else:
            yield next(classes)


_FINAL_CHARACTER = re.compile("[" + "".join(re.escape(c) for c in sorted(_SENTENCE_PUNCT)) + "]")


def sentence_count(text: str) -> int:
    """Sentences of spaCy's ``sentencizer`` in ``text`` (datatrove: ``len(split_into_sentences(text))``).

    The sentencizer starts a sentence at the first token and at every token
    that is neither punctuation nor a sentence-final character (``.``, ``!``,
    ``?``, ``。`` ...) and follows a sentence-final character: with tokens
    classed F (final), P (punctuation) and W (other), one sentence more per
    ``F[FP]*W``. datatrove's splitting returns one part for a text without
    tokens, so the count is at least 1. A text whose only sentence-final
    character is its last one is one sentence.
    """
    if _FINAL_CHARACTER.search(text, 0, len(text) - 1) is None:
        return 1
    chunks = text.split()
    if " ".join(chunks) == text:  # single spaces only: no whitespace tokens
        classes = "".join(_chunk_classes(chunks))
    else:
        classes = "".join(map(_token_class, tokens(text)))
    return 1 + len(_SENTENCE_BREAK.findall(classes))


# --- sentences of chosen lines, from a document's tokens ----------------------------------

#: A token's sentence class (:func:`_token_class`) as a number, for the compiled loop below.
SENTENCE_CODES = {"W": 0, "P": 1, "F": 2}


def _separator_table() -> np.ndarray:
    """Per code point up to U+3000: 0 for a character of a chunk, 1 for whitespace (``str.split``'s
    separators), 2 for a line break (``str.splitlines``'; each is whitespace too). No code point above
    U+3000 is either (tested)."""
    size = 0x3001
    space = np.fromiter((chr(code).isspace() for code in range(size)), np.uint8, size)
    breaks = np.fromiter((len(f"a{chr(code)}a".splitlines()) == 2 for code in range(size)), np.uint8, size)
    return space + breaks


_SEPARATORS = _separator_table()


def line_sentences(text: str, numbers: list[int], classes: np.ndarray, chunk_ends: np.ndarray) -> int | None:
    """``sum(sentence_count(line.strip()) for the lines of text.splitlines() numbered numbers)``, from the
    document's tokens instead of the lines' strings: ``classes`` are the sentence classes
    (:data:`SENTENCE_CODES`) of the tokens of ``text.split()``, ``chunk_ends`` where each chunk's tokens end
    (:meth:`_Vocabulary.tokens_of`). None when the chunks do not match ``text`` (then count from strings).

    Why: the C4 sentence count otherwise looks every kept chunk up in the cache a second time (a dict lookup
    per chunk, most of the count's cost); the tokens are known already. A compiled loop walks the text's
    code points once, numbers its lines and chunks as ``splitlines`` and ``split`` do, and runs the
    sentencizer's rule (:func:`sentence_count`) over the tokens of the chosen lines; whitespace between two
    chunks that is not one space is a whitespace token (class W), as in :func:`tokens`.
    """
    if not numbers:
        return 0
    chosen = np.zeros(max(numbers) + 1, np.uint8)
    chosen[numbers] = 1
    breaks = _line_breaks(code_points(text), _SEPARATORS, chosen, np.ascontiguousarray(classes, np.uint8), chunk_ends)
    return None if breaks < 0 else len(numbers) + breaks


@compiled
def _line_breaks(points, separators, chosen, classes, chunk_ends):  # pragma: no cover - compiled; tests compare
    """Sentence breaks (``F[FP]*W`` in token classes, :func:`sentence_count`) inside the chosen lines (see
    :func:`line_sentences`), or -1 when the text has another number of chunks than ``chunk_ends``."""
    n_chosen = chosen.shape[0]
    n_chunks = chunk_ends.shape[0]
    line = 0
    chunk = 0
    breaks = 0
    pending = False  # a sentence-final token seen, then only punctuation
    in_chunk = False
    line_start = True
    gap = 0  # whitespace characters since the last chunk
    last_space = 0
    for i in range(points.shape[0]):
        code = points[i]
        kind = separators[code] if code < separators.shape[0] else 0
        if kind == 0:
            if in_chunk:
                continue
            in_chunk = True
            if chunk >= n_chunks:
                return -1
            if line < n_chosen and chosen[line]:
                if not line_start and not (gap == 1 and last_space == 32) and pending:
                    breaks += 1  # a whitespace token (W) after a sentence-final one
                    pending = False
                for token in range(chunk_ends[chunk - 1] if chunk else 0, chunk_ends[chunk]):
                    if classes[token] == 2:
                        pending = True
                    elif classes[token] == 0 and pending:
                        breaks += 1
                        pending = False
            chunk += 1
            line_start = False
        else:
            if in_chunk:
                in_chunk = False
                gap = 0
            gap += 1
            last_space = code
            if kind == 2 and not (code == 10 and i and points[i - 1] == 13):  # "\r\n" is one line break
                line += 1
                line_start = True
                pending = False
    return breaks if chunk == n_chunks else -1
