"""Group counts of the near-dedup stage: how many key, doc and node groups its blocks travel in, and
what one worker holds.

:func:`stage_groups` sets the groups from the estimated documents
(:func:`estimated_documents`, passed by the build) so that a group holds at
most ``near_dedup.max_group_entries`` entries on average;
:func:`worker_bounds` gives the most entries one worker holds of each of the
stage's structures, which ``tests/test_memory_bounds.py`` checks
(``docs/scale.md``).
"""

from __future__ import annotations

from beam_pipeline.dedup import simhash
from beam_pipeline.dedup.cluster_alarms import LEDGER_CLUSTERS
from beam_pipeline.transforms.connected_components import FLUSH_EDGES
from beam_pipeline.transforms.near_dedup_candidates import PENDING_PAIRS
from beam_pipeline.transforms.near_dedup_params import NearDedupParams

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
