"""Gopher's n-gram repetition scores in one compiled loop (numba), for both definitions.

Gopher (J. W. Rae et al., "Scaling Language Models: Methods, Analysis &
Insights from Training Gopher", arXiv:2112.11446, 2021, Appendix A.1.1 and
Table A1) scores a document by the characters its repeated word n-grams
cover: the most frequent 2-, 3- and 4-gram, and every 5- to 10-gram that
occurs more than once. Two definitions use the same machinery:

* the project's (:func:`beam_pipeline.filters.heuristics.ngram_repetition`):
  ``rep_top_{2,3,4}gram`` is the top count times the characters of the
  n-gram (the most characters among the positions with the top count),
  capped at 1, over the characters of all words, 0 when nothing repeats;
  ``rep_dup_{5..10}gram`` the characters of the words covered by any
  repeated n-gram (every occurrence, each word once);
* the reference (:func:`beam_pipeline.filters.heuristics_reference._ngram_scores`),
  HF datatrove 0.10.1's ``GopherRepetitionFilter``: ``find_top_duplicate``
  (the first seen of the most frequent n-grams, its ``' '.join`` length times
  its count over ``len(text)``; a count of 1 counts) and ``find_all_duplicate``
  (a left-to-right scan counting the characters of an n-gram already seen and
  jumping over it).

n-grams are compared by a 64-bit rolling hash over word (token) ids:
``splitmix64(id + 0x9E3779B97F4A7C15)`` per word (:func:`beam_pipeline.records.hashing.splitmix64`),
then ``h = h * 0x100000001B3 + next`` modulo 2^64 (a collision needs ~2^32
distinct n-grams in one document). The project's word ids are the positions
of first occurrences (:func:`word_ids`), the reference's the tokenizer's
vocabulary ids. An n-gram can repeat only where the two (n-1)-grams inside
it repeat, so each size extends the hashes of the *candidates* left by the
size before only, and stops once there are none.

Why compiled: the numpy versions made ~15 array passes and a sort per n-gram
size, 9 sizes per document: ~0.9 ms per sample document (2,600 words, 4,100
tokens) for each definition, plus a dict of the words for the project's ids.
The loops here do the same work with one open-addressing hash table in numpy
arrays (reused across sizes), ~3-4x less time, and give bit-for-bit the same
floats: the same hashes (the same answers even after a collision), the same
tie-breaking, and every score is the same integer arithmetic followed by one
float division, as in the numpy code. ``tests/test_heuristics_fast_paths.py``
compares both definitions with the numpy versions (kept there) and with
plain Counters of n-gram tuples, on every sample document, generated edge
cases and crafted hash collisions. The decorator
(:class:`beam_pipeline.dedup.compiled.compiled`) compiles at the first call
and caches the machine code on disk (a process then pays ~0.35 s once to
import numba and load it).
"""

from __future__ import annotations

from itertools import count

import numpy as np

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.filters.code_points import code_points, span_numbers

TOP_NGRAM_SIZES = (2, 3, 4)
DUP_NGRAM_SIZES = (5, 6, 7, 8, 9, 10)


