"""spaCy's rule-based ``sentencizer``, reproduced without spaCy: sentence counts of lines and documents.

datatrove's C4 and FineWeb filters count sentences with spaCy's ``sentencizer``
(``spacy/pipeline/sentencizer.pyx``: ``predict``) over ``spacy.blank("en")``'s tokens. It starts a
sentence at every token that is neither punctuation nor sentence-final and follows a sentence-final
one; here each token is classed F, P or W (:func:`.reference_tokenizer.token_class`, kept per interned
token by :data:`.reference_tokenizer.VOCABULARY`) and the breaks are the matches of ``F[FP]*W`` in the
classes. :func:`sentence_count` counts one line, :func:`sentence_total` many at once from the chunk
cache, and :func:`line_sentences` the chosen lines of a document from its token ids (a compiled loop),
for :mod:`.heuristics_reference`. ``tests/test_heuristics_reference.py`` checks the counts against
spaCy's on the reference fixture.
"""

from __future__ import annotations

import re
from itertools import repeat

import numpy as np

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.filters import reference_tokenizer
from beam_pipeline.filters.code_points import code_points
from beam_pipeline.filters.reference_affixes import RUNS
from beam_pipeline.filters.reference_tokenizer import SENTENCE_PUNCT, token_class, tokens

_SENTENCE_BREAK = re.compile("F[FP]*W")


def _chunk_classes(chunks: list[str]) -> list[str]:
    """The token classes of each chunk (made when the chunk is tokenized)."""
    try:
        return list(map(reference_tokenizer.VOCABULARY.classes.__getitem__, chunks))
    except KeyError:  # a chunk not tokenized yet
        reference_tokenizer.VOCABULARY.fill(chunks)
        return list(map(reference_tokenizer.VOCABULARY.classes.__getitem__, chunks))


def _one_sentence(line: str) -> bool:
    """True when ``line`` has no sentence-final character but maybe its last one (see sentence_count):
    an ASCII line can only have . ! ? (str.find); another one is a set check of its characters (four times
    faster than searching the class of every sentence-final character with a regex)."""
    end = len(line) - 1
    if line.isascii():
        return line.find(".", 0, end) < 0 and line.find("!", 0, end) < 0 and line.find("?", 0, end) < 0
    return SENTENCE_PUNCT.isdisjoint(line[:end])


def sentence_total(lines: list[str]) -> int:
    """``sum(map(sentence_count, lines))`` in one pass: the lines joined by `` \\n `` and cut at single
    spaces, every piece's token classes taken from the chunk cache (a separator ``\\n`` and a piece not
    cached get ``|``, which no sentence break spans; the empty piece between two spaces is a whitespace
    token, W), and the class string searched once. When some piece is not a cached chunk (a tab, a chunk
    not tokenized yet) or a line ends with a space, :func:`_sentence_total_by_line` counts."""
    if not lines:
        return 0
    joined = " \n ".join(lines)
    if not joined.endswith(" ") and "  \n" not in joined:  # a line's last single space is no token
        classes = "".join(map(reference_tokenizer.VOCABULARY.classes.get, joined.split(" "), repeat("|")))
        if classes.count("|") == len(lines) - 1:  # only the separators: every piece was cached
            return len(lines) + len(_SENTENCE_BREAK.findall(classes))
    return _sentence_total_by_line(lines)


def _sentence_total_by_line(lines: list[str]) -> int:
    """``sum(map(sentence_count, lines))`` in one pass: the token classes of every line, joined by ``|``
    (which no sentence break spans), searched once; lines of single-spaced chunks take their classes
    from the chunk cache."""
    classes: list[str] = []
    cached = reference_tokenizer.VOCABULARY.classes.__getitem__
    for line in lines:
        if _one_sentence(line):
            continue  # one sentence (see sentence_count)
        chunks = line.split()
        if " ".join(chunks) == line:
            try:
                classes.append("".join(map(cached, chunks)))
            except KeyError:  # a chunk not classed yet
                classes.append("".join(_chunk_classes(chunks)))
        else:
            classes.append("".join(_spaced_classes(line, _chunk_classes(chunks))))
    return len(lines) + len(_SENTENCE_BREAK.findall("|".join(classes)))


def _spaced_classes(text: str, chunk_classes: list[str]):
    """The token classes of ``text`` from its chunks' classes (``text.split()`` order) and its whitespace
    runs: a run left after spaCy's one separating space is whitespace tokens, class W (:func:`tokens`);
    one W stands for several, since a W cannot start a sentence break."""
    classes = iter(chunk_classes)
    for index, run in enumerate(RUNS.findall(text)):
        if run[0].isspace():
            if len(run) > 1 or index == 0 or run != " ":
                yield "W"
        else:
            yield next(classes)


_FINAL_CHARACTER = re.compile("[" + "".join(re.escape(c) for c in sorted(SENTENCE_PUNCT)) + "]")


