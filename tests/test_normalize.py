import unicodedata

import pytest

from beam_pipeline.records.normalize import normalize_text


@pytest.mark.parametrize("raw, expected", [
    ("line one\r\nline two\rline three", "line one\nline two\nline three"),
    ("caf\u0065\u0301", "caf\u00e9"),                      # NFD -> NFC
    ("a\x00b\x07c\x1bd", "abcd"),                          # NUL and other C0 controls
    ("keep\ttabs\nand newlines", "keep\ttabs\nand newlines"),
    ("c1\x85\x9fcontrols", "c1controls"),
    ("non\ufffe\uffffchar\U0010ffff", "nonchar"),
    ("lone \ud800 surrogate", "lone  surrogate"),
    ("trailing   \nspaces\t \n", "trailing\nspaces"),
    ("  \n\n padded \n\n", "padded"),
    ("", ""),
    ("\x00\x01", ""),
    ("עברית וערבית: العربية", "עברית וערבית: العربية"),  # right-to-left text untouched
])
def test_normalize(raw, expected):
    assert normalize_text(raw) == expected


def test_idempotent_even_when_removal_enables_composition():
    raw = "e\x00\u0301 and A\u030a"
    once = normalize_text(raw)
    assert once == normalize_text(once)
    assert unicodedata.is_normalized("NFC", once)


def test_all_66_noncharacters_are_removed_and_other_astral_characters_kept():
    noncharacters = [chr(c) for c in range(0xFDD0, 0xFDF0)] + [
        chr(plane * 0x10000 + low) for plane in range(17) for low in (0xFFFE, 0xFFFF)]
    assert len(noncharacters) == 66
    for ch in noncharacters:
        assert normalize_text(f"a{ch}b") == "ab", hex(ord(ch))
    assert normalize_text("emoji \U0001F600 and \U0001FFFD stay\U0010FFFE") == "emoji \U0001F600 and \U0001FFFD stay"


def _normalize_without_shortcuts(text: str) -> str:
    """``nfc-v1`` as the module docstring states it, every pass run on every text (the code skips the astral
    and trailing-space passes when a cheaper test shows they would change nothing)."""
    import re

    from beam_pipeline.records import normalize

    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = normalize._REMOVE.sub("", text)
    text = normalize._REMOVE_ASTRAL.sub("", text)
    text = unicodedata.normalize("NFC", text)
    return re.sub(r"[ \t\u00a0\u3000]+(?=\n)", "", text).strip()


def test_shortcuts_change_nothing_on_text_dense_in_what_they_test():
    import random

    rng = random.Random(20261207)
    alphabet = ["a", "é", "e\u0301", " ", "\t", "\u00a0", "\u3000", "\n", "\r", "\r\n", "\x00", "\U0001F600",
                "\U0001FFFE", "\U0010FFFF", "\ud800", "\uffff", "\u2028", "x \n", "\u3000\n", "\t\n", "\u00a0\n"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(5000)]
    texts += ["plain ascii\nlines", "é\nastral-free", "trailing \u3000", "\U0001F600 only"]
    for text in texts:
        assert normalize_text(text) == _normalize_without_shortcuts(text), repr(text)
