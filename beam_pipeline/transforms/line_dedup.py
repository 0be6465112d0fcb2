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
* :class:`RepeatedSpans`: the documents' partitions (of the high-risk
  sources only) -> (partition, spill file) of the character ranges to cut,
  as ``span`` keyed records by doc_id. One task per partition spills every
  window of ``min_words`` words of its documents (hash, document order,
  offsets) to the bucket ``hash % n``; one task per bucket finds the windows
  of several documents and spills the ranges to cut to the partition of
  their doc_id. The runner moves file names. The cost is about one spilled
  record per word of those sources (~10-20x their text, on disk): use it
  for small, high-risk sources (forums, templated pages, code), not for a
  whole web crawl.
"""
from __future__ import annotations

import io
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_pipeline.dedup.repetition import countable_line_keys, word_windows
from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import arrow_table_bytes, read_partition_rows, read_segment, write_spill_blocks
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.layer_io import GroupSpillFiles, PartitionIndexes
from beam_pipeline.transforms.lsh_files import keyed_record, read_spill_table, write_keyed_spills, \
    write_table_spills

#: The kind of the keyed records of the spans to cut (read by near dedup's assembly).
SPAN = "span"


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
        blocks = []
        for bucket in np.unique(buckets).tolist():
            chosen = buckets == bucket
            blocks.append((bucket, arrow_table_bytes(
                pa.table({"key": keys[chosen], "documents": counts[chosen]}, schema=LINE_COUNT), compression="lz4")))
        yield from write_spill_blocks(self._directory, f"lines-{index:05d}", blocks)


def _frequent_lines(keyed: tuple[int, Iterable[str]], min_repeats: int) -> Iterator[int]:
    """(bucket, spill files) -> the bucket's line keys held by more than ``min_repeats`` documents."""
    table = pa.concat_tables([pq.read_table(io.BytesIO(read_segment(path))) for path in sorted(set(keyed[1]))])
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
    """pbegin -> PCollection[(partition, spill file of ``span`` keyed records)]: the spans to cut.

    A window found in several documents of ``sources`` is kept in the first of
    them by (source rank, missing date last, date, doc_id) and cut from the
    others; repeats inside one document are not counted (only across
    documents). The records (:data:`~beam_pipeline.transforms.lsh_files.KEYED_RECORD`,
    key doc_id, value (start, end)) go to the partition of their doc_id.
    """

    def __init__(self, document_paths: tuple[str, ...], sources: Iterable[str], min_words: int, seed: int,
                 spill_directory: str):
        super().__init__()
        self._documents = tuple(document_paths)
        self._sources = tuple(sorted(sources))
        self._min_words = min_words
        self._seed = seed
        self._spill_directory = spill_directory

    def expand(self, pbegin):
        count = len(self._documents)
        return (
            pbegin
            | "Partitions" >> PartitionIndexes(count)
            | "SpillWindows" >> beam.ParDo(_SpillWindowsFn(
                self._documents, self._sources, self._min_words, self._seed, self._spill_directory))
            .with_output_types(IntKeyed)
            | "GroupSpillsByWindowBucket" >> GroupSpillFiles()
            | "SpillNonFirstOccurrences" >> beam.ParDo(_NonFirstOccurrencesFn(self._spill_directory, count))
            .with_output_types(IntKeyed)
        )


#: One window of ``min_words`` words of one document, on its way to the bucket of its hash:
#: the document's order (rank, no date, date, doc_id) and the window's character range.
WINDOW_RECORD = pa.schema([
    ("hash", pa.int64()),
    ("source_rank", pa.int32()),
    ("no_date", pa.bool_()),
    ("date", pa.string()),
    ("doc_id", pa.string()),
    ("start", pa.int64()),
    ("end", pa.int64()),
])
_WINDOW_ORDER = ["hash", "source_rank", "no_date", "date", "doc_id", "start"]


def document_windows(document: dict, size: int, seed: int) -> dict[str, np.ndarray]:
    """The first occurrence in ``document`` of each distinct window of ``size`` words, as columns."""
    hashes, starts, ends = word_windows(document["text"], size, seed)
    _, first = np.unique(hashes, return_index=True)  # one occurrence per document
    first.sort()
    return {"hash": hashes[first].astype(np.int64), "start": starts[first], "end": ends[first]}


class _SpillWindowsFn(beam.DoFn):
    """partition index -> (bucket, spill file) of the windows of its documents of ``sources``."""

    def __init__(self, document_paths: tuple[str, ...], sources: tuple[str, ...], min_words: int, seed: int,
                 spill_directory: str):
        self._documents = document_paths
        self._sources = frozenset(sources)
        self._min_words = min_words
        self._seed = seed
        self._spill_directory = spill_directory

    def process(self, index: int) -> Iterator[tuple[int, str]]:
        columns = ["doc_id", "source", "source_rank", "date", "text"]
        tables = []
        for document in read_partition_rows(self._documents[index], columns):
            if document["source"] not in self._sources:
                continue
            windows = document_windows(document, self._min_words, self._seed)
            n = windows["hash"].size
            if n:
                tables.append(pa.table({
                    "hash": windows["hash"], "source_rank": pa.array([document["source_rank"]] * n, pa.int32()),
                    "no_date": pa.array([document["date"] is None] * n, pa.bool_()),
                    "date": pa.array([document["date"] or ""] * n, pa.string()),
                    "doc_id": pa.array([document["doc_id"]] * n, pa.string()),
                    "start": windows["start"], "end": windows["end"]}, schema=WINDOW_RECORD))
        if not tables:
            return
        table = pa.concat_tables(tables)
        yield from write_table_spills(table, table.column("hash").to_numpy() % len(self._documents), _WINDOW_ORDER,
                                      self._spill_directory, f"windows-{index:05d}")


class _NonFirstOccurrencesFn(beam.DoFn):
    """(bucket, window spill files) -> (partition, spill file) of the ranges to cut: every occurrence
    of a window but the first (in document order) of the windows found in several documents."""

    def __init__(self, spill_directory: str, partitions: int):
        self._spill_directory = spill_directory
        self._partitions = partitions

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator[tuple[int, str]]:
        bucket, paths = keyed
        table = read_spill_table(paths, WINDOW_RECORD, _WINDOW_ORDER)
        if table is None:
            return
        hashes = table.column("hash").to_numpy()
        # Rows are sorted by (hash, document order): the first row of a run of equal hashes is the
        # first occurrence; every other row of a run of two or more is a range to cut.
        first_of_run = np.concatenate(([True], hashes[1:] != hashes[:-1]))
        cut = table.filter(pa.array(~first_of_run))
        by_partition: dict[int, list[dict]] = {}
        for doc_id, start, end in zip(*(cut.column(c).to_pylist() for c in ("doc_id", "start", "end"))):
            by_partition.setdefault(bucket_of(doc_id, self._partitions), []).append(
                keyed_record(doc_id, SPAN, (start, end)))
        yield from write_keyed_spills(by_partition, self._spill_directory, f"{SPAN}-{bucket:05d}")
