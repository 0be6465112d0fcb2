"""Every grouping key in every stage's job has a deterministic, non-pickling coder."""
import pytest
from apache_beam.coders import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.runners import pipeline_context

from beam_pipeline.build import CorpusBuild
from beam_pipeline.config import load_config
from conftest import IN_PROCESS, SAMPLE_CONFIG

ALLOWED_KEY_CODERS = (coders.StrUtf8Coder, coders.VarIntCoder, coders.BytesCoder)


def test_grouping_keys_use_deterministic_coders(tmp_path):
    seen = {}

    def record(stage, pipeline):
        proto = pipeline.to_runner_api()
        context = pipeline_context.PipelineContext(proto.components)
        for transform in proto.components.transforms.values():
            if transform.spec.urn != common_urns.primitives.GROUP_BY_KEY.urn:
                continue
            (pcoll_id,) = transform.inputs.values()
            key_coder = context.coders.get_by_id(proto.components.pcollections[pcoll_id].coder_id).key_coder()
            seen[f"{stage}: {transform.unique_name}"] = key_coder

    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": str(tmp_path / "out")})
    CorpusBuild(config, PipelineOptions(IN_PROCESS), log=lambda m: None, before_run=record).run()
    assert {name.split(":")[0] for name in seen} == {"ingest", "exact_dedup", "select", "tokenize"}
    ours = dict(seen)
    bad = {name: str(coder) for name, coder in ours.items()
           if not (isinstance(coder, ALLOWED_KEY_CODERS) and coder.is_deterministic())}
    assert bad == {}
    assert len(ours) >= 6
