"""Versioned shingling: document text -> a uint64 array of shingle hashes.

MinHash and SimHash both start here, so they see the same features. Changing
anything in this module changes signatures, so the behaviour is frozen per
:data:`NORMALIZATION_VERSION`, which is part of the near-dedup layer key.

Normalization ``sh-v1`` (applied to the already ``nfc-v1``-normalized text):

1. Unicode NFKC (folds compatibility forms: full-width letters, ligatures,
   no-break and other compatibility spaces, superscripts);
2. ``str.casefold`` (lowercase, and e.g. ``ß`` -> ``ss``);
3. format characters (Unicode category ``Cf``: zero-width spaces and joiners,
   soft hyphens, bidi marks, BOM) are deleted;
4. every other character that is not a letter, a digit or a combining mark
   (categories ``L*``, ``N*``, ``M*``) becomes a space: punctuation, symbols,
   control characters and all whitespace fold to one separator;
5. the text is split on runs of spaces into words.

Categories come from the ``unicodedata`` of the running Python, whose Unicode
version is part of the version string (a new Unicode release can reclassify
characters). Characters outside the Basic Multilingual Plane count as letters.

Shingles are then word n-grams (default 5) or character n-grams of the
normalized words joined by single spaces. A shingle's hash is computed
without a Python loop per shingle: each word is hashed once with xxh3-64
(``map`` over the words, in C), and the n hashes of a window are combined by a
polynomial over uint64 (wrapping) followed by the murmur3 ``fmix64``
finalizer, seeded. The character classes of non-ASCII text and the window
hashes are one compiled loop each (numba; ``docs/decisions.md``, "MinHash in
compiled code"), which give the values the numpy passes gave before.
Documents with fewer than n words (n characters for character shingles)
have **no** shingles: :func:`shingle_hashes` returns None,
and such documents get no signature, so short texts never share an empty one.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
import xxhash

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.records.hashing import stable_hash64

NORMALIZATION_VERSION = f"sh-v1+unicode-{unicodedata.unidata_version}"

_U64 = np.uint64
_MUL1, _MUL2 = _U64(0xFF51AFD7ED558CCD), _U64(0xC4CEB9FE1A85EC53)
_S33 = _U64(33)
_KEEP, _SPACE, _DELETE = 1, 0, 2

# ASCII fast path: lowercase letters and digits stay, every other byte becomes a space.
_ASCII_FOLD = bytes(c if (48 <= c <= 57 or 97 <= c <= 122) else 32 for c in range(256))


@functools.lru_cache(maxsize=1)
def _bmp_classes() -> np.ndarray:
    """Class of every BMP code point: keep (L, N, M), delete (Cf) or space (the rest)."""
    classes = np.full(0x10000, _SPACE, dtype=np.uint8)
    for code in range(0x10000):
        category = unicodedata.category(chr(code))
        if category[0] in "LNM":
            classes[code] = _KEEP
        elif category == "Cf":
            classes[code] = _DELETE
    return classes


def fmix64(h: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finalizer, vectorised (modifies and returns ``h``)."""
    h ^= h >> _S33
    h *= _MUL1
    h ^= h >> _S33
    h *= _MUL2
    h ^= h >> _S33
    return h


def normalize_for_shingles(text: str) -> str:
    """The ``sh-v1`` normal form: words separated by single spaces (see the module doc)."""
    return " ".join(words(text))


def words(text: str) -> list[str]:
    """The ``sh-v1`` words of ``text``."""
    return [w.decode("utf-8") for w in _word_bytes(text)]


def _word_bytes(text: str) -> list[bytes]:
    """``sh-v1`` words as UTF-8 bytes (what gets hashed)."""
    if text.isascii():
        return text.lower().encode("ascii").translate(_ASCII_FOLD).split()
    return _folded_utf8(text).split()


def _fold_unicode(text: str) -> str:
    """Steps 1-4 of ``sh-v1`` (the module doc) on any text: what :func:`words` splits."""
    return _folded_utf8(text).decode("utf-8")


def _folded_utf8(text: str) -> bytes:
    """Steps 1-4 of ``sh-v1`` as UTF-8: NFKC and casefold by Python, then each code point's class by
    :func:`_fold_points`. (``encode("utf-32-le")`` raises on a lone surrogate, as it always did.)"""
    text = unicodedata.normalize("NFKC", text).casefold()
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return _fold_points(points, _bmp_classes()).tobytes()


