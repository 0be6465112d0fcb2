"""The code-point helpers of the compiled scans (beam_pipeline/filters/code_points.py)."""

import random

import numpy as np

from beam_pipeline.filters.code_points import code_points, span_numbers


def plain_span_numbers(text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """A dict of the spans' strings: numbers in order of first occurrence, and each number's first span."""
    numbers: dict[str, int] = {}
    firsts: list[int] = []
    out = []
    for index, (start, end) in enumerate(spans):
        string = text[start:end]
        if string not in numbers:
            numbers[string] = len(numbers)
            firsts.append(index)
        out.append(numbers[string])
    return out, firsts


def assert_span_numbers(text: str, spans: list[tuple[int, int]]) -> None:
    starts = np.array([start for start, _ in spans], dtype=np.int64)
    ends = np.array([end for _, end in spans], dtype=np.int64)
    numbers, firsts = span_numbers(code_points(text), starts, ends)
    assert numbers.dtype == firsts.dtype == np.int64
    assert (numbers.tolist(), firsts.tolist()) == plain_span_numbers(text, spans), (text[:40], spans[:8])


def test_span_numbers_equal_a_dict_of_the_strings():
    rng = random.Random(7)
    alphabet = "ab é\u0301\U0001f600\ud800日"  # combining marks, astral and lone surrogate code points
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        spans = []
        for _ in range(rng.randrange(0, 40)):  # overlapping, empty and repeated spans
            start = rng.randrange(0, len(text) + 1)
            spans.append((start, rng.randrange(start, min(len(text), start + 6) + 1)))
        assert_span_numbers(text, spans)


def test_span_numbers_of_many_spans_that_share_slots():
    """Thousands of distinct and repeated strings: the table probes past occupied slots, and strings of one
    length whose hashes may meet are told apart by their code points."""
    words = [f"w{i % 1_777}" for i in range(20_000)] + ["ab", "ba", "a", "b", "", "abc", "acb"]
    text = " ".join(words)
    spans, at = [], 0
    for word in words:
        spans.append((at, at + len(word)))
        at += len(word) + 1
    assert_span_numbers(text, spans)
    assert_span_numbers("", [])
