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
join only, then the pairs' ends' (:class:`VerifyPairs`). Text is read by the
tasks of its partition only. Every grouping key is
a str (doc_id, cluster label) or a non-negative int (key groups of the band
and block keys, line and window keys), typed with ``StrKeyed``/``IntKeyed``.
LSH keys travel in blocks, one per signing task and key group
(:class:`LshKeyBlocks`), not one runner element per key. Representatives are
minima over a total order ending in doc_id, and cluster ids are the smallest
doc_id of the component, so neither depends on the runner, the parallelism or
the order of delivery. Counts are data (:mod:`beam_pipeline.records.accounting`): every
deciding step emits its tallies on a ``counts`` output.

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
import itertools
from typing import Any, Iterable, Iterator

import apache_beam as beam
import numpy as np

from beam_pipeline.config.corpus import ConfigError
from beam_pipeline.dedup import minhash, simhash, verify
from beam_pipeline.dedup.cluster_alarms import LEDGER_CLUSTERS, largest_clusters, size_bucket
from beam_pipeline.dedup.config import NearDedupConfig
from beam_pipeline.dedup.repetition import LINES_VERSION, SPANS_VERSION, line_keys, merge_ranges
from beam_pipeline.dedup.shingling import NORMALIZATION_VERSION, shingle_hashes
from beam_pipeline.dedup.shingling import distinct as distinct_shingles
from beam_pipeline.records.accounting import COUNTS, LOST_IN_JOIN, CountingDoFn, Tally
from beam_pipeline.records.hashing import bucket_of, stable_hash64
from beam_pipeline.storage.layers import EarlierLayerError, earlier_layer, join, part_name, read_partition_rows
from beam_pipeline.storage.schemas import LARGE_CLUSTER, NEAR_DEDUP, NEAR_SIGNATURE, dead_letter_row
from beam_pipeline.transforms.blocks import BLOCK_BYTES, windowed
from beam_pipeline.transforms.bundle_budget import (
    WHOLE_ELEMENTS,
    BudgetedExpandFn,
    BundleBudget,
    bundle_budget,
    output_bytes,
)
from beam_pipeline.transforms.connected_components import (
    FLUSH_EDGES,
    LABELS,
    BundleBlocksFn,
    ConnectedComponents,
    NodeBlocks,
)
from beam_pipeline.transforms.gate import DocumentPartitions
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed
from beam_pipeline.transforms.layer_io import PartitionIndexes, WrittenPartitions, write_layer_partition
from beam_pipeline.transforms.line_dedup import RepeatedLines, RepeatedSpans, in_sorted

STAGE = "near_dedup"
VERSION = "3"  # 2: verify two_tier (default), shingle_count in signatures; 3: every member verified against
# its representative, quality term and length in the member, template lines out whenever the rest can be signed
ANNOTATIONS, SIGNATURES, LARGE_CLUSTERS, DEAD_LETTER = "annotations", "signatures", "large_clusters", "dead_letter"
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
INPUT_COLUMNS = ["doc_id", "source", "source_rank", "date", "text"]

#: The columns of a signature row that verification reads (:class:`PairCheck`'s payload).
PAYLOAD_COLUMNS = ["minhash", "simhash", "shingles", "shingle_count"]
#: The place of the shingle set in a payload whose set travels apart (:func:`add_payload`).
SHINGLES_APART = True

_MEMBERS, _PAYLOADS, _BANDS, _BLOCKS = "members", "payloads", "bands", "blocks"
_MEMBER, _PREVIOUS, _LABEL, _SPAN = "member", "previous", "label", "span"
_CLUSTERED, _CHECK, _ROWS, _SIZES = "clustered", "check", "rows", "sizes"
_KEYS, _SIGNATURE, _EDGES, _PAIRS, _CHECKED = "keys", "signature", "edges", "pairs", "checked"
_SHINGLES, _SELECTED = "shingles", "selected"


