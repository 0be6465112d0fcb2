"""Lineage: one table that says what happened to every ingested record.

After a dataset is published, :class:`WriteLineage` joins the layers the
dataset was built from (paths via their ledgers, layer keys from
``manifest["stages"]``) with the dataset's shard indexes, and writes
``<root>/datasets/<dataset_id>/lineage/part-NNNNN-of-MMMMM.parquet`` plus a
``_LINEAGE.json`` marker (written last: lineage is complete exactly when the
marker exists). One row per ingested document and one per verbatim repeat:

* provenance: doc_id, snapshot_id, source, domain, license, url, date,
  record_id, file, position, byte_offset, content_hash, n_chars;
* ``is_repeat`` / ``repeat_of``: repeat rows (the ingest ``repeats`` output)
  carry the doc_id of the document they repeat and only their own provenance;
* ``<stage>__<column>`` for every column of every stage's per-document
  output (``annotations``, ``decisions``: :data:`ANNOTATION_OUTPUTS`), joined
  on doc_id in stage order: a new stage that follows the convention appears
  with no change here; a document a stage never saw has nulls there;
* for documents in the dataset: ``shard``, ``token_start``, ``token_count``.

Rows go to partition ``xxh3_64(doc_id) % n`` (like layers) and are sorted by
(doc_id, is_repeat, file, position), so a doc_id is looked up by reading one
partition, and equal inputs give equal bytes.

The build writes lineage inside its job (:class:`WriteLineage`), one part per
task: partition ``i`` of every layer holds the same doc_ids, so part ``i`` of
lineage reads partition ``i`` of each layer and the placement rows of its
documents (the shard index rows, grouped by partition by the runner). A task
holds one partition's rows, whatever the corpus size. :func:`beam_pipeline.dataset.lineage.trace_token` answers "where did token T of shard
S come from": shard index (binary search) -> lineage row -> the raw record,
re-read from the source file at its recorded position.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Callable, Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import bucket_of, sha256_bytes
from beam_pipeline.storage import schemas
from beam_pipeline.storage.layers import (
    Layer,
    join,
    part_name,
    read_bytes,
    read_parquet,
    write_bytes_atomic,
    write_json_atomic,
)
from beam_pipeline.storage.manifest import MANIFEST
from beam_pipeline.transforms.keys import IntKeyed

LINEAGE_DIR = "lineage"
LINEAGE_MARKER = "_LINEAGE.json"
LINEAGE_FORMAT = 1
SEP = "__"  # between a stage name and its column: ``select__kept``

#: Provenance columns of a lineage row (documents fill all, repeats some).
BASE = pa.schema(
    [
        ("doc_id", pa.string()),
        ("is_repeat", pa.bool_()),
        ("repeat_of", pa.string()),  # the doc_id a repeat row repeats; null for documents
        ("snapshot_id", pa.string()),
        ("source", pa.string()),
        ("domain", pa.string()),
        ("license", pa.string()),
        ("url", pa.string()),
        ("date", pa.string()),
        ("record_id", pa.string()),
        ("file", pa.string()),
        ("position", pa.int64()),
        ("byte_offset", pa.int64()),
        ("content_hash", pa.string()),
        ("n_chars", pa.int64()),
    ]
)

#: Where the document sits in this dataset version (null if not in it).
PLACEMENT = pa.schema(
    [
        ("shard", pa.string()),
        ("token_start", pa.int64()),
        ("token_count", pa.int64()),
    ]
)

#: A placement row as the shard indexes give it.
_PLACEMENT_ROW = pa.schema(
    [("doc_id", pa.string()), ("token_start", pa.int64()), ("token_count", pa.int64()), ("shard", pa.string())]
)

_DOCUMENT_COLUMNS = [f.name for f in BASE if f.name not in ("is_repeat", "repeat_of", "snapshot_id")]
_REPEAT_COLUMNS = [f.name for f in schemas.REPEAT]

#: Stage outputs joined into lineage, by the stages' convention: one row per document, keyed by
#: doc_id ("annotations" of exact_dedup, near_dedup and the scorers; "decisions" of select).
#: A new stage that writes one of these gets its columns in lineage with no change here.
ANNOTATION_OUTPUTS = ("annotations", "decisions")
#: Columns never copied from a stage output: the join key, and what the base already has.
SKIP_COLUMNS = frozenset({"doc_id", "source", "content_hash", "text"})
#: Stages whose outputs are not per-document annotations (ingest is the base, tokenize the placement).
NOT_ANNOTATING = frozenset({"ingest", "tokenize"})


class LineageError(RuntimeError):
    """Lineage is missing, incomplete, or does not cover what was asked."""


# --- paths ------------------------------------------------------------------


def dataset_dir_of(path: str) -> str:
    """A dataset folder from the folder itself or its ``manifest.json``."""
    path = path.rstrip("/")
    return path[: -len(MANIFEST) - 1] if path.endswith("/" + MANIFEST) else path


def root_of(dataset_dir: str) -> str:
    """``<root>`` of ``<root>/datasets/<dataset_id>``."""
    head, _, _ = dataset_dir_of(dataset_dir).rpartition("/datasets/")
    if not head:
        raise LineageError(f"{dataset_dir} is not a <root>/datasets/<dataset_id> folder")
    return head


def lineage_dir(dataset_dir: str) -> str:
    return join(dataset_dir_of(dataset_dir), LINEAGE_DIR)


def has_lineage(dataset_dir: str) -> bool:
    return FileSystems.exists(join(lineage_dir(dataset_dir), LINEAGE_MARKER))


# --- building ---------------------------------------------------------------


def write_lineage(root: str, manifest: dict, *, log: Callable[[str], None] = print, force: bool = False) -> str:
    """Build and write the lineage of a published dataset; skip if complete from the same layers.

    The build writes lineage inside its job (:class:`WriteLineage`); this runs
    the same transform in a local job, for ``python -m beam_pipeline lineage``.
    Returns the lineage folder.
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    directory = join(root, "datasets", manifest["dataset_id"], LINEAGE_DIR)
    stages = {s["name"]: s["layer_key"] for s in manifest["stages"]}
    marker = join(directory, LINEAGE_MARKER)
    if not force and FileSystems.exists(marker) and json.loads(read_bytes(marker)).get("inputs") == stages:
        return directory  # complete, from the same layers (another stage set may give the same shards)
    if "ingest" not in stages:
        raise LineageError("the manifest lists no ingest stage")
    partitions = len(Layer(root, "ingest", stages["ingest"]).part_paths("documents"))
    with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])) as p:
        _ = p | "Manifest" >> beam.Create([manifest]) | "WriteLineage" >> WriteLineage(root, partitions)
    written = json.loads(read_bytes(marker))
    log(f"[lineage] {written['rows']} rows, {len(written['columns'])} columns in {partitions} parts -> {directory}")
    return directory


