"""Stage 7b, ngram_index: the retained n-gram index of the gold text.

Decontamination against eval sets known at build time happens in the
cascade. An eval set published *after* a dataset was built is checked with
``python -m beam_pipeline contamination-report --dataset D --evalset F``,
which reads this layer instead of re-reading and re-hashing the text.

One Parquet file per gold partition (``index/part-NNNNN-of-MMMMM.parquet``,
schema :data:`beam_pipeline.schemas.NGRAM_INDEX`): the distinct word n-gram
hashes of the partition's documents (:mod:`beam_pipeline.filters.decontamination`,
same normalization and hash as the cascade stage), one row per (n-gram,
document), sorted by (hash, doc_id). Each gold partition is indexed by one
worker in one step (numpy over the partition), so the job never moves one
element per n-gram through the runner. The ledger's ``index`` entry lists
the files with rows and sha256, ``n`` and the hash format.
"""
from __future__ import annotations

import io
import json
from typing import Iterator

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_pipeline import schemas
from beam_pipeline.accounting import StageCounters
from beam_pipeline.filters.decontamination import INDEX_FORMAT, index_rows
from beam_pipeline.hashing import canonical_json, sha256_bytes
from beam_pipeline.layers import join, part_name, read_bytes, read_partition_rows, write_bytes_atomic

STAGE = "ngram_index"
VERSION = "1"
INDEX = "index"


class IndexGold(beam.PTransform):
    """PBegin -> PCollection[partition sidecar]; writes ``index`` files under ``directory``."""

    def __init__(self, gold_part_paths: list[str], n: int, directory: str):
        super().__init__()
        self._paths = list(gold_part_paths)
        self._n = n
        self._directory = directory

    def expand(self, pbegin):
        count = len(self._paths)
        return (
            pbegin
            | "GoldPartitions" >> beam.Create(list(enumerate(self._paths)))
            | "Spread" >> beam.Reshuffle()
            | "IndexPartition" >> beam.ParDo(IndexPartitionFn(self._n, self._directory, count))
        )


class IndexPartitionFn(beam.DoFn):
    def __init__(self, n: int, directory: str, count: int):
        self._n = n
        self._directory = directory
        self._count = count

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, element: tuple[int, str]) -> Iterator[dict]:
        index, path = element
        documents = []
        for row in read_partition_rows(path, ["doc_id", "source", "text"]):
            self._counters.entered(row["source"])
            documents.append((row["doc_id"], row["text"]))
            self._counters.passed(row["source"])
        hashes, doc_ids = index_rows(documents, self._n)
        yield write_index_partition(self._directory, index, self._count, hashes, doc_ids)


def index_table(hashes, doc_ids: list[str]) -> pa.Table:
    return pa.table({"ngram": pa.array(hashes, type=pa.uint64()), "doc_id": pa.array(doc_ids, type=pa.string())},
                    schema=schemas.NGRAM_INDEX)


def write_index_partition(directory: str, index: int, count: int, hashes, doc_ids: list[str]) -> dict:
    buffer = io.BytesIO()
    pq.write_table(index_table(hashes, doc_ids), buffer, compression="zstd", compression_level=3,
                   row_group_size=1 << 20, write_statistics=False, use_dictionary=["doc_id"])
    data = buffer.getvalue()
    name = part_name(index, count)
    write_bytes_atomic(join(directory, name), data)
    meta = {"name": name, "rows": len(doc_ids), "bytes": len(data), "sha256": sha256_bytes(data)}
    write_bytes_atomic(join(directory, name + ".meta.json"), canonical_json(meta))
    return meta


def collect_index(directory: str, count: int, n: int) -> dict:
    """The ledger entry of the index (every partition present, empty ones written now)."""
    parts = []
    for index in range(count):
        sidecar = join(directory, part_name(index, count) + ".meta.json")
        if FileSystems.exists(sidecar):
            parts.append(json.loads(read_bytes(sidecar)))
        else:
            parts.append(write_index_partition(directory, index, count, [], []))
    return {"index": {"n": n, "hash": INDEX_FORMAT, "output": INDEX, "parts": parts,
                      "rows": sum(p["rows"] for p in parts)}}
