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

One ``GroupByKey`` on the content hash, rather than ``CombinePerKey`` plus a
join back to the members: annotating every member needs the member list at
the key anyway, so the combine would shuffle the same data twice
(``docs/decisions.md``).
"""
from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.accounting import CountEntering, StageCounters
from beam_pipeline.transforms.keys import StrKeyed

STAGE = "exact_dedup"
VERSION = "1"
ANNOTATIONS = "annotations"
INPUT_COLUMNS = ["doc_id", "content_hash", "source", "source_rank", "date"]


class AnnotateExactDuplicates(beam.PTransform):
    """PCollection[document dict] -> PCollection[annotation dict], one per document."""

    def expand(self, documents):
        return (
            documents
            | "Count" >> CountEntering(STAGE)
            | "KeyByContentHash" >> beam.Map(lambda d: (d["content_hash"], member_of(d))).with_output_types(StrKeyed)
            | "GroupByContentHash" >> beam.GroupByKey()
            | "Annotate" >> beam.ParDo(AnnotateGroupFn())
        )


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


class AnnotateGroupFn(beam.DoFn):
    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, keyed: tuple[str, Iterable[tuple]]) -> Iterator[dict]:
        content_hash, members = keyed
        members = list(members)
        for member, row in zip(members, annotate_group(content_hash, members)):
            self._counters.passed(member[4])
            yield row
