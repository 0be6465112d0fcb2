"""Reading and writing layer outputs: Parquet partitions keyed by doc_id.

``WriteLayerOutput`` routes each row to partition ``xxh3(sort key) % n`` with a
``GroupByKey`` on the int partition index, sorts the partition, and writes it
atomically (see :mod:`beam_pipeline.layers`). The output is therefore the same
bytes whatever the runner, the parallelism or the bundle boundaries.
``ReadLayerOutput`` reads the partitions a committed ledger lists.

Stages that only join layers on doc_id (the scorers and ``select``) need no
shuffle at all: every layer of a build has the same partition count and puts
a row in partition ``xxh3(doc_id) % n`` sorted by doc_id, so partition ``i``
of the documents and partition ``i`` of every annotation layer hold the same
doc_ids. :class:`PartitionInputs` merge-joins them (:func:`merge_join`), and
one task per partition (:class:`PartitionIndexes`) reads, processes and
writes partition ``i`` of its outputs itself (:class:`WrittenPartitions`).
A worker then holds one partition at a time, whatever the corpus size, and
the runner moves partition numbers, not text. Ingest, whose input is not
partitioned yet, shuffles through files instead (:class:`SpillByPartition`):
the worker that reads a record writes it to a spill file of its partition,
and only the file names go through the runner (docs/decisions.md, "Stages
that shuffle no text").
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Callable, Iterable, Iterator

import apache_beam as beam
import pyarrow as pa

from beam_pipeline.accounting import LOST_IN_JOIN
from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import join, read_partition_rows, remove_folder, table_bytes, write_partition, \
    write_spill_blocks
from beam_pipeline.transforms.keys import IntKeyed


class WriteLayerOutput(beam.PTransform):
    """PCollection[dict] -> PCollection[partition sidecar dict], files written under ``directory``."""

    def __init__(self, directory: str, schema: pa.Schema, num_partitions: int,
                 sort_key: Callable[[dict], tuple] | None = None,
                 partition_key: Callable[[dict], str] = lambda row: row["doc_id"]):
        super().__init__()
        self._directory = directory
        self._schema = schema
        self._num_partitions = num_partitions
        self._sort_key = sort_key or row_order
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
        return write_layer_partition(self._directory, index, self._num_partitions, rows, self._schema,
                                     self._sort_key)


def row_order(row: dict) -> tuple:
    """The order of rows inside a partition: doc_id, then the record's origin."""
    return row["doc_id"], row.get("file") or "", row.get("position") or 0


def write_layer_partition(directory: str, index: int, count: int, rows: Iterable[dict], schema: pa.Schema,
                          sort_key: Callable[[dict], tuple] = row_order) -> dict:
    """Sort one partition's rows and write it atomically (:func:`beam_pipeline.layers.write_partition`)."""
    return write_partition(directory, index, count, sorted(rows, key=sort_key), schema)


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


# --- partition-wise joins ------------------------------------------------------------

class WrittenPartitions:
    """A stage output its own tasks wrote, one partition per task: ``sidecars`` is the
    PCollection of the written partitions' sidecars. The driver adds no writer for it."""

    def __init__(self, sidecars):
        self.sidecars = sidecars


class PartitionIndexes(beam.PTransform):
    """pbegin -> the partition indexes ``0..count-1``, spread over the workers."""

    def __init__(self, count: int):
        super().__init__()
        self._count = count

    def expand(self, pbegin):
        return (pbegin
                | "Indexes" >> beam.Create(list(range(self._count))).with_output_types(int)
                | "SpreadIndexes" >> beam.Reshuffle())


def partition_index_of(path: str) -> tuple[int, int]:
    """(index, count) of a ``part-00003-of-00016.parquet`` path."""
    name = path.rsplit("/", 1)[-1]
    index, count = name[len("part-"):-len(".parquet")].split("-of-")
    return int(index), int(count)


