"""Corpus-wide repetition inside documents: boilerplate lines and repeated spans.

Both composites run inside the near-dedup stage's job
(:mod:`beam_pipeline.transforms.near_dedup`); the pure functions they call,
and the stripping that ``select`` applies, are in :mod:`beam_pipeline.dedup.repetition`.

* :class:`BoilerplateLines`: PCollection[document] -> a one-element
  PCollection holding the sorted tuple of ``lines-v1`` keys of lines that
  occur in more than ``min_repeats`` documents (each document counts a line
  once). Counting is a ``CombinePerKey(sum)`` on int line keys, so the
  shuffle carries one partial count per line and worker, never document ids.
  The set travels to the signature step as a side input: its memory is
  8 bytes per boilerplate line on each worker (10 M lines = 80 MB).
* :class:`RepeatedSpans`: PCollection[document] (of the high-risk sources
  only) -> PCollection[(doc_id, (start, end))] of character ranges to cut.
  Every window of ``min_words`` words is one shuffle record, so the cost is
  about one record per word of those sources (~10-20x their text): use it
  for small, high-risk sources (forums, templated pages, code), not for a
  whole web crawl.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np

from beam_pipeline.dedup.repetition import countable_line_keys, word_windows
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed


class BoilerplateLines(beam.PTransform):
    """PCollection[document dict] -> PCollection with exactly one tuple[int, ...] (sorted keys)."""

    def __init__(self, min_repeats: int, min_chars: int):
        super().__init__()
        self._min_repeats = min_repeats
        self._min_chars = min_chars

    def expand(self, documents):
        min_repeats, min_chars = self._min_repeats, self._min_chars
        frequent = (
            documents
            | "LineKeys" >> beam.FlatMap(lambda d: ((key, 1) for key in countable_line_keys(d["text"], min_chars)))
            .with_output_types(IntKeyed)
            | "CountDocumentsPerLine" >> beam.CombinePerKey(sum)
            | "MoreThanMinRepeats" >> beam.Filter(lambda kv: kv[1] > min_repeats)
            | "ToOneKey" >> beam.Map(lambda kv: (0, kv[0])).with_output_types(IntKeyed)
        )
        nothing = documents.pipeline | "NoLines" >> beam.Create([(0, -1)]).with_output_types(IntKeyed)
        return (
            (frequent, nothing)
            | "WithEmpty" >> beam.Flatten()
            | "CollectKeys" >> beam.CombinePerKey(SortedKeysFn())
            | "Keys" >> beam.Values()
        )


class SortedKeysFn(beam.CombineFn):
    """Non-negative ints -> their sorted tuple (negative placeholders are dropped)."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, key):
        if key >= 0:
            accumulator.append(key)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = []
        for accumulator in accumulators:
            merged.extend(accumulator)
        return merged

    def extract_output(self, accumulator):
        return tuple(sorted(set(accumulator)))


class RepeatedSpans(beam.PTransform):
    """PCollection[document dict] -> PCollection[(doc_id, (start, end))]: spans to cut.

    A window found in several documents is kept in the first of them by
    (source rank, missing date last, date, doc_id) and cut from the others;
    repeats inside one document are not counted (only across documents).
    """

    def __init__(self, min_words: int, seed: int):
        super().__init__()
        self._min_words = min_words
        self._seed = seed

    def expand(self, documents):
        return (
            documents
            | "Windows" >> beam.FlatMap(_windows, self._min_words, self._seed).with_output_types(IntKeyed)
            | "GroupByWindow" >> beam.GroupByKey()
            | "NonFirstOccurrences" >> beam.FlatMap(_non_first_occurrences).with_output_types(StrKeyed)
        )


def _windows(document: dict, size: int, seed: int) -> Iterator[tuple[int, tuple]]:
    hashes, starts, ends = word_windows(document["text"], size, seed)
    if not hashes.size:
        return
    _, first = np.unique(hashes, return_index=True)  # one occurrence per document
    first.sort()
    order = (document["source_rank"], document["date"] is None, document["date"] or "", document["doc_id"])
    for h, s, e in zip(hashes[first].tolist(), starts[first].tolist(), ends[first].tolist()):
        yield h, (order, s, e)


def _non_first_occurrences(keyed: tuple[int, Iterable[tuple]]) -> Iterator[tuple[str, tuple[int, int]]]:
    _, occurrences = keyed
    occurrences = list(occurrences)
    if len(occurrences) < 2:
        return
    first = min(o[0] for o in occurrences)
    for order, start, end in occurrences:
        if order != first:
            yield order[3], (start, end)