def word_ids(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, lengths) of ``words``: each word's id is the position of its first occurrence (equal strings,
    equal ids), its length its number of characters, both int64.

    The words are joined by spaces and compared as UTF-32 code points in a compiled loop, ~2x cheaper than
    a dict of the words (``setdefault`` and ``len`` per word, what the project's definition did before).
    Words that contain a space (never those of :func:`~.heuristics.split_words`) take the dict. The
    distinct words are numbered by :func:`.code_points.span_numbers`; a word's id is its number's first span.
    """
    n_words = len(words)
    points = code_points(" ".join(words))
    starts, ends, split = _spaced_spans(points, n_words)
    if split:
        numbers, firsts = span_numbers(points, starts, ends)
        ids, lengths = firsts[numbers], ends - starts
    else:  # a space inside a word
        vocabulary: dict[str, int] = {}
        ids = np.fromiter(map(vocabulary.setdefault, words, count()), dtype=np.int64, count=n_words)
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=n_words)
    return ids, lengths


def project_scores(ids: np.ndarray, lengths: np.ndarray) -> list[float]:
    """The project's ``rep_top_{2,3,4}gram`` then ``rep_dup_{5..10}gram`` of a non-empty document whose
    words have these ids and lengths (over the characters of all words)."""
    return _ngram_scores(_int64(ids), _int64(lengths), False, 0).tolist()


def datatrove_scores(ids: np.ndarray, lengths: np.ndarray, text_length: int) -> list[float]:
    """datatrove's top 2,3,4-gram then duplicate 5..10-gram scores of a document whose tokens have these
    ids and lengths (over ``text_length``, the characters of the text)."""
    return _ngram_scores(_int64(ids), _int64(lengths), True, int(text_length)).tolist()


def _int64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


@compiled
def _spaced_spans(points, n_words):  # pragma: no cover - compiled; tests compare it with a dict of the words
    """(starts, ends, True) of the ``n_words`` words whose code points, joined by spaces (32), are
    ``points``; or empty arrays and False when there are not ``n_words - 1`` spaces."""
    size = points.shape[0]
    spaces = 0
    for i in range(size):
        spaces += points[i] == 32
    if spaces != n_words - 1:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), False
    starts = np.empty(n_words + 1, dtype=np.int64)  # word i is points[starts[i] : starts[i + 1] - 1]
    starts[0] = 0
    w = 0
    for i in range(size):  # without a branch: the last write to starts[w + 1] is the space's
        starts[w + 1] = i + 1
        w += points[i] == 32
    starts[n_words] = size + 1
    return starts[:n_words], starts[1:] - 1, True


@compiled
def _ngram_scores(ids, lengths, datatrove, text_length):  # pragma: no cover - compiled; tests compare it with numpy
    """The 9 scores (top 2,3,4-gram, duplicate 5..10-gram) as a float64 array; ``datatrove`` picks the
    definition (``text_length`` is its divisor; the project divides by the characters of the words).

    Per size n: the candidates (positions whose two inner (n-1)-grams repeat, increasing) extend their
    rolling hash by one word, a hash table counts them (the slot of each candidate is kept: a slot is a
    distinct hash), and the positions counted more than once become the next size's repeats.
    """
    n_words = ids.shape[0]
    out = np.zeros(9, dtype=np.float64)
    cumulative = np.empty(n_words + 1, dtype=np.int64)
    cumulative[0] = 0
    for i in range(n_words):
        cumulative[i + 1] = cumulative[i] + lengths[i]
    divisor = text_length if datatrove else cumulative[n_words]
    multiplier, golden = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15)
    s30, s27, s31 = np.uint64(30), np.uint64(27), np.uint64(31)
    mix1, mix2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    base = np.empty(n_words, dtype=np.uint64)
    for i in range(n_words):  # splitmix64(id + golden), as beam_pipeline.records.hashing.splitmix64
        x = np.uint64(ids[i]) + golden
        x ^= x >> s30
        x *= mix1
        x ^= x >> s27
        x *= mix2
        base[i] = x ^ (x >> s31)
    rolling = base.copy()  # the hash of the n-gram at each position, kept up to date at the candidates
    capacity = 2
    while capacity < 2 * n_words:
        capacity *= 2
    keys = np.empty(capacity, dtype=np.uint64)
    counts = np.zeros(capacity, dtype=np.int64)
    seen = np.zeros(capacity, dtype=np.bool_)
    slots = np.empty(n_words, dtype=np.int64)
    dense = True  # ids below the capacity (the project's: first positions) index the counts directly
    for i in range(n_words):
        if ids[i] < 0 or ids[i] >= capacity:
            dense = False
            break
    positions = np.arange(n_words)  # size 1: every position; then the candidates, then the repeats
    k = n_words
    for n in range(1, 11):
        if n > 1:
            m = 0  # candidates: p and p + 1 both start a repeated (n-1)-gram
            for j in range(k - 1):
                if positions[j + 1] == positions[j] + 1:
                    positions[m] = positions[j]
                    m += 1
            k = m
            if k == 0:  # no n-gram repeats, nor any longer one: the scores stay 0
                if datatrove:  # but every n-gram occurs once, so the first one is datatrove's top
                    for size in range(n, 5):
                        if n_words >= size:
                            out[size - 2] = (cumulative[size] + size - 1) / divisor
                break
            for j in range(k):
                p = positions[j]
                rolling[p] = rolling[p] * multiplier + base[p + n - 1]
        table, bits = 2, 1  # a table of at least 2k slots (a prefix of the arrays), Fibonacci hashing
        while table < 2 * k:
            table, bits = 2 * table, bits + 1
        mask, shift = table - 1, np.uint64(64 - bits)
        counts[:table] = 0
        if n == 1 and dense:  # words counted by id: equal ids, equal hashes (splitmix64 is a bijection)
            for j in range(k):
                counts[ids[j]] += 1
                slots[j] = ids[j]
        else:
            for j in range(k):
                value = rolling[positions[j]]
                slot = np.int64((value * golden) >> shift)
                while counts[slot] != 0 and keys[slot] != value:
                    slot = (slot + 1) & mask
                keys[slot] = value
                counts[slot] += 1
                slots[j] = slot
        if 2 <= n <= 4:
            top, first_top = 0, 0
            for j in range(k):
                if counts[slots[j]] > top:
                    top, first_top = counts[slots[j]], j
            if datatrove:
                at = positions[first_top] if top > 1 else 0
                top = top if top > 1 else 1
                chars = cumulative[at + n] - cumulative[at] + n - 1
                out[n - 2] = chars * top / divisor
            elif top > 1:
                chars = 0
                for j in range(k):
                    if counts[slots[j]] == top:
                        p = positions[j]
                        chars = max(chars, cumulative[p + n] - cumulative[p])
                out[n - 2] = min(1.0, top * chars / divisor)
        m = 0  # the repeats, increasing, with their slots
        for j in range(k):
            if counts[slots[j]] > 1:
                positions[m] = positions[j]
                slots[m] = slots[j]
                m += 1
        k = m
        if n >= 5:
            chars = 0
            if datatrove:  # find_all_duplicate: only a repeat can be seen before; a jump skips positions
                seen[:table] = False
                resume = 0
                for j in range(k):
                    p = positions[j]
                    if p >= resume:
                        if seen[slots[j]]:
                            chars += cumulative[p + n] - cumulative[p]
                            resume = p + n
                        else:
                            seen[slots[j]] = True
                out[n - 2] = chars / divisor
            elif k:  # the words covered by any repeat, each once (positions increase)
                covered = 0
                for j in range(k):
                    p = positions[j]
                    start = max(p, covered)
                    covered = p + n
                    if covered > start:
                        chars += cumulative[covered] - cumulative[start]
                out[n - 2] = chars / divisor
    return out