@compiled
def _fold_points(points, classes):  # pragma: no cover - compiled; tests/test_minhash.py checks it
    """Code points -> the UTF-8 bytes of the kept ones (L, N, M, and every point above the BMP), a space
    for each of the others, nothing for a format character (Cf).

    Compiled (numba): one pass, where numpy took five over the text (class lookup, mask, replace,
    re-encode through UTF-32 and UTF-8; docs/decisions.md, "MinHash in compiled code").
    """
    out = np.empty(points.shape[0] * 4, dtype=np.uint8)
    n = 0
    for point in points:
        if point <= 0xFFFF:
            kind = classes[point]
            if kind == _DELETE:
                continue
            if kind == _SPACE:
                out[n] = 32
                n += 1
                continue
        if point < 0x80:
            out[n] = point
            n += 1
        elif point < 0x800:
            out[n] = 0xC0 | (point >> 6)
            out[n + 1] = 0x80 | (point & 0x3F)
            n += 2
        elif point < 0x10000:
            out[n] = 0xE0 | (point >> 12)
            out[n + 1] = 0x80 | ((point >> 6) & 0x3F)
            out[n + 2] = 0x80 | (point & 0x3F)
            n += 3
        else:
            out[n] = 0xF0 | (point >> 18)
            out[n + 1] = 0x80 | ((point >> 12) & 0x3F)
            out[n + 2] = 0x80 | ((point >> 6) & 0x3F)
            out[n + 3] = 0x80 | (point & 0x3F)
            n += 4
    return out[:n]


@functools.lru_cache(maxsize=64)
def _constants(seed: int) -> tuple[np.uint64, np.uint64]:
    """Seeded odd multiplier and final xor of the window combination."""
    return (_U64(stable_hash64(seed, "shingle-multiplier") | 1), _U64(stable_hash64(seed, "shingle-xor")))


def shingle_hashes(text: str, *, kind: str = "word", size: int = 5, seed: int = 0) -> np.ndarray | None:
    """uint64 hashes of the shingles of ``text`` (in text order, repeats kept), or None if too short.

    ``kind`` is ``word`` (n consecutive words) or ``char`` (n consecutive
    characters of the normalized text, words joined by one space).
    """
    word_list = _word_bytes(text)
    if kind == "word":
        if len(word_list) < size:
            return None
        units = np.fromiter(map(xxhash.xxh3_64_intdigest, word_list), dtype=np.uint64, count=len(word_list))
    elif kind == "char":
        joined = b" ".join(word_list).decode("utf-8")
        if len(joined) < size:
            return None
        units = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        units *= _MUL1  # spread code points over 64 bits before combining
    else:
        raise ValueError(f"unknown shingle kind {kind!r}; use 'word' or 'char'")
    return combine_windows(units, size, seed)


def combine_windows(units: np.ndarray, size: int, seed: int = 0) -> np.ndarray:
    """Hash of every window of ``size`` consecutive uint64 units (order-sensitive): per window
    ``h = u_0; h = h * multiplier + u_k`` for k = 1 .. size-1 (wrapping), then ``fmix64(h ^ final_xor)``."""
    multiplier, final_xor = _constants(seed)
    return _combined_windows(np.ascontiguousarray(units, dtype=np.uint64), size, multiplier, final_xor)


@compiled
def _combined_windows(units, size, multiplier, final_xor):  # pragma: no cover - compiled; tested
    """:func:`combine_windows` compiled (numba): one pass, where numpy made two per unit of the window and
    five for ``fmix64``; the same uint64 arithmetic (C unsigned integers wrap as numpy's do)."""
    count = units.shape[0] - size + 1
    out = np.empty(max(count, 0), dtype=np.uint64)
    s33, mul1, mul2 = np.uint64(33), np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
    for j in range(count):
        h = units[j]
        for offset in range(1, size):
            h = h * multiplier + units[j + offset]
        h ^= final_xor
        h ^= h >> s33
        h *= mul1
        h ^= h >> s33
        h *= mul2
        h ^= h >> s33
        out[j] = h
    return out


def distinct(shingles: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-d array: ``np.unique(shingles)``, by a sort and one comparison.

    numpy 2.x's ``np.unique`` hashes the values before it sorts them, which on
    shingle arrays (hundreds to thousands of mostly distinct uint64) costs ~9x
    the sort alone; it was the second-largest cost of signing a document.
    """
    ordered = np.sort(shingles)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
