"""Reading, writing and committing layer outputs inside the build's one job.

A layer output is ``n`` Parquet partitions: row ``r`` lives in partition
``xxh3(doc_id) % n`` and rows are sorted by doc_id inside a partition, so the
bytes do not depend on the runner, the parallelism or bundle boundaries
(:mod:`beam_pipeline.storage.layers`). Three ways to make one:

* :class:`WriteLayerOutput`: rows -> ``(partition, block of rows)`` (one block
  per bundle and partition) -> the runner's ``GroupByKey`` on the int
  partition index -> sort -> one atomic write per partition (DESIGN.md,
  "layers"). Stages whose rows come out of a shuffle use it.
* :class:`WrittenPartitions`: a stage whose tasks already hold partition ``i``
  of its inputs (the scorers, ``select``) writes partition ``i`` of its output
  itself. Every layer of a build has the same partition count and the same
  partitioning, so partition ``i`` of the documents and of every annotation
  layer hold the same doc_ids: :class:`PartitionInputs` merge-joins them
  (:func:`merge_join`) without a shuffle.
* The commit: :class:`CommitLayer` waits for every partition of every output
  and for the stage's counts (data of the job: :mod:`beam_pipeline.records.accounting`),
  checks them, writes the partitions no row reached (empty), and writes the
  ledger last. Its output, one :class:`Committed` element, is what later stages
  wait for: :class:`PartitionIndexes` and :class:`ReadLayerRows` take the
  ``Committed`` collections of the layers they read as side inputs, so a stage
  reads a layer of the same job only once it is committed (data first, ledger
  last), exactly as it reads a layer of an earlier run.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import apache_beam as beam
import pyarrow as pa

from beam_pipeline.records.accounting import (
    COUNTS,
    DEAD_LETTER,
    LOST_IN_JOIN,
    AccountingError,
    SumCounts,
    check_outputs,
    check_stage,
    stage_counts,
)
from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.storage.layers import (
    Layer,
    commit_layer,
    part_name,
    read_partition_rows,
    remove_scratch,
    remove_temporaries,
    write_partition,
)
from beam_pipeline.transforms.blocks import BlocksFn
from beam_pipeline.transforms.bundle_budget import BudgetedExpandFn, BundleBudget, bundle_budget
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.task_ledger import TaskLedger, finished_partitions


class WriteLayerOutput(beam.PTransform):
    """PCollection[dict] -> PCollection[partition sidecar dict], files written under ``directory``.

    With ``ledger`` (the output's :class:`~beam_pipeline.transforms.task_ledger.TaskLedger`), each
    written partition gets a task record, and the partitions an earlier, killed run of the layer
    finished are not written again: their rows are dropped before the ``GroupByKey`` and their
    sidecars come from their records. The rows themselves are still computed by the stage (its
    counts with them); only the move, sort and write of finished partitions are saved.
    """

    def __init__(
        self,
        directory: str,
        schema: pa.Schema,
        num_partitions: int,
        sort_key: Callable[[dict], tuple] | None = None,
        partition_key: Callable[[dict], str] = lambda row: row["doc_id"],
        ledger: TaskLedger | None = None,
    ):
        super().__init__()
        self._directory = directory
        self._schema = schema
        self._num_partitions = num_partitions
        self._sort_key = sort_key or row_order
        self._partition_key = partition_key
        if ledger is not None and not ledger.output:
            raise ValueError("WriteLayerOutput records the partitions of one output: a ledger with its output's name")
        self._ledger = ledger

    def expand(self, rows):
        finished = (
            frozenset(finished_partitions(self._ledger.layer_path, self._num_partitions, self._ledger.output))
            if self._ledger is not None
            else frozenset()
        )
        written = (
            rows
            | "BlocksByPartition"
            >> beam.ParDo(_PartitionBlocksFn(self._num_partitions, self._partition_key, finished)).with_output_types(
                IntKeyed
            )
            | "GroupPartitions" >> beam.GroupByKey()
            | "WritePartition" >> beam.MapTuple(self._write)
        )
        if not finished:
            return written
        replayed = (
            rows.pipeline
            | "FinishedPartitions" >> beam.Create(sorted(finished)).with_output_types(int)
            | "ReplayPartition" >> beam.Map(replayed_sidecar, self._ledger)
        )
        return (written, replayed) | "WrittenAndReplayed" >> beam.Flatten()

    def _write(self, index: int, blocks: Iterable[tuple[dict, ...]]) -> dict:
        rows = (row for block in blocks for row in block)
        sidecar = write_layer_partition(
            self._directory, index, self._num_partitions, rows, self._schema, self._sort_key
        )
        if self._ledger is not None:
            self._ledger.write(index, {str(self._ledger.output): sidecar}, {}, [])
        return sidecar


def replayed_sidecar(index: int, ledger: TaskLedger) -> dict:
    """The sidecar of partition ``index`` of ``ledger.output``, from the task record an earlier run wrote."""
    record = ledger.done(index)
    if record is None:
        raise RuntimeError(
            f"partition {index} of {ledger.output} in {ledger.layer_path} was finished when the job was built, "
            f"but its task record or files are gone"
        )
    return record["outputs"][ledger.output]


class _PartitionBlocksFn(BlocksFn):
    """Rows -> (partition, block of rows): what the runner moves is one element per bundle and partition
    (or per :data:`FLUSH_ROWS` rows held), not one per row. The rows that come this way are small
    (annotations, dead letters with a 256-byte prefix); stages whose rows hold documents' text write
    their partitions in their tasks (:class:`WrittenPartitions`). Rows of ``finished`` partitions
    (written by an earlier, killed run) are dropped."""

    def __init__(self, count: int, partition_key: Callable[[dict], str], finished: frozenset = frozenset()):
        super().__init__(FLUSH_ROWS)
        self._count = count
        self._partition_key = partition_key
        self._finished = finished

    def process(self, row: dict) -> Iterator[tuple[int, tuple]]:
        index = bucket_of(self._partition_key(row), self._count)
        if index not in self._finished:
            self._out.add_to(index, row)
        yield from self._flush_if_full()


#: Rows a bundle of :class:`WriteLayerOutput` holds before it hands its blocks on.
FLUSH_ROWS = 16384


def row_order(row: dict) -> tuple:
    """The order of rows inside a partition: doc_id, then the record's origin."""
    return row["doc_id"], row.get("file") or "", row.get("position") or 0


def write_layer_partition(
    directory: str,
    index: int,
    count: int,
    rows: Iterable[dict],
    schema: pa.Schema,
    sort_key: Callable[[dict], tuple] = row_order,
) -> dict:
    """Sort one partition's rows and write it atomically (:func:`beam_pipeline.storage.layers.write_partition`)."""
    return write_partition(directory, index, count, sorted(rows, key=sort_key), schema)


class WrittenPartitions:
    """A stage output its own tasks wrote, one partition per task: ``sidecars`` is the
    PCollection of the written partitions' sidecars. The build adds no writer for it."""

    def __init__(self, sidecars):
        self.sidecars = sidecars


# --- waiting for layers ------------------------------------------------------------------


def _after(committed: Iterable) -> list:
    """Side inputs that make a step wait until each of these layers is committed."""
    return [beam.pvalue.AsSingleton(c) for c in committed]


def _first(value, *_committed):
    return value


class PartitionIndexes(beam.PTransform):
    """pbegin -> the partition indexes ``0..count-1``, spread over the workers, once every layer of
    ``after`` (PCollections of one :class:`Committed`) is committed."""

    def __init__(self, count: int, after: Iterable = ()):
        super().__init__()
        self._count = count
        self._after = tuple(after)

    def expand(self, pbegin):
        # reshuffle=False: SpreadIndexes is the one reshuffle (Create's own would add a second, a stage for nothing)
        indexes = pbegin | "Indexes" >> beam.Create(list(range(self._count)), reshuffle=False).with_output_types(int)
        if self._after:
            indexes = indexes | "AfterInputsCommitted" >> beam.Map(_first, *_after(self._after)).with_output_types(int)
        return indexes | "SpreadIndexes" >> beam.Reshuffle()


class ReadLayerRows(beam.PTransform):
    """pbegin -> the rows (``columns``, or all) of a layer output's partitions, once ``after`` is committed."""

    def __init__(self, part_paths: Iterable[str], columns: Iterable[str] | None = None, after: Iterable = ()):
        super().__init__()
        self._paths = tuple(part_paths)
        self._columns = None if columns is None else list(columns)
        self._after = tuple(after)

    def expand(self, pbegin):
        return (
            pbegin
            | "Partitions" >> PartitionIndexes(len(self._paths), self._after)
            | "ReadRows" >> beam.ParDo(_ReadRowsFn(self._paths, self._columns, bundle_budget(pbegin.pipeline)))
        )


class _ReadRowsFn(BudgetedExpandFn):
    """A partition index -> its rows; a bundle stops taking partitions once it has emitted its budget."""

    def __init__(self, paths: tuple[str, ...], columns: list[str] | None, budget: BundleBudget):
        super().__init__(budget)
        self._paths, self._columns = paths, columns

    def items(self, index: int, start: int) -> Iterable[dict]:
        return read_partition_rows(self._paths[index], self._columns)


# --- committing ---------------------------------------------------------------------------


class Committed(NamedTuple):
    """A committed layer, as the later steps of the job see it (one element per layer)."""

    stage: str
    key: str
    ledger: dict
    reused: bool
    committed_at: float | None = None  # wall clock of the commit (run metrics only, never in a layer)


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """What committing a layer needs (picklable: the commit step runs on a worker).

    ``outputs``: output name -> schema (``dead_letter`` included when the stage
    has one); ``rows_match``: output -> the count its rows must equal;
    ``finalize``: ``(layer, partitions) -> extra ledger fields`` computed from
    the written files (histograms, the shard list), or None.
    """

    layer: Layer
    version: str
    config: Any
    inputs: dict
    outputs: dict
    partitions: int
    rows_match: dict
    max_dead_letter_fraction: float
    finalize: Callable[[Layer, int], dict] | None = None

    def output_directory(self, output: str) -> str:
        return self.layer.dead_letter_path if output == DEAD_LETTER else self.layer.output_path(output)

    def output_partitions(self, output: str) -> int:
        return 1 if output == DEAD_LETTER else self.partitions


#: What a stage's tasks write besides its layer outputs (shards, index files): the commit waits for it.
WRITTEN = "written"


#: A stage whose tasks each finish one partition of every output: its task records
#: (:mod:`beam_pipeline.transforms.task_ledger`), one collection that the commit reads alone.
TASK_RECORDS = "task_records"


class CommitLayer(beam.PTransform):
    """{output: PCollection[sidecar], "counts": PCollection[counts], "written": PCollection (optional)}
    or {"task_records": PCollection[task record]} -> PCollection[Committed] (one element).

    Waits for every partition of every output, for every count of the stage and
    for everything else its tasks write (``written``), then
    (:class:`CommitLayerFn`) checks that the stage accounts for every record and
    that each output holds the rows its counts say, writes the partitions no row
    reached, and writes the ledger last.

    A stage whose tasks each write one partition of all its outputs gives its task
    records instead (:class:`CommitTaskRecordsFn`): the sidecars, counts and dead
    letters of each partition in one element. The commit then waits on one
    collection, not on a branch per output that meets the others again: a Flink
    batch job's optimizer walks every route through the plan, and each such
    meeting multiplies the routes of every later stage (docs/flink.md, "Routes
    through the plan").
    """

    def __init__(self, spec: LayerSpec):
        super().__init__()
        self._spec = spec

    def expand(self, produced):
        if TASK_RECORDS in produced:
            return (
                produced[TASK_RECORDS]
                | "AllTasks" >> beam.combiners.ToList()
                | "CheckAndWriteLedger" >> beam.ParDo(CommitTaskRecordsFn(self._spec))
            )
        names = sorted(self._spec.outputs)
        summed = produced[COUNTS] | "SumCounts" >> beam.CombineGlobally(SumCounts())
        sides = [beam.pvalue.AsList(produced[name]) for name in names]
        if WRITTEN in produced:
            sides.append(beam.pvalue.AsList(produced[WRITTEN]))
        return summed | "CheckAndWriteLedger" >> beam.ParDo(CommitLayerFn(self._spec, names), *sides)


class CommitLayerFn(beam.DoFn):
    """The stage's summed counts (+ every output's sidecars) -> the ledger, written; yields :class:`Committed`."""

    def __init__(self, spec: LayerSpec, names: list[str]):
        self._spec = spec
        self._names = names

    def process(self, summed: dict, *sidecar_lists) -> Iterator[Committed]:
        sidecar_lists = sidecar_lists[: len(self._names)]  # after them: what the stage wrote besides (waited for)
        yield commit_checked(self._spec, summed, dict(zip(self._names, sidecar_lists)))


class CommitTaskRecordsFn(beam.DoFn):
    """Every task record of the stage (one list) -> its dead letters written (one partition), the
    ledger written; yields :class:`Committed`."""

    def __init__(self, spec: LayerSpec):
        self._spec = spec

    def process(self, records: list[dict]) -> Iterator[Committed]:
        from beam_pipeline.transforms.task_ledger import replayed_counts, replayed_dead_letters

        spec = self._spec
        summed: dict = {}
        for record in records:
            for key, n in replayed_counts(record).items():
                summed[key] = summed.get(key, 0) + n
        sidecars = {
            name: [record["outputs"][name] for record in records if name in record["outputs"]]
            for name in spec.outputs
            if name != DEAD_LETTER
        }
        if DEAD_LETTER in spec.outputs:
            rows = [row for record in records for row in replayed_dead_letters(record)]
            sidecars[DEAD_LETTER] = (
                [
                    write_layer_partition(
                        spec.layer.dead_letter_path, 0, 1, rows, spec.outputs[DEAD_LETTER], dead_letter_order
                    )
                ]
                if rows
                else []
            )
        yield commit_checked(spec, summed, sidecars)


def commit_checked(spec: LayerSpec, summed: dict, sidecars: dict[str, list[dict]]) -> Committed:
    """Check the stage's counts and outputs (``sidecars``: output -> the sidecars of its written
    partitions), write the partitions no row reached, and the ledger last."""
    stage = spec.layer.stage
    counts = stage_counts(stage, summed)
    check_stage(stage, counts, spec.max_dead_letter_fraction)
    remove_temporaries(spec.layer)  # writes of bundle attempts that failed and were retried
    remove_scratch(spec.layer)  # the folder of files its tasks handed each other (ingest's slices), now empty
    parts = {
        name: complete_partitions(spec.output_directory(name), spec.output_partitions(name), spec.outputs[name], found)
        for name, found in sidecars.items()
    }
    rows = {name: sum(part["rows"] for part in output) for name, output in parts.items()}
    if sum(rows.values()) and not counts["in"]:
        raise AccountingError(
            f"stage {stage}: the job wrote {sum(rows.values())} rows but counted no record "
            f"entering the stage (in=0): a step of the stage does not count"
        )
    check_outputs(stage, counts, rows, {**spec.rows_match, DEAD_LETTER: "dead_letter"})
    extra = spec.finalize(spec.layer, spec.partitions) if spec.finalize else None
    ledger = commit_layer(
        spec.layer,
        version=spec.version,
        config=spec.config,
        inputs=spec.inputs,
        outputs=parts,
        counts=counts,
        extra=extra,
    )
    return Committed(stage, spec.layer.key, ledger, False, time.time())


def dead_letter_order(row: dict) -> tuple:
    """The order of a stage's dead letters in their one partition: file, position, doc_id, error."""
    return (
        row["file"] or "",
        row["position"] if row["position"] is not None else -1,
        row["doc_id"] or "",
        row["error"],
    )


def complete_partitions(directory: str, count: int, schema: pa.Schema, sidecars: Iterable[dict]) -> list[dict]:
    """The sidecars of all ``count`` partitions in order; a partition no row reached (a ``GroupByKey``
    has no empty groups) is written empty now, so a complete layer always has ``count`` partitions."""
    by_name: dict[str, dict] = {}
    for sidecar in sidecars:
        if sidecar["name"] in by_name and by_name[sidecar["name"]] != sidecar:
            raise ValueError(f"{directory}: two different writes of {sidecar['name']}")
        by_name[sidecar["name"]] = sidecar
    metas = []
    for index in range(count):
        name = part_name(index, count)
        metas.append(by_name.pop(name) if name in by_name else write_partition(directory, index, count, [], schema))
    if by_name:
        raise ValueError(f"{directory}: partitions outside 0..{count - 1}: {sorted(by_name)}")
    return metas


def partition_index_of(path: str) -> tuple[int, int]:
    """(index, count) of a ``part-00003-of-00016.parquet`` path."""
    name = path.rsplit("/", 1)[-1]
    index, count = name[len("part-") : -len(".parquet")].split("-of-")
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
    def of(
        cls,
        documents: list[str],
        document_columns: list[str] | None = None,
        layers: dict[str, tuple[list[str], list[str] | None]] | None = None,
        required: tuple[str, ...] = (),
    ) -> "PartitionInputs":
        layers = layers or {}
        inputs = cls(
            tuple(documents),
            None if document_columns is None else tuple(document_columns),
            tuple(
                (name, tuple(paths), None if columns is None else tuple(columns))
                for name, (paths, columns) in sorted(layers.items())
            ),
            frozenset(name for name in required if name in layers),
        )
        inputs.check()
        return inputs

    @property
    def count(self) -> int:
        return len(self.documents)

    def check(self) -> None:
        for name, paths in [("documents", self.documents), *((n, p) for n, p, _ in self.layers)]:
            if len(paths) != self.count or any(
                partition_index_of(path) != (i, self.count) for i, path in enumerate(paths)
            ):
                raise ValueError(
                    f"cannot join {name} partition by partition: it has {len(paths)} partitions "
                    f"({paths[:1]}...), the documents have {self.count}; layers of one build share "
                    f"one partition count (layout.target_partition_bytes)"
                )

    def joined(self, index: int, where: str) -> Iterator[tuple[dict, dict]]:
        """(document, {layer name: its row or None}) for every document of partition ``index``."""
        documents = read_partition_rows(self.documents[index], _list(self.document_columns))
        layers = {name: read_partition_rows(paths[index], _list(columns)) for name, paths, columns in self.layers}
        return merge_join(documents, layers, f"{where}, partition {index}", self.required)


def _list(columns):
    return None if columns is None else list(columns)


def merge_join(
    documents: Iterable[dict], layers: dict[str, Iterable[dict]], where: str, required: Iterable[str] = ()
) -> Iterator[tuple[dict, dict]]:
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
            raise ValueError(
                f"{self._where}: {self._name} annotations for doc_id {head['doc_id']} but no document ({LOST_IN_JOIN})"
            )
        if head is None or head["doc_id"] != doc_id:
            return None
        self._head = next(self._rows, None)
        if self._head is not None and self._head["doc_id"] <= doc_id:
            raise ValueError(
                f"{self._where}: {self._name} rows are not sorted by doc_id, or repeat one "
                f"({doc_id} before {self._head['doc_id']})"
            )
        return head