@dataclasses.dataclass(frozen=True)
class PartitionInputs:
    """The documents and the annotation layers a stage joins on doc_id, partition by partition.

    ``documents`` and every entry of ``layers`` (name -> (partition paths, columns or
    None for all)) come from committed layers of the same build; they must have the
    same partition count, which :meth:`check` verifies before any job runs. Layers
    named in ``required`` hold a row for every document (exact and near dedup
    annotate all of them); a document without its row there is an error, never a
    silently absent score.
    """

    documents: tuple[str, ...]
    document_columns: tuple[str, ...] | None = None
    layers: tuple[tuple[str, tuple[str, ...], tuple[str, ...] | None], ...] = ()
    required: frozenset[str] = frozenset()

    @classmethod
    def of(cls, documents: list[str], document_columns: list[str] | None = None,
           layers: dict[str, tuple[list[str], list[str] | None]] | None = None,
           required: tuple[str, ...] = ()) -> "PartitionInputs":
        layers = layers or {}
        inputs = cls(tuple(documents), None if document_columns is None else tuple(document_columns),
                     tuple((name, tuple(paths), None if columns is None else tuple(columns))
                           for name, (paths, columns) in sorted(layers.items())),
                     frozenset(name for name in required if name in layers))
        inputs.check()
        return inputs

    @property
    def count(self) -> int:
        return len(self.documents)

    def check(self) -> None:
        for name, paths in [("documents", self.documents), *((n, p) for n, p, _ in self.layers)]:
            if len(paths) != self.count or any(partition_index_of(path) != (i, self.count)
                                               for i, path in enumerate(paths)):
                raise ValueError(f"cannot join {name} partition by partition: it has {len(paths)} partitions "
                                 f"({paths[:1]}...), the documents have {self.count}; layers of one build share "
                                 f"one partition count (layout.target_partition_bytes)")

    def joined(self, index: int, where: str) -> Iterator[tuple[dict, dict]]:
        """(document, {layer name: its row or None}) for every document of partition ``index``."""
        documents = read_partition_rows(self.documents[index], _list(self.document_columns))
        layers = {name: read_partition_rows(paths[index], _list(columns)) for name, paths, columns in self.layers}
        return merge_join(documents, layers, f"{where}, partition {index}", self.required)


def _list(columns):
    return None if columns is None else list(columns)


def merge_join(documents: Iterable[dict], layers: dict[str, Iterable[dict]], where: str,
               required: Iterable[str] = ()) -> Iterator[tuple[dict, dict]]:
    """Join rows sorted by doc_id: (document, {name: row with that doc_id or None}) per document.

    Streams: it holds one row per input. A row whose doc_id has no document, or a
    document without its row in a ``required`` layer, means the inputs disagree (an
    upstream stage lost a record): ``ValueError`` with the ``LOST_IN_JOIN`` marker,
    so the driver reruns the stage. Inputs out of doc_id order are an error too (a
    layer of another layout).
    """
    cursors = {name: _Cursor(name, rows, where) for name, rows in layers.items()}
    required = sorted(set(required))
    previous = None
    for document in documents:
        doc_id = document["doc_id"]
        if previous is not None and doc_id <= previous:
            raise ValueError(f"{where}: documents are not sorted by doc_id ({previous} before {doc_id})")
        previous = doc_id
        rows = {name: cursor.take(doc_id) for name, cursor in cursors.items()}
        for name in required:
            if rows[name] is None:
                raise ValueError(f"{where}: document {doc_id} has no {name} row ({LOST_IN_JOIN})")
        yield document, rows
    for cursor in cursors.values():
        cursor.take(None)


class _Cursor:
    def __init__(self, name: str, rows: Iterable[dict], where: str):
        self._name = name
        self._rows = iter(rows)
        self._where = where
        self._head = next(self._rows, None)

    def take(self, doc_id: str | None) -> dict | None:
        """The row of ``doc_id`` (None: the rows must be exhausted)."""
        head = self._head
        if head is not None and (doc_id is None or head["doc_id"] < doc_id):
            raise ValueError(f"{self._where}: {self._name} annotations for doc_id {head['doc_id']} "
                             f"but no document ({LOST_IN_JOIN})")
        if head is None or head["doc_id"] != doc_id:
            return None
        self._head = next(self._rows, None)
        if self._head is not None and self._head["doc_id"] <= doc_id:
            raise ValueError(f"{self._where}: {self._name} rows are not sorted by doc_id, or repeat one "
                             f"({doc_id} before {self._head['doc_id']})")
        return head


# --- shuffling through files -----------------------------------------------------------

#: The folder of a layer that holds its job's spill files (deleted before the layer is committed).
SPILL = "_spill"

#: Text a spilling worker buffers before it writes its spill files (bounds its memory).
SPILL_BYTES = 32 * 1024 * 1024


class SpillByPartition(beam.PTransform):
    """PCollection[row] -> PCollection[(partition, spill file path)].

    The worker that produced a row writes it to a spill file of partition
    ``xxh3(doc_id) % count`` under ``directory``; the runner then moves file names,
    not text. A file is named by the digest of its bytes (rows sorted by
    :func:`row_order`), so a retried bundle rewrites the same file; files of an
    attempt the runner discarded are never named downstream, and the driver
    deletes the folder before the layer is committed.
    """

    def __init__(self, directory: str, count: int, schema: pa.Schema, spill_bytes: int = SPILL_BYTES,
                 prefix: str = "part"):
        super().__init__()
        self._fn = _SpillFn(directory, count, schema, spill_bytes, prefix)

    def expand(self, rows):
        return rows | "WriteSpillFiles" >> beam.ParDo(self._fn).with_output_types(IntKeyed)


