"""Stage 4, near dedup: clusters of near-duplicate documents, boilerplate lines, repeated spans.

Input: ``documents`` of the ingest layer (``doc_id``, ``source``,
``source_rank``, ``date``, ``text``) and, for incremental dedup, the
``signatures`` of earlier near-dedup layers (``near_dedup.against``).
Outputs:

* ``annotations`` (:data:`~beam_pipeline.storage.schemas.NEAR_DEDUP`): one row per
  document: its cluster, the cluster's representative, ``is_duplicate``, and
  the boilerplate lines and repeated spans that ``select`` strips. Nothing is
  deleted here; the policy rule ``near_duplicate`` decides.
* ``signatures`` (:data:`~beam_pipeline.storage.schemas.NEAR_SIGNATURE`): MinHash
  signature, band keys, SimHash and block keys and distinct shingle count of
  every signed document: the persisted band index that a later snapshot
  dedups against.
* ``large_clusters`` (:data:`~beam_pipeline.storage.schemas.LARGE_CLUSTER`): clusters
  above ``max_cluster_size``, with a deterministic sample of members.
* ``largest_clusters`` (the same schema): the ``LEDGER_CLUSTERS`` largest
  clusters of any size, what the cluster alarms read.

The data flow, every grouping the runner's own (``docs/near_dedup.md`` has
the reasoning and the numbers)::

    documents partition i --RepeatedLines (CombinePerKey(sum) of line keys)--> side input
      |                                    v  (boilerplate keys, template keys)
      +--Sign (one task per partition): writes signatures partition i itself
      |    -> (doc group, block of (doc_id, member))  (doc group, block of (doc_id, layer, payload))
      |       (key group, block of (band key, doc_id))  (key group, block of (block key, doc_id, fingerprint))
      |       (+ previous versions' signature partitions: payloads and keys alike)
      |                                    v
      |    MinHashEdges: GroupByKey(key group) -> per shared band key: star edges (min doc_id, other)
      |                  -> VerifyPairs: CoGroupByKey(group of a, signature blocks, shingle set blocks),
      |                                  CoGroupByKey(group of b, signature blocks, the sets of b asked for)
      |                     (PairCheck: two tiers on exact shingle sets by default, dedup/verify.py)
      |    SimHashEdges: GroupByKey(key group) -> per shared block key: pairs within max_hamming bits
      |                                    v
      |    ConnectedComponents: large-star / small-star rounds, a GroupByKey(node group) per step
      |                                    v  (doc group, block of (doc_id, label))
      +--RepeatedSpans: GroupByKey(window hash) -> (doc_id, range to cut)
                                           v
       AssignClusters: CoGroupByKey(doc group) of blocks of member, label, previous-version members, spans
           -> documents in no cluster: their row
           -> GroupByKey(node group of the label, blocks) -> per label: representative = min(previous version
                  first, source rank, -quality (missing last), date (missing last), doc_id)
                  +-- every other member: (representative, member) -> VerifyPairs, the same two joins and
                  |   PairCheck as the candidates: a duplicate only if it passes against the representative
                  |   itself, else kept as its own representative (no removal through a chain, issue 41)
                  +-- size > max_cluster_size: also reported (large_clusters)
                  +-- every cluster: (size, label, representative, members) -> Top.PerKey -> largest_clusters
           -> annotation rows (the build writes them, partitioned and sorted by doc_id)

What is grouped is small: doc_ids, band keys, member tuples (rank, quality,
date, doc_id, source, length), signatures (``num_perm`` x 4 bytes), labels and
character ranges; with ``two_tier.measure: exact``, the default, or ``verify:
jaccard`` also the sorted distinct shingle hashes (~4x the text), apart from
the signatures: every document's through the candidates' first verification
join only, then the pairs' ends'
(:class:`~beam_pipeline.transforms.near_dedup_verify.VerifyPairs`). Text is read by the
tasks of its partition only. Every grouping key is
a str (doc_id, cluster label) or a non-negative int (key groups of the band
and block keys, line and window keys), typed with ``StrKeyed``/``IntKeyed``.
LSH keys travel in blocks, one per signing task and key group
(:class:`~beam_pipeline.transforms.near_dedup_blocks.LshKeyBlocks`), not one runner element per key. Representatives are
minima over a total order ending in doc_id, and cluster ids are the smallest
doc_id of the component, so neither depends on the runner, the parallelism or
the order of delivery. Counts are data (:mod:`beam_pipeline.records.accounting`): every
deciding step emits its tallies on a ``counts`` output.

This module is the stage's data flow: its composite transforms and their
``expand``. The pieces they wire live beside it, each in a module of its
own: the stage's names and :class:`NearDedupParams`
(:mod:`~beam_pipeline.transforms.near_dedup_params`), signing
(:mod:`~beam_pipeline.transforms.near_dedup_signing`), the blocks that carry
signatures, members and LSH keys (:mod:`~beam_pipeline.transforms.near_dedup_blocks`),
the buckets' candidate pairs (:mod:`~beam_pipeline.transforms.near_dedup_candidates`),
the verification joins and :class:`PairCheck`
(:mod:`~beam_pipeline.transforms.near_dedup_verify`), members, representatives
and annotation rows (:mod:`~beam_pipeline.transforms.near_dedup_clusters`) and
the group counts (:mod:`~beam_pipeline.transforms.near_dedup_groups`).

**After a kill** (:mod:`beam_pipeline.transforms.task_ledger`): the build's
writer records each partition of ``annotations``, ``large_clusters`` and
``largest_clusters`` it writes, and a rerun keeps the finished ones (their
rows are dropped before the writer's ``GroupByKey``). Everything before the
write restarts, signing included (it writes ``signatures`` again): a cluster
can span every partition, and a shuffle's result does not outlive its job;
what signing sends into the shuffles is more than its ``signatures``
partition holds (each member's quality term, boilerplate lines and length,
and the members of documents too short to sign), so a signed partition is
not replayed from it (``docs/operations.md``, "Resuming, retries and faults").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

import apache_beam as beam

from beam_pipeline.config.corpus import ConfigError
from beam_pipeline.dedup.cluster_alarms import LEDGER_CLUSTERS, largest_clusters
from beam_pipeline.dedup.config import NearDedupConfig
from beam_pipeline.dedup.repetition import LINES_VERSION, SPANS_VERSION
from beam_pipeline.records.accounting import COUNTS
from beam_pipeline.storage.layers import EarlierLayerError, earlier_layer, join, part_name
from beam_pipeline.storage.schemas import LARGE_CLUSTER, NEAR_DEDUP, NEAR_SIGNATURE
from beam_pipeline.transforms.bundle_budget import bundle_budget
from beam_pipeline.transforms.connected_components import LABELS, ConnectedComponents
from beam_pipeline.transforms.gate import DocumentPartitions
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed
from beam_pipeline.transforms.layer_io import PartitionIndexes, WrittenPartitions
from beam_pipeline.transforms.line_dedup import RepeatedLines, RepeatedSpans
from beam_pipeline.transforms.near_dedup_blocks import DocBlocks, shingles_apart
from beam_pipeline.transforms.near_dedup_candidates import MinHashBucketFn, SimHashBucketFn
from beam_pipeline.transforms.near_dedup_clusters import AssembleFn, ClusterFn, MemberRowFn, cluster_row
from beam_pipeline.transforms.near_dedup_groups import DOCUMENTS_PER_PARTITION, stage_groups
from beam_pipeline.transforms.near_dedup_params import (
    ANNOTATIONS,
    BANDS,
    BLOCKS,
    CHECK,
    CHECKED,
    CLUSTERED,
    DEAD_LETTER,
    EDGES,
    KEYS,
    LABEL,
    LARGE_CLUSTERS,
    MEMBER,
    MEMBERS,
    PAIRS,
    PAYLOADS,
    PREVIOUS,
    ROWS,
    SELECTED,
    SHINGLES,
    SIGNATURE,
    SIGNATURES,
    SIZES,
    SPAN,
    STAGE,
    NearDedupParams,
)
from beam_pipeline.transforms.near_dedup_signing import PreviousSignaturesFn, SignPartitionFn
from beam_pipeline.transforms.near_dedup_verify import PairCheck, VerifyPairs

VERSION = "3"  # 2: verify two_tier (default), shingle_count in signatures; 3: every member verified against
# its representative, quality term and length in the member, template lines out whenever the rest can be signed
#: The largest clusters of any size (at most ``LEDGER_CLUSTERS``, chosen by the runner's combine): what the
#: cluster alarms read (``dedup/cluster_alarms.py``), so a cluster below ``max_cluster_size`` that holds a
#: large share of a small corpus alarms too.
LARGEST_CLUSTERS = "largest_clusters"
OUTPUTS = {
    ANNOTATIONS: NEAR_DEDUP,
    SIGNATURES: NEAR_SIGNATURE,
    LARGE_CLUSTERS: LARGE_CLUSTER,
    LARGEST_CLUSTERS: LARGE_CLUSTER,
}


def summarize_layer(layer, partitions: int) -> dict:
    """Extra ledger fields of a near-dedup layer: its largest clusters of any size (``dedup/cluster_alarms.py``)."""
    directory = layer.output_path(LARGEST_CLUSTERS)
    return {
        "largest_clusters": largest_clusters([join(directory, part_name(i, partitions)) for i in range(partitions)])
    }


def stage_config(config: NearDedupConfig) -> dict:
    """The layer-key slice: the config (without ``against``, whose layer keys are inputs, ``alarms``,
    which judge the layer without shaping it, and ``key_groups`` and ``max_group_entries``, which only
    batch the runner's elements) and versions."""
    params = NearDedupParams.from_config(config)
    return {
        **config.model_dump(mode="json", exclude={"against", "alarms", "key_groups", "max_group_entries"}),
        "signature": params.signature_config(),
        "versions": {"lines": LINES_VERSION, "spans": SPANS_VERSION},
    }


# --- the stage ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PreviousLayer:
    """An earlier near-dedup layer to dedup against: its key, signature partitions and their rows (its
    signed documents, which join this corpus's in every grouping: :func:`stage_groups`)."""

    key: str
    path: str
    signature_paths: tuple[str, ...]
    documents: int = 0


def resolve_against(root: str, entry: str, config: NearDedupConfig) -> PreviousLayer:
    """An ``against`` entry (a near_dedup layer path/URI, or a dataset id under ``root``) -> its layer.

    Raises :class:`ConfigError` when the layer is missing, incomplete or was
    made with incompatible signature settings (its band keys would never meet
    ours).
    """
    try:
        path, ledger = earlier_layer(root, entry, STAGE, "near_dedup.against")
    except EarlierLayerError as err:
        raise ConfigError(str(err)) from None
    ours = NearDedupParams.from_config(config).signature_config()
    theirs = ledger["config"].get("signature")
    if theirs != ours:
        differing = sorted(k for k in ours if (theirs or {}).get(k) != ours[k])
        raise ConfigError(
            f"near_dedup.against: {entry!r} was made with other signature settings "
            f"({', '.join(differing)}: {[(theirs or {}).get(k) for k in differing]} vs ours "
            f"{[ours[k] for k in differing]}); its band keys cannot match this config's"
        )
    parts = ledger["outputs"][SIGNATURES]["parts"]
    return PreviousLayer(
        ledger["key"],
        path,
        tuple(join(path, SIGNATURES, p["name"]) for p in parts),
        sum(int(p.get("rows", 0)) for p in parts),
    )


def build_stage(
    pipeline,
    config: NearDedupConfig,
    documents: "DocumentPartitions | list[str]",
    previous: list[PreviousLayer],
    layer_path: str,
    after: Iterable = (),
    estimated_documents: int | None = None,
) -> dict:
    """The stage in the build's job: {"annotations", "signatures" (written by the signing tasks),
    "large_clusters", "dead_letter", "counts"} (:class:`AnnotateNearDuplicates`).

    ``layer_path`` is the layer being built: the signing tasks write its
    ``signatures`` partitions themselves. The documents are read once every
    layer of ``after`` (PCollections of one ``Committed``) is committed.
    ``estimated_documents`` (the snapshot's, :func:`estimated_documents`) sets the group counts.
    """
    return pipeline | "NearDedup" >> AnnotateNearDuplicates(
        NearDedupParams.from_config(config),
        DocumentPartitions.of(documents),
        tuple(previous),
        layer_path,
        tuple(after),
        estimated_documents,
    )


class AnnotateNearDuplicates(beam.PTransform):
    """pbegin -> {"annotations": rows, "signatures": WrittenPartitions, "large_clusters": rows,
    "dead_letter": rows, "counts": a tuple of PCollections of tallies}.

    ``documents`` are the partitions of the ingest layer's documents
    (partition ``i`` holds the doc_ids with ``xxh3(doc_id) % n == i``, sorted),
    with the stage's gate when dedup is gated in the cascade
    (:mod:`beam_pipeline.transforms.gate`: every pass reads the same documents);
    ``previous`` the earlier layers to dedup against (committed).
    """

    def __init__(
        self,
        params: NearDedupParams,
        documents: "DocumentPartitions | tuple[str, ...]",
        previous: tuple[PreviousLayer, ...],
        layer_path: str,
        after: tuple = (),
        estimated_documents: int | None = None,
    ):
        super().__init__()
        self._params = params
        self._documents = DocumentPartitions.of(documents)
        self._previous = previous
        self._layer_path = layer_path
        self._after = after
        self._estimated_documents = estimated_documents

    def expand(self, pbegin):
        params, documents, after = self._params, self._documents, self._after
        groups = stage_groups(
            params,
            documents.count,
            sum(previous.documents for previous in self._previous)
            + (
                self._estimated_documents
                if self._estimated_documents is not None
                else documents.count * DOCUMENTS_PER_PARTITION
            ),
        )
        side = []
        if params.lines:
            # Counted over a read of its own: the keys must be complete before any document is signed,
            # and signing reads its partition itself, so no document waits in the runner for them.
            lines = pbegin | "RepeatedLines" >> RepeatedLines(
                documents, params.line_min_repeats, params.signature_line_threshold(), params.line_min_chars, after
            )
            side = [beam.pvalue.AsSingleton(lines, default_value=((), ()))]
        signed = (
            pbegin
            | "Partitions" >> PartitionIndexes(documents.count, after)
            | "Sign"
            >> beam.ParDo(
                SignPartitionFn(
                    params, documents, join(self._layer_path, SIGNATURES), groups, bundle_budget(pbegin.pipeline)
                ),
                *side,
            )
            .with_output_types(
                IntKeyed,
                **{
                    PAYLOADS: IntKeyed,
                    SHINGLES: IntKeyed,
                    BANDS: IntKeyed,
                    BLOCKS: IntKeyed,
                    SIGNATURES: Any,
                    DEAD_LETTER: Any,
                    COUNTS: Any,
                },
            )
            .with_outputs(SIGNATURES, PAYLOADS, SHINGLES, BANDS, BLOCKS, DEAD_LETTER, COUNTS, main=MEMBERS)
        )
        payloads, bands, blocks = [signed[PAYLOADS]], [signed[BANDS]], [signed[BLOCKS]]
        shingle_sets = [signed[SHINGLES]]
        if self._previous:
            old = (
                pbegin
                | "PreviousSignaturePartitions"
                >> beam.Create(
                    [
                        (layer, path)
                        for layer, previous in enumerate(self._previous, 1)
                        for path in previous.signature_paths
                    ],
                    reshuffle=False,
                )
                | "SpreadPreviousPartitions" >> beam.Reshuffle()
                | "ReadPreviousSignatures"
                >> beam.ParDo(PreviousSignaturesFn(params, groups, bundle_budget(pbegin.pipeline)))
                .with_output_types(IntKeyed, **{SHINGLES: IntKeyed, BANDS: IntKeyed, BLOCKS: IntKeyed})
                .with_outputs(SHINGLES, BANDS, BLOCKS, main=PAYLOADS)
            )
            payloads.append(old[PAYLOADS])
            shingle_sets.append(old[SHINGLES])
            bands.append(old[BANDS])
            blocks.append(old[BLOCKS])
        # (doc group, block of (doc_id, layer, payload)); layer 0: this corpus
        signatures = _flatten(payloads, "AllSignatures")
        # (doc group, block of (doc_id, layer, shingle set)): the sets that travel apart (shingles_apart)
        shingles = {SHINGLES: _flatten(shingle_sets, "AllShingleSets")} if shingles_apart(params) else {}

        found = []  # per finder: {"edges", "previous" (previous-version members), "counts"}
        if params.use_minhash:
            found.append(
                {KEYS: _flatten(bands, "AllBandKeys"), SIGNATURE: signatures, **shingles}
                | "MinHashEdges" >> MinHashEdges(params, groups)
            )
        if params.use_simhash:
            found.append({KEYS: _flatten(blocks, "AllBlockKeys")} | "SimHashEdges" >> SimHashEdges(params))
        components = tuple(f[EDGES] for f in found) | "Components" >> ConnectedComponents(
            params.max_rounds, STAGE, groups, label_blocks=True
        )
        counts = [signed[COUNTS], *(c for f in found for c in f[COUNTS]), components[COUNTS]]

        # every part in blocks per doc group: (group, block of (doc_id, value))
        parts = {MEMBER: signed[MEMBERS], LABEL: components[LABELS]}
        if self._previous:
            parts[PREVIOUS] = _flatten([f[PREVIOUS] for f in found], "AllPreviousMembers") | (
                "PreviousMemberBlocks" >> DocBlocks(groups)
            )
        if params.span_sources:
            parts[SPAN] = (
                pbegin
                | "RepeatedSpans"
                >> RepeatedSpans(documents, params.span_sources, params.span_min_words, params.seed, after)
                | "SpanBlocks" >> DocBlocks(groups)
            )
        if shingles and not params.use_simhash:
            # every member of a cluster is an end of a verified candidate pair: their sets are selected already
            shingles = {SHINGLES: found[0][SELECTED]}
        clusters = {**parts, SIGNATURE: signatures, **shingles} | "Clusters" >> AssignClusters(params, groups)
        counts.extend(clusters[COUNTS])
        return {
            ANNOTATIONS: clusters[ANNOTATIONS],
            SIGNATURES: WrittenPartitions(signed[SIGNATURES]),
            LARGE_CLUSTERS: clusters[LARGE_CLUSTERS],
            LARGEST_CLUSTERS: clusters[LARGEST_CLUSTERS],
            DEAD_LETTER: signed[DEAD_LETTER],
            COUNTS: tuple(counts),
        }


def _flatten(collections: list, label: str):
    return collections[0] if len(collections) == 1 else tuple(collections) | label >> beam.Flatten()


class MinHashEdges(beam.PTransform):
    """{"keys": (key group, band key block), "signature": (doc group, block of (doc_id, layer, payload)),
    "shingles" (optional): (doc group, block of (doc_id, layer, shingle set))}
    -> {"edges": verified (a, b), "previous": (doc_id, member), "counts", "selected": the shingle sets
    of the candidates' ends (with "shingles" only)}.

    One ``GroupByKey`` on the band keys' group (:class:`LshKeyBlocks`) brings
    each band bucket together and makes a star of it (:class:`MinHashBucketFn`); each distinct candidate pair is then verified
    (unless ``verify: none``) by joining both ends with their signatures (:class:`VerifyPairs`).
    """

    def __init__(self, params: NearDedupParams, groups: int):
        super().__init__()
        self._params = params
        self._groups = groups

    def expand(self, inputs):
        buckets = (
            inputs[KEYS]
            | "GroupByBandKeyGroup" >> beam.GroupByKey()
            | "StarCandidates"
            >> beam.ParDo(MinHashBucketFn())
            .with_output_types(tuple[str, str], **{PREVIOUS: StrKeyed, COUNTS: Any})
            .with_outputs(PREVIOUS, COUNTS, main=PAIRS)
        )
        edges, counts = buckets[PAIRS], [buckets[COUNTS]]
        selected = {}
        if self._params.verify != "none":
            shingles = {SHINGLES: inputs[SHINGLES]} if SHINGLES in inputs else {}
            verified = {
                PAIRS: edges | "AsCandidatePairs" >> beam.Map(lambda e: (e[0], e[1], None)),
                SIGNATURE: inputs[SIGNATURE],
                **shingles,
            } | "VerifyCandidates" >> VerifyPairs(PairCheck(self._params, "minhash"), "candidate", self._groups)
            edges = verified[CHECKED] | "KeepVerified" >> beam.FlatMap(lambda r: [(r[0], r[1])] if r[3] else [])
            counts.append(verified[COUNTS])
            selected = {SELECTED: verified[SELECTED]} if shingles else {}
        return {EDGES: edges, PREVIOUS: buckets[PREVIOUS], COUNTS: tuple(counts), **selected}


class SimHashEdges(beam.PTransform):
    """{"keys": (key group, block key block)} -> {"edges": (a, b) within
    max_hamming bits, "previous": (doc_id, member), "counts"}: every pair of a block bucket is
    checked exactly (:class:`SimHashBucketFn`), so there is no join."""

    def __init__(self, params: NearDedupParams):
        super().__init__()
        self._params = params

    def expand(self, inputs):
        close = (
            inputs[KEYS]
            | "GroupByBlockKeyGroup" >> beam.GroupByKey()
            | "ClosePairs"
            >> beam.ParDo(SimHashBucketFn(self._params.max_hamming))
            .with_output_types(tuple[str, str], **{PREVIOUS: StrKeyed, COUNTS: Any})
            .with_outputs(PREVIOUS, COUNTS, main=PAIRS)
        )
        return {EDGES: close[PAIRS], PREVIOUS: close[PREVIOUS], COUNTS: (close[COUNTS],)}


class AssignClusters(beam.PTransform):
    """{"member", "label", "previous" (optional), "span" (optional): (doc group, block of (doc_id, value)),
    "signature"} -> {"annotations": rows, "large_clusters": rows, "counts"}.

    ``CoGroupByKey`` on the doc group brings together what annotating a
    document needs: its ``member`` (from signing), its cluster ``label``,
    ``previous``-version members and repeated ``span`` ranges
    (:class:`AssembleFn`). The parts travel in blocks per doc group
    (:func:`doc_blocks`), like the signatures: one element per producing
    bundle and group, not one per document. Documents in no cluster get their row there; the
    others are grouped by cluster label (a ``GroupByKey`` on the label's node
    group, of blocks), where each cluster's representative is chosen
    (:class:`ClusterFn`); members of large
    clusters are verified against it (:class:`VerifyPairs`).
    """

    def __init__(self, params: NearDedupParams, groups: int):
        super().__init__()
        self._params = params
        self._groups = groups

    def expand(self, parts):
        joined = {name: collection for name, collection in parts.items() if name not in (SIGNATURE, SHINGLES)}
        assembled = (
            joined
            | "JoinByDocGroup" >> beam.CoGroupByKey()
            | "Assemble"
            >> beam.ParDo(AssembleFn(self._groups))
            .with_output_types(IntKeyed)
            .with_outputs(ROWS, COUNTS, main=CLUSTERED)
        )
        clusters = (
            assembled[CLUSTERED]  # (group of the cluster label, block of (label, (member, new, spans)))
            | "GroupByClusterGroup" >> beam.GroupByKey()
            | "Representatives"
            >> beam.ParDo(ClusterFn(self._params)).with_outputs(LARGE_CLUSTERS, SIZES, CHECK, COUNTS, main=ROWS)
        )
        largest = (  # a bounded combine (LEDGER_CLUSTERS entries per accumulator) over every cluster, on one int key
            clusters[SIZES]
            | "OneKey" >> beam.Map(lambda entry: (0, entry)).with_output_types(IntKeyed)
            | "LargestClusters" >> beam.CombinePerKey(beam.combiners.TopCombineFn(LEDGER_CLUSTERS, key=_cluster_rank))
            | "LargestClusterRows" >> beam.FlatMap(_largest_rows)
        )
        shingles = {SHINGLES: parts[SHINGLES]} if SHINGLES in parts else {}
        checked = (
            {PAIRS: clusters[CHECK], SIGNATURE: parts[SIGNATURE], **shingles}  # (representative, member, carry)
            | "VerifyAgainstRepresentative"
            >> VerifyPairs(PairCheck(self._params, "any"), "representative", self._groups)
        )
        large = checked[CHECKED] | "MemberRows" >> beam.ParDo(MemberRowFn()).with_outputs(COUNTS, main=ROWS)
        rows = (assembled[ROWS], clusters[ROWS], large[ROWS]) | "AllRows" >> beam.Flatten()
        counts = (assembled[COUNTS], clusters[COUNTS], checked[COUNTS], large[COUNTS])
        return {
            ANNOTATIONS: rows,
            LARGE_CLUSTERS: clusters[LARGE_CLUSTERS],
            LARGEST_CLUSTERS: largest,
            COUNTS: counts,
        }


def _cluster_rank(entry: tuple) -> tuple:
    """Larger first, then the smaller cluster id (``Top.Of`` keeps the greatest keys)."""
    size, label, _representative, _members = entry
    return size, tuple(-b for b in label.encode("utf-8")) + (1,)


def _largest_rows(keyed: tuple[int, list[tuple]]) -> Iterator[dict]:
    """The ``largest_clusters`` rows: (0, [(size, label, representative, member sample)]) -> a row per cluster."""
    for size, label, representative, sample in keyed[1]:
        yield cluster_row(representative, label, size, list(sample))
