"""The build's plan stays small enough for Flink's batch optimizer to start it.

Flink's DataSet optimizer walks every source-to-sink route of a bounded job's
plan (``beam_pipeline/build/plan_routes.py``). On the sample's build, 1.3e9 routes
(129ca5e) kept the job in the optimizer for more than 30 minutes; 6.0e7
started it after 52 s; the build today has about 5.3e6. The embedded-Flink
test (``tests/test_flink_embedded.py``) shows that the job runs; this one
names the step that multiplied the routes, in a second, on every change.
"""
from __future__ import annotations

import apache_beam as beam

from beam_pipeline.build.corpus_build import CorpusBuild
from beam_pipeline.config.corpus import load_config
from beam_pipeline.build.plan_routes import count_routes, routes_into
from conftest import SAMPLE_CONFIG

#: 4x the sample's routes today: room for a stage or two, not for one more diamond per stage (3^12).
MAX_SAMPLE_ROUTES = 20_000_000


def test_routes_are_counted_through_main_and_side_inputs():
    p = beam.Pipeline()
    start = p | "Start" >> beam.Create([1])
    left = start | "Left" >> beam.Map(lambda x: x)
    right = start | "Right" >> beam.Map(lambda x: x)
    _ = left | "Meet" >> beam.Map(lambda x, _y: x, beam.pvalue.AsSingleton(right))  # a diamond: 2 routes
    found = count_routes(p.to_runner_api())
    into = routes_into(p.to_runner_api())
    assert found["routes"] == 2 and found["sinks"] == 1
    assert into["Meet"] == 2 and into["Left"] == 1 and into["Right"] == 1


def test_the_sample_builds_plan_has_few_routes(tmp_path):
    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": str(tmp_path)})
    build = CorpusBuild(config, beam.options.pipeline_options.PipelineOptions(["--runner=DirectRunner"]),
                        log=lambda _: None)
    proto = build.assemble(*build._prepare()).pipeline.to_runner_api()
    found = count_routes(proto)
    worst = sorted(routes_into(proto).items(), key=lambda item: -item[1])[:10]
    assert found["routes"] <= MAX_SAMPLE_ROUTES, (
        f"{found['routes']:.2e} routes through the build's plan (at most {MAX_SAMPLE_ROUTES:.0e}): Flink's batch "
        f"optimizer walks each one (beam_pipeline/build/plan_routes.py); the steps most routes reach: {worst}"
    )