# --- parameters -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NearDedupParams:
    """The resolved knobs of the stage (bands and rows chosen), picklable for workers."""

    seed: int
    shingle_kind: str
    shingle_size: int
    use_minhash: bool
    num_perm: int
    bands: int
    rows: int
    threshold: float
    verify: str
    verify_threshold: float
    low_threshold: float
    containment_threshold: float
    short_shingles: int
    short_threshold: float
    exact_sets: bool
    use_simhash: bool
    max_hamming: int
    blocks: int
    max_rounds: int
    max_cluster_size: int
    sample_members: int
    key_groups: int | None
    max_group_entries: int
    lines: bool
    line_min_repeats: int
    line_signature_min_repeats: int | None
    line_min_chars: int
    span_sources: tuple[str, ...]
    span_min_words: int
    quality: str | None = None

    @classmethod
    def from_config(cls, config: NearDedupConfig) -> "NearDedupParams":
        m, tiers = config.minhash, config.two_tier
        if m.bands is not None:
            bands, rows = m.bands, m.rows
        else:  # two tiers accept pairs below minhash.threshold: their candidates come from a lower curve
            target = tiers.lsh_threshold if config.verify == "two_tier" else m.threshold
            bands, rows = minhash.optimal_bands(target, m.num_perm, m.fp_weight, m.fn_weight)
        return cls(
            seed=config.seed,
            shingle_kind=config.shingles.kind,
            shingle_size=config.shingles.size,
            use_minhash=config.method in ("minhash", "both"),
            num_perm=m.num_perm,
            bands=bands,
            rows=rows,
            threshold=m.threshold,
            verify=config.verify,
            verify_threshold=config.verify_threshold if config.verify_threshold is not None else m.threshold,
            low_threshold=tiers.low_threshold,
            containment_threshold=tiers.containment_threshold,
            short_shingles=tiers.short_shingles,
            short_threshold=tiers.short_threshold,
            exact_sets=config.verify == "jaccard" or (config.verify == "two_tier" and tiers.measure == "exact"),
            use_simhash=config.method in ("simhash", "both"),
            max_hamming=config.simhash.max_hamming,
            blocks=config.simhash.blocks or config.simhash.max_hamming + 1,
            max_rounds=config.max_rounds,
            max_cluster_size=config.max_cluster_size,
            sample_members=config.sample_members,
            key_groups=config.key_groups,
            max_group_entries=config.max_group_entries,
            lines=config.lines.enabled,
            line_min_repeats=config.lines.min_repeats,
            line_min_chars=config.lines.min_chars,
            line_signature_min_repeats=config.lines.signature_min_repeats,
            span_sources=tuple(sorted(config.substrings.sources)),
            span_min_words=config.substrings.min_words,
            quality=config.representative.quality,
        )

    def signature_line_threshold(self) -> int:
        """Lines in more than this many documents stay out of signatures (boilerplate, or template lines)."""
        if self.line_signature_min_repeats is None:
            return self.line_min_repeats
        return min(self.line_min_repeats, self.line_signature_min_repeats)

    def signature_config(self) -> dict:
        """What makes two layers' signatures and band keys comparable (checked for ``against``)."""
        return {
            "normalization": NORMALIZATION_VERSION,
            "seed": self.seed,
            "shingles": {"kind": self.shingle_kind, "size": self.shingle_size},
            "minhash": {"num_perm": self.num_perm, "bands": self.bands, "rows": self.rows}
            if self.use_minhash
            else None,
            "simhash": {"max_hamming": self.max_hamming, "blocks": self.blocks} if self.use_simhash else None,
            "shingle_sets": self.exact_sets,
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
                    _PAYLOADS: IntKeyed,
                    _SHINGLES: IntKeyed,
                    _BANDS: IntKeyed,
                    _BLOCKS: IntKeyed,
                    SIGNATURES: Any,
                    DEAD_LETTER: Any,
                    COUNTS: Any,
                },
            )
            .with_outputs(SIGNATURES, _PAYLOADS, _SHINGLES, _BANDS, _BLOCKS, DEAD_LETTER, COUNTS, main=_MEMBERS)
        )
        payloads, bands, blocks = [signed[_PAYLOADS]], [signed[_BANDS]], [signed[_BLOCKS]]
        shingle_sets = [signed[_SHINGLES]]
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
                .with_output_types(IntKeyed, **{_SHINGLES: IntKeyed, _BANDS: IntKeyed, _BLOCKS: IntKeyed})
                .with_outputs(_SHINGLES, _BANDS, _BLOCKS, main=_PAYLOADS)
            )
            payloads.append(old[_PAYLOADS])
            shingle_sets.append(old[_SHINGLES])
            bands.append(old[_BANDS])
            blocks.append(old[_BLOCKS])
        # (doc group, block of (doc_id, layer, payload)); layer 0: this corpus
        signatures = _flatten(payloads, "AllSignatures")
        # (doc group, block of (doc_id, layer, shingle set)): the sets that travel apart (shingles_apart)
        shingles = {_SHINGLES: _flatten(shingle_sets, "AllShingleSets")} if shingles_apart(params) else {}

        found = []  # per finder: {"edges", "previous" (previous-version members), "counts"}
        if params.use_minhash:
            found.append(
                {_KEYS: _flatten(bands, "AllBandKeys"), _SIGNATURE: signatures, **shingles}
                | "MinHashEdges" >> MinHashEdges(params, groups)
            )
        if params.use_simhash:
            found.append({_KEYS: _flatten(blocks, "AllBlockKeys")} | "SimHashEdges" >> SimHashEdges(params))
        components = tuple(f[_EDGES] for f in found) | "Components" >> ConnectedComponents(
            params.max_rounds, STAGE, groups, label_blocks=True
        )
        counts = [signed[COUNTS], *(c for f in found for c in f[COUNTS]), components[COUNTS]]

        # every part in blocks per doc group: (group, block of (doc_id, value))
        parts = {_MEMBER: signed[_MEMBERS], _LABEL: components[LABELS]}
        if self._previous:
            parts[_PREVIOUS] = _flatten([f[_PREVIOUS] for f in found], "AllPreviousMembers") | (
                "PreviousMemberBlocks" >> DocBlocks(groups)
            )
        if params.span_sources:
            parts[_SPAN] = (
                pbegin
                | "RepeatedSpans"
                >> RepeatedSpans(documents, params.span_sources, params.span_min_words, params.seed, after)
                | "SpanBlocks" >> DocBlocks(groups)
            )
        if shingles and not params.use_simhash:
            # every member of a cluster is an end of a verified candidate pair: their sets are selected already
            shingles = {_SHINGLES: found[0][_SELECTED]}
        clusters = {**parts, _SIGNATURE: signatures, **shingles} | "Clusters" >> AssignClusters(params, groups)
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
            inputs[_KEYS]
            | "GroupByBandKeyGroup" >> beam.GroupByKey()
            | "StarCandidates"
            >> beam.ParDo(MinHashBucketFn())
            .with_output_types(tuple[str, str], **{_PREVIOUS: StrKeyed, COUNTS: Any})
            .with_outputs(_PREVIOUS, COUNTS, main=_PAIRS)
        )
        edges, counts = buckets[_PAIRS], [buckets[COUNTS]]
        selected = {}
        if self._params.verify != "none":
            shingles = {_SHINGLES: inputs[_SHINGLES]} if _SHINGLES in inputs else {}
            verified = {
                _PAIRS: edges | "AsCandidatePairs" >> beam.Map(lambda e: (e[0], e[1], None)),
                _SIGNATURE: inputs[_SIGNATURE],
                **shingles,
            } | "VerifyCandidates" >> VerifyPairs(PairCheck(self._params, "minhash"), "candidate", self._groups)
            edges = verified[_CHECKED] | "KeepVerified" >> beam.FlatMap(lambda r: [(r[0], r[1])] if r[3] else [])
            counts.append(verified[COUNTS])
            selected = {_SELECTED: verified[_SELECTED]} if shingles else {}
        return {_EDGES: edges, _PREVIOUS: buckets[_PREVIOUS], COUNTS: tuple(counts), **selected}


class SimHashEdges(beam.PTransform):
    """{"keys": (key group, block key block)} -> {"edges": (a, b) within
    max_hamming bits, "previous": (doc_id, member), "counts"}: every pair of a block bucket is
    checked exactly (:class:`SimHashBucketFn`), so there is no join."""

    def __init__(self, params: NearDedupParams):
        super().__init__()
        self._params = params

    def expand(self, inputs):
        close = (
            inputs[_KEYS]
            | "GroupByBlockKeyGroup" >> beam.GroupByKey()
            | "ClosePairs"
            >> beam.ParDo(SimHashBucketFn(self._params.max_hamming))
            .with_output_types(tuple[str, str], **{_PREVIOUS: StrKeyed, COUNTS: Any})
            .with_outputs(_PREVIOUS, COUNTS, main=_PAIRS)
        )
        return {_EDGES: close[_PAIRS], _PREVIOUS: close[_PREVIOUS], COUNTS: (close[COUNTS],)}


