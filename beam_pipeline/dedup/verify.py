"""Verification rules for near-duplicate candidates: pure functions over shingle sets or their estimates.

The near-dedup stage (``beam_pipeline/transforms/near_dedup.py``) decides
each LSH candidate pair with :func:`accept` (``verify: two_tier``, the
default), from exact shingle sets (``two_tier.measure: exact``, the default
since issue 41) or from the MinHash estimate of Jaccard and the two sets'
sizes (``estimate``: :func:`estimated_containment`). ``bench/near_dup_recall.py`` scores
the rules on a labeled set of real text, through the stage and offline.

A single Jaccard threshold (0.7) misses copies whose 5-gram Jaccard with the
original is 0.4-0.7 although one text is almost all inside the other: a
truncated copy (the first half of a page has J = 0.5 with the page), a page
wrapped in a site template or with inserted ad blocks. Two measures separate
those from look-alikes:

* **containment** ``|A & B| / min(|A|, |B|)`` (Broder, "On the resemblance
  and containment of documents", SEQUENCES 1997): near 1 when one text is
  inside the other, whatever their lengths;
* **shingles without repeated lines** (the idea of line-level dedup in C4 and
  Gopher/MassiveText): lines that occur in several documents of the corpus
  (menus, footers, templates, ad blocks, quoted boilerplate) are removed
  before shingling, so two pages of one site do not meet on their template
  and a wrapped copy meets its original on the content alone (the stage:
  ``lines.min_repeats``; here :func:`repeated_lines` for offline scoring).

:func:`two_tier` accepts a pair at Jaccard >= 0.7 as before, and a second tier
of Jaccard >= 0.4 only when one text is >= 80% inside the other; texts with
fewer than 50 shingles (a few sentences) need Jaccard >= 0.9 (short texts are
handled apart: a short text inside a long one is a quote, not a copy).
"""

from __future__ import annotations

import collections
from typing import Iterable

import numpy as np

from beam_pipeline.dedup.repetition import line_key
from beam_pipeline.dedup.shingling import shingle_hashes

HIGH_JACCARD = 0.7
LOW_JACCARD = 0.4
MIN_CONTAINMENT = 0.9
MIN_SHINGLES = 50
SHORT_JACCARD = 0.9


def _overlap(a: np.ndarray, b: np.ndarray) -> int:
    """|A & B| of two sorted arrays of distinct shingle hashes: a binary search of each value of the smaller
    in the larger (``np.intersect1d`` concatenates and sorts both again: ~3x the CPU per pair)."""
    if not len(a) or not len(b):
        return 0
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    at = np.minimum(np.searchsorted(large, small), len(large) - 1)
    return int(np.count_nonzero(large[at] == small))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|A & B| / |A | B| (0 for two empty sets)."""
    both = _overlap(a, b)
    union = len(a) + len(b) - both
    return both / union if union else 0.0


def containment(a: np.ndarray, b: np.ndarray) -> float:
    """|A & B| / min(|A|, |B|): how much of the smaller text is inside the larger (Broder 1997)."""
    smaller = min(len(a), len(b))
    return _overlap(a, b) / smaller if smaller else 0.0


def accept(
    j: float,
    contained: float,
    smaller: int,
    *,
    high: float = HIGH_JACCARD,
    low: float = LOW_JACCARD,
    min_containment: float = MIN_CONTAINMENT,
    min_shingles: int = MIN_SHINGLES,
    short_jaccard: float = SHORT_JACCARD,
) -> bool:
    """The two-tier rule on a pair's Jaccard ``j``, containment ``contained`` and smaller set size ``smaller``.

    Texts with fewer than ``min_shingles`` shingles need ``j >= short_jaccard``;
    longer ones ``j >= high``, or ``j >= low`` with ``contained >= min_containment``.
    """
    if smaller < min_shingles:
        return j >= short_jaccard
    return j >= high or (j >= low and contained >= min_containment)


def two_tier(
    a: np.ndarray,
    b: np.ndarray,
    *,
    high: float = HIGH_JACCARD,
    low: float = LOW_JACCARD,
    min_containment: float = MIN_CONTAINMENT,
    min_shingles: int = MIN_SHINGLES,
    short_jaccard: float = SHORT_JACCARD,
) -> bool:
    """Whether a candidate pair is a near duplicate, from its exact shingle sets (module docstring)."""
    both = _overlap(a, b)
    union = len(a) + len(b) - both
    smaller = min(len(a), len(b))
    return accept(
        both / union if union else 0.0,
        both / smaller if smaller else 0.0,
        smaller,
        high=high,
        low=low,
        min_containment=min_containment,
        min_shingles=min_shingles,
        short_jaccard=short_jaccard,
    )


def estimated_containment(j: float, size_a: int, size_b: int) -> float:
    """Containment ``|A & B| / min(|A|, |B|)`` from a Jaccard estimate and the two set sizes (at most 1).

    ``|A | B| = |A| + |B| - |A & B|`` and ``J = |A & B| / |A | B|`` give
    ``|A & B| = J (|A| + |B|) / (1 + J)``: a MinHash signature and a shingle
    count per document are enough (Broder 1997 estimates containment from
    the same sketches). The estimate's error is the Jaccard estimate's,
    scaled by ``(|A| + |B|) / ((1 + J)^2 min(|A|, |B|))``.
    """
    smaller = min(size_a, size_b)
    if smaller <= 0:
        return 0.0
    return min(1.0, j * (size_a + size_b) / ((1.0 + j) * smaller))


def repeated_lines(texts: Iterable[str], *, min_documents: int = 3, min_chars: int = 20) -> set[int]:
    """Keys of the lines (at least ``min_chars`` long) that occur in ``min_documents`` or more of ``texts``."""
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update({line_key(line) for line in text.splitlines() if len(line.strip()) >= min_chars})
    return {key for key, n in counts.items() if n >= min_documents}


def shingles_without_lines(text: str, repeated: set[int], *, size: int = 5) -> np.ndarray:
    """Sorted distinct word-shingle hashes (``sh-v1``) of ``text`` without its repeated lines."""
    kept = "\n".join(line for line in text.splitlines() if line_key(line) not in repeated)
    found = shingle_hashes(kept, size=size)
    return np.unique(found) if found is not None else np.zeros(0, dtype=np.uint64)