class WriteLineage(beam.PTransform):
    """PCollection of one manifest -> PCollection of its lineage marker, written after every part.

    Part ``i`` joins partition ``i`` of the ingest layer (documents and repeats)
    and of every per-document output of the dataset's stages (every layer of a
    build shares the partition count and the partitioning) with the placement of
    its documents: the shard index rows, routed to the partition of their doc_id
    by the runner's ``GroupByKey``. A task holds one partition's rows.

    The steps form a chain: what a part or the marker needs travels inside the
    elements (a part task carries its own partition's paths), never as a side
    input that would be a second route back to the manifest. A Flink batch
    job's optimizer walks every route of the plan (docs/flink.md, "Routes through
    the plan").
    """

    def __init__(self, root: str, partitions: int):
        super().__init__()
        self._root = root
        self._partitions = partitions

    def expand(self, manifest):
        root, n = self._root, self._partitions
        return (
            manifest
            | "Tasks" >> beam.FlatMap(lineage_tasks, root, n)
            | "SpreadTasks" >> beam.Reshuffle()
            | "ByPartition" >> beam.FlatMap(_by_partition, root, n).with_output_types(IntKeyed)
            | "GroupByPartition" >> beam.GroupByKey()
            | "WritePart" >> beam.Map(_write_part, root, n)
            | "AllParts" >> beam.combiners.ToList()
            | "WriteMarker" >> beam.Map(_write_marker, root)
        )


def lineage_plan(manifest: dict, root: str, partitions: int) -> dict:
    """What every part of a dataset's lineage reads: the ingest partitions and the joined outputs."""
    stages = {s["name"]: s["layer_key"] for s in manifest["stages"]}
    if "ingest" not in stages:
        raise LineageError("the manifest lists no ingest stage")
    ingest = Layer(root, "ingest", stages["ingest"])
    documents, repeats = ingest.part_paths("documents"), ingest.part_paths("repeats")
    if len(documents) != partitions:
        raise LineageError(f"the ingest layer has {len(documents)} partitions, the build {partitions}")
    return {
        "documents": documents,
        "repeats": repeats,
        "inputs": stages,
        "joined": [dataclasses.asdict(j) for j in joined_outputs(root, manifest, partitions)],
    }


def lineage_tasks(manifest: dict, root: str, partitions: int) -> Iterator[tuple]:
    """The manifest -> one ``("shard", dataset_id, shard)`` task per shard (its placement rows) and one
    ``("part", index, what part index reads)`` task per partition."""
    plan = lineage_plan(manifest, root, partitions)
    for shard in manifest["shards"]:
        yield "shard", manifest["dataset_id"], shard
    for index in range(partitions):
        yield (
            "part",
            index,
            {
                "documents": plan["documents"][index],
                "repeats": plan["repeats"][index],
                "joined": [(j["stage"], j["paths"][index], j["columns"]) for j in plan["joined"]],
                "snapshot_id": manifest["snapshot_id"],
                "dataset_id": manifest["dataset_id"],
                "inputs": plan["inputs"],
            },
        )