class VerifyPairs(beam.PTransform):
    """{"pairs": (a, b, carry), "signature": (doc group, block of (doc_id, layer, payload)), "shingles"
    (optional): (doc group, block of (doc_id, layer, shingle set))} -> {"checked": (a, b, carry, ok),
    "counts", "selected" (with "shingles"): (doc group, block of the shingle sets of the pairs' ends)}.

    ``b`` is a document of this corpus; ``a`` of this corpus or of an earlier
    version. The pairs travel in blocks per doc group of ``a``
    (:func:`~beam_pipeline.transforms.connected_components.node_group`, the
    groups of :func:`doc_blocks`) and meet the signatures of that group
    (``CoGroupByKey`` on the group), which drops repeated (a, b, carry) and
    attaches ``a``'s payload from the first layer that has it (this corpus,
    then the ``against`` entries in order); then in blocks per doc group of
    ``b`` they meet those signatures (``CoGroupByKey``), where
    ``check(payload_a, payload_b)`` decides. Counts ``<label>_verified`` and
    ``<label>_rejected`` per distinct (a, b, carry).

    Signatures travel as blocks, not one element per document, because every
    document's signature goes through each join whether or not it is in a pair.

    The exact shingle sets (8 B per distinct shingle, about the text's size)
    do not go through both joins: with :func:`shingles_apart`, a payload holds
    :data:`SHINGLES_APART` in the set's place and the sets come as
    "shingles". Only the first join reads them: each pair also asks, in the
    doc group of ``b``, for ``b``'s set (:class:`_PairRequestsFn`), and the
    first join hands on the sets of its group's ends, ``b``'s with the pairs
    that go to ``b``'s group (:class:`_AttachFirstFn`; :func:`first_payloads`
    puts each set back in its payload) and all of them as "selected", which
    the representatives' check reads instead of every document's set (every
    member of a cluster is an end of a verified candidate pair). Moved
    through four joins for every document, the sets were most of what the
    defaults' verification cost over ``verify: signature``
    (``bench/results/near-dedup-defaults-cost-20261207-b.md``).
    """

    def __init__(self, check, label: str, groups: int):
        super().__init__()
        self._check = check
        self._label = label
        self._groups = groups

    def expand(self, inputs):
        with_sets = _SHINGLES in inputs
        shingles = {_SHINGLES: inputs[_SHINGLES]} if with_sets else {}
        attached = (
            {
                _PAIRS: inputs[_PAIRS]
                | "PairsByFirst" >> beam.ParDo(_PairRequestsFn(self._groups, with_sets)).with_output_types(IntKeyed),
                _SIGNATURE: inputs[_SIGNATURE],
                **shingles,
            }
            | "JoinFirstSignature" >> beam.CoGroupByKey()
            | "AttachFirst"
            >> beam.ParDo(_AttachFirstFn(self._groups))
            .with_output_types(IntKeyed, **{_SELECTED: IntKeyed})
            .with_outputs(_SELECTED, main=_PAIRS)
        )
        checked = (
            {_PAIRS: attached[_PAIRS], _SIGNATURE: inputs[_SIGNATURE]}
            | "JoinSecondSignature" >> beam.CoGroupByKey()
            | "Check" >> beam.ParDo(_CheckFn(self._check, self._label)).with_outputs(COUNTS, main=_CHECKED)
        )
        selected = {_SELECTED: attached[_SELECTED]} if with_sets else {}
        return {_CHECKED: checked[_CHECKED], COUNTS: checked[COUNTS], **selected}


def doc_blocks(entries: Iterable[tuple], groups: int) -> list[tuple[int, tuple]]:
    """Entries whose first field is a doc_id (signatures ``(doc_id, layer, payload)``, members
    ``(doc_id, member)``) -> (doc group, block of entries) per group that has any."""
    blocks = NodeBlocks(groups)
    for entry in entries:
        blocks.add(entry[0], entry)
    return blocks.take()


class DocBlocks(beam.PTransform):
    """Entries whose first field is a doc_id ((doc_id, value) parts of a document, (a, b, carry) pairs)
    -> (doc group of that doc_id, block of entries), one block per bundle and group (:func:`doc_blocks`
    of a stream)."""

    def __init__(self, groups: int):
        super().__init__()
        self._groups = groups

    def expand(self, entries):
        return entries | "InBlocks" >> beam.ParDo(_DocBlocksFn(self._groups)).with_output_types(IntKeyed)


class _DocBlocksFn(BundleBlocksFn):
    def process(self, entry: tuple) -> Iterator:
        self._out.add(entry[0], entry)
        yield from self._flush_if_full()


def first_payloads(
    blocks: Iterable[tuple], wanted: set[str], shingle_blocks: Iterable[Iterable[tuple]] = ()
) -> dict[str, tuple]:
    """{doc_id: payload of the first layer (lowest index) that holds it} for the ``wanted`` doc_ids, with
    its shingle set put back from ``shingle_blocks`` (blocks of (doc_id, layer, set)) where the payload
    holds :data:`SHINGLES_APART`.

    Raises ValueError naming a wanted document without a signature, or without the shingle set its
    payload says travels apart: every pair's ends were signed (or are in a committed previous layer),
    so a runner lost records.
    """
    found: dict[str, tuple[int, tuple]] = {}
    for block in blocks:
        for doc_id, layer, payload in block:
            if doc_id in wanted and (doc_id not in found or layer < found[doc_id][0]):
                found[doc_id] = (layer, payload)
    missing = wanted.difference(found)
    if missing:
        raise ValueError(f"{STAGE}: no signature for document {min(missing)} of a pair to verify ({LOST_IN_JOIN})")
    apart = {(doc_id, layer) for doc_id, (layer, payload) in found.items() if payload[2] is SHINGLES_APART}
    if apart:
        sets = {
            (doc_id, layer): shingles
            for block in shingle_blocks
            for doc_id, layer, shingles in block
            if (doc_id, layer) in apart
        }
        if len(sets) < len(apart):
            doc_id = min(doc_id for doc_id, layer in apart.difference(sets))
            raise ValueError(f"{STAGE}: no shingle set for document {doc_id} of a pair to verify ({LOST_IN_JOIN})")
        for key, shingles in sets.items():
            layer, payload = found[key[0]]
            found[key[0]] = (layer, payload[:2] + (shingles,) + payload[3:])
    return {doc_id: payload for doc_id, (_, payload) in found.items()}


