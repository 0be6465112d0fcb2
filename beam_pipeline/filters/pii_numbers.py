"""The PII detectors that look inside runs of digits: phone numbers, IP addresses, payment cards and US SSNs.

The kinds of :data:`.pii.NUMBER_KINDS`. One compiled scan of the code points finds the runs of digits and
separators (:func:`number_windows`); :func:`.pii.detect` computes those windows once per text and hands
them to each detector here, which runs its regex only inside them (and validates beyond the shape: Luhn,
:mod:`ipaddress`, libphonenumber through :mod:`.phones`). IPv6 candidates have windows of their own, around
colon pairs (:func:`ipv6_windows`). What each detector accepts and rejects is in :mod:`.pii`'s docstring and
docs/filters.md; :func:`in_windows` and :func:`add_window` are also the email detector's (``pii.py``).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterator

import numpy as np

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.filters import phones
from beam_pipeline.filters.code_points import code_point_table, code_points
from beam_pipeline.filters.phones import EXTENSION, WORD


def add_window(windows: list[tuple[int, int]], start: int, end: int) -> None:
    """Append (start, end) to ``windows`` (sorted by start), merged with the last one when they overlap."""
    if windows and start <= windows[-1][1]:
        windows[-1] = (windows[-1][0], max(end, windows[-1][1]))
    else:
        windows.append((start, end))


# --- phone ---------------------------------------------------------------------

# Not preceded by a word character (CJK may touch it), '#', '+', '-', '.', '/' (ids, paths, decimals, dates),
# nor by a colon unless it ends a phone label ("Tel:415-555-2671").
_LABEL_COLON = "|".join(f"(?<=(?i:{label}):)" for label in ("tel", "fax", "phone", "call", "cell", "mobile"))
_NOT_AFTER = rf"(?<!{WORD})(?<![#+\-./])(?:(?<!:)|{_LABEL_COLON})"
_NOT_BEFORE = rf"(?!{WORD}|-|\.\d|/\d)"
#: North-American shapes; followed by an extension or by what ends a number.
_NANP = re.compile(
    _NOT_AFTER
    + r"(?:\+?1[ .-]?)?(?:\([2-9]\d{2}\)[ .-]?|[2-9]\d{2}[ .-])[2-9]\d{2}[ .-]\d{4}"
    + rf"(?:(?={EXTENSION}(?!{WORD}))|{_NOT_BEFORE})"
)
#: A country code just before a :data:`_NANP` match ("+39 ", "0039 ", "+44 (0)"): the match is part of an
#: international number.
_COUNTRY_CODE_BEFORE = re.compile(r"(?:\+|(?<!\d)00)[1-9]\d{0,2}[ .\-]?(?:\(0\)[ .\-]?)?$")
#: What follows a :data:`_NANP` match in the whole text (its lookahead saw only the window): an extension,
#: which joins the span, or the end of the number.
_NANP_TAIL = re.compile(rf"{EXTENSION}(?!{WORD})|{_NOT_BEFORE}")
#: The shape of an international number the detector looked for before :mod:`.phones` (what
#: ``bench/bench_filters.py`` runs as the bare regex): now found and validated by libphonenumber.
_INTERNATIONAL = re.compile(r"(?<![\w#+\-./])\+[1-9]\d{0,2}(?:[ .-]?\(\d{1,4}\))?(?:[ .-]?\d{1,5}){2,6}" + _NOT_BEFORE)


# Every number detector (phone, IPv4, card, SSN) matches inside a run of digits and separators (no-break
# spaces, '/' and the fullwidth hyphen and parentheses included: "01\u00a023\u00a045\u00a067\u00a089",
# "030/12345678", "０３－１２３４－５６７８"); one scan finds those runs and the detectors look only there.
_NUMBERISH = re.compile(r"\d[\d .()+\-/\u00a0\u202f\uff08\uff09\uff0d]{5,}\d")


def number_windows(text: str) -> list[tuple[int, int]]:
    """Merged (start, end) windows around digit-and-separator runs, with 3 characters of context."""
    windows: list[tuple[int, int]] = []
    for m in _numberish_matches(text):
        start, end = max(0, m.start() - 3), min(len(text), m.end() + 3)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], end)
        else:
            windows.append((start, end))
    return windows


def _numberish_matches(text: str) -> Iterator[re.Match]:
    """``_NUMBERISH.finditer(text)``, run only over the runs of :func:`number_runs` (a compiled scan of the
    code points instead of the regex's attempt at every digit).

    Exact: a match is made of the class's characters only, so it lies inside one maximal run of them, and
    it begins and ends with a digit at least 6 apart, so that run is one of :func:`number_runs`. An attempt
    from a start inside a run reads no further than the first character after it, where the repeat stops
    (the pattern has no lookaround); with ``endpos`` at the run's end the repeat stops there too. Attempts
    from other starts fail at once (not a digit).
    """
    for start, end in number_runs(text):
        yield from _NUMBERISH.finditer(text, start, end)


def number_runs(text: str) -> list[tuple[int, int]]:
    """(start, end) of the maximal runs of ``[\\d .()+\\-/]`` characters, no-break spaces and fullwidth
    ``（）－`` whose first and last digits are at least 6 apart: where :data:`_NUMBERISH` can match
    (positions are the string's: :func:`.code_points`)."""
    starts, ends = _number_runs(code_points(text), code_point_table(r"\d"))
    return list(zip(starts.tolist(), ends.tolist()))


@compiled
def _number_runs(points, is_digit):  # pragma: no cover - compiled; tests compare number_windows with the regex
    """(starts, ends) of :func:`number_runs`, given a bool per code point for ``\\d``."""
    size = points.shape[0]
    starts = np.empty(size // 8 + 1, dtype=np.int64)  # a run is 7+ characters and a character after it
    ends = np.empty(size // 8 + 1, dtype=np.int64)
    found = 0
    i = 0
    while i < size:
        j, first, last = i, -1, -1
        while j < size:
            c = points[j]
            if is_digit[c]:
                if first < 0:
                    first = j
                last = j
            elif not (
                c == 32 or c == 46 or c == 40 or c == 41 or c == 43 or c == 45 or c == 47 or c == 160 or c == 8239
            ) and not (c == 0xFF08 or c == 0xFF09 or c == 0xFF0D):
                break  # " .()+-/", no-break space, narrow no-break space; fullwidth "()-"
            j += 1
        if first >= 0 and last - first >= 6:
            starts[found] = i
            ends[found] = j
            found += 1
        i = j + 1
    return starts[:found], ends[:found]


def in_windows(pattern: re.Pattern, text: str, windows) -> Iterator[re.Match]:
    for start, end in number_windows(text) if windows is None else windows:
        yield from pattern.finditer(text, start, end)


def find_phones(text: str, windows=None) -> Iterator[tuple[int, int]]:
    """North-American shapes by :data:`_NANP` (not after an order or invoice label), then the candidates
    :mod:`.phones` validates (each digit run of the windows, from a '+' or '(' just before it)."""
    seen = set()
    windows = number_windows(text) if windows is None else windows
    for m in in_windows(_NANP, text, windows):
        tail = _NANP_TAIL.match(text, m.end())
        if tail is None or phones.not_a_phone_label(text, m.start()):
            continue
        if _COUNTRY_CODE_BEFORE.search(text, max(0, m.start() - 12), m.start()):
            continue  # the rest of "+39 312 345 3011": the validated path decides
        if (m.start(), tail.end()) not in seen:
            seen.add((m.start(), tail.end()))
            yield m.start(), tail.end()
    runs = []
    for start, end in windows:
        for m in _NUMBERISH.finditer(text, start, end):
            begin = m.start()
            while begin > start and text[begin - 1] in "+(\uff08":
                begin -= 1
            runs.append((begin, m.end()))
    for span in phones.find_phones(text, runs):
        if span not in seen:
            seen.add(span)
            yield span


# --- IP addresses ---------------------------------------------------------------

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<!{WORD})(?<!\.){_OCTET}(?:\.{_OCTET}){{3}}(?!{WORD}|\.\d)")
_IPV6_CANDIDATE = re.compile(
    r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|:|" + _OCTET + r"(?:\." + _OCTET + r"){3})(?![\w:])"
)


# IPv6 candidates are looked for only in a text where this matches somewhere (the definition; what runs is
# its twin below, which matches in the same texts).
_IPV6_HINT = re.compile(r"\d[0-9A-Fa-f]{0,3}:[0-9A-Fa-f]{0,4}:|::[0-9A-Fa-f]{0,3}\d|:\d[0-9A-Fa-f]{0,3}:")
#: :data:`_IPV6_HINT` anchored at the first colon of its match, so the engine finds candidates by a fast
#: scan for ':' instead of trying every position: its first alternative's part before that colon (a digit
#: and up to 3 hex digits) becomes one fixed-width lookbehind per length. It matches in a text exactly when
#: :data:`_IPV6_HINT` does (each alternative matches at ``i`` exactly when its twin here does at the colon).
_IPV6_HINT_AT_COLON = re.compile(
    r":(?:(?:(?<=\d:)|(?<=\d[0-9A-Fa-f]:)|(?<=\d[0-9A-Fa-f]{2}:)|(?<=\d[0-9A-Fa-f]{3}:))[0-9A-Fa-f]{0,4}:"
    r"|:[0-9A-Fa-f]{0,3}\d"
    r"|\d[0-9A-Fa-f]{0,3}:)"
)
#: A colon followed by another within 5 characters, hex digits between (a fast literal scan for ':').
_COLON_PAIR = re.compile(r":(?=[\dA-Fa-f]{0,4}:)")
#: The most characters an :data:`_IPV6_CANDIDATE` match holds after its first colon: 6 more groups of 4 hex
#: digits and a colon, then an IPv4 tail (15).
_IPV6_AFTER_FIRST_COLON = 6 * 5 + 15


def ipv6_windows(text: str) -> list[tuple[int, int]]:
    """Merged (start, end) windows where :data:`_IPV6_CANDIDATE` can match, for ``finditer(text, start, end)``.

    Why exact: a match starts at most 4 characters (hex digits) before its first colon, which is followed
    by another within 5 characters, hex digits between (a :data:`_COLON_PAIR`); it holds at most
    :data:`_IPV6_AFTER_FIRST_COLON` characters after that colon, and an attempt reads at most its
    lookahead's one character more. So the window from 4 characters before each colon pair to the
    lookahead's character after the longest match holds everything an attempt from a start within reach
    reads (``pos`` does not hide the character before it from the lookbehind); an attempt from any other
    start fails before it reaches a second colon.
    """
    windows: list[tuple[int, int]] = []
    for m in _COLON_PAIR.finditer(text):
        colon = m.start()
        end = colon + 1 + _IPV6_AFTER_FIRST_COLON + 1  # the colon, the rest of the longest match, the lookahead
        add_window(windows, max(0, colon - 4), min(len(text), end))
    return windows


def find_ips(text: str, windows=None) -> Iterator[tuple[int, int]]:
    for m in in_windows(_IPV4, text, windows):
        yield m.span()
    if _IPV6_HINT_AT_COLON.search(text):
        for m in in_windows(_IPV6_CANDIDATE, text, ipv6_windows(text)):
            candidate = m.group(0)
            if not any(c.isdigit() for c in candidate) or candidate.count(":") < 2:
                continue
            try:
                ipaddress.IPv6Address(candidate)
            except ValueError:
                continue
            yield m.span()


# --- payment cards --------------------------------------------------------------

_CARD = re.compile(
    rf"(?<!{WORD})(?<![\-.+])(?:\d{{4}}([ -]?)\d{{4}}\1\d{{4}}\1\d{{1,7}}|\d{{4}}([ -]?)\d{{6}}\2\d{{5}}|\d{{4}}([ -]?)\d{{6}}\3\d{{4}})"
    rf"(?!{WORD}|-|\.\d)"
)
_ISSUER = re.compile(r"^(?:4|5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|6(?:011|5|4[4-9]|22)|35|30[0-5]|36|38|62)")


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = ord(char) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def find_cards(text: str, windows=None) -> Iterator[tuple[int, int]]:
    for m in in_windows(_CARD, text, windows):
        digits = re.sub(r"\D", "", m.group(0))
        if 13 <= len(digits) <= 19 and _ISSUER.match(digits) and luhn_valid(digits):
            yield m.span()


# --- US social security numbers --------------------------------------------------

_SSN = re.compile(rf"(?<!{WORD})(?<![\-.])(?!000|666|9\d\d)\d{{3}}-(?!00)\d{{2}}-(?!0000)\d{{4}}(?!{WORD}|-|\.\d)")
#: The labels after which nine digits without dashes are an SSN (each found by a substring search).
_SSN_LABELS = ("SSN", "ssn", "Social Security", "social security", "SOCIAL SECURITY")
#: What follows an SSN label: an optional "number" / "No." / "#", a colon, then nine digits (or 3-2-4 with
#: spaces), the number being group 1.
_SSN_AFTER_LABEL = re.compile(
    r"(?: (?:[Nn]umber|NUMBER|[Nn]o\.?|#))?[ \t]*[:#]?[ \t]*"
    rf"((?!000|666|9\d\d)\d{{3}}( ?)(?!00)\d{{2}}\2(?!0000)\d{{4}})(?!{WORD}|-|\.\d)"
)


def find_ssns(text: str, windows=None) -> Iterator[tuple[int, int]]:
    """SSNs with dashes (:data:`_SSN`, in the number windows), and nine digits right after an SSN label
    (:data:`_SSN_LABELS`, not inside a longer word)."""
    for m in in_windows(_SSN, text, windows):
        yield m.span()
    for label in _SSN_LABELS:
        at = text.find(label)
        while at != -1:
            if not (at and text[at - 1].isalpha()):
                after = _SSN_AFTER_LABEL.match(text, at + len(label))
                if after is not None:
                    yield after.span(1)
            at = text.find(label, at + 1)
