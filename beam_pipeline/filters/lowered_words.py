"""A document's lower-cased text and its words (``\\w+`` runs), made once per document.

The safety scorer (bad words, :mod:`.safety`) and the decontamination scorer
(13-gram overlap, :mod:`.decontamination`) both read exactly these words, and
they run one after the other on the same document in the fused scoring stage.
Cutting a text into words was most of either scorer's cost, so it is done once:
by a compiled loop over the code points that also numbers the distinct words
(only those become Python strings), and the last text's result is kept, so the
second scorer gets the first one's. The memo holds one text, is found by
identity (``is``: the text object is kept alive with it, so another text cannot
take its place), and is replaced as a whole, so threads of one worker never
see a mixed result. Callers must not change what they get.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.filters.code_points import code_point_table, code_points


@dataclasses.dataclass(frozen=True)
class LoweredWords:
    """``text.lower()`` and its words, ``re.findall(r"\\w+", text.lower())``, as distinct words and ids."""

    lowered: str
    #: The distinct words, in order of first occurrence.
    distinct: list[str]
    #: Each word's number in :attr:`distinct` (int64, one per word, in text order).
    ids: np.ndarray

    def words(self) -> list[str]:
        """Every word in text order (``findall``'s list)."""
        return [self.distinct[i] for i in self.ids.tolist()]


_last: tuple[str, LoweredWords] | None = None


def lowered_words(text: str) -> LoweredWords:
    """The :class:`LoweredWords` of ``text``; the previous caller's when ``text`` is the same object."""
    global _last
    last = _last
    if last is not None and last[0] is text:
        return last[1]
    lowered = text.lower()
    distinct, ids = distinct_words(lowered)
    found = LoweredWords(lowered, distinct, ids)
    _last = (text, found)
    return found


def distinct_words(lowered: str) -> tuple[list[str], np.ndarray]:
    """(the distinct words of ``lowered`` in order of first occurrence, each word's number in that list).

    ``[distinct[i] for i in ids] == re.findall(r"\\w+", lowered)``: a word is a maximal run of the code
    points that ``\\w`` matches (:func:`.code_point_table`, made by the regex itself), so the runs are
    ``findall``'s; positions are the string's (:func:`.code_points`).
    """
    starts, ends, ids, firsts = _split_words(code_points(lowered), code_point_table(r"\w"))
    distinct = [lowered[start:end] for start, end in zip(starts[firsts].tolist(), ends[firsts].tolist())]
    return distinct, ids


@compiled
def _split_words(points, is_word):  # pragma: no cover - compiled; tests compare it with findall
    """(starts, ends, ids, firsts) of the words of ``points`` (maximal runs of code points ``c`` with
    ``is_word[c]``): each word's start and end, its number (distinct words are numbered in order of first
    occurrence) and, for each number, the word that first had it. A hash table of word numbers: words are
    compared by length and code points (the hash only picks the slot)."""
    size = points.shape[0]
    starts = np.empty(size // 2 + 1, dtype=np.int64)
    ends = np.empty(size // 2 + 1, dtype=np.int64)
    n_words = 0
    i = 0
    while i < size:
        if is_word[points[i]]:
            j = i + 1
            while j < size and is_word[points[j]]:
                j += 1
            starts[n_words] = i
            ends[n_words] = j
            n_words += 1
            i = j
        else:
            i += 1
    table, bits = 2, 1
    while table < 2 * n_words:
        table, bits = 2 * table, bits + 1
    mask, shift = table - 1, np.uint64(64 - bits)
    slots = np.full(table, -1, dtype=np.int64)  # the first word of each slot's number, -1 for none
    ids = np.empty(n_words, dtype=np.int64)
    firsts = np.empty(n_words, dtype=np.int64)
    distinct = 0
    prime, golden = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15)
    for w in range(n_words):
        start, end = starts[w], ends[w]
        length = end - start
        value = np.uint64(length)  # FNV-style over the code points
        for j in range(start, end):
            value = (value ^ np.uint64(points[j])) * prime
        slot = np.int64((value * golden) >> shift)
        while True:
            other = slots[slot]
            if other < 0:
                slots[slot] = w
                ids[w] = distinct
                firsts[distinct] = w
                distinct += 1
                break
            if ends[other] - starts[other] == length:
                offset = starts[other] - start
                j = start
                while j < end and points[j + offset] == points[j]:
                    j += 1
                if j == end:
                    ids[w] = ids[other]
                    break
            slot = (slot + 1) & mask
    return starts[:n_words], ends[:n_words], ids, firsts[:distinct]
