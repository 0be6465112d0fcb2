"""Phone numbers in running text: cheap candidates, validated by libphonenumber's metadata.

:mod:`.pii_numbers`' compiled scan finds the runs of digits and separators (``[\\d .()+\\-/]``, no-break
spaces, fullwidth ``（）－``) with at least 7 characters between their first and last digit; only those runs
reach this module, so text without such a run costs nothing here. Each run is cut into candidates, and a
candidate is a phone number when `phonenumbers <https://github.com/daviddrysdale/python-phonenumbers>`_
(the Python port of Google's libphonenumber, ~250 regions' numbering plans) says it is a valid number:

* ``+<country> ...`` and ``00<country> ...``: parsed as international numbers, any country
  (``+49 (0)521 6340953``, ``0044 161 496 0663``, ``+81 3-1234-5678``).
* A national number that starts with ``0`` (a trunk prefix, or the first digit of an Italian landline):
  valid for one of :data:`NATIONAL_REGIONS`; a Brazilian ``(11) 91234-5678`` for Brazil (``0161 496 0663``,
  ``0521 6340953``, ``030/12345678``, ``01 23 45 67 89``, ``02 1234 5678``, ``020-123 4567``,
  ``03-1234-5678``).
* A national number that starts with another digit (Spain, Italian mobiles, a US number outside the
  North-American shapes of :data:`.pii_numbers._NANP`): after a phone label (``Tel``, ``Telefon``, ``móvil``,
  ``電話``, ... :data:`_LABEL`), or grouped as Spain (``612 34 56 78``) and Italy's mobiles
  (``333 123 4567``) write them, since ``912 345 678`` is also a thousands-grouped amount.

Before the library is asked, the shape must not be one of the look-alikes that some numbering plan would
accept: dates (``01.05.2014``), ZIP+4 codes (``02110-1301``), versions and tables (a group of one digit,
dots mixed with spaces, a sequence like ``01 02 03 04 05``), ISBNs, digit runs without any separator (unless
labelled), decimals (``0,50``), and numbers after an order, invoice or ISBN label nearer than any phone
label (:data:`_NOT_PHONE_LABEL`; it holds for the North-American shapes too). The boundaries
are those of words in languages written with spaces: a number may touch CJK text (``電話03-1234-5678まで``).
An extension (``x228``, ``ext. 12``) is part of the number's span.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Iterator

#: Regions whose national numbers start with 0 (a trunk prefix, or Italy's landlines), tried in this order
#: for a national number that does (the first that validates wins).
NATIONAL_REGIONS = ("GB", "DE", "FR", "IT", "NL", "JP", "BR")
#: Regions tried for a national number that does not start with 0 (and has a phone label before it). The
#: US is found by :data:`.pii_numbers._NANP`'s shapes, and here after a label.
UNPREFIXED_REGIONS = ("ES", "IT", "US", "BR")

#: A word character of a language written with spaces: ``\w`` less CJK ideographs, kana, hangul and
#: halfwidth katakana, so that a number or an email address may touch Chinese or Japanese text.
WORD = r"[^\W\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]"
_WORD_CHAR = re.compile(WORD)

#: An extension after a number: ``x228``, `` ext. 12``, ``, Durchwahl 12``.
EXTENSION = (
    r"[ \u00a0]?(?:x|ext\.?|Ext\.?|EXT\.?|extension|Durchwahl|DW|poste|interno|ramal)[ \u00a0]?:?[ \u00a0]?\d{1,6}"
)
_EXTENSION = re.compile(EXTENSION + rf"(?!{WORD})")

#: Words that say a phone number follows (searched in the ~30 characters before a candidate, lower-cased).
_LABEL = re.compile(
    r"(?:(?<![a-zà-ÿ])(?:tel|phone|fax|mobil|cell|call|ring|handy|ruf|anruf|t[ée]l[ée]phone|appel|portable|telefono|chiam|"
    r"ll[aá]m|m[óo]vil|bel |bellen|mobiel|telefoon|celular|ligue|liga|whatsapp|contato|contact|kontakt"
    r")|電話|携帯|連絡|ＴＥＬ|☎|📞)[^\d\n]{0,24}$"
)
#: Words that say a number is not a phone number (order, invoice, customer, ISBN ...).
_NOT_PHONE_LABEL = re.compile(
    r"(?:(?<![a-zà-ÿ])(?:order|bestell|auftrag|kunden|rechnung|invoice|isbn|issn|commande|facture|ordine|fattura|pedido|"
    r"factura|bestelling|factuur|nota fiscal|r[ée]f\b|rif\b|nr\b|no\.|n\.|n[º°]|id\b)|注文|請求|#)[^\d\n]{0,16}$"
)
#: How far before a candidate the labels are looked for.
_LABEL_REACH = 32

#: The separators inside a candidate.
_SEPARATORS = re.compile(r"[ \u00a0\u202f.\-/()]+")
#: A date, or a date and the hour of a time after it (``01/01/2000 12:00``).
_DATE = re.compile(r"\d{1,4}([./-])\d{1,2}\1\d{2,4}(?:[ T]\d{1,2})?")
#: A US ZIP+4 code (``02110-1301``).
_ZIP4 = re.compile(r"\d{5}-\d{4}")
_ISBN = re.compile(r"\d{1,5}-\d{1,7}-\d{1,7}-[\dX]|97[89]-\d+-\d+-\d+-\d")
#: Unlabelled national numbers without a leading 0 that are still taken (when valid): grouped as Spain and
#: Italy's mobiles write them, which a thousands-grouped amount (``912 345 678``) never is.
_ES_GROUPS = re.compile(r"[6-9]\d{2}[ \u00a0]\d{2}[ \u00a0]\d{2}[ \u00a0]\d{2}")
_IT_MOBILE_GROUPS = re.compile(r"3\d{2}[ \u00a0]\d{3}[ \u00a0]\d{4}|3\d{2}[ \u00a0]\d{6,7}")
#: A Brazilian area code in parentheses.
_BR_AREA = re.compile(r"\(\d{2}\)")
#: A slash between numbers that may be a list separator (``0521 6340953 / 6340954``).
_LIST_SLASH = re.compile(r"[ \u00a0]*/[ \u00a0]*")


def find_phones(text: str, runs: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """(start, end) of the phone numbers validated in the runs ``runs`` of digits and separators."""
    for run_start, run_end in runs:
        for start, end in _candidates(text, run_start, run_end):
            span = _phone(text, start, end)
            if span is not None:
                yield span


def _candidates(text: str, run_start: int, run_end: int) -> Iterator[tuple[int, int]]:
    """The run cut to start at '+', '(' or a digit and end at a digit; as a whole, and where that holds
    more than one number, its parts between list slashes. (A number inside a longer run, as in
    ``12:30 0161 496 0663``, is not looked for: the parts of tables and IBANs would pass.)"""
    start, end = run_start, run_end
    while start < end and not (text[start].isdigit() or text[start] in "+(\uff08"):
        start += 1
    while end > start and not text[end - 1].isdigit():
        end -= 1
    while start < end and text[start] in "(\uff08" and _opened(text, start, end):
        start += 1  # an opening parenthesis around the number: "(+44 121 234 2461)", "((11) 2345-0043)"
    if end - start < 7:
        return
    yield start, end
    if "/" in text[start:end]:
        position = start
        for m in _LIST_SLASH.finditer(text, start, end):
            if m.start() > position:
                yield position, m.start()
            position = m.end()
        if position < end:
            yield position, end


def _opened(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] opens more parentheses than it closes (one around the number)."""
    opened = text.count("(", start, end) + text.count("\uff08", start, end)
    return opened > text.count(")", start, end) + text.count("\uff09", start, end)


