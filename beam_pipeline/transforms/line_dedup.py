"""Corpus-wide repetition inside documents: boilerplate lines and repeated spans.

Both composites run inside the near-dedup stage
(:mod:`beam_pipeline.transforms.near_dedup`); the pure functions they call,
and the stripping that ``select`` applies, are in :mod:`beam_pipeline.dedup.repetition`.
Both read the documents' partitions themselves (one task per partition, once
the layers of ``after`` are committed), so no text goes through the runner:

* :class:`RepeatedLines`: -> a one-element PCollection holding two sorted
  tuples of ``lines-v1`` keys: the lines that occur in more than
  ``min_repeats`` documents (boilerplate; each document counts a line once)
  and those in more than ``signature_min_repeats`` but not ``min_repeats``
  (left out of signatures only)::

      partition i -> (line key, documents of partition i holding it)
        -> CombinePerKey(sum) -> keys above the lower bound -> CombinePerKey(two sorted tuples) on one int key

  The task of a partition counts its documents' distinct lines with numpy
  and emits one partial count per distinct line of the partition (the
  map-side combine, done where it is cheapest); the runner sums them per
  key. The tuples travel to the signing step as a side input: 8 bytes per
  boilerplate line on each worker (10 M lines = 80 MB).
* :class:`RepeatedLines`: the same count, two classes (what the near-dedup
  stage reads): the boilerplate keys, and the keys of lines in more than
  ``signature_min_repeats`` documents but not boilerplate (template lines,
  left out of signatures only).
* :class:`RepeatedSpans`: -> PCollection[(doc_id, (start, end))], the
  character ranges to cut::

      partition i -> (window hash, (source rank, no date, date, doc_id, start, end))
        -> GroupByKey(window hash) -> every occurrence but the first -> (doc_id, range)

  for the documents of ``sources`` only. The cost is one grouped element
  per distinct window of ``min_words`` words of those documents (about one
  per word): use it for small, high-risk sources (forums, templated pages,
  code), not for a whole web crawl.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.typehints import Tuple

from beam_pipeline.dedup.repetition import countable_line_keys, word_windows
from beam_pipeline.transforms.gate import DocumentPartitions
from beam_pipeline.transforms.keys import StrKeyed
from beam_pipeline.transforms.layer_io import PartitionIndexes


def in_sorted(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.isin(values, keys)`` for ``keys`` sorted ascending (the side input's key tuples, as arrays), by
    binary search: O(len(values) log len(keys)) per call.

    ``np.isin`` sorts (numpy 2.x: hashes, then sorts) both arrays on every call, so with the corpus's
    template keys (thousands of lines in more than ``signature_min_repeats`` documents) it cost more than
    the rest of signing a document together (2026-12-07, profiled: 14 of 62 CPU seconds of the stage on 50 MB of
    the bench corpus, ``bench/results/near-dedup-defaults-cost-20261207.md``).
    """
    if not keys.size or not values.size:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(keys, values), keys.size - 1)
    return keys[at] == values


class RepeatedLines(beam.PTransform):
    """pbegin -> PCollection with at most one (boilerplate keys, signature keys), two sorted tuples:
    the lines in more than ``min_repeats`` documents, and those in more than ``signature_min_repeats``
    but not in more than ``min_repeats`` (read it as ``AsSingleton(lines, default_value=((), ()))``).

    One count serves both: the near-dedup
    stage strips boilerplate lines from the text and the signatures, and
    leaves the second class out of a document's signature only
    (:func:`beam_pipeline.transforms.near_dedup_signing.sign_document`).
    """

    def __init__(
        self,
        documents: "DocumentPartitions | Iterable[str]",
        min_repeats: int,
        signature_min_repeats: int,
        min_chars: int,
        after: Iterable = (),
    ):
        super().__init__()
        self._documents = DocumentPartitions.of(documents)
        self._min_repeats = min_repeats
        self._signature_min_repeats = signature_min_repeats
        self._min_chars = min_chars
        self._after = tuple(after)

    def expand(self, pbegin):
        min_repeats, lowest = self._min_repeats, min(self._min_repeats, self._signature_min_repeats)
        return (
            pbegin
            | "CountLines" >> _CountLines(self._documents, self._min_chars, self._after)
            | "MoreThanLowestRepeats"
            >> beam.FlatMap(lambda summed: _key_classes(summed[1], lowest, min_repeats)).with_output_types(
                Tuple[int, Tuple[int, bool]]
            )
            | "CollectKeys" >> beam.CombinePerKey(SortedKeyClassesFn())
            | "Keys" >> beam.Values()
        )


