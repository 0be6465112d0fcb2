"""PII detection (counts per kind) and redaction (for the gold text).

Regular expressions with validation, the practice of FineWeb and Dolma: a
cheap prefilter decides whether a detector runs at all ('@' before the email
regex, a digit before the number detectors, a key prefix before the secret
patterns), then every candidate is checked beyond its shape:

=============  ==================================================================
kind           what counts (and the traps that do not)
=============  ==================================================================
email          ``local@domain.tld`` with a 2+ letter TLD (not ``user@localhost``,
               not ``@decorator`` or ``pip install pkg@1.2``)
phone          North-American ``(555) 234-5678`` / ``555-234-5678`` / ``+1 ...``
               shapes; international (``+<country> ...``, ``00<country> ...``)
               and national numbers of GB, DE, FR, IT, NL, JP, BR, ES and the
               US validated by libphonenumber's metadata (:mod:`.phones`:
               ``0161 496 0663``, ``030/12345678``, ``(11) 91234-5678``,
               ``03-1234-5678``); extensions (``844-279-2685x228``), a number
               right after ``Tel:``. Not dates (``2014-05-12``), versions
               (``3.11.2``), ISBNs (``978-0-13-110362-7``), ids after ``#``,
               a letter or an order label (``#555-234-5678``,
               ``ORD-555-234-5678``), numeric tables, or digit runs without
               separators (unless after a phone label)
ip             IPv4 dotted quads with every octet <= 255, not part of a longer
               dotted number (``1.3.6.1.4.1`` OIDs); IPv6 validated by
               :mod:`ipaddress` and holding at least one digit (not ``std::map``)
credit_card    13-19 digits, optionally in groups of 4 (Amex 4-6-5, Diners
               4-6-4), a known issuer prefix (Visa, Mastercard, Amex, Discover,
               JCB, Diners, UnionPay) and a valid Luhn checksum (so ISBNs and
               order numbers almost never pass)
ssn            US SSN ``AAA-GG-SSSS`` with dashes, or without them after an
               ``SSN`` / ``Social Security number`` label (``SSN: 078051120``),
               excluding the never-issued area 000/666/9xx, group 00 and
               serial 0000
iban           country code, check digits and a BBAN of that country's length,
               valid ISO 13616 mod-97 checksum
secret         AWS access key ids (AKIA/ASIA...), GitHub tokens (ghp_, gho_,
               ghu_, ghs_, ghr_, github_pat_), Slack tokens (xoxb-, xoxp-, ...),
               Google API keys (AIza...), Stripe live keys, JSON Web Tokens,
               and PEM/OpenSSH/PGP private-key blocks
=============  ==================================================================

Boundaries are those of words in languages written with spaces (:data:`.phones.WORD`): an
address or a number may touch CJK text (``お問い合わせはmark72@ezweb.ne.jpまで。``).

Redaction replaces each detected span with a token (``<EMAIL>``, ...;
configurable). Overlapping detections are resolved by a fixed priority
(secrets first, IPs last), then by position, so the result does not depend
on detector order.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.filters import phones
from beam_pipeline.filters.code_points import code_point_table, code_points
from beam_pipeline.filters.phones import EXTENSION, WORD

KINDS = ("email", "phone", "ip", "credit_card", "ssn", "iban", "secret")
#: Which detection wins when two overlap (earlier wins).
PRIORITY = ("secret", "email", "iban", "credit_card", "ssn", "phone", "ip")
DEFAULT_TOKENS = {
    "email": "<EMAIL>",
    "phone": "<PHONE>",
    "ip": "<IP_ADDRESS>",
    "credit_card": "<CREDIT_CARD>",
    "ssn": "<SSN>",
    "iban": "<IBAN>",
    "secret": "<SECRET>",
}

Span = tuple[int, int, str]  # (start, end, kind)

# --- email ---------------------------------------------------------------------

_EMAIL = re.compile(
    rf"(?<!{WORD})(?<![.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{{0,63}}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+"
    rf"[A-Za-z]{{2,24}}(?!{WORD})(?!-)"
)


#: The longest local part of :data:`_EMAIL`: a first character and up to 63 more.
_EMAIL_LOCAL_MAX = 64
#: The characters an email's domain (labels, dots, TLD) is made of.
_EMAIL_DOMAIN_RUN = re.compile(r"[A-Za-z0-9.-]*")


def email_windows(text: str) -> list[tuple[int, int]]:
    """Merged (start, end) windows around each '@' where :data:`_EMAIL` can match, for ``finditer(text, start, end)``.

    Why exact (the matches in the windows are those over the whole text, at a fraction of the cost: the
    regex's leading lookbehind defeats the engine's literal-prefix scan, so over the whole text it tries
    every position): a match holds exactly one '@' (neither part's characters include it), starts at most
    :data:`_EMAIL_LOCAL_MAX` characters before it, and ends within the run of domain characters after it.
    Every attempt from a start within reach of an '@' reads nothing beyond that run's end plus the
    lookahead's one character, so the window of that '@' (up to one character past the run) holds all it
    reads; ``pos`` does not hide the character before a window from the lookbehind. An attempt from a start
    with no '@' within reach fails whatever follows, so positions outside every window never match.
    """
    windows: list[tuple[int, int]] = []
    at = text.find("@")
    while at != -1:
        start = max(0, at - _EMAIL_LOCAL_MAX)
        end = min(len(text), _domain_run_end(text, at + 1) + 1)
        _add_window(windows, start, end)
        at = text.find("@", at + 1)
    return windows


def _domain_run_end(text: str, start: int) -> int:
    """The end of the run of domain characters that begins at ``start``."""
    run = _EMAIL_DOMAIN_RUN.match(text, start)  # never None: the run may be empty
    return start if run is None else run.end()


def _add_window(windows: list[tuple[int, int]], start: int, end: int) -> None:
    """Append (start, end) to ``windows`` (sorted by start), merged with the last one when they overlap."""
    if windows and start <= windows[-1][1]:
        windows[-1] = (windows[-1][0], max(end, windows[-1][1]))
    else:
        windows.append((start, end))


def find_emails(text: str) -> Iterator[tuple[int, int]]:
    for m in _in_windows(_EMAIL, text, email_windows(text)):
        yield m.span()


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


def _in_windows(pattern: re.Pattern, text: str, windows) -> Iterator[re.Match]:
    for start, end in number_windows(text) if windows is None else windows:
        yield from pattern.finditer(text, start, end)


def find_phones(text: str, windows=None) -> Iterator[tuple[int, int]]:
    """North-American shapes by :data:`_NANP` (not after an order or invoice label), then the candidates
    :mod:`.phones` validates (each digit run of the windows, from a '+' or '(' just before it)."""
    seen = set()
    windows = number_windows(text) if windows is None else windows
    for m in _in_windows(_NANP, text, windows):
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
        _add_window(windows, max(0, colon - 4), min(len(text), end))
    return windows


def find_ips(text: str, windows=None) -> Iterator[tuple[int, int]]:
    for m in _in_windows(_IPV4, text, windows):
        yield m.span()
    if _IPV6_HINT_AT_COLON.search(text):
        for m in _in_windows(_IPV6_CANDIDATE, text, ipv6_windows(text)):
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
    for m in _in_windows(_CARD, text, windows):
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
    for m in _in_windows(_SSN, text, windows):
        yield m.span()
    for label in _SSN_LABELS:
        at = text.find(label)
        while at != -1:
            if not (at and text[at - 1].isalpha()):
                after = _SSN_AFTER_LABEL.match(text, at + len(label))
                if after is not None:
                    yield after.span(1)
            at = text.find(label, at + 1)


# --- IBAN ------------------------------------------------------------------------

#: ISO 13616 IBAN length per country (SWIFT IBAN registry).
IBAN_LENGTHS = {
    "AD": 24,
    "AE": 23,
    "AL": 28,
    "AT": 20,
    "AZ": 28,
    "BA": 20,
    "BE": 16,
    "BG": 22,
    "BH": 22,
    "BR": 29,
    "BY": 28,
    "CH": 21,
    "CR": 22,
    "CY": 28,
    "CZ": 24,
    "DE": 22,
    "DK": 18,
    "DO": 28,
    "EE": 20,
    "EG": 29,
    "ES": 24,
    "FI": 18,
    "FO": 18,
    "FR": 27,
    "GB": 22,
    "GE": 22,
    "GI": 23,
    "GL": 18,
    "GR": 27,
    "GT": 28,
    "HR": 21,
    "HU": 28,
    "IE": 22,
    "IL": 23,
    "IQ": 23,
    "IS": 26,
    "IT": 27,
    "JO": 30,
    "KW": 30,
    "KZ": 20,
    "LB": 28,
    "LC": 32,
    "LI": 21,
    "LT": 20,
    "LU": 20,
    "LV": 21,
    "MC": 27,
    "MD": 24,
    "ME": 22,
    "MK": 19,
    "MR": 27,
    "MT": 31,
    "MU": 30,
    "NL": 18,
    "NO": 15,
    "PK": 24,
    "PL": 28,
    "PS": 29,
    "PT": 25,
    "QA": 29,
    "RO": 24,
    "RS": 22,
    "SA": 24,
    "SC": 31,
    "SE": 24,
    "SI": 19,
    "SK": 24,
    "SM": 27,
    "ST": 25,
    "SV": 28,
    "TL": 23,
    "TN": 24,
    "TR": 26,
    "UA": 29,
    "VA": 22,
    "VG": 24,
    "XK": 20,
}
_IBAN = re.compile(rf"(?<!{WORD})([A-Z]{{2}})(\d{{2}})((?: ?[A-Z0-9]){{11,30}})(?!{WORD})")
_IBAN_PREFILTER = re.compile(r"[A-Z]{2}\d{2}")


def iban_valid(iban: str) -> bool:
    iban = iban.replace(" ", "")
    if IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def iban_starts(text: str) -> list[int]:
    """Every position where :data:`_IBAN_PREFILTER` (the start of every :data:`_IBAN` match) may match, in order.

    A superset, from four vectorized comparisons of the code points instead of the regex's scan of every
    position: non-ASCII characters count as digits (``\\d`` matches every Unicode digit), so the regex
    decides at each start.
    """
    if len(text) < 4:
        return []
    points = code_points(text)
    upper = (points >= 65) & (points <= 90)
    digit = ((points >= 48) & (points <= 57)) | (points > 127)
    return np.flatnonzero(upper[:-3] & upper[1:-2] & digit[2:-1] & digit[3:]).tolist()


def iban_at(text: str, start: int) -> tuple[int, int] | None:
    """The valid IBAN that starts at ``start``, if any: :data:`_IBAN` there (it may run into following words
    or the next IBAN), cut to the country's length, then the ISO 13616 checksum."""
    m = _IBAN.match(text, start)
    if m is None:
        return None
    expected = IBAN_LENGTHS.get(m.group(1))
    if expected is None:
        return None
    compact, end = 0, m.start()
    for i, char in enumerate(m.group(0)):
        if char != " ":
            compact += 1
        if compact == expected:
            end = m.start() + i + 1
            break
    else:
        return None
    if iban_valid(text[m.start() : end]) and not (end < len(text) and text[end].isalnum()):
        return m.start(), end
    return None


def find_ibans(text: str) -> Iterator[tuple[int, int]]:
    """Every :func:`iban_at` from the starts of :func:`iban_starts`, resuming after each IBAN found (not
    after the regex's match, which may hold the next IBAN: ``BE68 5390 0754 7034 DE89 3704 ...``).

    Exact: every match of :data:`_IBAN` starts with ``[A-Z]{2}\\d{2}``, so attempts at other positions fail;
    ``match`` at a start sees the character before it for the lookbehind.
    """
    resume = 0
    for start in iban_starts(text):
        if start < resume:
            continue
        span = iban_at(text, start)
        if span is not None:
            resume = span[1]
            yield span


# --- secrets ---------------------------------------------------------------------

#: (prefilter, pattern): the pattern runs over the text only when its prefilter (a substring, or a regex
#: that starts with a literal character, so the engine finds candidates by a fast scan) occurs in it.
_SECRETS: list[tuple[str | re.Pattern, re.Pattern]] = [
    (
        re.compile("A(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)"),
        re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Z0-9])"),
    ),
    (re.compile("gh[pousr]_"), re.compile(r"(?<!\w)gh[pousr]_[A-Za-z0-9]{36,255}(?!\w)")),
    ("github_pat_", re.compile(r"(?<!\w)github_pat_[A-Za-z0-9_]{22,255}(?!\w)")),
    ("xox", re.compile(r"(?<!\w)xox[abposr]-[A-Za-z0-9-]{10,250}(?![\w-])")),
    ("AIza", re.compile(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}(?![\w-])")),
    ("_live_", re.compile(r"(?<!\w)(?:sk|rk|pk)_live_[0-9A-Za-z]{24,99}(?!\w)")),
    ("eyJ", re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}(?![\w-])")),
    (
        "PRIVATE KEY",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
            re.DOTALL,
        ),
    ),
]


