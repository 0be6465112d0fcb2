"""Stage 7b, ngram_index: the retained n-gram index of the gold text.

Decontamination against eval sets known at build time happens in the
cascade. An eval set published *after* a dataset was built is checked with
``python -m beam_pipeline contamination-report --dataset D --evalset F``,
which reads this layer instead of re-reading and re-hashing the text.

One Parquet file per gold partition (``index/part-NNNNN-of-MMMMM.parquet``,
schema :data:`beam_pipeline.storage.schemas.NGRAM_INDEX`): the distinct word n-gram
hashes of the partition's documents (:mod:`beam_pipeline.filters.decontamination`,
same normalization and hash as the cascade stage), one row per (n-gram,
document), sorted by (hash, doc_id). Each gold partition is indexed by one
worker in one step (numpy over the partition), so the job never moves one
element per n-gram through the runner. The ledger's ``index`` entry lists
the files with rows and sha256, ``n`` and the hash format.

Each partition's task writes a task record after its index file
(:mod:`beam_pipeline.transforms.task_ledger`); a rerun after a kill replays
the finished partitions from their records (the index file kept, its counts
emitted again) and indexes only the others. Nothing of this stage restarts
whole: it has no shuffle.
"""

from __future__ import annotations

import io
import json
from typing import Iterator

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.filters.decontamination import INDEX_FORMAT, index_rows
from beam_pipeline.records.accounting import Tally
from beam_pipeline.records.hashing import canonical_json, sha256_bytes
from beam_pipeline.storage import schemas
from beam_pipeline.storage.layers import join, part_name, read_bytes, read_partition_rows, write_bytes_atomic
from beam_pipeline.transforms.layer_io import TASK_RECORDS, PartitionIndexes
from beam_pipeline.transforms.task_ledger import TaskLedger

STAGE = "ngram_index"
VERSION = "1"
INDEX = "index"


class IndexGold(beam.PTransform):
    """PBegin -> {"task_records": one per gold partition}; writes ``index`` files under ``directory``
    (the layer's ``index`` folder) once the gold layer (``after``) is committed."""

    def __init__(self, gold_part_paths: list[str], n: int, directory: str, after=()):
        super().__init__()
        self._paths = list(gold_part_paths)
        self._n = n
        self._directory = directory
        self._after = tuple(after)

    def expand(self, pbegin):
        count = len(self._paths)
        records = (
            pbegin
            | "GoldPartitions" >> PartitionIndexes(count, self._after)
            | "IndexPartition" >> beam.ParDo(IndexPartitionFn(self._paths, self._n, self._directory))
        )
        return {TASK_RECORDS: records}


class IndexPartitionFn(beam.DoFn):
    """Gold partition index -> its task record: the sidecar of its index file (written here) and its
    counts; replayed from the record when an earlier, killed run finished the partition."""

    def __init__(self, paths: list[str], n: int, directory: str):
        self._paths = paths
        self._n = n
        self._directory = directory

    def setup(self):
        self._tally = Tally(STAGE)

    def process(self, index: int) -> Iterator:
        count = len(self._paths)
        ledger = TaskLedger(self._directory.rsplit("/", 1)[0], count)
        record = ledger.done(index)
        if record is not None:  # finished by an earlier, killed run of this layer (transforms/task_ledger.py)
            yield record
            return
        documents = []
        for row in read_partition_rows(self._paths[index], ["doc_id", "source", "text"]):
            self._tally.entered(row["source"])
            documents.append((row["doc_id"], row["text"]))
            self._tally.passed(row["source"])
        hashes, doc_ids = index_rows(documents, self._n)
        sidecar = write_index_partition(self._directory, index, count, hashes, doc_ids)
        yield ledger.write(index, {INDEX: sidecar}, self._tally.take(), [])


def index_table(hashes, doc_ids: list[str]) -> pa.Table:
    return pa.table(
        {"ngram": pa.array(hashes, type=pa.uint64()), "doc_id": pa.array(doc_ids, type=pa.string())},
        schema=schemas.NGRAM_INDEX,
    )


def write_index_partition(directory: str, index: int, count: int, hashes, doc_ids: list[str]) -> dict:
    buffer = io.BytesIO()
    pq.write_table(
        index_table(hashes, doc_ids),
        buffer,
        compression="zstd",
        compression_level=3,
        row_group_size=1 << 20,
        write_statistics=False,
        use_dictionary=["doc_id"],
    )
    data = buffer.getvalue()
    name = part_name(index, count)
    write_bytes_atomic(join(directory, name), data)
    meta = {"name": name, "rows": len(doc_ids), "bytes": len(data), "sha256": sha256_bytes(data)}
    write_bytes_atomic(join(directory, name + ".meta.json"), canonical_json(meta))
    return meta


def collect_index(layer, partitions: int, *, n: int) -> dict:
    """The ledger entry of the layer's index (every partition present, empty ones written now)."""
    return collect_index_files(layer.output_path(INDEX), partitions, n)


def collect_index_files(directory: str, count: int, n: int) -> dict:
    """The ledger entry of the index files under ``directory``."""
    parts = []
    for index in range(count):
        sidecar = join(directory, part_name(index, count) + ".meta.json")
        if FileSystems.exists(sidecar):
            parts.append(json.loads(read_bytes(sidecar)))
        else:
            parts.append(write_index_partition(directory, index, count, [], []))
    return {
        "index": {"n": n, "hash": INDEX_FORMAT, "output": INDEX, "parts": parts, "rows": sum(p["rows"] for p in parts)}
    }
