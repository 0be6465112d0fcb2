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
from beam_pipeline.filters.code_points import code_point_table, code_points, span_numbers


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
    points = code_points(lowered)
    starts, ends = _word_spans(points, code_point_table(r"\w"))
    ids, firsts = span_numbers(points, starts, ends)
    distinct = [lowered[start:end] for start, end in zip(starts[firsts].tolist(), ends[firsts].tolist())]
    return distinct, ids


@compiled
def _word_spans(points, is_word):  # pragma: no cover - compiled; tests compare it with findall
    """(starts, ends) of the words of ``points``: maximal runs of code points ``c`` with ``is_word[c]``."""
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
    return starts[:n_words], ends[:n_words]
