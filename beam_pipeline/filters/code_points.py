"""Texts as arrays of code points, and per-code-point tables made by a regex, for compiled scans.

Several scorers find the places where a regex can match with a compiled loop
over a text's code points (:mod:`.pii`'s number runs and IBAN starts,
:mod:`.lowered_words`' words) instead of the regex's attempt at every
position. The loop reads a bool per code point; the table is made by running
the regex itself over every code point once, so "matches ``\\w``" means what
``re`` means by it, including every Unicode letter and digit.

:func:`span_numbers` numbers the distinct strings among spans of the code
points (words, in :mod:`.lowered_words` and :mod:`.ngram_repeats`), so that
only the distinct ones ever become Python strings, or none at all.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from beam_pipeline.dedup.compiled import compiled

#: Code points are 0 .. U+10FFFF.
CODE_POINTS = 0x110000


def code_points(text: str) -> np.ndarray:
    """The code points of ``text`` as uint32, one per character: ``surrogatepass`` keeps lone surrogates
    (JSON's ``\\ud800``) as the code points they are, so positions are the string's."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


@functools.cache
def code_point_table(character_class: str) -> np.ndarray:
    """A bool per code point: whether the one-character regex ``character_class`` (``r"\\w"``, ``r"\\d"``)
    matches it. Made by the regex itself over all code points (~0.04 s, once per process and class)."""
    every = np.arange(CODE_POINTS, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    table = np.zeros(CODE_POINTS, dtype=np.bool_)
    for m in re.finditer(f"(?:{character_class})+", every):
        table[m.start() : m.end()] = True
    return table


@compiled
def span_numbers(points, starts, ends):  # pragma: no cover - compiled; tests compare it with a dict of the strings
    """(numbers, firsts) of the spans ``points[starts[i]:ends[i]]``: each span's number, equal strings of
    code points getting equal numbers, numbered 0, 1, ... in order of first occurrence, and for each number
    the index of the span that first had it (int64 both).

    An open-addressing hash table of the numbers, sized to at least twice the spans: spans are compared by
    length and code points (the hash, FNV-style over pairs of code points, only picks the slot), so the
    numbers are exact whatever the hash does.
    """
    n_spans = starts.shape[0]
    table, bits = 2, 1
    while table < 2 * n_spans:
        table, bits = 2 * table, bits + 1
    mask, shift = table - 1, np.uint64(64 - bits)
    slots = np.full(table, -1, dtype=np.int64)  # the first span of each slot's number, -1 for none
    numbers = np.empty(n_spans, dtype=np.int64)
    firsts = np.empty(n_spans, dtype=np.int64)
    distinct = 0
    prime, golden, s32 = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15), np.uint64(32)
    for i in range(n_spans):
        start, end = starts[i], ends[i]
        length = end - start
        value = np.uint64(length)
        j = start
        while j + 1 < end:
            value = (value ^ (np.uint64(points[j]) | (np.uint64(points[j + 1]) << s32))) * prime
            j += 2
        if j < end:
            value = (value ^ np.uint64(points[j])) * prime
        slot = np.int64((value * golden) >> shift)
        while True:
            other = slots[slot]
            if other < 0:
                slots[slot] = i
                numbers[i] = distinct
                firsts[distinct] = i
                distinct += 1
                break
            if ends[other] - starts[other] == length:
                offset = starts[other] - start
                j = start
                while j < end and points[j + offset] == points[j]:
                    j += 1
                if j == end:
                    numbers[i] = numbers[other]
                    break
            slot = (slot + 1) & mask
    return numbers, firsts[:distinct]
