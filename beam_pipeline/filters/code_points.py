"""Texts as arrays of code points, and per-code-point tables made by a regex, for compiled scans.

Several scorers find the places where a regex can match with a compiled loop
over a text's code points (:mod:`.pii`'s number runs and IBAN starts,
:mod:`.lowered_words`' words) instead of the regex's attempt at every
position. The loop reads a bool per code point; the table is made by running
the regex itself over every code point once, so "matches ``\\w``" means what
``re`` means by it, including every Unicode letter and digit.
"""

from __future__ import annotations

import functools
import re

import numpy as np

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
