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

The shape (DESIGN.md, "exact dedup")::

    partition i of the documents ─ (content_hash, member) ─┬─ CombinePerKey(min over the total order,
                                                            │     with a member count; hot-key fan-out)
                                                            │   -> (content_hash, (representative, size))
                                                            └─ CoGroupByKey(content_hash) -> one row per member
      -> annotations, partitioned by doc_id

A member is five small fields (no text). The combine is lifted: each worker
folds its members per hash before the shuffle, and a hash held by very many
documents (a boilerplate page copied everywhere) is spread over
:data:`HOT_KEY_FANOUT` intermediate keys first, so no worker merges all its
copies alone. The join sends each member to the group of its hash once.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.accounting import COUNTS, CountingDoFn
from beam_pipeline.transforms.keys import StrKeyed
from beam_pipeline.transforms.layer_io import ReadLayerRows

STAGE = "exact_dedup"
VERSION = "1"
ANNOTATIONS = "annotations"
INPUT_COLUMNS = ["doc_id", "content_hash", "source", "source_rank", "date"]

#: Intermediate keys a content hash's members are combined under before the final merge
#: (``CombinePerKey.with_hot_key_fanout``): bounds the work of a hash held by very many documents.
HOT_KEY_FANOUT = 8
_MEMBERS, _REPRESENTATIVE = "members", "representative"


class AnnotateExactDuplicates(beam.PTransform):
    """pbegin -> {"annotations": PCollection[row], "counts"}.

    ``document_paths`` are the ingest layer's documents partitions, read once
    every layer of ``after`` is committed.
    """

    def __init__(self, document_paths: list[str], after=()):
        super().__init__()
        self._documents = tuple(document_paths)
        self._after = tuple(after)

    def expand(self, pbegin):
        members = (
            pbegin
            | "ReadDocuments" >> ReadLayerRows(self._documents, INPUT_COLUMNS, self._after)
            | "KeyByContentHash" >> beam.ParDo(_MemberFn()).with_output_types(StrKeyed).with_outputs(
                COUNTS, main=_MEMBERS)
        )
        keyed = members[_MEMBERS]  # (content_hash, member)
        representatives = (
            keyed
            | "PickRepresentative" >> beam.CombinePerKey(RepresentativeFn()).with_hot_key_fanout(HOT_KEY_FANOUT)
            | "KeyedByContentHash" >> beam.Map(lambda kv: kv).with_output_types(StrKeyed)  # the fan-out drops the type
        )
        annotated = (
            {_MEMBERS: keyed, _REPRESENTATIVE: representatives}
            | "JoinMembersWithRepresentative" >> beam.CoGroupByKey()
            | "Annotate" >> beam.ParDo(_AnnotateFn()).with_outputs(COUNTS, main=ANNOTATIONS)
        )
        return {ANNOTATIONS: annotated[ANNOTATIONS], COUNTS: (members[COUNTS], annotated[COUNTS])}


def member_of(document: dict) -> tuple:
    """The fields of a document that the representative choice needs, as a tuple."""
    return (document["source_rank"], document["date"] is None, document["date"] or "",
            document["doc_id"], document["source"])


def representative_order(member: tuple) -> tuple:
    """Total order; the minimum is the representative. Ends in doc_id (unique)."""
    rank, no_date, date, doc_id, _source = member
    return (rank, no_date, date, doc_id)


class RepresentativeFn(beam.CombineFn):
    """Members of one content hash -> (the minimum member by :func:`representative_order`, member count)."""

    def create_accumulator(self):
        return None, 0

    def add_input(self, accumulator, member):
        best, count = accumulator
        if best is None or representative_order(member) < representative_order(best):
            best = member
        return best, count + 1

    def merge_accumulators(self, accumulators):
        best, count = None, 0
        for other, n in accumulators:
            if other is not None and (best is None or representative_order(other) < representative_order(best)):
                best = other
            count += n
        return best, count

    def extract_output(self, accumulator):
        return accumulator


def annotate_group(content_hash: str, members: Iterable[tuple]) -> list[dict]:
    """Annotation rows for every member of one content-hash group."""
    members = list(members)
    representative = min(members, key=representative_order)[3]
    return [annotation(content_hash, m, representative, len(members)) for m in members]


def annotation(content_hash: str, member: tuple, representative: str, size: int) -> dict:
    return {"doc_id": member[3], "content_hash": content_hash, "duplicate_count": size,
            "representative": representative, "is_duplicate": member[3] != representative}


class _MemberFn(CountingDoFn):
    """document (INPUT_COLUMNS) -> (content_hash, member); counts it ``in``."""

    def __init__(self):
        super().__init__(STAGE)

    def process(self, document: dict) -> Iterator[tuple[str, tuple]]:
        self.tally.entered(document["source"])
        yield document["content_hash"], member_of(document)


class _AnnotateFn(CountingDoFn):
    """(content_hash, {members, representative: [(member, size)]}) -> one annotation row per member."""

    def __init__(self):
        super().__init__(STAGE)

    def process(self, joined: tuple[str, dict]) -> Iterator[dict]:
        content_hash, groups = joined
        (best, size), = groups[_REPRESENTATIVE]
        representative = best[3]
        for member in groups[_MEMBERS]:
            self.tally.passed(member[4])
            yield annotation(content_hash, member, representative, size)
