"""Corpus-wide repetition inside documents: boilerplate lines and repeated spans.

Both composites run inside the near-dedup stage's job
(:mod:`beam_pipeline.transforms.near_dedup`); the pure functions they call,
and the stripping that ``select`` applies, are in :mod:`beam_pipeline.dedup.repetition`.

* :class:`BoilerplateLines`: the documents' partitions -> a one-element
  PCollection holding the sorted tuple of ``lines-v1`` keys of lines that
  occur in more than ``min_repeats`` documents (each document counts a line
  once). One task per partition counts its documents' distinct lines and
  writes the (line key, documents) counts to spill files, one per bucket
  ``key % n``; one task per bucket sums them and keeps the frequent lines. The
  runner moves file names and the frequent keys, never a count per line (a
  ``CombinePerKey`` on line keys held up to a million keys per worker and
  handed every distinct line of a worker's share to it in one piece, which
  grew with the corpus). The set travels to the signature step as a side
  input: its memory is 8 bytes per boilerplate line on each worker (10 M
  lines = 80 MB).
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
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.dedup.repetition import countable_line_keys, word_windows
from beam_pipeline.hashing import sha256_bytes
from beam_pipeline.layers import arrow_table_bytes, join, read_partition_rows, write_bytes_atomic
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed
from beam_pipeline.transforms.layer_io import PartitionIndexes


class BoilerplateLines(beam.PTransform):
    """pbegin -> PCollection with exactly one tuple[int, ...] (sorted keys).

    ``document_paths`` are the partitions of the documents (any split works: a
    document is counted where it is); the spill files go under ``spill_directory``.
    """

    def __init__(self, document_paths: tuple[str, ...], spill_directory: str, min_repeats: int, min_chars: int):
        super().__init__()
        self._documents = tuple(document_paths)
        self._spill_directory = spill_directory
        self._min_repeats = min_repeats
        self._min_chars = min_chars

    def expand(self, pbegin):
        frequent = (
            pbegin
            | "Partitions" >> PartitionIndexes(len(self._documents))
            | "CountLinesAndSpill" >> beam.ParDo(_CountLinesFn(self._documents, self._spill_directory,
                                                               self._min_chars)).with_output_types(IntKeyed)
            | "GroupSpillsByBucket" >> beam.GroupByKey()
            | "MoreThanMinRepeats" >> beam.FlatMap(_frequent_lines, self._min_repeats).with_output_types(int)
            | "ToOneKey" >> beam.Map(lambda key: (0, key)).with_output_types(IntKeyed)
        )
        nothing = pbegin | "NoLines" >> beam.Create([(0, -1)]).with_output_types(IntKeyed)
        return (
            (frequent, nothing)
            | "WithEmpty" >> beam.Flatten()
            | "CollectKeys" >> beam.CombinePerKey(SortedKeysFn())
            | "Keys" >> beam.Values()
        )


LINE_COUNT = pa.schema([("key", pa.int64()), ("documents", pa.int64())])


def partition_line_counts(texts: Iterable[str], min_chars: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct line keys, number of documents holding each) over ``texts``."""
    per_document = [np.fromiter(countable_line_keys(text, min_chars), dtype=np.int64) for text in texts]
    if not per_document:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.unique(np.concatenate(per_document), return_counts=True)


class _CountLinesFn(beam.DoFn):
    """partition index -> (bucket, spill file of that bucket's (line key, documents) counts)."""

    def __init__(self, document_paths: tuple[str, ...], spill_directory: str, min_chars: int):
        self._documents = document_paths
        self._directory = spill_directory
        self._min_chars = min_chars

    def process(self, index: int) -> Iterator[tuple[int, str]]:
        texts = (row["text"] for row in read_partition_rows(self._documents[index], ["text"]))
        keys, counts = partition_line_counts(texts, self._min_chars)
        buckets = keys % len(self._documents)
        for bucket in np.unique(buckets).tolist():
            chosen = buckets == bucket
            data = arrow_table_bytes(pa.table({"key": keys[chosen], "documents": counts[chosen]}, schema=LINE_COUNT),
                                     compression="lz4")
            path = join(self._directory, f"lines-{index:05d}-{bucket:05d}-{sha256_bytes(data)[:24]}.parquet")
            write_bytes_atomic(path, data)
            yield bucket, path


def _frequent_lines(keyed: tuple[int, Iterable[str]], min_repeats: int) -> Iterator[int]:
    """(bucket, spill files) -> the bucket's line keys held by more than ``min_repeats`` documents."""
    tables = []
    for path in sorted(set(keyed[1])):
        with FileSystems.open(path) as f:
            tables.append(pq.read_table(f))
    table = pa.concat_tables(tables)
    keys, inverse = np.unique(table.column("key").to_numpy(), return_inverse=True)
    documents = np.bincount(inverse, weights=table.column("documents").to_numpy(), minlength=keys.size)
    yield from keys[documents > min_repeats].tolist()


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
