"""Versioned text normalization applied at ingest, before ``doc_id``.

Changing anything here changes document ids, so the behaviour is frozen per
``NORMALIZATION_VERSION`` and the version is part of the ingest layer key.

``nfc-v1`` does, in order:

1. line endings: CRLF and lone CR become LF;
2. removes C0/C1 control characters except TAB and LF (this includes NUL),
   lone surrogates, and the 66 Unicode non-characters (U+FFFE, U+FFFF, ...);
   removal comes before composition so that the result is idempotent;
3. Unicode NFC composition;
4. strips trailing whitespace on each line and leading/trailing blank space of
   the whole document.

Invalid UTF-8 never reaches this function: readers decode per record and
dead-letter (JSONL) or replace with U+FFFD (whole-file text) first.
"""

from __future__ import annotations

import re
import unicodedata

NORMALIZATION_VERSION = "nfc-v1"

# One character class for the Basic Multilingual Plane (controls, surrogates, U+FDD0..U+FDEF,
# U+FFFE, U+FFFF) and a second pass for the 32 non-characters of the other planes, run only
# when the text has a character above U+FFFF: a class holding astral characters makes `re`
# more than twice as slow on every text. The removed set is the same as one class would be.
_REMOVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]")
_REMOVE_ASTRAL = re.compile(
    "[" + "".join(chr(plane * 0x10000 + low) for plane in range(1, 17) for low in (0xFFFE, 0xFFFF)) + "]"
)
#: A character above U+FFFF (one range: ``re`` tests it with two comparisons per character, five times
#: faster than ``max(text)``, which makes a string object of every character).
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_TRAILING_SPACE_CHARACTERS = " \t\u00a0\u3000"
_TRAILING_SPACE = re.compile(f"[{_TRAILING_SPACE_CHARACTERS}]+(?=\n)")
#: Every match of ``_TRAILING_SPACE`` ends with one of these: a text holding none of them (``str.find``,
#: memchr-fast) has nothing to strip, and the regex, which tries every space of the text, is not run.
_TRAILING_SPACE_ENDS = tuple(f"{character}\n" for character in _TRAILING_SPACE_CHARACTERS)


def normalize_text(text: str) -> str:
    """Return the ``nfc-v1`` normal form of ``text`` (idempotent)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _REMOVE.sub("", text)
    if not text.isascii():
        if _ASTRAL.search(text) is not None:
            text = _REMOVE_ASTRAL.sub("", text)
        text = unicodedata.normalize("NFC", text)
    if any(end in text for end in _TRAILING_SPACE_ENDS):
        text = _TRAILING_SPACE.sub("", text)
    return text.strip()
