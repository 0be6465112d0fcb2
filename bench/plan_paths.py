#!/usr/bin/env python3
"""Source-to-sink paths in a build's Beam graph: what Flink's batch plan optimizer walks.

Flink 1.19's DataSet optimizer (the FlinkRunner's batch translation, which the
portable runner always uses for a bounded job) traverses the plan once per path
in some of its passes (``UnionParallelismAndForwardEnforcer`` visits a node
again for every path that reaches it), so its time grows with the number of
paths, and every diamond in the graph (a collection read by two branches that
meet again) multiplies it. This prints that number for a config's build graph
(primitive transforms; main and side inputs are edges), built exactly as
``beam_pipeline.build.corpus_build.CorpusBuild`` builds it, without running it::

    .venv/bin/python bench/plan_paths.py sample/corpus.yaml

Measured (bench/README.md, 'End to end at scale'; docs/flink.md, 'Routes
through the plan'): 8.2e10 paths before the connected components' rounds
stopped being diamonds (the sample's job never left the optimizer), 2.3e7
after (the optimizer took ~40 s of a build); 1.3e9 once dedup joined the
cascade (more than 30 min), 5.3e6 since stages commit from one collection
each (``beam_pipeline.build.plan_routes`` says how the count is made).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a corpus YAML file")
    args = parser.parse_args()
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.build.corpus_build import CorpusBuild
    from beam_pipeline.config.corpus import load_config
    from beam_pipeline.build.plan_routes import count_routes

    root = tempfile.mkdtemp(prefix="plan-paths-")  # the snapshot is written here; no layer is
    try:
        config = load_config(args.config).model_copy(update={"output_root": root})
        build = CorpusBuild(config, PipelineOptions(["--runner=DirectRunner"]), log=lambda _: None)
        graph = build.assemble(*build._prepare())
        found = count_routes(graph.pipeline.to_runner_api())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{found['transforms']} primitive transforms, {found['sinks']} sinks, longest chain "
          f"{found['longest_chain']}, {found['routes']:,} source-to-sink paths ({found['routes']:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