def _occurs(prefilter: str | re.Pattern, text: str) -> bool:
    return prefilter in text if isinstance(prefilter, str) else prefilter.search(text) is not None


def find_secrets(text: str) -> Iterator[tuple[int, int]]:
    for prefilter, pattern in _SECRETS:
        if _occurs(prefilter, text):
            for m in pattern.finditer(text):
                yield m.span()


_DIGIT = re.compile(r"\d")

DETECTORS: dict[str, Callable[[str], Iterable[tuple[int, int]]]] = {
    "email": find_emails,
    "phone": find_phones,
    "ip": find_ips,
    "credit_card": find_cards,
    "ssn": find_ssns,
    "iban": find_ibans,
    "secret": find_secrets,
}


def _has_digit_run(text: str) -> bool:
    return _DIGIT.search(text) is not None


NUMBER_KINDS = ("phone", "ip", "credit_card", "ssn")


def detect(text: str, kinds: Iterable[str] = KINDS) -> list[Span]:
    """Non-overlapping detections, by priority then position, sorted by start."""
    kinds = [k for k in PRIORITY if k in set(kinds)]
    windows = number_windows(text) if any(k in NUMBER_KINDS for k in kinds) and _has_digit_run(text) else []
    found: list[Span] = []
    for kind in kinds:
        detector = DETECTORS[kind]
        spans = detector(text, windows) if kind in NUMBER_KINDS else detector(text)
        for start, end in spans:
            found.append((start, end, kind))
    # resolve overlaps: earlier priority wins, then the earlier start, then the longer span
    rank = {k: i for i, k in enumerate(PRIORITY)}
    chosen: list[Span] = []
    taken: list[tuple[int, int]] = []
    for start, end, kind in sorted(found, key=lambda s: (rank[s[2]], s[0], -s[1])):
        if any(start < t_end and t_start < end for t_start, t_end in taken):
            continue
        chosen.append((start, end, kind))
        taken.append((start, end))
    return sorted(chosen)


