#!/usr/bin/env python3
"""Source-to-sink paths in a build's Beam graph: what Flink's batch plan optimizer walks.

Flink 1.19's DataSet optimizer (the FlinkRunner's batch translation, which the
portable runner always uses for a bounded job) traverses the plan once per path
in some of its passes (``UnionParallelismAndForwardEnforcer`` visits a node
again for every path that reaches it), so its time grows with the number of
paths, and every diamond in the graph (a collection read by two branches that
meet again) multiplies it. This prints that number for a config's build graph
(primitive transforms; main and side inputs are edges), built exactly as
``beam_pipeline.build.CorpusBuild`` builds it, without running it::

    .venv/bin/python bench/plan_paths.py sample/corpus.yaml

Measured (bench/README.md, 'End to end at scale'): 8.2e10 paths before the
connected components' rounds stopped being diamonds (the sample's job never
left the optimizer), 2.3e7 after (the optimizer takes ~40 s of a build).
"""
from __future__ import annotations

import argparse
import graphlib
import shutil
import sys
import tempfile


def count_paths(pipeline_proto) -> dict:
    """{"transforms", "sinks", "paths", "longest_chain"} of a pipeline proto's primitive transforms."""
    components = pipeline_proto.components
    leaves = {tid: t for tid, t in components.transforms.items() if not t.subtransforms}
    producer = {pc: tid for tid, t in leaves.items() for pc in t.outputs.values()}
    predecessors = {tid: sorted({producer[pc] for pc in t.inputs.values() if pc in producer and producer[pc] != tid})
                    for tid, t in leaves.items()}
    paths, depth = {}, {}
    for tid in graphlib.TopologicalSorter(predecessors).static_order():
        before = predecessors[tid]
        paths[tid] = sum(paths[p] for p in before) if before else 1
        depth[tid] = 1 + max((depth[p] for p in before), default=0)
    consumed = {pc for t in leaves.values() for pc in t.inputs.values()}
    sinks = [tid for tid, t in leaves.items() if not any(pc in consumed for pc in t.outputs.values())]
    return {"transforms": len(leaves), "sinks": len(sinks), "paths": sum(paths[s] for s in sinks),
            "longest_chain": max(depth.values(), default=0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a corpus YAML file")
    args = parser.parse_args()
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.build import CorpusBuild
    from beam_pipeline.config import load_config

    root = tempfile.mkdtemp(prefix="plan-paths-")  # the snapshot is written here; no layer is
    try:
        config = load_config(args.config).model_copy(update={"output_root": root})
        build = CorpusBuild(config, PipelineOptions(["--runner=DirectRunner"]), log=lambda _: None)
        graph = build.assemble(*build._prepare())
        found = count_paths(graph.pipeline.to_runner_api())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{found['transforms']} primitive transforms, {found['sinks']} sinks, longest chain "
          f"{found['longest_chain']}, {found['paths']:,} source-to-sink paths ({found['paths']:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