class _PairRequestsFn(BundleBlocksFn):
    """(a, b, carry) -> blocks per doc group: the pair in ``a``'s group and, ``with_sets``, the request
    ``(b,)`` for ``b``'s shingle set in ``b``'s group (a block holds both kinds: :func:`split_requests`)."""

    def __init__(self, groups: int, with_sets: bool):
        super().__init__(groups)
        self._with_sets = with_sets

    def process(self, pair: tuple) -> Iterator:
        self._out.add(pair[0], pair)
        if self._with_sets:
            self._out.add(pair[1], (pair[1],))
        yield from self._flush_if_full()


def split_requests(blocks: Iterable[tuple]) -> tuple[set[tuple], set[str]]:
    """(distinct pairs (a, b, carry), doc_ids whose shingle set is asked for) of a group's request blocks."""
    pairs, asked = set(), set()
    for block in blocks:
        for item in block:
            if len(item) == 1:
                asked.add(item[0])
            else:
                pairs.add(item)
    return pairs, asked


def split_attached(blocks: Iterable[tuple]) -> tuple[list[tuple], list[tuple]]:
    """([(b, a, carry, payload of a)], [(doc_id, layer, shingle set)]) of a group's attached blocks."""
    pairs, sets = [], []
    for block in blocks:
        for item in block:
            (pairs if len(item) == 4 else sets).append(item)
    return pairs, sets


def sets_of(blocks: Iterable[Iterable[tuple]], doc_ids: set[str]) -> list[tuple]:
    """The (doc_id, layer, shingle set) entries of ``blocks`` whose doc_id is one of ``doc_ids``, every layer's."""
    return [entry for block in blocks for entry in block if entry[0] in doc_ids]


class _AttachFirstFn(BundleBlocksFn):
    """(group, {pairs: [blocks of (a, b, carry) and (b,)], signature: [blocks], shingles (optional): [blocks]})
    -> blocks of (b, a, carry, payload of a) per doc group of b, one per distinct (a, b, carry), and of the
    shingle sets (doc_id, layer, set) asked for by (b,) in this group; tagged ``selected``: (group, the sets
    of this group's ends, ``a`` and ``b``)."""

    def process(self, joined: tuple[int, dict]) -> Iterator:
        group, parts = joined
        pairs, asked = split_requests(parts[_PAIRS])
        shingles = list(parts.get(_SHINGLES, ()))
        if pairs:
            payloads = first_payloads(parts[_SIGNATURE], {a for a, _, _ in pairs}, shingles)
            for a, b, carry in pairs:
                self._out.add(b, (b, a, carry, payloads[a]))
        if shingles:
            for entry in sets_of(shingles, asked):
                self._out.add(entry[0], entry)
            selected = sets_of(shingles, asked | {a for a, _, _ in pairs})
            if selected:
                yield beam.pvalue.TaggedOutput(_SELECTED, (group, tuple(selected)))
        yield from self._flush_if_full()


class _CheckFn(CountingDoFn):
    """(group, {pairs: [blocks of (b, a, carry, payload of a) and of (doc_id, layer, shingle set)],
    signature: [blocks]}) -> (a, b, carry, ok) per pair."""

    def __init__(self, check, label: str):
        super().__init__(STAGE)
        self._check = check
        self._label = label

    def process(self, joined: tuple[int, dict]) -> Iterator[tuple]:
        _, parts = joined
        pairs, sets = split_attached(parts[_PAIRS])
        if not pairs:
            return
        payloads = first_payloads(parts[_SIGNATURE], {b for b, _, _, _ in pairs}, [sets])
        for b, a, carry, payload_a in pairs:
            ok = self._check(payload_a, payloads[b])
            self.tally.inc(f"{self._label}_{'verified' if ok else 'rejected'}")
            yield a, b, carry, ok


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
        joined = {name: collection for name, collection in parts.items() if name not in (_SIGNATURE, _SHINGLES)}
        assembled = (
            joined
            | "JoinByDocGroup" >> beam.CoGroupByKey()
            | "Assemble"
            >> beam.ParDo(AssembleFn(self._groups))
            .with_output_types(IntKeyed)
            .with_outputs(_ROWS, COUNTS, main=_CLUSTERED)
        )
        clusters = (
            assembled[_CLUSTERED]  # (group of the cluster label, block of (label, (member, new, spans)))
            | "GroupByClusterGroup" >> beam.GroupByKey()
            | "Representatives"
            >> beam.ParDo(ClusterFn(self._params)).with_outputs(LARGE_CLUSTERS, _SIZES, _CHECK, COUNTS, main=_ROWS)
        )
        largest = (  # a bounded combine (LEDGER_CLUSTERS entries per accumulator) over every cluster, on one int key
            clusters[_SIZES]
            | "OneKey" >> beam.Map(lambda entry: (0, entry)).with_output_types(IntKeyed)
            | "LargestClusters" >> beam.CombinePerKey(beam.combiners.TopCombineFn(LEDGER_CLUSTERS, key=_cluster_rank))
            | "LargestClusterRows" >> beam.FlatMap(_largest_rows)
        )
        shingles = {_SHINGLES: parts[_SHINGLES]} if _SHINGLES in parts else {}
        checked = (
            {_PAIRS: clusters[_CHECK], _SIGNATURE: parts[_SIGNATURE], **shingles}  # (representative, member, carry)
            | "VerifyAgainstRepresentative"
            >> VerifyPairs(PairCheck(self._params, "any"), "representative", self._groups)
        )
        large = checked[_CHECKED] | "MemberRows" >> beam.ParDo(MemberRowFn()).with_outputs(COUNTS, main=_ROWS)
        rows = (assembled[_ROWS], clusters[_ROWS], large[_ROWS]) | "AllRows" >> beam.Flatten()
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


# --- DoFns --------------------------------------------------------------------------