def _by_partition(task: tuple, root: str, partitions: int) -> Iterator[tuple[int, tuple]]:
    kind, key, value = task
    if kind == "part":
        yield key, ("part", value)
        return
    index = shard_placement(join(root, "datasets", key), {"shards": [value]})
    for row in index.to_pylist():
        yield bucket_of(row["doc_id"], partitions), ("placement", row)


def _write_part(keyed: tuple[int, Iterable[tuple]], root: str, partitions: int) -> dict:
    index, grouped = keyed
    part, placement = None, []
    for kind, value in grouped:
        if kind == "part":
            part = value
        else:
            placement.append(value)
    if part is None:
        raise LineageError(f"lineage part {index}: placement rows but no part task")
    table = lineage_partition(
        part["documents"],
        part["repeats"],
        [tuple(joined) for joined in part["joined"]],
        pa.Table.from_pylist(placement, schema=_PLACEMENT_ROW) if placement else empty_placement(),
        part["snapshot_id"],
    )
    written = write_lineage_part(join(root, "datasets", part["dataset_id"], LINEAGE_DIR), index, partitions, table)
    return {**written, "columns": table.schema.names, "dataset_id": part["dataset_id"], "inputs": part["inputs"]}


def _write_marker(parts: list[dict], root: str) -> dict:
    if not parts:
        raise LineageError("no lineage part was written")
    parts = sorted(parts, key=lambda p: p["name"])
    columns, dataset_id, inputs = parts[0]["columns"], parts[0]["dataset_id"], parts[0]["inputs"]
    if any(p["columns"] != columns for p in parts):
        raise LineageError("lineage parts disagree on their columns")
    return write_lineage_marker(
        join(root, "datasets", dataset_id, LINEAGE_DIR),
        dataset_id,
        sum(p["rows"] for p in parts),
        columns,
        [{k: v for k, v in p.items() if k not in ("columns", "dataset_id", "inputs")} for p in parts],
        inputs,
    )


def annotation_outputs(root: str, manifest: dict) -> list[tuple[str, str, list[str]]]:
    """(stage, output, partition paths) of every per-document output, in stage order."""
    found = []
    for stage in manifest["stages"]:
        if stage["name"] in NOT_ANNOTATING:
            continue
        layer = Layer(root, stage["name"], stage["layer_key"])
        outputs = layer.ledger()["outputs"]
        found += [
            (stage["name"], output, layer.part_paths(output)) for output in ANNOTATION_OUTPUTS if output in outputs
        ]
    return found


@dataclasses.dataclass(frozen=True)
class JoinedOutput:
    """A stage output joined into lineage: its partitions and the columns copied as ``<stage>__<column>``."""

    stage: str
    paths: list[str]
    columns: list[str]


def joined_outputs(root: str, manifest: dict, partitions: int) -> list[JoinedOutput]:
    """The per-document outputs lineage joins, decided once for the dataset (every part gets the same
    columns): an output is left out if its columns are already joined."""
    found, names = [], set(BASE.names)
    for stage, output, paths in annotation_outputs(root, manifest):
        if len(paths) != partitions:
            raise LineageError(
                f"{stage}/{output} has {len(paths)} partitions and the documents {partitions}; "
                f"the layers of one build share the partition count"
            )
        with FileSystems.open(paths[0]) as f:
            columns = [c for c in pq.read_schema(f).names if c not in SKIP_COLUMNS]
        if any(f"{stage}{SEP}{c}" in names for c in columns):
            continue
        names.update(f"{stage}{SEP}{c}" for c in columns)
        found.append(JoinedOutput(stage, list(paths), columns))
    return found


def lineage_partition(
    documents_path: str,
    repeats_path: str,
    joined: list[tuple[str, str, list[str]]],
    placement: pa.Table,
    snapshot_id: str,
) -> pa.Table:
    """The lineage rows of one partition of the documents, sorted (:func:`sort_lineage`). ``joined``:
    (stage, the same partition of its per-document output, the columns copied) per joined output."""
    documents = conform(
        read_parts([documents_path], _DOCUMENT_COLUMNS), BASE, fill={"is_repeat": False, "snapshot_id": snapshot_id}
    )
    for stage, path, columns in joined:
        rows = read_parts([path], None)
        if not _unique(rows.column("doc_id")):
            raise LineageError(f"{path}: more than one row per doc_id in a per-document output")
        documents = attach(documents, rows, columns, prefix=f"{stage}{SEP}")
    documents = attach(documents, placement, [f.name for f in PLACEMENT])
    repeats = read_parts([repeats_path], _REPEAT_COLUMNS)
    repeats = conform(
        repeats.append_column("repeat_of", repeats.column("doc_id")),
        documents.schema,
        fill={"is_repeat": True, "snapshot_id": snapshot_id},
    )
    return sort_lineage(pa.concat_tables([documents, repeats]))


