"""Every grouping in the build's job is the runner's own, keyed by a deterministic, non-pickling coder.

The graph is the one job ``python -m beam_pipeline run`` submits for the sample
(assembled, not run). DESIGN.md principle 9: every grouping is a GroupByKey,
CombinePerKey or CoGroupByKey of the runner (never files of our own), and
principle 6: every grouping key has a deterministic coder (str, int or bytes;
a pickled key silently differs between processes: apache/beam #33020).
"""
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.build import CorpusBuild
from beam_pipeline.config import load_config
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