class SignPartitionFn(BudgetedExpandFn):
    """partition index -> blocks of (doc_id, member) per doc group; tagged: the sidecar of its ``signatures``
    partition (written here), blocks of (doc_id, 0, payload) per doc group and blocks of the band
    and block keys of the signed documents (:class:`LshKeyBlocks`), dead letters, and the
    partition's tally. A bundle stops taking partitions once it has emitted ``budget`` bytes
    (:mod:`beam_pipeline.transforms.bundle_budget`)."""

    def __init__(
        self,
        params: NearDedupParams,
        documents: DocumentPartitions,
        signatures_directory: str,
        key_groups: int,
        budget: BundleBudget,
    ):
        super().__init__(budget)
        self._params = params
        self._documents = documents
        self._signatures = signatures_directory
        self._key_groups = key_groups

    def setup(self):
        self.tally = Tally(STAGE)
        self._lines_source, self._boilerplate, self._signature_lines = None, None, None

    # (the side input comes before the tracker: an override of the base class's process(element, tracker))
    def process(self, index: int, lines: tuple = ((), ()), tracker=WHOLE_ELEMENTS) -> Iterator:  # type: ignore[override]
        if lines is not self._lines_source:
            self._lines_source = lines
            self._boilerplate, self._signature_lines = (np.array(keys, dtype=np.int64) for keys in lines)
        yield from super().process(index, tracker)

    def items(self, index: int, start: int) -> Iterator:
        params, count, tally = self._params, self._documents.count, self.tally
        tally.discard()  # what an attempt that failed on this instance counted is not this element's
        rows, members, payloads, shingle_sets = [], [], [], []
        keys, apart = LshKeyBlocks(params, self._key_groups), shingles_apart(params)
        for document in self._documents.rows(
            index, INPUT_COLUMNS, tally, where=f"{STAGE} gate", annotation=params.quality
        ):
            doc_id = document["doc_id"]
            if bucket_of(doc_id, count) != index:
                raise ValueError(
                    f"{STAGE}: document {doc_id} is in partition {index} of "
                    f"{self._documents.paths[index]}, but its doc_id belongs to partition "
                    f"{bucket_of(doc_id, count)} of {count}"
                )
            tally.entered(document["source"])
            try:
                member, row = sign_document(document, params, self._boilerplate, self._signature_lines)
            except Exception as err:  # noqa: BLE001 - one bad document costs that document only
                tally.dead_letter(document.get("source"))
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTER,
                    dead_letter_row(
                        STAGE,
                        source=document.get("source"),
                        doc_id=doc_id,
                        error=f"{type(err).__name__}: {err}",
                        raw_prefix=(document.get("text") or "").encode("utf-8"),
                    ),
                )
                continue
            tally.inc("signed" if row is not None else "unsigned_too_short")
            if member[_BOILERPLATE]:
                tally.inc("boilerplate_documents")
            members.append((doc_id, member))
            if row is None:
                continue
            rows.append(row)
            add_payload(payloads, shingle_sets, doc_id, 0, payload_of(row), apart)
            keys.add(row, None)
        yield from doc_blocks(members, self._key_groups)
        for block in doc_blocks(payloads, self._key_groups):
            yield beam.pvalue.TaggedOutput(_PAYLOADS, block)
        for block in doc_blocks(shingle_sets, self._key_groups):
            yield beam.pvalue.TaggedOutput(_SHINGLES, block)
        yield from keys.tagged()
        yield beam.pvalue.TaggedOutput(
            SIGNATURES, write_layer_partition(self._signatures, index, count, rows, NEAR_SIGNATURE)
        )

    def settle(self) -> Iterator:
        return self.tally.tagged()


class PreviousSignaturesFn(BudgetedExpandFn):
    """(layer index, a signature partition of an earlier version) -> blocks of (doc_id, layer, payload) per
    doc group; tagged: blocks of (doc_id, layer, shingle set) per doc group (``shingles_apart``), and blocks
    of its band and block keys, with each document's member (it competes as a previous version). A
    bundle stops taking partitions once it has emitted ``budget`` bytes."""

    def __init__(self, params: NearDedupParams, key_groups: int, budget: BundleBudget):
        super().__init__(budget)
        self._params = params
        self._key_groups = key_groups

    def items(self, entry: tuple[int, str], start: int) -> Iterator:
        layer, path = entry
        payloads, shingle_sets, keys = [], [], LshKeyBlocks(self._params, self._key_groups)
        apart = shingles_apart(self._params)
        for row in read_partition_rows(path):
            add_payload(payloads, shingle_sets, row["doc_id"], layer, payload_of(row), apart)
            keys.add(row, member_of(row, previous=True))
        yield from doc_blocks(payloads, self._key_groups)
        for block in doc_blocks(shingle_sets, self._key_groups):
            yield beam.pvalue.TaggedOutput(_SHINGLES, block)
        yield from keys.tagged()


def payload_of(row: dict) -> tuple:
    """What :class:`PairCheck` compares, from a signature row (``shingle_count`` is None in
    layers written before it existed: such pairs are judged by Jaccard alone)."""
    return tuple(row.get(column) for column in PAYLOAD_COLUMNS)


def shingles_apart(params: NearDedupParams) -> bool:
    """Whether the shingle sets travel apart from the payloads (:class:`VerifyPairs`): when there are
    sets (``exact_sets``) and MinHash, whose check reads them (SimHash alone never does)."""
    return params.exact_sets and params.use_minhash


def add_payload(payloads: list, shingle_sets: list, doc_id: str, layer: int, payload: tuple, apart: bool) -> None:
    """Append ``(doc_id, layer, payload)`` to ``payloads``; with ``apart`` and a shingle set, the payload
    holds :data:`SHINGLES_APART` in its place and ``(doc_id, layer, set)`` goes to ``shingle_sets``."""
    if apart and payload[2] is not None:
        shingle_sets.append((doc_id, layer, payload[2]))
        payload = payload[:2] + (SHINGLES_APART,) + payload[3:]
    payloads.append((doc_id, layer, payload))


class LshKeyBlocks:
    """A task's band keys and SimHash block keys with their entries, handed to the runner in blocks.

    A key's entry is ``(doc_id, previous-version member or None)`` for a band
    key and ``(doc_id, member or None, fingerprint)`` for a block key. Emitted
    per runner element, 14 band keys a document made the grouping the stage's
    largest cost (each is encoded, shuffled, grouped and handed to a DoFn
    call, nearly always alone in its bucket). Here a task sends one block per
    *key group* (``key % key_groups``): tagged ``bands`` / ``blocks``,
    ``(group, (little-endian int64 keys, entries))``. The ``GroupByKey`` on the
    group brings every entry of a key to one place, where
    :func:`shared_keys` splits the blocks into keys again, so the buckets and
    their edges are exactly those of a ``GroupByKey`` on the key itself
    (docs/decisions.md, "LSH keys in blocks").
    """

    def __init__(self, params: NearDedupParams, key_groups: int):
        self._params = params
        self._groups = key_groups
        self._bands: tuple[list, list] = ([], [])
        self._blocks: tuple[list, list] = ([], [])

    def add(self, row: dict, previous_member: tuple | None) -> None:
        """Add a signature row's band keys and block keys (``previous_member``: None for this corpus)."""
        doc_id = row["doc_id"]
        if self._params.use_minhash:
            band_keys = row["band_keys"] or ()
            self._bands[0].extend(band_keys)
            self._bands[1].extend(itertools.repeat((doc_id, previous_member), len(band_keys)))
        if self._params.use_simhash:
            block_keys = row["simhash_keys"] or ()
            self._blocks[0].extend(block_keys)
            self._blocks[1].extend(itertools.repeat((doc_id, previous_member, row["simhash"]), len(block_keys)))

    def tagged(self) -> Iterator:
        for tag, (keys, entries) in ((_BANDS, self._bands), (_BLOCKS, self._blocks)):
            for block in key_blocks(keys, entries, self._groups):
                yield beam.pvalue.TaggedOutput(tag, block)