def sentence_count(text: str) -> int:
    """Sentences of spaCy's ``sentencizer`` in ``text`` (datatrove: ``len(split_into_sentences(text))``).

    The sentencizer starts a sentence at the first token and at every token
    that is neither punctuation nor a sentence-final character (``.``, ``!``,
    ``?``, ``。`` ...) and follows a sentence-final character: with tokens
    classed F (final), P (punctuation) and W (other), one sentence more per
    ``F[FP]*W``. datatrove's splitting returns one part for a text without
    tokens, so the count is at least 1. A text whose only sentence-final
    character is its last one is one sentence.
    """
    if _FINAL_CHARACTER.search(text, 0, len(text) - 1) is None:
        return 1
    chunks = text.split()
    if " ".join(chunks) == text:  # single spaces only: no whitespace tokens
        classes = "".join(_chunk_classes(chunks))
    else:
        classes = "".join(map(token_class, tokens(text)))
    return 1 + len(_SENTENCE_BREAK.findall(classes))


# --- sentences of chosen lines, from a document's tokens ----------------------------------

#: A token's sentence class (:func:`token_class`) as a number, for the compiled loop below.
SENTENCE_CODES = {"W": 0, "P": 1, "F": 2}


def _separator_table() -> np.ndarray:
    """Per code point up to U+3000: 0 for a character of a chunk, 1 for whitespace (``str.split``'s
    separators), 2 for a line break (``str.splitlines``'; each is whitespace too). No code point above
    U+3000 is either (tested)."""
    size = 0x3001
    space = np.fromiter((chr(code).isspace() for code in range(size)), np.uint8, size)
    breaks = np.fromiter((len(f"a{chr(code)}a".splitlines()) == 2 for code in range(size)), np.uint8, size)
    return space + breaks


_SEPARATORS = _separator_table()


def line_sentences(text: str, numbers: list[int], classes: np.ndarray, chunk_ends: np.ndarray) -> int | None:
    """``sum(sentence_count(line.strip()) for the lines of text.splitlines() numbered numbers)``, from the
    document's tokens instead of the lines' strings: ``classes`` are the sentence classes
    (:data:`SENTENCE_CODES`) of the tokens of ``text.split()``, ``chunk_ends`` where each chunk's tokens end
    (:meth:`_Vocabulary.tokens_of`). None when the chunks do not match ``text`` (then count from strings).

    Why: the C4 sentence count otherwise looks every kept chunk up in the cache a second time (a dict lookup
    per chunk, most of the count's cost); the tokens are known already. A compiled loop walks the text's
    code points once, numbers its lines and chunks as ``splitlines`` and ``split`` do, and runs the
    sentencizer's rule (:func:`sentence_count`) over the tokens of the chosen lines; whitespace between two
    chunks that is not one space is a whitespace token (class W), as in :func:`tokens`.
    """
    if not numbers:
        return 0
    chosen = np.zeros(max(numbers) + 1, np.uint8)
    chosen[numbers] = 1
    breaks = _line_breaks(code_points(text), _SEPARATORS, chosen, np.ascontiguousarray(classes, np.uint8), chunk_ends)
    return None if breaks < 0 else len(numbers) + breaks


@compiled
def _line_breaks(points, separators, chosen, classes, chunk_ends):  # pragma: no cover - compiled; tests compare
    """Sentence breaks (``F[FP]*W`` in token classes, :func:`sentence_count`) inside the chosen lines (see
    :func:`line_sentences`), or -1 when the text has another number of chunks than ``chunk_ends``."""
    n_chosen = chosen.shape[0]
    n_chunks = chunk_ends.shape[0]
    line = 0
    chunk = 0
    breaks = 0
    pending = False  # a sentence-final token seen, then only punctuation
    in_chunk = False
    line_start = True
    gap = 0  # whitespace characters since the last chunk
    last_space = 0
    for i in range(points.shape[0]):
        code = points[i]
        kind = separators[code] if code < separators.shape[0] else 0
        if kind == 0:
            if in_chunk:
                continue
            in_chunk = True
            if chunk >= n_chunks:
                return -1
            if line < n_chosen and chosen[line]:
                if not line_start and not (gap == 1 and last_space == 32) and pending:
                    breaks += 1  # a whitespace token (W) after a sentence-final one
                    pending = False
                for token in range(chunk_ends[chunk - 1] if chunk else 0, chunk_ends[chunk]):
                    if classes[token] == 2:
                        pending = True
                    elif classes[token] == 0 and pending:
                        breaks += 1
                        pending = False
            chunk += 1
            line_start = False
        else:
            if in_chunk:
                in_chunk = False
                gap = 0
            gap += 1
            last_space = code
            if kind == 2 and not (code == 10 and i and points[i - 1] == 13):  # "\r\n" is one line break
                line += 1
                line_start = True
                pending = False
    return breaks if chunk == n_chunks else -1
