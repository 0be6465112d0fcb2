"""What one worker holds is bounded by configuration, not by the corpus (DESIGN.md principle 11, issue 40).

The near-dedup stage's groupings (LSH key groups, doc groups of the verification joins and the
clusters' join, node groups of the components) hold ``documents x entries per document / groups``
entries each; the group count is derived from the snapshot's estimated document count and
``near_dedup.max_group_entries`` (docs/scale.md). These tests pin the derivation at 10^6 to 10^11
documents, where a fixed cap on the group count (65,536 before) let a group grow with the corpus.
"""

import os

import pytest
import yaml
from conftest import SAMPLE_CONFIG
from test_near_dedup import clusters_of, planted_corpus, run_stage

from beam_pipeline.build.corpus_build import partition_count
from beam_pipeline.config.corpus import ConfigError, LayoutConfig, parse_config
from beam_pipeline.dedup.config import NearDedupConfig
from beam_pipeline.transforms import near_dedup
from beam_pipeline.transforms.connected_components import FLUSH_EDGES
from beam_pipeline.transforms.near_dedup_candidates import PENDING_PAIRS
from beam_pipeline.transforms.near_dedup_groups import (
    DOCUMENTS_PER_PARTITION,
    ESTIMATED_DOCUMENT_BYTES,
    MAX_PARALLEL_GROUPS,
    derived_groups,
    entries_per_document,
    estimated_documents,
    group_entries,
    stage_groups,
    worker_bounds,
)
from beam_pipeline.transforms.near_dedup_params import NearDedupParams

SCALES = [10**6, 10**9, 10**11]


def _partitions(documents: int) -> int:
    layout = LayoutConfig()
    return partition_count(documents * 5000, layout.target_partition_bytes, layout.min_partitions)


@pytest.mark.parametrize("documents", SCALES)
@pytest.mark.parametrize("method", ["minhash", "simhash", "both"])
def test_a_group_holds_at_most_max_group_entries_at_any_scale(documents, method):
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True, method=method))
    groups = stage_groups(params, _partitions(documents), documents)
    assert group_entries(documents, entries_per_document(params), groups) <= params.max_group_entries


@pytest.mark.parametrize("documents", [10**9, 10**11])
def test_the_group_count_grows_past_the_old_fixed_cap(documents):
    """min(16 x partitions, 65,536) groups held 854,000 entries each at 10^9 documents, 8.5e7 at 10^11."""
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True))
    groups = stage_groups(params, _partitions(documents), documents)
    assert groups > MAX_PARALLEL_GROUPS
    assert group_entries(documents, entries_per_document(params), MAX_PARALLEL_GROUPS) > params.max_group_entries


@pytest.mark.parametrize("documents", SCALES)
def test_every_structure_of_the_stage_has_a_bound_that_does_not_grow(documents):
    """Each structure's entries stay at or under max_group_entries or a fixed flush size (docs/scale.md)."""
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True, method="both"))
    bounds = worker_bounds(params, _partitions(documents), documents)
    fixed = max(PENDING_PAIRS, FLUSH_EDGES)
    assert set(bounds) >= {"lsh key group", "component node group", "doc group (verification joins, clusters' join)"}
    assert all(0 <= entries <= max(params.max_group_entries, fixed) for entries in bounds.values()), bounds
    assert bounds["component node group"] <= params.max_group_entries
    assert bounds == worker_bounds(params, _partitions(documents), documents)


def test_a_smaller_bound_yields_more_groups():
    documents = 10**9
    default = NearDedupParams.from_config(NearDedupConfig(enabled=True))
    small = NearDedupParams.from_config(NearDedupConfig(enabled=True, max_group_entries=1 << 12))
    partitions = _partitions(documents)
    assert stage_groups(small, partitions, documents) > 63 * stage_groups(default, partitions, documents)
    assert group_entries(documents, entries_per_document(small), stage_groups(small, partitions, documents)) <= 1 << 12


def test_small_corpora_keep_the_parallelism_floor():
    """The sample's 4 partitions: 64 groups, as before (the floor, not the bound, sets small builds)."""
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True))
    assert stage_groups(params, 4, estimated_documents(6_000_000)) == 64
    assert derived_groups(0, 0, 28, 1 << 18) == 16
    assert derived_groups(10**6, 10**6, 28, 1 << 18) == MAX_PARALLEL_GROUPS  # the floor is capped, the bound is not


def test_an_explicit_key_groups_wins():
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True, key_groups=7))
    assert stage_groups(params, 4, 10**11) == 7


def test_entries_per_document_counts_every_key_twice():
    minhash = NearDedupParams.from_config(NearDedupConfig(enabled=True, method="minhash"))
    both = NearDedupParams.from_config(NearDedupConfig(enabled=True, method="both"))
    assert entries_per_document(minhash) == 2 * minhash.bands
    assert entries_per_document(both) == 2 * (both.bands + both.blocks)  # blocks = max_hamming + 1: one key each
    wide = NearDedupParams.from_config(NearDedupConfig(enabled=True, method="simhash", simhash={"blocks": 6}))
    assert entries_per_document(wide) == 2 * 20  # C(6, 6 - 3) keys per document


def test_estimated_documents_round_up_from_text_bytes():
    assert estimated_documents(None) == 0
    assert estimated_documents(1) == 1
    assert estimated_documents(500 * 10**12) == 500 * 10**12 // ESTIMATED_DOCUMENT_BYTES


@pytest.mark.parametrize("bound", [0, 1000, 1 << 31])
def test_max_group_entries_is_validated(bound):
    with pytest.raises(ConfigError, match="max_group_entries"):
        parse_config(_config_with({"max_group_entries": bound}), base_dir=os.path.dirname(SAMPLE_CONFIG))


def test_batching_knobs_stay_out_of_the_layer_key():
    base = near_dedup.stage_config(NearDedupConfig(enabled=True))
    assert near_dedup.stage_config(NearDedupConfig(enabled=True, max_group_entries=1 << 12, key_groups=3)) == base


def test_more_groups_give_the_same_layer(tmp_path):
    """A bound of 16,384 entries makes 459 groups for the harness's estimate (2 partitions of
    DOCUMENTS_PER_PARTITION documents), 14 times the default's 32: the same digests, counts and layer key."""
    documents, expected = planted_corpus(originals=3, singles=6)
    config = NearDedupConfig(enabled=True, method="both", max_cluster_size=3)
    small = config.model_copy(update={"max_group_entries": 1 << 14})
    params = NearDedupParams.from_config(small)
    assert stage_groups(params, 2, 2 * DOCUMENTS_PER_PARTITION) > 400
    default = run_stage(tmp_path, documents, config, name="default", partitions=2)
    many = run_stage(tmp_path, documents, small, name="many", partitions=2)
    assert clusters_of(default["annotations"]) == expected
    for output in near_dedup.OUTPUTS:
        assert many[output + "_digests"] == default[output + "_digests"], output
    assert many["metrics"] == default["metrics"]
    assert many["layer"].key == default["layer"].key


def _config_with(near: dict) -> dict:
    """The sample's config, parsed YAML, with ``near`` in its near_dedup section."""
    with open(SAMPLE_CONFIG, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    raw.setdefault("near_dedup", {}).update(near)
    return raw
