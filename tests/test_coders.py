"""Every grouping in the build's job is the runner's own, keyed by a deterministic, non-pickling coder.

The graph is the one job ``python -m beam_pipeline run`` submits for the sample
(assembled, not run). DESIGN.md principle 9: every grouping is a GroupByKey,
CombinePerKey or CoGroupByKey of the runner (never files of our own), and
principle 6: every grouping key has a deterministic coder (str, int or bytes;
a pickled key silently differs between processes: apache/beam #33020).
"""
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.build.corpus_build import CorpusBuild
from beam_pipeline.config.corpus import load_config
from conftest import IN_PROCESS, SAMPLE_CONFIG, deterministic_key_coder, grouping_key_coders


def sample_job(tmp_path):
    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": str(tmp_path / "out")})
    build = CorpusBuild(config, PipelineOptions(IN_PROCESS), log=lambda m: None)
    return build.assemble(*build._prepare()).pipeline


def test_grouping_keys_use_deterministic_coders(tmp_path):
    keys = grouping_key_coders(sample_job(tmp_path))
    bad = {name: str(coder) for name, coder in keys.items() if not deterministic_key_coder(name, coder)}
    assert bad == {}
    stages = {name.split("/", 1)[0] for name in keys}
    assert {"Ingest", "ExactDedup", "NearDedup", "Select", "Tokenize", "Publish"} <= stages


def test_the_shuffles_of_the_design_are_the_runners(tmp_path):
    """Exact dedup: a CombinePerKey on the content hash and a CoGroupByKey back to the members;
    ingest, layers and lineage: GroupByKey on the partition; tokenize: GroupByKey on the shard."""
    names = list(grouping_key_coders(sample_job(tmp_path)))

    def grouped(*parts):
        return [name for name in names if all(part in name for part in parts)]

    assert grouped("ExactDedup/", "PickRepresentative")
    assert grouped("ExactDedup/", "JoinMembersWithRepresentative")
    assert grouped("Ingest/", "CollapseRepeatedRecords/GroupByPartition")
    assert grouped("Tokenize/", "GroupByShard")
    assert grouped("NearDedup/")
    assert grouped("Publish/", "WriteLineage/GroupByPartition")


def test_no_flatten_takes_another_flattens_output(tmp_path):
    """The Flink job server's fuser (Beam 2.62) rejects a Flatten of a Flatten's output ("PCollectionNodes
    [...] were consumed but never produced"): a stage hands its counts to the commit as a flat tuple."""
    from apache_beam.portability import common_urns

    components = sample_job(tmp_path).to_runner_api().components
    flattens = [t for t in components.transforms.values() if t.spec.urn == common_urns.primitives.FLATTEN.urn]
    produced_by_flatten = {pcoll: t.unique_name for t in flattens for pcoll in t.outputs.values()}
    nested = {t.unique_name: produced_by_flatten[p] for t in flattens for p in t.inputs.values()
              if p in produced_by_flatten}
    assert flattens and nested == {}
