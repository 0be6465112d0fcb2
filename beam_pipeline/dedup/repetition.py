"""Repeated text inside documents: boilerplate lines and repeated spans (pure functions).

Two kinds of repetition are removed from the gold text by ``select`` (the
scoring happens in the near-dedup stage, :mod:`beam_pipeline.transforms.line_dedup`):

* **boilerplate lines** (version ``lines-v1``): a line's key is xxh3-64 (fixed
  seed) of the line casefolded, with runs of whitespace folded to one space
  and stripped, as a non-negative 63-bit int. Lines of at least
  ``min_chars`` normalized characters that occur in more than ``min_repeats``
  documents of the corpus are boilerplate; the annotation lists their keys and
  :func:`strip_text` removes every line with such a key (and its newline).
* **repeated spans** (version ``spans-v1``): exact runs of at least
  ``min_words`` whitespace-separated words (``str.split`` words, case and
  punctuation kept) that occur in more than one document. Windows of
  ``min_words`` words are hashed with a rolling polynomial over the words'
  hashes (vectorised, :func:`word_windows`); a window in several documents is
  kept in the first document by (source rank, date, doc_id) and removed from
  the others. The annotation lists the merged character ranges to remove.

Both are exact up to 64-bit hash collisions.
"""

from __future__ import annotations

import functools
from typing import Iterable

import numpy as np
import xxhash

from beam_pipeline.dedup.shingling import combine_windows, fmix64

LINES_VERSION = "lines-v1"
SPANS_VERSION = "spans-v1"
MASK63 = (1 << 63) - 1
_LINE_SEED = 0x6C696E6573  # fixed: select recomputes line keys without the stage's config
_hash_line = functools.partial(xxhash.xxh3_64_intdigest, seed=_LINE_SEED)

# The characters str.split() treats as whitespace.
_WHITESPACE = np.array(sorted({c for c in range(0x3001) if chr(c).isspace()}), dtype=np.uint32)
_P = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible modulo 2^64
_P_INV = np.uint64(pow(int(_P), -1, 1 << 64))


def normalize_line(line: str) -> str:
    """casefold, runs of whitespace to one space, stripped (the reference form of ``lines-v1``)."""
    return " ".join(line.casefold().split())


def line_key(line: str) -> int:
    """The ``lines-v1`` key of one line."""
    return xxhash.xxh3_64_intdigest(normalize_line(line).encode("utf-8"), _LINE_SEED) & MASK63


def line_keys(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(key, normalized length) of every ``\n``-separated line of ``text``, as int64 arrays.

    The same keys as :func:`line_key` line by line, computed without Python
    bytecode per line: ``map`` applies C functions (split, join, len, encode,
    xxh3) to the lines.
    """
    lines = list(map(" ".join, map(str.split, text.casefold().split("\n"))))
    lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
    keys = np.fromiter(map(_hash_line, map(str.encode, lines)), dtype=np.uint64, count=len(lines))
    return (keys & np.uint64(MASK63)).astype(np.int64), lengths


def countable_line_keys(text: str, min_chars: int) -> set[int]:
    """Distinct keys of the lines of ``text`` long enough to be boilerplate."""
    keys, lengths = line_keys(text)
    return set(keys[lengths >= min_chars].tolist())


def strip_text(text: str, boilerplate: Iterable[int] = (), spans: Iterable[dict | tuple] = ()) -> str:
    """``text`` without the lines whose key is in ``boilerplate`` and without the character ``spans``.

    ``spans`` are ``{"start", "end"}`` dicts or (start, end) pairs of
    character offsets into ``text``. Removed lines go with their newline; the
    result is stripped of leading and trailing whitespace.
    """
    keys = set(boilerplate)
    cuts: list[tuple[int, int]] = []
    if keys:
        offset = 0
        for line, key in zip(text.split("\n"), line_keys(text)[0].tolist()):
            end = offset + len(line)
            if key in keys:
                cuts.append((offset, min(end + 1, len(text))))
            offset = end + 1
    for span in spans:
        start, end = (span["start"], span["end"]) if isinstance(span, dict) else span
        cuts.append((max(0, start), min(len(text), end)))
    if not cuts:
        return text
    pieces, position = [], 0
    for start, end in merge_ranges(cuts):
        pieces.append(text[position:start])
        position = end
    pieces.append(text[position:])
    return "".join(pieces).strip()


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged half-open ranges (overlapping or touching ranges become one)."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def word_windows(text: str, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hashes, char starts, char ends) of every window of ``size`` consecutive words, vectorised.

    Words are ``text.split()`` words. A word's hash is a polynomial over its
    code points modulo 2^64 read from prefix sums (no loop over words), mixed
    with ``fmix64``; a window's hash combines ``size`` word hashes
    (:func:`beam_pipeline.dedup.shingling.combine_windows`). Hashes are
    non-negative 63-bit ints in a uint64 array.
    """
    empty = np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    if points.size == 0:
        return empty
    space = np.isin(points, _WHITESPACE)
    before = np.concatenate(([True], space[:-1]))
    after = np.concatenate((space[1:], [True]))
    starts = np.flatnonzero(~space & before)
    ends = np.flatnonzero(~space & after) + 1
    if starts.size < size:
        return empty
    with np.errstate(over="ignore"):
        powers = np.empty(points.size + 1, dtype=np.uint64)
        powers[0] = 1
        powers[1:] = _P
        np.multiply.accumulate(powers, out=powers)
        inverse = np.empty(points.size + 1, dtype=np.uint64)
        inverse[0] = 1
        inverse[1:] = _P_INV
        np.multiply.accumulate(inverse, out=inverse)
        prefix = np.zeros(points.size + 1, dtype=np.uint64)
        np.cumsum((points.astype(np.uint64) + np.uint64(1)) * powers[:-1], out=prefix[1:])
        word_hashes = fmix64((prefix[ends] - prefix[starts]) * inverse[starts])
    hashes = combine_windows(word_hashes, size, seed) & np.uint64(MASK63)
    count = hashes.size
    return hashes, starts[:count].astype(np.int64), ends[size - 1 : size - 1 + count].astype(np.int64)


def stripped_document(document: dict, near: dict | None, *, strip_lines: bool = True, strip_spans: bool = True) -> dict:
    """``document`` with its boilerplate lines and repeated spans removed, as ``select`` writes it.

    ``near`` is the document's near-dedup annotation (or None). The result
    has ``text`` and ``n_chars`` of the stripped text, so the policy's length
    rules judge what would be written; a document with nothing to strip is
    returned unchanged (the same object).
    """
    if near is None:
        return document
    line_keys = (near.get("boilerplate_lines") or ()) if strip_lines else ()
    spans = (near.get("repeated_spans") or ()) if strip_spans else ()
    if not line_keys and not spans:
        return document
    text = strip_text(document["text"], line_keys, spans)
    return {**document, "text": text, "n_chars": len(text)}
