"""Members and clusters of the near-dedup stage: the member tuple, the representative order, the
annotation rows, and the DoFns that assemble a document's parts and choose each cluster's representative.

A member is what the representative choice and a document's annotation
need, a plain tuple made at signing (:func:`member_of`). :class:`AssembleFn`
follows the ``CoGroupByKey`` on the doc group of
:class:`~beam_pipeline.transforms.near_dedup.AssignClusters`,
:class:`ClusterFn` the ``GroupByKey`` on the label's node group, and
:class:`MemberRowFn` the check of a member against its representative
(``docs/near_dedup.md``, "Clusters and representatives").
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.dedup.cluster_alarms import size_bucket
from beam_pipeline.dedup.repetition import merge_ranges
from beam_pipeline.records.accounting import CountingDoFn, Tally
from beam_pipeline.records.hashing import stable_hash64
from beam_pipeline.transforms.connected_components import BundleBlocksFn
from beam_pipeline.transforms.near_dedup_params import (
    CHECK,
    LABEL,
    LARGE_CLUSTERS,
    MEMBER,
    PREVIOUS,
    ROWS,
    SIZES,
    SPAN,
    STAGE,
    NearDedupParams,
)

# A member is a plain tuple (cheap to encode); the fields up to _SOURCE are the representative order.
_PRIOR, _RANK, _NO_QUALITY, _QUALITY, _NO_DATE, _DATE, _DOC_ID, _SOURCE, _SIGNED, BOILERPLATE, _LENGTH = range(11)

#: Counter of the clusters whose representative is more than :data:`SHORT_SHARE` shorter than the
#: cluster's median length (the seed's check of the representative order).
SHORT_REPRESENTATIVE = "representative_short"
SHORT_SHARE = 0.2


def member_of(document: dict, *, signed: bool = True, boilerplate: tuple = (), previous: bool = False) -> tuple:
    """The fields of a document the representative choice and its annotation need.

    ``document["annotation"]`` is the quality term (``near_dedup.representative.quality``, a score of
    a cascade layer before the stage; higher is better), kept to 0.01 so that near-equal scores fall
    through to the date; a document without it comes after those with one. ``document["text"]``
    gives the length (None for a previous version's document)."""
    quality = document.get("annotation")
    known = quality is not None and quality == quality  # NaN counts as missing
    text = document.get("text")
    return (
        0 if previous else 1,
        document["source_rank"],
        not known,
        -round(float(quality), 2) if known else 0.0,
        document["date"] is None,
        document["date"] or "",
        document["doc_id"],
        document["source"],
        signed,
        boilerplate,
        None if text is None else len(text),
    )


def representative_order(member: tuple) -> tuple:
    """Total order; the minimum is the representative (DESIGN.md, seed 000): documents of a previous
    version first, then source rank, then quality (highest first, missing last), then the earliest
    date (missing last), then doc_id."""
    return member[:_SOURCE]


def member_sample(doc_ids: list[str], seed: int, count: int) -> list[str]:
    """A cluster's deterministic member sample: the ``count`` doc_ids of least seeded hash, sorted."""
    return sorted(sorted(doc_ids, key=lambda d: (stable_hash64(seed, "sample", d), d))[:count])


def cluster_row(representative: str, label: str, size: int, sample: list[str]) -> dict:
    """A ``large_clusters`` / ``largest_clusters`` row (:data:`~beam_pipeline.storage.schemas.LARGE_CLUSTER`)."""
    return {"doc_id": representative, "cluster_id": label, "size": size, "sampled_members": sample}


def short_representative(representative: tuple, members: list[tuple]) -> bool:
    """Whether the representative is more than :data:`SHORT_SHARE` shorter than the median length of the
    cluster's members of known length (the median of an even count is the mean of the middle two)."""
    lengths = sorted(m[_LENGTH] for m in members if m[_LENGTH] is not None)
    if representative[_LENGTH] is None or not lengths:
        return False
    middle = len(lengths) // 2
    median = lengths[middle] if len(lengths) % 2 else (lengths[middle - 1] + lengths[middle]) / 2
    return representative[_LENGTH] < (1.0 - SHORT_SHARE) * median


def annotation_row(
    member: tuple,
    cluster_id: str | None,
    size: int,
    representative: str,
    duplicate: bool,
    large: bool,
    spans: list[tuple[int, int]],
) -> dict:
    return {
        "doc_id": member[_DOC_ID],
        "signed": member[_SIGNED],
        "cluster_id": cluster_id,
        "cluster_size": size,
        "representative": representative,
        "is_duplicate": duplicate,
        "large_cluster": large,
        "boilerplate_lines": list(member[BOILERPLATE]),
        "repeated_spans": [{"start": s, "end": e} for s, e in spans],
    }


class AssembleFn(BundleBlocksFn):
    """(doc group, {member, previous, label, span: [blocks of (doc_id, value)]}) -> per document, a row
    (not clustered, tagged ``rows``) or (label, entry) to cluster, in blocks per node group of the label."""

    def setup(self):
        self.tally = Tally(STAGE)

    def process(self, joined: tuple[int, dict]) -> Iterator:
        _, blocks = joined
        by_document: dict[str, dict[str, list]] = {}
        for part, part_blocks in blocks.items():
            for block in part_blocks:
                for doc_id, value in block:
                    by_document.setdefault(doc_id, {}).setdefault(part, []).append(value)
        for doc_id in sorted(by_document):
            assembled = self._assemble(doc_id, by_document[doc_id])
            if isinstance(assembled, dict):
                yield beam.pvalue.TaggedOutput(ROWS, assembled)
            elif assembled is not None:
                self._out.add(assembled[0], assembled)
        yield from self._flush_if_full()

    def finish_bundle(self):
        yield from super().finish_bundle()
        yield from self.tally.tagged_at_bundle_end()

    def _assemble(self, doc_id: str, parts: dict[str, list]) -> tuple | dict | None:
        """(cluster label, (member, new, spans)) for a document in a cluster, its row for a document of
        this corpus in none, None for a previous version's document in none."""
        members, previous = parts.get(MEMBER, ()), parts.get(PREVIOUS, ())
        if members:
            member = members[0]
            if previous:  # the same document is in a previous version
                member = (0,) + member[1:]
        elif previous:  # (several buckets, or several earlier versions, may name it)
            member = min(previous, key=representative_order)
        else:  # spans of a document that was dead-lettered
            return None
        new = bool(members)
        spans = tuple(merge_ranges(parts.get(SPAN, ())))
        if spans:
            self.tally.inc("span_documents")
        labels = parts.get(LABEL, ())
        if labels:
            return min(labels), (member, new, spans)
        if not new:
            return None
        self.tally.passed(member[_SOURCE])
        if member[_PRIOR] == 0:
            self.tally.inc("previous_version_copies")
        return annotation_row(member, None, 1, doc_id, member[_PRIOR] == 0, False, spans)


class ClusterFn(CountingDoFn):
    """(label group, [blocks of (cluster label, (member, new, spans))]) -> rows per cluster; large clusters:
    a report and pairs to verify."""

    def __init__(self, params: NearDedupParams):
        super().__init__(STAGE)
        self._cap = params.max_cluster_size
        self._sample = params.sample_members
        self._seed = params.seed

    def process(self, grouped: tuple[int, Iterable[tuple]]) -> Iterator:
        clusters: dict[str, list[tuple]] = {}
        for block in grouped[1]:
            for label, entry in block:
                clusters.setdefault(label, []).append(entry)
        for label in sorted(clusters):
            yield from self._cluster(label, clusters[label])

    def _cluster(self, label: str, entries: list[tuple]) -> Iterator:
        entries = sorted(entries, key=lambda e: representative_order(e[0]))
        size = len(entries)
        representative = entries[0][0][_DOC_ID]
        large = size > self._cap
        # every cluster competes for the ledger's largest (the alarms' input) with a sample of its members,
        # so what travels to the combine stays bounded
        sample = member_sample([e[0][_DOC_ID] for e in entries], self._seed, self._sample)
        yield beam.pvalue.TaggedOutput(SIZES, (size, label, representative, tuple(sample)))
        self.tally.inc("large_clusters" if large else "clusters")
        self.tally.inc(size_bucket(size))
        if short_representative(entries[0][0], [e[0] for e in entries]):
            self.tally.inc(SHORT_REPRESENTATIVE)
        if large:
            yield beam.pvalue.TaggedOutput(LARGE_CLUSTERS, cluster_row(representative, label, size, sample))
        for member, new, spans in entries:
            if not new:
                continue
            doc_id = member[_DOC_ID]
            in_previous = member[_PRIOR] == 0
            if doc_id != representative and not in_previous:
                # removed only if it is a near duplicate of the representative itself, not through a chain
                yield beam.pvalue.TaggedOutput(CHECK, (representative, doc_id, (member, spans, label, size, large)))
                continue
            duplicate = doc_id != representative or in_previous
            self.tally.passed(member[_SOURCE])
            self.tally.inc("clustered_documents")
            if duplicate:
                self.tally.inc("near_duplicates")
            yield annotation_row(member, label, size, representative, duplicate, large, spans)


class MemberRowFn(CountingDoFn):
    """(representative, doc_id, (member, spans, label, size, large), verified) -> the member's row: a
    duplicate of the representative when verified against it, else kept as its own representative."""

    def __init__(self):
        super().__init__(STAGE)

    def process(self, checked: tuple) -> Iterator[dict]:
        representative, doc_id, (member, spans, label, size, large), verified = checked
        self.tally.passed(member[_SOURCE])
        self.tally.inc("clustered_documents")
        if large:
            self.tally.inc(f"large_cluster_{'verified' if verified else 'rejected'}")
        if verified:
            self.tally.inc("near_duplicates")
        yield annotation_row(member, label, size, representative if verified else doc_id, verified, large, spans)