def key_blocks(keys: list[int], entries: list, groups: int) -> Iterator[tuple[int, tuple[bytes, tuple]]]:
    """(group, (keys as little-endian int64 bytes, their entries)) per key group ``key % groups`` that has keys,
    a group's in blocks of at most :data:`~beam_pipeline.transforms.blocks.BLOCK_BYTES` (judged by its
    first entry: a task's entries are alike)."""
    if not keys:
        return
    array = np.array(keys, dtype="<i8")
    group_of = array % groups
    order = np.argsort(group_of, kind="stable")
    ordered = group_of[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    for start, end in zip(starts.tolist(), np.r_[starts[1:], order.size].tolist()):
        chosen, group = order[start:end], int(ordered[start])
        per_block = max(1, BLOCK_BYTES // (8 + output_bytes(entries[int(chosen[0])])))
        for at in range(0, chosen.size, per_block):
            part = chosen[at : at + per_block]
            yield group, (array[part].tobytes(), tuple(entries[i] for i in part.tolist()))


def shared_keys(blocks: Iterable[tuple[bytes, tuple]]) -> Iterator[tuple[int, list]]:
    """(key, its entries) for every key of a group's blocks that two or more entries share, in key order.

    A key with one entry makes no pair, so it is skipped here instead of being handed on.
    """
    blocks = list(blocks)
    if not blocks:
        return
    keys = np.concatenate([np.frombuffer(data, dtype="<i8") for data, _ in blocks])
    entries = [entry for _, block_entries in blocks for entry in block_entries]
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    shared = ends - starts > 1
    for start, end in zip(starts[shared].tolist(), ends[shared].tolist()):
        yield int(ordered[start]), [entries[i] for i in order[start:end].tolist()]


#: Bytes of input text per document that the group counts assume (a snapshot knows its bytes, not its
#: documents). It is below the mean document of web corpora (C4: 156 B tokens in 365 M documents, ~2 KB
#: each; Dodge et al. 2021, Table 1), so for them the estimate errs towards more documents, hence more and
#: smaller groups; a corpus of shorter documents lowers ``near_dedup.max_group_entries`` in proportion
#: (docs/scale.md).
ESTIMATED_DOCUMENT_BYTES = 1000
#: Documents a partition is taken to hold when the caller gives no estimate: the default
#: ``layout.target_partition_bytes`` (64 MiB) of text at :data:`ESTIMATED_DOCUMENT_BYTES`.
DOCUMENTS_PER_PARTITION = (64 << 20) // ESTIMATED_DOCUMENT_BYTES
#: The group count's floor, for parallelism, not memory: 16 groups per document partition, at most
#: :data:`MAX_PARALLEL_GROUPS` (a signing task sends at most one block per group and output).
PARALLEL_GROUPS_PER_PARTITION = 16
MAX_PARALLEL_GROUPS = 1 << 16


def estimated_documents(text_bytes: int | None) -> int:
    """The documents of a snapshot of ``text_bytes`` estimated text (``snapshot.estimated_text_bytes``):
    one per :data:`ESTIMATED_DOCUMENT_BYTES`, rounded up (0 when unknown)."""
    return -(-max(text_bytes or 0, 0) // ESTIMATED_DOCUMENT_BYTES)


def entries_per_document(params: NearDedupParams) -> int:
    """The most entries one document adds to a grouping of the stage: twice its LSH keys (band keys and
    SimHash block keys, one per choice of ``blocks - max_hamming`` blocks).

    A key entry makes at most one MinHash star edge (to its bucket's smallest doc_id) and the components
    carry every edge in both directions, so no round holds more edges than twice the keys; a document's
    other entries (its member, label, payload per layer, spans' ranges, the pairs it starts) are fewer.
    SimHash buckets pair every close pair, not a star: their edges are bounded by the buckets' sizes
    (docs/scale.md)."""
    block_keys = len(simhash.key_masks(params.max_hamming, params.blocks)) if params.use_simhash else 0
    return 2 * max((params.bands if params.use_minhash else 0) + block_keys, 1)


def derived_groups(documents: int, partitions: int, per_document: int, max_group_entries: int) -> int:
    """Groups for ``documents`` adding ``per_document`` entries each, so that a group holds at most
    ``max_group_entries`` on average (``ceil(documents x per_document / max_group_entries)``), and at
    least the parallelism floor (:data:`PARALLEL_GROUPS_PER_PARTITION` per partition, at most
    :data:`MAX_PARALLEL_GROUPS`). No cap: the count grows with the corpus, the entries per group do not.

    Keys and doc_ids are spread by 64-bit hashes, so the fullest of ``g`` groups exceeds the mean ``m`` by
    about ``sqrt(2 m ln g)`` (balls into bins, Raab and Steger 1998): ~1% at the default 2^18 and 10^7
    groups. One key or node is never split: a band bucket or a hub node sets its group's size (docs/scale.md).
    """
    parallel = min(PARALLEL_GROUPS_PER_PARTITION * max(partitions, 1), MAX_PARALLEL_GROUPS)
    needed = -(-max(documents, 0) * per_document // max_group_entries)
    return max(parallel, needed)


def stage_groups(params: NearDedupParams, partitions: int, documents: int) -> int:
    """The stage's key, doc and node groups: ``near_dedup.key_groups`` if set, else :func:`derived_groups`
    of the estimated ``documents`` (this snapshot's and the ``against`` layers') and
    ``near_dedup.max_group_entries``."""
    if params.key_groups:
        return params.key_groups
    return derived_groups(documents, partitions, entries_per_document(params), params.max_group_entries)


def group_entries(documents: int, per_document: int, groups: int) -> float:
    """Mean entries a group holds: ``documents x per_document / groups`` (the bound docs/scale.md tabulates)."""
    return documents * per_document / groups


def worker_bounds(params: NearDedupParams, partitions: int, documents: int) -> dict[str, float]:
    """The most entries one worker holds of each of the stage's structures at once, for ``documents``
    estimated documents in ``partitions`` partitions (docs/scale.md, "Every worker-side structure"):
    the groupings' means (:func:`group_entries`; one key or node is never split, so a bucket or a
    cluster larger than that sits whole in its group) and the bundles' fixed flush sizes."""
    groups = stage_groups(params, partitions, documents)
    per_document = entries_per_document(params)
    return {
        "lsh key group": group_entries(documents, per_document // 2, groups),
        "component node group": group_entries(documents, per_document, groups),
        "doc group (verification joins, clusters' join)": group_entries(documents, 1, groups),
        "pending candidate pairs": PENDING_PAIRS,
        "bundle blocks": FLUSH_EDGES,
        "largest clusters": LEDGER_CLUSTERS * params.sample_members,
    }


class MinHashBucketFn(CountingDoFn):
    """(key group, [block of band keys]) -> star edges (a, b) to the smallest doc_id of each shared band key.

    ``b`` is always a document of this corpus (its payload is in the second
    join); previous-version documents are never paired with each other.
    Previous-version members of buckets that hold a new document go to the
    ``previous`` output (their rank and date for the representative choice).

    A near-duplicate pair shares several bands (at J = 0.8 and 14 x 8, about
    2.4 of 14; copies share all 14), so a bundle emits each distinct pair once,
    when it ends or holds :data:`PENDING_PAIRS`; ``candidate_pairs`` still
    counts every star edge of every key. (The verification drops repeats
    anyway; this spares the runner moving them: 322k star edges were 40k
    distinct pairs in the 200 MB side-by-side corpus.)
    """

    def __init__(self):
        super().__init__(STAGE)

    def start_bundle(self):
        self._pairs: set[tuple[str, str]] = set()

    def process(self, grouped: tuple[int, Iterable[tuple[bytes, tuple]]]) -> Iterator:
        for _, entries in shared_keys(grouped[1]):
            yield from self._star(entries)
        if len(self._pairs) >= PENDING_PAIRS:
            yield from sorted(self._pairs)
            self._pairs = set()

    def finish_bundle(self):
        for pair in sorted(self._pairs):
            yield windowed(pair)
        self._pairs = set()
        yield from super().finish_bundle()

    def _star(self, entries: list[tuple]) -> Iterator:
        new, old = _split_bucket(entries)
        if not new:
            return
        ids = sorted(new | set(old))
        anchor, produced = ids[0], 0
        for other in ids[1:]:
            if other in new:
                self._pairs.add((anchor, other))
            elif anchor in new:
                self._pairs.add((other, anchor))
            else:
                continue
            produced += 1
        self.tally.inc("candidate_pairs", n=produced)
        yield from _previous_members(old)


#: Distinct candidate pairs a :class:`MinHashBucketFn` bundle holds before it hands them on.
PENDING_PAIRS = 1 << 20


class SimHashBucketFn(CountingDoFn):
    """(key group, [block of SimHash block keys]) -> pairs within ``max_hamming`` bits in each shared block key."""

    def __init__(self, max_hamming: int):
        super().__init__(STAGE)
        self._max_hamming = max_hamming

    def process(self, grouped: tuple[int, Iterable[tuple[bytes, tuple]]]) -> Iterator:
        for _, entries in shared_keys(grouped[1]):
            yield from self._close_pairs(entries)

    def _close_pairs(self, entries: list[tuple]) -> Iterator:
        new, old = _split_bucket((e[0], e[1]) for e in entries)
        if not new:
            return
        fingerprints = {e[0]: e[2] for e in entries}
        ids = sorted(fingerprints)
        used = set()
        for i, j in simhash.close_pairs([fingerprints[d] for d in ids], self._max_hamming):
            a, b = ids[i], ids[j]
            if a in new or b in new:
                used.update((a, b))
                self.tally.inc("simhash_pairs")
                yield a, b
        # a previous version's document is reported where it pairs with a new one, or is one (the same doc_id)
        yield from _previous_members({d: m for d, m in old.items() if d in used or d in new})


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
                yield beam.pvalue.TaggedOutput(_ROWS, assembled)
            elif assembled is not None:
                self._out.add(assembled[0], assembled)
        yield from self._flush_if_full()

    def finish_bundle(self):
        yield from super().finish_bundle()
        yield from self.tally.tagged_at_bundle_end()

    def _assemble(self, doc_id: str, parts: dict[str, list]) -> tuple | dict | None:
        """(cluster label, (member, new, spans)) for a document in a cluster, its row for a document of
        this corpus in none, None for a previous version's document in none."""
        members, previous = parts.get(_MEMBER, ()), parts.get(_PREVIOUS, ())
        if members:
            member = members[0]
            if previous:  # the same document is in a previous version
                member = (0,) + member[1:]
        elif previous:  # (several buckets, or several earlier versions, may name it)
            member = min(previous, key=representative_order)
        else:  # spans of a document that was dead-lettered
            return None
        new = bool(members)
        spans = tuple(merge_ranges(parts.get(_SPAN, ())))
        if spans:
            self.tally.inc("span_documents")
        labels = parts.get(_LABEL, ())
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
        yield beam.pvalue.TaggedOutput(_SIZES, (size, label, representative, tuple(sample)))
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
                yield beam.pvalue.TaggedOutput(_CHECK, (representative, doc_id, (member, spans, label, size, large)))
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


# --- pure functions -------------------------------------------------------------------

# A member is a plain tuple (cheap to encode); the fields up to _SOURCE are the representative order.
_PRIOR, _RANK, _NO_QUALITY, _QUALITY, _NO_DATE, _DATE, _DOC_ID, _SOURCE, _SIGNED, _BOILERPLATE, _LENGTH = range(11)

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


def sign_document(
    document: dict,
    params: NearDedupParams,
    boilerplate: np.ndarray | None = None,
    signature_lines: np.ndarray | None = None,
) -> tuple[tuple, dict | None]:
    """(member, signature row or None): the per-document work of the stage, without Beam.

    Boilerplate lines (``lines-v1`` keys in the sorted int64 array
    ``boilerplate``) are left out of the shingles, so documents that share
    only a footer do not look alike. Lines of ``signature_lines`` (in more
    documents than ``lines.signature_min_repeats``) are left out too when,
    together, they are at most half of what remains (:data:`SIGNATURE_LINES_MAX_SHARE`
    of its normalized characters): a site template or an ad block around a page
    is, while the paragraphs of a page copied more often than that are most of
    each copy and stay (:func:`signature_text`).
    """
    text, present = signature_text(document["text"], boilerplate, signature_lines)
    shingles = shingle_hashes(text, kind=params.shingle_kind, size=params.shingle_size, seed=params.seed)
    member = member_of(document, signed=shingles is not None, boilerplate=present)
    if shingles is None:
        return member, None
    distinct = distinct_shingles(shingles)
    row = {
        "doc_id": document["doc_id"],
        "source": document["source"],
        "source_rank": document["source_rank"],
        "date": document["date"],
        "minhash": None,
        "band_keys": [],
        "simhash": None,
        "simhash_keys": [],
        "shingles": None,
        "shingle_count": int(distinct.size),
    }
    if params.use_minhash:
        sig = minhash.signature(distinct, params.num_perm, params.seed)  # a minimum over the set: repeats add nothing
        row["minhash"] = minhash.to_bytes(sig)
        row["band_keys"] = minhash.band_keys(sig, params.bands, params.rows, params.seed)
    if params.use_simhash:
        fingerprint = simhash.fingerprint(distinct)
        row["simhash"] = fingerprint
        row["simhash_keys"] = simhash.block_keys(fingerprint, params.max_hamming, params.blocks, params.seed)
    if params.exact_sets:
        row["shingles"] = distinct.astype("<u8").tobytes()
    return member, row


#: Lines of ``signature_lines`` leave a document's signature if they are at most this share of it ...
SIGNATURE_LINES_MAX_SHARE = 0.5
#: ... or if what is left without them still has this many words (two shingles' width): a short text
#: under a license block or a template that many documents share is signed by its own words.
SIGNATURE_MIN_REST_WORDS = 10


def signature_text(text: str, boilerplate: np.ndarray | None, signature_lines: np.ndarray | None) -> tuple[str, tuple]:
    """(the text to shingle, the sorted boilerplate keys it holds): ``text`` without its boilerplate lines,
    and without its ``signature_lines`` if they are at most :data:`SIGNATURE_LINES_MAX_SHARE` of the
    normalized characters left or the rest has at least :data:`SIGNATURE_MIN_REST_WORDS` words. A
    document that is (almost) only such lines keeps them: they are what it is. Both key arrays are sorted
    (the side input's tuples): membership is a binary search (:func:`in_sorted`)."""
    has_boilerplate = boilerplate is not None and boilerplate.size
    has_signature_lines = signature_lines is not None and signature_lines.size
    if not has_boilerplate and not has_signature_lines:
        return text, ()
    keys, lengths = line_keys(text)
    drop = in_sorted(keys, boilerplate) if has_boilerplate else np.zeros(keys.size, dtype=bool)
    present = tuple(sorted(set(keys[drop].tolist())))
    if has_signature_lines:
        template = in_sorted(keys, signature_lines) & ~drop
        if template.any():
            if lengths[template].sum() <= SIGNATURE_LINES_MAX_SHARE * lengths[~drop].sum():
                drop |= template
            else:
                rest = itertools.compress(text.split("\n"), (~(drop | template)).tolist())
                if sum(len(line.split()) for line in rest) >= SIGNATURE_MIN_REST_WORDS:
                    drop |= template
    if drop.any():
        text = "\n".join(itertools.compress(text.split("\n"), (~drop).tolist()))
    return text, present


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
        "boilerplate_lines": list(member[_BOILERPLATE]),
        "repeated_spans": [{"start": s, "end": e} for s, e in spans],
    }


class PairCheck:
    """Is a candidate pair a near duplicate? ``criteria``: ``minhash`` (LSH candidates) or ``any``.

    MinHash, by ``verify``: estimated Jaccard from the signatures
    (``signature``) or true Jaccard of the shingle sets (``jaccard``) at least
    ``verify_threshold``; ``two_tier``: :func:`beam_pipeline.dedup.verify.accept`
    (``verify_threshold`` as the first tier, then ``low_threshold`` with
    ``containment_threshold``, and ``short_threshold`` when a text has fewer
    than ``short_shingles`` shingles) on the estimated Jaccard and the
    containment it implies with the two shingle counts, or on the exact sets.
    SimHash: Hamming distance at most ``max_hamming``.
    """

    def __init__(self, params: NearDedupParams, criteria: str):
        self._exact = params.exact_sets
        self._two_tier = params.verify == "two_tier"
        self._threshold = params.verify_threshold
        self._tiers = dict(
            high=params.verify_threshold,
            low=params.low_threshold,
            min_containment=params.containment_threshold,
            min_shingles=params.short_shingles,
            short_jaccard=params.short_threshold,
        )
        self._max_hamming = params.max_hamming
        self._simhash = criteria == "any"

    def __call__(self, a: tuple, b: tuple) -> bool:
        minhash_a, simhash_a = a[:2]
        minhash_b, simhash_b = b[:2]
        if minhash_a is not None and minhash_b is not None and self._minhash_accepts(a, b):
            return True
        if self._simhash and simhash_a is not None and simhash_b is not None:
            return simhash.hamming(simhash_a, simhash_b) <= self._max_hamming
        return False

    def _minhash_accepts(self, a: tuple, b: tuple) -> bool:
        minhash_a, _, shingles_a, count_a = a
        minhash_b, _, shingles_b, count_b = b
        if self._exact and shingles_a is not None and shingles_b is not None:
            x, y = np.frombuffer(shingles_a, dtype="<u8"), np.frombuffer(shingles_b, dtype="<u8")
            if self._two_tier:
                return verify.two_tier(x, y, **self._tiers)
            return verify.jaccard(x, y) >= self._threshold
        similarity = minhash.estimate_jaccard(minhash.from_bytes(minhash_a), minhash.from_bytes(minhash_b))
        if not self._two_tier or count_a is None or count_b is None:
            return similarity >= self._threshold
        return verify.accept(
            similarity, verify.estimated_containment(similarity, count_a, count_b), min(count_a, count_b), **self._tiers
        )


def _split_bucket(entries: Iterable[tuple[str, tuple | None]]) -> tuple[set, dict]:
    """(doc_ids of this corpus, {doc_id: member} of previous versions) of one bucket; a document
    of several earlier versions keeps its first member in representative order."""
    new, old = set(), {}
    for doc_id, previous_member in entries:
        if previous_member is None:
            new.add(doc_id)
        elif doc_id not in old or representative_order(previous_member) < representative_order(old[doc_id]):
            old[doc_id] = previous_member
    return new, old


def _previous_members(old: dict) -> Iterator:
    for doc_id, member in sorted(old.items()):
        yield beam.pvalue.TaggedOutput(_PREVIOUS, (doc_id, member))
