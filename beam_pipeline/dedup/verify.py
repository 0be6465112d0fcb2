"""Prototype verification rules for near-duplicate candidates: pure functions over shingle sets.

Not wired into the stage yet (``beam_pipeline/transforms/near_dedup.py``
verifies by Jaccard >= ``verify_threshold``); ``bench/near_dup_recall.py``
scores these rules offline on its labeled set so the stage can adopt one.

Today's rule misses copies whose 5-gram Jaccard with the original is 0.4-0.7
although one text is almost all inside the other: a truncated copy (the first
half of a page has J = 0.5 with the page), a page wrapped in a site template
or with inserted ad blocks. Two measures separate those from look-alikes:

* **containment** ``|A & B| / min(|A|, |B|)`` (Broder, "On the resemblance
  and containment of documents", SEQUENCES 1997): near 1 when one text is
  inside the other, whatever their lengths;
* **shingles without repeated lines** (the idea of line-level dedup in C4 and
  Gopher/MassiveText): lines that occur in several documents of the corpus
  (menus, footers, templates, ad blocks, quoted boilerplate) are removed
  before shingling, so two pages of one site do not meet on their template
  and a wrapped copy meets its original on the content alone.

:func:`two_tier` accepts a pair at Jaccard >= 0.7 as today, and a second tier
of Jaccard >= 0.4 only when one text is >= 80% inside the other; texts with
fewer than 50 shingles (a few sentences) need Jaccard >= 0.9 (short texts are
handled apart: a short text inside a long one is a quote, not a copy).
"""
from __future__ import annotations

import collections
from typing import Iterable

import numpy as np
import xxhash

from beam_pipeline.dedup.shingling import shingle_hashes

HIGH_JACCARD = 0.7
LOW_JACCARD = 0.4
MIN_CONTAINMENT = 0.8
MIN_SHINGLES = 50
SHORT_JACCARD = 0.9


def _overlap(a: np.ndarray, b: np.ndarray) -> int:
    """|A & B| of two sorted arrays of distinct shingle hashes."""
    if not len(a) or not len(b):
        return 0
    return int(np.intersect1d(a, b, assume_unique=True).size)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|A & B| / |A | B| (0 for two empty sets)."""
    both = _overlap(a, b)
    union = len(a) + len(b) - both
    return both / union if union else 0.0


def containment(a: np.ndarray, b: np.ndarray) -> float:
    """|A & B| / min(|A|, |B|): how much of the smaller text is inside the larger (Broder 1997)."""
    smaller = min(len(a), len(b))
    return _overlap(a, b) / smaller if smaller else 0.0


def two_tier(a: np.ndarray, b: np.ndarray, *, high: float = HIGH_JACCARD, low: float = LOW_JACCARD,
             min_containment: float = MIN_CONTAINMENT, min_shingles: int = MIN_SHINGLES,
             short_jaccard: float = SHORT_JACCARD) -> bool:
    """Whether a candidate pair is a near duplicate (module docstring)."""
    both = _overlap(a, b)
    union = len(a) + len(b) - both
    j = both / union if union else 0.0
    if min(len(a), len(b)) < min_shingles:
        return j >= short_jaccard
    if j >= high:
        return True
    return j >= low and both / min(len(a), len(b)) >= min_containment


def line_key(line: str) -> int:
    """The key of a line: xxh3-64 of its whitespace-collapsed, casefolded text."""
    return xxhash.xxh3_64_intdigest(" ".join(line.casefold().split()).encode("utf-8"))


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
