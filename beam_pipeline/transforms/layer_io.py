"""Reading and writing layer outputs: Parquet partitions keyed by doc_id.

``WriteLayerOutput`` routes each row to partition ``xxh3(sort key) % n`` with a
``GroupByKey`` on the int partition index, sorts the partition, and writes it
atomically (see :mod:`beam_pipeline.layers`). The output is therefore the same
bytes whatever the runner, the parallelism or the bundle boundaries.
``ReadLayerOutput`` reads the partitions a committed ledger lists.
"""
from __future__ import annotations

from typing import Callable, Iterable

import apache_beam as beam
import pyarrow as pa

from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import read_partition_rows, write_partition
from beam_pipeline.transforms.keys import IntKeyed


class WriteLayerOutput(beam.PTransform):
    """PCollection[dict] -> PCollection[partition sidecar dict], files written under ``directory``."""

    def __init__(self, directory: str, schema: pa.Schema, num_partitions: int,
                 sort_key: Callable[[dict], tuple] = lambda row: (row["doc_id"], row.get("file") or "",
                                                                  row.get("position") or 0),
                 partition_key: Callable[[dict], str] = lambda row: row["doc_id"]):
        super().__init__()
        self._directory = directory
        self._schema = schema
        self._num_partitions = num_partitions
        self._sort_key = sort_key
        self._partition_key = partition_key

    def expand(self, rows):
        n = self._num_partitions
        partition_key = self._partition_key
        return (
            rows
            | "KeyByPartition" >> beam.Map(lambda row: (bucket_of(partition_key(row), n), row)).with_output_types(IntKeyed)
            | "GroupPartitions" >> beam.GroupByKey()
            | "WritePartition" >> beam.MapTuple(self._write)
        )

    def _write(self, index: int, rows: Iterable[dict]) -> dict:
        ordered = sorted(rows, key=self._sort_key)
        return write_partition(self._directory, index, self._num_partitions, ordered, self._schema)


class ReadLayerOutput(beam.PTransform):
    """Partition paths of a committed layer output -> PCollection[dict] of its rows."""

    def __init__(self, part_paths: list[str], columns: list[str] | None = None):
        super().__init__()
        self._part_paths = part_paths
        self._columns = columns

    def expand(self, pbegin):
        columns = self._columns
        return (
            pbegin
            | "PartPaths" >> beam.Create(self._part_paths)
            | "SpreadParts" >> beam.Reshuffle()
            | "ReadRows" >> beam.FlatMap(lambda path: read_partition_rows(path, columns))
        )
