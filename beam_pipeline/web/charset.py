"""Bytes of a web page to text: which encoding, in which order, and why.

:func:`decode_page` tries, in this order, and takes the first that applies:

1. a byte order mark (UTF-8, UTF-16 LE/BE): it overrides everything, as in
   the WHATWG encoding standard ("BOM sniffing");
2. the ``charset`` of the HTTP ``Content-Type`` header;
3. for HTML, the ``<meta charset>`` / ``<meta http-equiv="Content-Type">``
   tag or the XML declaration in the first ``META_SCAN_BYTES`` bytes;
4. detection: bytes that are valid UTF-8 are UTF-8 (a non-ASCII text in any
   other common encoding is almost never valid UTF-8); otherwise uchardet
   (resiliparse's ``detect_encoding``), and when uchardet has no answer
   (it then says UTF-8, which we already know is wrong) or its answer does not
   decode, charset-normalizer (slower, better on Korean: uchardet returns
   nothing for EUC-KR pages here);
5. windows-1252 with replacement characters, the last resort.

A declared encoding (steps 2 and 3) is used only if the bytes decode with it
without an error; otherwise the next step is tried, so a page served as
``charset=utf-8`` that is really EUC-KR still decodes. One exception for the
most common wrong label: a page declared as a single-byte Latin encoding
(ISO-8859-x, windows-125x) whose bytes are valid, non-ASCII UTF-8 is UTF-8.

Labels are mapped as browsers do (WHATWG, via resiliparse's
``map_encoding_to_html5``: ``iso-8859-1`` and ``latin1`` are windows-1252,
``gb2312`` is GBK) and then to the superset Python codec that browsers
actually decode with: EUC-KR as cp949 (Unified Hangul Code), Shift_JIS as
cp932 (Windows-31J), GBK as GB18030, Big5 as Big5-HKSCS.
"""

from __future__ import annotations

import codecs
import re
from typing import NamedTuple

from resiliparse.parse.encoding import detect_encoding, map_encoding_to_html5

META_SCAN_BYTES = 4096
DETECT_BYTES = 65536  # bytes given to the detectors

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_META = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:+-]+)"""
    rb"""|<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.:+-]+)""",
    re.IGNORECASE,
)
# WHATWG name (as resiliparse maps it) -> the codec browsers decode that label with.
_SUPERSETS = {
    "euc_kr": "cp949",
    "shift_jis": "cp932",
    "gbk": "gb18030",
    "gb2312": "gb18030",
    "big5": "big5hkscs",
    "iso8859-1": "cp1252",
    "latin-1": "cp1252",
    "ascii": "cp1252",
}
_SINGLE_BYTE_LATIN = re.compile(r"^(cp125\d|iso8859-\d+|latin-\d|ascii)$")


class Decoded(NamedTuple):
    text: str
    encoding: str  # Python codec name actually used
    how: str  # "bom", "http", "meta", "utf-8", "detected", "fallback"


def codec_for_label(label: str | None) -> str | None:
    """Python codec for a charset label from a header or a tag, or None if unknown."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    whatwg = map_encoding_to_html5(label)  # a label WHATWG does not know comes back as utf-8
    if whatwg == "utf-8" and label.replace("_", "-") not in ("utf-8", "utf8", "unicode-1-1-utf-8"):
        try:  # not a web label (e.g. cp949): Python's own name, if it has one
            whatwg = label
            codecs.lookup(whatwg)
        except LookupError:
            return None
    name = codecs.lookup(whatwg).name
    return _SUPERSETS.get(name, name)


def meta_charset(head: bytes) -> str | None:
    """Charset label of the first meta tag (or XML declaration) in ``head``, if any."""
    match = _META.search(head)
    if not match:
        return None
    return (match.group(1) or match.group(2)).decode("ascii")


def decode_page(body: bytes, http_charset: str | None = None, *, html: bool = True) -> Decoded:
    """Text of a page's bytes; the order of evidence is in the module docstring."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return Decoded(body[len(bom) :].decode(encoding, errors="replace"), encoding, "bom")
    declared = [("http", http_charset)]
    if html:
        declared.append(("meta", meta_charset(body[:META_SCAN_BYTES])))
    for how, label in declared:
        codec = codec_for_label(label)
        if codec is None:
            continue
        if _SINGLE_BYTE_LATIN.match(codec) and not body.isascii():
            utf8 = _strict(body, "utf-8")
            if utf8 is not None:
                return Decoded(utf8, "utf-8", how)
        text = _strict(body, codec)
        if text is not None:
            return Decoded(text, codec, how)
    return _detect(body)


def _detect(body: bytes) -> Decoded:
    text = _strict(body, "utf-8")
    if text is not None:
        return Decoded(text, "utf-8", "utf-8")
    sample = body[:DETECT_BYTES]
    guesses = [codec_for_label(detect_encoding(sample, max_len=0))]
    if guesses[0] in (None, "utf-8"):
        guesses[0] = _charset_normalizer(sample)
    for codec in guesses:
        if codec and codec != "utf-8":
            text = _strict(body, codec)
            if text is not None:
                return Decoded(text, codec, "detected")
    codec = guesses[0] if guesses[0] and guesses[0] != "utf-8" else "cp1252"
    return Decoded(body.decode(codec, errors="replace"), codec, "fallback")


def _charset_normalizer(sample: bytes) -> str | None:
    import charset_normalizer  # imported here: only pages no cheaper step decodes need it

    best = charset_normalizer.from_bytes(sample).best()
    return codec_for_label(best.encoding) if best is not None else None


def _strict(body: bytes, codec: str) -> str | None:
    try:
        return body.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None
