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

This module holds the email, IBAN and secret detectors and :func:`detect`, which runs every kind; the
detectors that look inside runs of digits (phone, ip, credit_card, ssn: :data:`NUMBER_KINDS`) are in
``pii_numbers.py``.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from beam_pipeline.filters.code_points import code_points
from beam_pipeline.filters.phones import WORD
from beam_pipeline.filters.pii_numbers import (
    add_window,
    find_cards,
    find_ips,
    find_phones,
    find_ssns,
    in_windows,
    number_windows,
)

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
        add_window(windows, start, end)
        at = text.find("@", at + 1)
    return windows


def _domain_run_end(text: str, start: int) -> int:
    """The end of the run of domain characters that begins at ``start``."""
    run = _EMAIL_DOMAIN_RUN.match(text, start)  # never None: the run may be empty
    return start if run is None else run.end()


def find_emails(text: str) -> Iterator[tuple[int, int]]:
    for m in in_windows(_EMAIL, text, email_windows(text)):
        yield m.span()


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