class BufferedSpillFn(beam.DoFn, metaclass=abc.ABCMeta):
    """Buffers rows per target and writes them as spill files: what is left of the map side of a shuffle.

    Subclasses say where an element's rows go (:meth:`targets`), what it weighs
    against :meth:`limit` (:meth:`weight`), and how one spill writes its buffers
    (:meth:`write`: yields (target, path)). Buffers are written whenever they reach
    the limit and at the end of the bundle, so a worker holds at most one limit's
    worth; the runner moves (target, path) pairs.
    """

    @abc.abstractmethod
    def targets(self, element) -> Iterable[tuple[int, dict]]:
        """See the class docstring (a subclass must define it)."""

    def weight(self, element) -> int:
        return 1

    @abc.abstractmethod
    def limit(self) -> int:
        """See the class docstring (a subclass must define it)."""

    @abc.abstractmethod
    def write(self, buffers: dict[int, list[dict]]) -> Iterator[tuple[int, str]]:
        """See the class docstring (a subclass must define it)."""

    def start_bundle(self):
        self._buffers: dict[int, list[dict]] = {}
        self._buffered = 0

    def process(self, element) -> Iterator[tuple[int, str]]:
        for target, row in self.targets(element):
            self._buffers.setdefault(target, []).append(row)
        self._buffered += self.weight(element)
        if self._buffered >= self.limit():
            yield from self._spill()

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        for pair in self._spill():
            yield GlobalWindows.windowed_value(pair)

    def _spill(self) -> Iterator[tuple[int, str]]:
        buffers, self._buffers, self._buffered = self._buffers, {}, 0
        return self.write(buffers)


class _SpillFn(BufferedSpillFn):
    def __init__(self, directory: str, count: int, schema: pa.Schema, spill_bytes: int, prefix: str):
        self._directory = directory
        self._count = count
        self._schema = schema
        self._spill_bytes = spill_bytes
        self._prefix = prefix

    def targets(self, row: dict) -> Iterable[tuple[int, dict]]:
        return [(bucket_of(row["doc_id"], self._count), row)]

    def weight(self, row: dict) -> int:
        return len(row.get("text") or "") + 256

    def limit(self) -> int:
        return self._spill_bytes

    def write(self, buffers: dict[int, list[dict]]) -> Iterator[tuple[int, str]]:
        return write_partition_spills(buffers, self._directory, self._schema, self._prefix)


def write_partition_spills(buffers: dict[int, list[dict]], directory: str, schema: pa.Schema,
                           prefix: str = "part") -> Iterator[tuple[int, str]]:
    """(partition, segment) of one lz4 Parquet block per partition of ``buffers`` (the rows in
    :func:`row_order`), all in one spill file named ``<prefix>-<digest of the bytes>``
    (:func:`~beam_pipeline.layers.write_spill_blocks`)."""
    blocks = [(index, table_bytes(sorted(rows, key=row_order), schema, compression="lz4"))
              for index, rows in sorted(buffers.items())]
    yield from write_spill_blocks(directory, prefix, blocks)


def read_spilled(paths: Iterable[str]) -> list[dict]:
    """Every row of one partition's spill files (each file once), in :func:`row_order`."""
    return sorted((row for path in sorted(set(paths)) for row in read_partition_rows(path)), key=row_order)


def remove_spills(layer_path: str) -> None:
    """Delete a job's spill files (the driver calls it before committing the layer)."""
    remove_folder(join(layer_path, SPILL))


class GroupSpillFiles(beam.PTransform):
    """PCollection[(int target, spill file)] -> PCollection[(target, [spill file, ...])].

    The only grouping a stage that shuffles through files needs: the runner moves
    file names, keyed by an int (VarIntCoder: a deterministic key coder, which a
    Flatten of typed inputs would otherwise lose).
    """

    def expand(self, spills):
        return (spills
                | "KeyedByTarget" >> beam.Map(lambda kv: kv).with_output_types(IntKeyed)
                | "GroupByTarget" >> beam.GroupByKey())


class WriteSpilledPartitions(beam.PTransform):
    """PCollection[(partition, spill file)] -> the sidecars of the partitions written under ``directory``.

    One task per partition reads that partition's spill files (each once) and
    writes it (:func:`write_layer_partition`); the runner groups file names only.
    """

    def __init__(self, directory: str, count: int, schema: pa.Schema):
        super().__init__()
        self._directory = directory
        self._count = count
        self._schema = schema

    def expand(self, spills):
        return (
            spills
            | "GroupSpillsByPartition" >> GroupSpillFiles()
            | "WritePartition" >> beam.MapTuple(self._write)
        )

    def _write(self, index: int, paths: Iterable[str]) -> dict:
        return write_layer_partition(self._directory, index, self._count, read_spilled(paths), self._schema)
