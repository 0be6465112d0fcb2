"""Routes through a job's plan: the work Flink's batch optimizer does before a job starts.

The portable Flink runner translates a bounded job to Flink's DataSet API, whose
optimizer (Flink 1.19) runs passes that walk the plan from each sink back to
the sources without remembering the nodes they have visited
(``RangePartitionRewriter.preVisit`` always returns true;
``UnionParallelismAndForwardEnforcer`` does the same). Their time grows with
the number of source-to-sink *routes*, not with the number of steps: every
collection that two steps read and that meet again later (a side input of a
collection the main input also descends from, a commit that waits on several
outputs of one task) multiplies the routes of everything after it. A build is
a chain of about a dozen stages, so a factor of 3 per stage is 3^12.

Measured on the sample's build on embedded Flink (docs/flink.md, "Routes
through the plan"): 1.3e9 routes kept the job in the optimizer for more than
30 minutes; 6.0e7 started it after 52 s; the build's graph today has about
5e6. ``tests/test_plan_routes.py`` keeps it under a bound, and
``bench/plan_paths.py`` prints the number for any config.

The count here is over the Beam pipeline's primitive transforms, main and
side inputs alike (both are inputs of a Flink operator: side inputs are
broadcast sets). Fusion merges chains of steps, not routes, so this is the
number that decides the optimizer's time, up to a constant.
"""

from __future__ import annotations

import graphlib


def count_routes(pipeline_proto) -> dict:
    """{"transforms", "sinks", "routes", "longest_chain"} of a pipeline proto's primitive transforms
    (``beam.Pipeline.to_runner_api()``)."""
    leaves, routes, depth = _walk(pipeline_proto)
    consumed = {pc for t in leaves.values() for pc in t.inputs.values()}
    sinks = [tid for tid, t in leaves.items() if not any(pc in consumed for pc in t.outputs.values())]
    return {
        "transforms": len(leaves),
        "sinks": len(sinks),
        "routes": sum(routes[s] for s in sinks),
        "longest_chain": max(depth.values(), default=0),
    }


def routes_into(pipeline_proto) -> dict[str, int]:
    """{unique name of a primitive transform: the routes from the sources to it}: where routes multiply."""
    leaves, routes, _ = _walk(pipeline_proto)
    return {leaves[tid].unique_name: n for tid, n in routes.items()}


def _walk(pipeline_proto) -> tuple[dict, dict[str, int], dict[str, int]]:
    """(primitive transforms by id, routes from the sources to each, its depth), in one topological pass."""
    leaves = {tid: t for tid, t in pipeline_proto.components.transforms.items() if not t.subtransforms}
    producer = {pc: tid for tid, t in leaves.items() for pc in t.outputs.values()}
    predecessors = {
        tid: sorted({producer[pc] for pc in t.inputs.values() if pc in producer and producer[pc] != tid})
        for tid, t in leaves.items()
    }
    routes: dict[str, int] = {}
    depth: dict[str, int] = {}
    for tid in graphlib.TopologicalSorter(predecessors).static_order():
        before = predecessors[tid]
        routes[tid] = sum(routes[p] for p in before) if before else 1
        depth[tid] = 1 + max((depth[p] for p in before), default=0)
    return leaves, routes, depth