def _phone(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The span of the number at text[start:end] with its extension, if it is a valid phone number.

    The cheap checks first (digit count, which route, boundaries, shape, labels), the library last.
    """
    candidate = text[start:end]
    if not candidate.isascii():  # fullwidth digits and signs ("０３－１２３４－５６７８"), no-break spaces
        candidate = unicodedata.normalize("NFKC", candidate).replace("\u202f", " ")
        if not candidate.isascii():
            return None  # digits of other scripts
    digits = re.sub(r"\D", "", candidate)
    if not 7 <= len(digits) <= 17:
        return None
    international = candidate[0] == "+" or candidate.startswith("00")
    if not international and "+" in candidate:
        return None
    context = text[max(0, start - _LABEL_REACH) : start].lower()
    label = None
    regions: tuple[str, ...] = ()
    if international:
        pass
    elif digits[0] == "0":
        regions = NATIONAL_REGIONS
    elif candidate[0] == "(" and _BR_AREA.match(candidate):
        regions = ("BR",)
    elif _ES_GROUPS.fullmatch(candidate):
        regions = ("ES",)
    elif _IT_MOBILE_GROUPS.fullmatch(candidate):
        regions = ("IT",)
    else:  # a national number without a leading 0 in no such grouping: only after a phone label
        label = _LABEL.search(context)
        if label is None:
            return None
        regions = UNPREFIXED_REGIONS
    extension = _EXTENSION.match(text, end)
    after_end = extension.end() if extension else end
    if not _free_after(text, after_end):
        return None
    if label is None:
        label = _LABEL.search(context)
    if start and not _free_before(text, start, label is not None):
        return None
    if not international and not _national_shape(candidate, label is not None):
        return None
    not_label = _NOT_PHONE_LABEL.search(context)
    if not_label is not None and (label is None or not_label.start() > label.start()):
        return None  # an order, invoice or ISBN label nearer than any phone label
    if international:
        number = "+" + candidate[1:] if candidate[0] == "+" else "+" + candidate.lstrip("0 ")
        return (start, after_end) if _valid(number, None) else None
    for region in regions:
        if _possible_length(region, digits) and _valid(candidate, region):
            return start, after_end
    if label is not None and regions != UNPREFIXED_REGIONS and digits[0] != "0":
        for region in UNPREFIXED_REGIONS:  # "Móvil 612 345 678": labelled, in another grouping
            if region not in regions and _possible_length(region, digits) and _valid(candidate, region):
                return start, after_end
    return None


def not_a_phone_label(text: str, start: int) -> bool:
    """Whether an order, invoice, ISBN ... label stands before ``start`` nearer than any phone label."""
    context = text[max(0, start - _LABEL_REACH) : start].lower()
    not_label = _NOT_PHONE_LABEL.search(context)
    if not_label is None:
        return False
    label = _LABEL.search(context)
    return label is None or not_label.start() > label.start()


def _free_before(text: str, start: int, labelled: bool) -> bool:
    """Whether the character before a candidate lets a number start there: not a word character (CJK may
    touch it), not part of an id, path, decimal or range (``#``, ``-``, ``.``, ``/``, ``,`` after a digit),
    and a colon only after a phone label (``Tel:0161 ...``)."""
    before = text[start - 1]
    if _WORD_CHAR.match(before):
        return False
    if before in "#+-./=_\\&%$€£":
        return False
    if before == ",":
        return not (start >= 2 and text[start - 2].isdigit())
    if before == ":":
        return labelled
    return True


def _free_after(text: str, end: int) -> bool:
    """Whether the character after a candidate ends it: not a word character, not a decimal (``,5``, ``.5``)
    or a range (``-2``)."""
    if end >= len(text):
        return True
    after = text[end]
    if _WORD_CHAR.match(after):
        return False
    if after in ",.-/" and end + 1 < len(text) and text[end + 1].isalnum():
        return False
    return after not in "@%°²³"


def _national_shape(candidate: str, labelled: bool) -> bool:
    """Whether a national candidate is shaped like a phone number rather than a date, version, ISBN, table
    row or bare id: groups of 2+ digits (the first may be shorter inside parentheses), one kind of separator
    besides spaces, not a counting sequence, and a separator unless labelled."""
    core = candidate.lstrip("(")
    if _DATE.fullmatch(core) or _ISBN.fullmatch(core) or _ZIP4.fullmatch(core):
        return False
    groups = [g for g in _SEPARATORS.split(candidate) if g]
    if len(groups) == 1:
        return labelled
    if any(len(g) < 2 for g in groups):
        return False
    if "." in candidate and any(c in candidate for c in " \u00a0\u202f-/"):
        return False
    if len(groups) >= 3 and len({len(g) for g in groups}) == 1:
        values = [int(g) for g in groups]
        steps = {b - a for a, b in zip(values, values[1:])}
        if len(steps) == 1 and abs(steps.pop()) <= 10:  # 01 02 03 04 05; not 01 23 45 67 89
            return False
    return True


def _possible_length(region: str, digits: str) -> bool:
    """Whether the national significant number (the digits less a trunk 0) has a length that ``region``'s
    numbers have: a lookup that spares the parse for most regions (Brazil's carrier codes: always tried)."""
    lengths, trunk = _lengths(region)
    if lengths is None:
        return True
    significant = len(digits) - 1 if trunk and digits[0] == "0" else len(digits)
    return significant in lengths


@functools.cache
def _lengths(region: str) -> tuple[frozenset[int] | None, bool]:
    """(possible lengths of ``region``'s national significant numbers or None, whether 0 is its trunk prefix)."""
    from phonenumbers import PhoneMetadata

    metadata = PhoneMetadata.metadata_for_region(region)
    if metadata is None or metadata.general_desc is None or region == "BR":
        return None, False
    return frozenset(metadata.general_desc.possible_length), metadata.national_prefix == "0"


@functools.lru_cache(maxsize=4096)
def _valid(number: str, region: str | None) -> bool:
    """Whether ``number`` (in ``region``'s national format, or international when None) is a valid number by
    libphonenumber's metadata; cached, as the same numbers recur across documents.

    The number is built from its digits (the country code read off an international number's first 1-3
    digits, a trunk 0 dropped, Italy's leading zero kept) and checked against the region's patterns:
    ``phonenumbers.parse`` would do the same for these formats at twice the cost. Brazil's carrier codes
    need the parse.
    """
    import phonenumbers

    digits = re.sub(r"\D", "", number.replace("(0)", "") if region is None else number)
    if not digits:  # "+(0)": an international prefix and a trunk 0 and nothing else (seen in Debian's docs)
        return False
    if region is None:
        for width in (1, 2, 3):
            regions = phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(int(digits[:width]))
            if regions:
                return _valid_significant(int(digits[:width]), digits[width:], regions)
        return False
    if region == "BR":
        try:
            return phonenumbers.is_valid_number_for_region(phonenumbers.parse(number, region), region)
        except phonenumbers.NumberParseException:
            return False
    metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
    if metadata is None or metadata.country_code is None:
        return False
    prefix = metadata.national_prefix
    if prefix and digits.startswith(prefix):
        digits = digits[len(prefix) :]
    return _valid_significant(metadata.country_code, digits, (region,))


def _valid_significant(country_code: int, significant: str, regions) -> bool:
    """Whether ``significant`` is a valid national significant number of ``country_code`` in one of
    ``regions`` (the main one first)."""
    import phonenumbers

    if not significant.strip("0") or len(significant) > 17:
        return False
    zeros = len(significant) - len(significant.lstrip("0"))
    number = phonenumbers.PhoneNumber(
        country_code=country_code,
        national_number=int(significant),
        italian_leading_zero=True if zeros else None,
        number_of_leading_zeros=zeros if zeros > 1 else None,
    )
    return any(phonenumbers.is_valid_number_for_region(number, r) for r in regions)
