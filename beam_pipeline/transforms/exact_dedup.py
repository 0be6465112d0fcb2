"""Stage 2, exact dedup: annotate every document with its content-hash group.

Input: ``documents`` of the ingest layer (only ``doc_id``, ``content_hash``,
``source``, ``source_rank``, ``date`` are read). Output: one ``annotations`` row
per document (:data:`beam_pipeline.schemas.EXACT_DEDUP`): the group size, the
representative and ``is_duplicate``. Nothing is deleted here; the policy in
``select`` decides.

The key is xxh3-128 of the normalized text (a collision needs ~2^64
documents). The representative is the minimum of
(source rank, missing date last, date, doc_id): curated sources beat web
copies, then the earliest capture, then a deterministic tie-break, as in
DESIGN.md. Because the choice is a minimum over a total order, it does not
depend on the order in which the runner delivers the group (unlike the random
ids that decided survivors in some peers: text-dedup #28).

The grouping goes through files, not through the runner (as every stage's
does since the scale work; docs/decisions.md, "Stages that shuffle no text")::

    partition i of the documents ─ its members spilled to bucket xxh3(content_hash) % n
      ─(bucket, file names)─ per bucket: members by content hash -> annotation rows,
                             spilled to the partition of their doc_id
      ─(partition, file names)─ per partition: write annotations partition i

A worker holds one partition's members, then one bucket's, whatever the
corpus size. Each member crosses the disk twice (two small records, no
text); a ``GroupByKey`` of the members and then of the rows, as this stage
used to do, held each worker's whole share of both in one message on the
local runner (exact_dedup's worker peak grew from 320 to 430 MB between 278 MB
and 1 GB of text).
"""
from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
import pyarrow as pa

from beam_pipeline import schemas
from beam_pipeline.accounting import StageCounters
from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import read_partition_rows
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.layer_io import GroupSpillFiles, PartitionIndexes, WriteSpilledPartitions, \
    WrittenPartitions, write_partition_spills
from beam_pipeline.transforms.lsh_files import key_runs, read_spill_table, write_spills

STAGE = "exact_dedup"
VERSION = "1"
ANNOTATIONS = "annotations"
INPUT_COLUMNS = ["doc_id", "content_hash", "source", "source_rank", "date"]

#: A document's member on its way to the bucket of its content hash.
MEMBER_RECORD = pa.schema([
    ("content_hash", pa.string()),
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("source_rank", pa.int32()),
    ("date", pa.string()),
])


class AnnotateExactDuplicates(beam.PTransform):
    """pbegin -> the sidecars of the ``annotations`` partitions written under ``annotations_directory``.

    ``document_paths`` are the ingest layer's documents partitions (partition
    ``i`` holds the doc_ids with ``xxh3(doc_id) % n == i``); the annotations
    get the same partitioning. Spill files go to ``spill_directory``.
    """

    def __init__(self, document_paths: list[str], annotations_directory: str, spill_directory: str):
        super().__init__()
        self._documents = tuple(document_paths)
        self._annotations = annotations_directory
        self._spills = spill_directory

    def expand(self, pbegin):
        count = len(self._documents)
        return WrittenPartitions(
            pbegin
            | "Partitions" >> PartitionIndexes(count)
            | "SpillMembersByContentHash" >> beam.ParDo(
                SpillMembersFn(self._documents, self._spills)).with_output_types(IntKeyed)
            | "GroupSpillsByHashBucket" >> GroupSpillFiles()
            | "AnnotateHashBucket" >> beam.ParDo(AnnotateBucketFn(self._spills, count)).with_output_types(IntKeyed)
            | "WriteAnnotations" >> WriteSpilledPartitions(self._annotations, count, schemas.EXACT_DEDUP)
        ).sidecars


def member_of(document: dict) -> tuple:
    """The fields of a document that the representative choice needs, as a tuple."""
    return (document["source_rank"], document["date"] is None, document["date"] or "",
            document["doc_id"], document["source"])


def representative_order(member: tuple) -> tuple:
    """Total order; the minimum is the representative. Ends in doc_id (unique)."""
    rank, no_date, date, doc_id, _source = member
    return (rank, no_date, date, doc_id)


def annotate_group(content_hash: str, members: Iterable[tuple]) -> list[dict]:
    """Annotation rows for every member of one content-hash group."""
    members = list(members)
    representative = min(members, key=representative_order)[3]
    return [{"doc_id": m[3], "content_hash": content_hash, "duplicate_count": len(members),
             "representative": representative, "is_duplicate": m[3] != representative}
            for m in members]


def member_record(document: dict) -> dict:
    return {column: document[column] for column in MEMBER_RECORD.names}


class SpillMembersFn(beam.DoFn):
    """partition index -> (bucket, spill file): its documents' members, by the bucket of their content hash."""

    def __init__(self, document_paths: tuple[str, ...], spill_directory: str):
        self._documents = document_paths
        self._spills = spill_directory

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, index: int) -> Iterator[tuple[int, str]]:
        count = len(self._documents)
        by_bucket: dict[int, list[dict]] = {}
        for document in read_partition_rows(self._documents[index], INPUT_COLUMNS):
            self._counters.entered(document["source"])
            by_bucket.setdefault(bucket_of(document["content_hash"], count), []).append(member_record(document))
        yield from write_spills(by_bucket, self._spills, f"members-{index:05d}", MEMBER_RECORD,
                                lambda r: (r["content_hash"], r["doc_id"]))


class AnnotateBucketFn(beam.DoFn):
    """(bucket, member spill files) -> (partition, spill file) of the annotation rows of its members."""

    def __init__(self, spill_directory: str, partitions: int):
        self._spills = spill_directory
        self._partitions = partitions

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator[tuple[int, str]]:
        bucket, paths = keyed
        table = read_spill_table(paths, MEMBER_RECORD, ["content_hash", "doc_id"])
        if table is None:
            return
        columns = [table.column(name).to_pylist() for name in MEMBER_RECORD.names]
        del table
        hashes, doc_ids, sources, ranks, dates = columns
        by_partition: dict[int, list[dict]] = {}
        for start, end in key_runs(hashes):
            members = [member_of({"source_rank": ranks[i], "date": dates[i], "doc_id": doc_ids[i],
                                  "source": sources[i]}) for i in range(start, end)]
            for member, row in zip(members, annotate_group(hashes[start], members)):
                self._counters.passed(member[4])
                by_partition.setdefault(bucket_of(row["doc_id"], self._partitions), []).append(row)
        yield from write_partition_spills(by_partition, self._spills, schemas.EXACT_DEDUP,
                                          prefix=f"annotations-{bucket:05d}")