def spill_placement(dataset_dir: str, manifest: dict, partitions: int, directory: str) -> dict[int, list[str]]:
    """{partition: files} of the placement rows (doc_id, shard, token_start, token_count) of the
    dataset's documents, split by ``xxh3(doc_id) % partitions``; one shard index is read at a time."""
    files: dict[int, list[str]] = {}
    for shard in manifest["shards"]:
        index = shard_placement(dataset_dir, {"shards": [shard]})
        buckets = np.fromiter(
            (bucket_of(d, partitions) for d in index.column("doc_id").to_pylist()), dtype=np.int64, count=index.num_rows
        )
        for bucket in np.unique(buckets).tolist():
            path = join(directory, f"{shard['name']}-{bucket:05d}.parquet")
            write_bytes_atomic(path, parquet_bytes(index.filter(pa.array(buckets == bucket))))
            files.setdefault(bucket, []).append(path)
    return files


def attach(left: pa.Table, right: pa.Table, columns: list[str], prefix: str = "") -> pa.Table:
    """``left`` plus ``right``'s ``columns`` (renamed ``prefix + name``) of the row with the same doc_id.

    A left join done with ``index_in`` + ``take``: any column type (lists, structs) and left order kept.
    """
    ids = right.column("doc_id").combine_chunks() if right.num_rows else pa.array([], pa.string())
    positions = pc.index_in(left.column("doc_id"), value_set=ids)
    for name in columns:
        column = right.column(name)
        values = column.take(positions) if right.num_rows else pa.nulls(left.num_rows, column.type)
        left = left.append_column(pa.field(prefix + name, column.type), values)
    return left


def _unique(ids) -> bool:
    return len(pc.unique(ids)) == len(ids)


def shard_placement(dataset_dir: str, manifest: dict) -> pa.Table:
    """doc_id, shard, token_start, token_count of every document in the dataset's shards."""
    tables = []
    for shard in manifest["shards"]:
        index = read_parquet(
            io.BytesIO(read_bytes(join(dataset_dir, shard["index_file"]))), ["doc_id", "token_start", "token_count"]
        )
        tables.append(index.append_column("shard", pa.array([shard["name"]] * index.num_rows, pa.string())))
    return pa.concat_tables(tables) if tables else empty_placement()


def empty_placement() -> pa.Table:
    return _PLACEMENT_ROW.empty_table()


def read_parts(paths: list[str], columns: list[str] | None) -> pa.Table:
    tables = [read_parquet(io.BytesIO(read_bytes(p)), columns) for p in paths]
    if not tables:
        raise LineageError("a layer output has no partitions")
    return pa.concat_tables(tables)


def conform(table: pa.Table, schema: pa.Schema, fill: dict | None = None) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in order; missing ones null (or ``fill``)."""
    fill = fill or {}
    columns = []
    for field in schema:
        if field.name in fill:
            columns.append(pa.array([fill[field.name]] * table.num_rows, field.type))
        elif field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def sort_lineage(table: pa.Table) -> pa.Table:
    """Rows in (doc_id, is_repeat, file, position) order: documents before their repeats."""
    return table.sort_by(
        [("doc_id", "ascending"), ("is_repeat", "ascending"), ("file", "ascending"), ("position", "ascending")]
    )


def parquet_bytes(table: pa.Table) -> bytes:
    """Deterministic Parquet bytes, with the same settings as layer partitions."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd", compression_level=3, row_group_size=65536, write_statistics=False)
    return buffer.getvalue()


def write_lineage_part(directory: str, index: int, partitions: int, part: pa.Table) -> dict:
    """Write part ``index`` (its rows already sorted) atomically; return its entry of the marker."""
    data = parquet_bytes(part.combine_chunks())
    name = part_name(index, partitions)
    write_bytes_atomic(join(directory, name), data)
    return {"name": name, "rows": part.num_rows, "bytes": len(data), "sha256": sha256_bytes(data)}


def write_lineage_marker(
    directory: str, dataset_id: str, rows: int, columns: list[str], parts: list[dict], inputs: dict
) -> dict:
    """The marker, written last: lineage is complete exactly when it exists."""
    marker = {
        "format": LINEAGE_FORMAT,
        "dataset_id": dataset_id,
        "rows": rows,
        "partition": "xxh3_64(doc_id) % parts",
        "columns": columns,
        "inputs": inputs,
        "parts": parts,
    }
    write_json_atomic(join(directory, LINEAGE_MARKER), marker)
    return marker


# --- reading ----------------------------------------------------------------