#: Line keys are summed in this many buckets (``key % LINE_BUCKETS``), each a block of numpy arrays.
LINE_BUCKETS = 16


class _CountLines(beam.PTransform):
    """pbegin -> (bucket, (line keys, documents holding each)): each partition's partial counts, as one
    block of numpy arrays per bucket ``key % LINE_BUCKETS``, summed per bucket by the runner
    (``CombinePerKey`` over blocks: one grouped element per partition and bucket instead of one per
    distinct line, which cost ~2.5 CPU s per 159,000 lines on the DirectRunner; bench/results/near-dedup-*)."""

    def __init__(self, documents: DocumentPartitions, min_chars: int, after: tuple):
        super().__init__()
        self._documents = documents
        self._min_chars = min_chars
        self._after = after

    def expand(self, pbegin):
        documents, min_chars = self._documents, self._min_chars
        return (
            pbegin
            | "Partitions" >> PartitionIndexes(documents.count, self._after)
            | "CountLinesPerPartition"
            >> beam.FlatMap(lambda index: _partition_count_blocks(documents, index, min_chars)).with_output_types(
                Tuple[int, Any]
            )
            | "SumPerLineBucket" >> beam.CombinePerKey(SumCountBlocksFn())
        )


def partition_line_counts(texts: Iterable[str], min_chars: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct line keys, number of documents holding each) over ``texts``."""
    per_document = [np.fromiter(countable_line_keys(text, min_chars), dtype=np.int64) for text in texts]
    if not per_document:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.unique(np.concatenate(per_document), return_counts=True)


def _partition_count_blocks(
    documents: DocumentPartitions, index: int, min_chars: int
) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """(bucket, (sorted distinct line keys, documents holding each)) of one partition (the documents its
    gate keeps), per non-empty bucket."""
    rows = documents.rows(index, ["text"], where="near_dedup lines gate")
    texts = (row["text"] or "" for row in rows)  # no text: signing dead-letters it
    keys, counts = partition_line_counts(texts, min_chars)
    buckets = keys % LINE_BUCKETS  # line keys are non-negative
    for bucket in np.unique(buckets).tolist():
        chosen = buckets == bucket
        yield bucket, (keys[chosen], counts[chosen])


class SumCountBlocksFn(beam.CombineFn):
    """Blocks (sorted distinct keys, counts) -> one block: the distinct keys of all, their counts summed."""

    def create_accumulator(self):
        return (np.empty(0, np.int64), np.empty(0, np.int64))

    def add_input(self, accumulator, block):
        return self.merge_accumulators([accumulator, block])

    def merge_accumulators(self, accumulators):
        accumulators = list(accumulators)
        keys = np.concatenate([a[0] for a in accumulators]).astype(np.int64, copy=False)
        counts = np.concatenate([a[1] for a in accumulators]).astype(np.int64, copy=False)
        if not keys.size:
            return keys, counts
        order = np.argsort(keys, kind="stable")
        keys, counts = keys[order], counts[order]
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        return keys[starts], np.add.reduceat(counts, starts)

    def extract_output(self, accumulator):
        return accumulator


def _key_classes(block: tuple[np.ndarray, np.ndarray], lowest: int, min_repeats: int) -> Iterator[tuple]:
    """(0, (key, in more than ``min_repeats`` documents)) per key of a summed block in more than ``lowest``."""
    keys, counts = block
    kept = counts > lowest
    for key, first in zip(keys[kept].tolist(), (counts[kept] > min_repeats).tolist()):
        yield 0, (key, first)


class SortedKeyClassesFn(beam.CombineFn):
    """(key, in the first class) -> (sorted keys of the first class, sorted keys of the second)."""

    def create_accumulator(self):
        return set()

    def add_input(self, accumulator, entry):
        accumulator.add(entry)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = set()
        for accumulator in accumulators:
            merged |= accumulator
        return merged

    def extract_output(self, accumulator):
        return (
            tuple(sorted(key for key, first in accumulator if first)),
            tuple(sorted(key for key, first in accumulator if not first)),
        )


class RepeatedSpans(beam.PTransform):
    """pbegin -> PCollection[(doc_id, (start, end))]: the spans to cut.

    A window found in several documents of ``sources`` is kept in the first of
    them by (source rank, missing date last, date, doc_id) and cut from the
    others; repeats inside one document are not counted (only across
    documents). A document may get several ranges; they overlap (merged by
    the consumer, :func:`~beam_pipeline.dedup.repetition.merge_ranges`).
    """

    def __init__(
        self,
        documents: "DocumentPartitions | Iterable[str]",
        sources: Iterable[str],
        min_words: int,
        seed: int,
        after: Iterable = (),
    ):
        super().__init__()
        self._documents = DocumentPartitions.of(documents)
        self._sources = tuple(sorted(sources))
        self._min_words = min_words
        self._seed = seed
        self._after = tuple(after)

    def expand(self, pbegin):
        return (
            pbegin
            | "Partitions" >> PartitionIndexes(self._documents.count, self._after)
            | "Windows"
            >> beam.ParDo(_WindowsFn(self._documents, self._sources, self._min_words, self._seed)).with_output_types(
                Tuple[int, Tuple[int, bool, str, str, int, int]]
            )
            | "GroupByWindow" >> beam.GroupByKey()
            | "NonFirstOccurrences" >> beam.FlatMap(non_first_occurrences).with_output_types(StrKeyed)
        )


def document_windows(document: dict, size: int, seed: int) -> dict[str, np.ndarray]:
    """The first occurrence in ``document`` of each distinct window of ``size`` words, as columns."""
    hashes, starts, ends = word_windows(document["text"], size, seed)
    _, first = np.unique(hashes, return_index=True)  # one occurrence per document
    first.sort()
    return {"hash": hashes[first].astype(np.int64), "start": starts[first], "end": ends[first]}


class _WindowsFn(beam.DoFn):
    """partition index -> (window hash, occurrence) for the windows of its documents of ``sources``.

    An occurrence is (source rank, no date, date or "", doc_id, start, end): its first
    five fields are the order in which the first occurrence of a window is kept.
    """

    def __init__(self, documents: DocumentPartitions, sources: tuple[str, ...], min_words: int, seed: int):
        self._documents = documents
        self._sources = frozenset(sources)
        self._min_words = min_words
        self._seed = seed

    def process(self, index: int) -> Iterator[tuple[int, tuple]]:
        columns = ["doc_id", "source", "source_rank", "date", "text"]
        for document in self._documents.rows(index, columns, where="near_dedup spans gate"):
            if document["source"] not in self._sources or not document["text"]:
                continue
            windows = document_windows(document, self._min_words, self._seed)
            order = (document["source_rank"], document["date"] is None, document["date"] or "", document["doc_id"])
            for key, start, end in zip(*(windows[c].tolist() for c in ("hash", "start", "end"))):
                yield key, (*order, start, end)


def non_first_occurrences(keyed: tuple[int, Iterable[tuple]]) -> Iterator[tuple[str, tuple[int, int]]]:
    """(window hash, occurrences) -> (doc_id, (start, end)) of every occurrence but the first in order."""
    occurrences = sorted(keyed[1])
    for _rank, _no_date, _date, doc_id, start, end in occurrences[1:]:
        yield doc_id, (start, end)