def counts(text: str, kinds: Iterable[str] = KINDS) -> dict:
    """The ``pii`` layer row (minus ids): a count per kind (None for kinds not checked) and ``total``."""
    kinds = tuple(kinds)
    spans = detect(text, kinds)
    out: dict = dict.fromkeys(KINDS)
    for kind in kinds:
        out[kind] = 0
    for _, _, kind in spans:
        out[kind] += 1
    out["total"] = len(spans)
    return out


def redact(text: str, kinds: Iterable[str] = KINDS, tokens: Mapping[str, str] | None = None) -> tuple[str, int]:
    """(text with every detection replaced by its kind's token, number of replacements)."""
    redacted, kinds_replaced = redact_spans(text, kinds, tokens)
    return redacted, len(kinds_replaced)


def redact_spans(
    text: str, kinds: Iterable[str] = KINDS, tokens: Mapping[str, str] | None = None
) -> tuple[str, list[str]]:
    """(text with every detection replaced by its kind's token, the kind of each replacement in order)."""
    spans = detect(text, kinds)
    if not spans:
        return text, []
    tokens = {**DEFAULT_TOKENS, **(tokens or {})}
    pieces, position = [], 0
    for start, end, kind in spans:
        pieces.append(text[position:start])
        pieces.append(tokens[kind])
        position = end
    pieces.append(text[position:])
    return "".join(pieces), [kind for _, _, kind in spans]
