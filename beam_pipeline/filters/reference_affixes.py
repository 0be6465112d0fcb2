"""spaCy's English tokenizer over one whitespace-free chunk: prefixes, suffixes, infixes and special cases.

The algorithm of spaCy 3.8's ``spacy/tokenizer.pyx`` (``split_affixes``, ``_attach_tokens``,
``apply_special_cases``), in Python over the rule data of :mod:`.reference_rules`, for
:mod:`.reference_tokenizer`, which caches each chunk's tokens and takes this module's
:func:`split_chunk` (and the special-case pass) for a chunk its fast paths do not decide. The rule
patterns are read once, at import, to know which characters can start a prefix or infix and end a
suffix, so the loops here try a pattern only where it can match; ``tests/test_heuristics_reference.py``
and ``tests/test_heuristics_fast_paths.py`` compare each shortcut with spaCy's loop as written.
"""

from __future__ import annotations

import re

from beam_pipeline.filters import reference_rules as _rules

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


SPECIALS: dict[str, tuple[str, ...]] = _rules.SPECIAL_CASES
RUNS = re.compile(r"\s+|\S+")

#: Upper bound of the chunk cache (:mod:`.reference_tokenizer`, entries) and of the memos of affix splits
#: (the suffix lengths here, a word's affixes there); each is cleared when full, like a generation.
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


def split_affixes(string: str, specials: bool) -> tuple[list[str], str, list[str]]:
    """spaCy's ``split_affixes``: (prefixes, what is left, suffixes in the order they were cut, from the end).

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
        if specials and string in SPECIALS:
            break
        if string.isalpha():
            break  # no affix rule matches letters only (tested over Unicode): the loop would stop here
        last_size = len(string)
        pre_len = _prefix_length(string)
        if pre_len:
            prefix = string[:pre_len]
            minus_pre = string[pre_len:]
            if minus_pre and specials and minus_pre in SPECIALS:
                string = minus_pre
                prefixes.append(prefix)
                break
        suf_len = _suffix_length(string[pre_len:])
        if suf_len:
            suffix = string[-suf_len:]
            minus_suf = string[:-suf_len]
            if minus_suf and specials and minus_suf in SPECIALS:
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


def split_chunk(string: str, specials: bool) -> list[str]:
    """Tokens of one chunk without whitespace (``split_affixes`` + ``_attach_tokens``)."""
    if specials and string in SPECIALS:
        return list(SPECIALS[string])
    prefixes, string, suffixes = split_affixes(string, specials)
    tokens = prefixes
    if string:
        if specials and string in SPECIALS:
            tokens.extend(SPECIALS[string])
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
    for index, match in enumerate(RUNS.finditer(text)):
        run = match.group()
        if run[0].isspace():
            if index and run[0] == " ":
                run = run[1:]
            if run:
                tokens.append(run)
        else:
            tokens.extend(split_chunk(run, specials=False))
    return tokens


def _matcher_patterns() -> dict[tuple[str, str], list[tuple[tuple[str, ...], str]]]:
    """First two tokens -> [(pattern tokens, special case)] for the special cases spaCy re-joins after
    splitting (in the order of the special cases: a pattern can only match where its first two tokens do, so
    looking patterns up by the pair finds the matches a lookup by the first token would, in the same order)."""
    patterns: dict[tuple[str, str], list[tuple[tuple[str, ...], str]]] = {}
    for string in SPECIALS:
        if not (_prefix_length(string) or _infix_spans(string) or _suffix_length(string) or " " in string):
            continue
        tokens = tuple(_tokenize_without_specials(string))
        if len(tokens) > 1 and "".join(tokens) == string:
            patterns.setdefault((tokens[0], tokens[1]), []).append((tokens, string))
    return patterns


_PATTERNS = _matcher_patterns()
PATTERN_PAIRS = frozenset(_PATTERNS)


def apply_special_cases(tokens: list[str]) -> list[str]:
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
        out.extend(SPECIALS[string])
        at = end
    out.extend(tokens[at:])
    return out
