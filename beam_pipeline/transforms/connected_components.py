"""Connected components of the near-duplicate graph, through spill files.

The pure steps (large-star and small-star, Kiveris et al., SoCC 2014) are in
:mod:`beam_pipeline.dedup.components`. Each step groups the edges by node.
Grouped by the runner, a worker received its whole share of the edges as
one message in every step of every round, and near dedup's worker memory
grew with the corpus (550 -> 880 MB during the rounds at 1 GB of text).
Here an edge is a record of a spill file of the bucket ``xxh3(node) % n`` of
the node it is grouped by; one task per bucket reads its files, applies the
step to each node and spills the edges it emits to the buckets of the next
step. Only (bucket, file name) pairs go through a ``GroupByKey``.

Every file is named by the digest of its bytes (a retried task rewrites the
same file) and a file named twice is read once; every step reads its edges
sorted, so the result does not depend on bundles, retries or parallelism.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipeline.accounting import StageCounters
from beam_pipeline.dedup.components import large_star, small_star
from beam_pipeline.hashing import bucket_of
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.layer_io import BufferedSpillFn, GroupSpillFiles
from beam_pipeline.transforms.lsh_files import SPILL_KEYED, key_runs, keyed_record, read_spill_table, \
    write_keyed_spills, write_spills

#: One edge of a spill file: grouped by ``node``, it names one neighbour.
EDGE_RECORD = pa.schema([("node", pa.string()), ("other", pa.string())])

_CHANGES = "changes"


class ConnectedComponents(beam.PTransform):
    """{finder: PCollection[(a, b)] edges} -> PCollection[(bucket, spill file of (node, "label", label) records)].

    A node's label is the smallest node of its component; its records are in
    bucket ``xxh3(node) % buckets`` (:func:`~beam_pipeline.transforms.lsh_files.read_keyed_groups`
    reads them; a node may have several records, all with its label).
    ``max_rounds`` large-star + small-star rounds are unrolled in the job
    graph (``docs/near_dedup.md`` says why not one job per round). Each round
    also yields its changed-edge count as a few partial sums (one per bundle);
    the next round reads them as a side input and, once they sum to 0
    (converged), passes the edge files through without reading them. If the
    last round still changed edges, the job fails with a message naming
    ``near_dedup.max_rounds``. Counters (namespace ``stage``):
    ``components_rounds`` (rounds that ran) and ``components_changed_rNN``.
    """

    def __init__(self, max_rounds: int, spill_directory: str, buckets: int, stage: str):
        super().__init__()
        self._max_rounds = max_rounds
        self._directory = spill_directory
        self._buckets = buckets
        self._stage = stage

    def expand(self, edge_sets):
        directory, buckets = self._directory, self._buckets
        spilled = [
            edges
            | f"Spill{name.title()}Edges" >> beam.ParDo(_SpillEdgesFn(directory, buckets, f"components-{name}"))
            .with_output_types(IntKeyed)
            for name, edges in sorted(edge_sets.items())
        ]
        # Each finder's edges are spilled by the step that finds them: only file names are flattened
        # (a Flatten of two steps' edges would be buffered by the local runner's driver).
        current = spilled[0] if len(spilled) == 1 else tuple(spilled) | "AllEdgeSpills" >> beam.Flatten()
        changes = []
        for index in range(1, self._max_rounds + 1):
            result = current | f"Round{index:02d}" >> _StarRound(
                index, changes[-1] if changes else None, directory, buckets, self._stage)
            current = result["edges"]
            changes.append(result["changes"])
        _ = (current.pipeline
             | "Once" >> beam.Create([None])
             | "CheckConverged" >> beam.ParDo(_ConvergedFn(self._max_rounds, self._stage),
                                              *[beam.pvalue.AsList(c) for c in changes]))
        return current | "Labels" >> beam.ParDo(_LabelsFn(directory)).with_output_types(IntKeyed)


class _StarRound(beam.PTransform):
    """(bucket, edge file) of both directions -> {"edges": the same after large-star + small-star,
    "changes": partial counts}."""

    def __init__(self, index: int, previous_changes, directory: str, buckets: int, stage: str):
        super().__init__()
        self._index = index
        self._previous = previous_changes
        self._directory = directory
        self._buckets = buckets
        self._stage = stage

    def expand(self, spills):
        if self._previous is None:
            work, done = spills, None
        else:
            routed = spills | "SkipIfConverged" >> beam.ParDo(
                _RouteFn(), beam.pvalue.AsList(self._previous)).with_outputs("done", main="work")
            work, done = routed["work"], routed["done"]
        prefix = f"components-r{self._index:02d}"
        large = (
            work
            | "GroupNeighbours" >> GroupSpillFiles()
            | "LargeStar" >> beam.ParDo(_StarFilesFn(
                large_star, self._index, self._directory, self._buckets, f"{prefix}-large", False, self._stage))
            .with_output_types(IntKeyed).with_outputs(_CHANGES, main="edges")
        )
        small = (
            large["edges"]  # (larger, smaller): in the bucket of the larger end
            | "GroupSmallerNeighbours" >> beam.GroupByKey()
            | "SmallStar" >> beam.ParDo(_StarFilesFn(
                small_star, self._index, self._directory, self._buckets, f"{prefix}-small", True, self._stage))
            .with_output_types(IntKeyed).with_outputs(_CHANGES, main="edges")
        )
        changes = (large[_CHANGES], small[_CHANGES]) | "AllChanges" >> beam.Flatten()
        out = small["edges"] if done is None else (small["edges"], done) | "WithSkipped" >> beam.Flatten()
        return {"edges": out, "changes": changes}


def read_edges(paths: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(node, [neighbour, ...]) of the given edge spill files (each read once), by node."""
    table = read_spill_table(paths, EDGE_RECORD, ["node", "other"])
    if table is None:
        return
    nodes, others = table.column("node").to_pylist(), table.column("other").to_pylist()
    del table
    for start, end in key_runs(nodes):
        yield nodes[start], others[start:end]


def _edge_targets(a: str, b: str, buckets: int, both: bool) -> list[tuple[int, dict]]:
    targets = [(bucket_of(a, buckets), {"node": a, "other": b})]
    if both:
        targets.append((bucket_of(b, buckets), {"node": b, "other": a}))
    return targets


def _write_edges(buffers: dict[int, list[dict]], directory: str, prefix: str) -> Iterator[tuple[int, str]]:
    return write_spills(buffers, directory, prefix, EDGE_RECORD, lambda r: (r["node"], r["other"]))


class _SpillEdgesFn(BufferedSpillFn):
    """(a, b) -> (bucket, edge file): the edge in the buckets of both ends (self-loops dropped)."""

    def __init__(self, directory: str, buckets: int, prefix: str):
        self._directory = directory
        self._buckets = buckets
        self._prefix = prefix

    def targets(self, edge: tuple[str, str]) -> Iterable[tuple[int, dict]]:
        a, b = edge
        return _edge_targets(a, b, self._buckets, True) if a != b else []

    def limit(self) -> int:
        return SPILL_KEYED

    def write(self, buffers: dict[int, list[dict]]) -> Iterator[tuple[int, str]]:
        return _write_edges(buffers, self._directory, self._prefix)


class _StarFilesFn(beam.DoFn):
    """(bucket, edge files) -> (bucket, edge file) of the edges ``step`` emits at the bucket's nodes,
    spilled by their first end (``both``: by both ends); changed-edge counts leave once per bundle."""

    def __init__(self, step, index: int, directory: str, buckets: int, prefix: str, both: bool, stage: str):
        self._step = step
        self._index = index
        self._directory = directory
        self._buckets = buckets
        self._prefix = prefix
        self._both = both
        self._stage = stage

    def setup(self):
        self._counters = StageCounters(self._stage)

    def start_bundle(self):
        self._changed = 0

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator[tuple[int, str]]:
        buffers: dict[int, list[dict]] = {}
        for node, neighbours in read_edges(keyed[1]):
            edges, changed = self._step(node, neighbours)
            self._changed += changed
            for a, b in edges:
                for target, row in _edge_targets(a, b, self._buckets, self._both):
                    buffers.setdefault(target, []).append(row)
        yield from _write_edges(buffers, self._directory, f"{self._prefix}-{keyed[0]:05d}")

    def finish_bundle(self):
        if self._changed:
            self._counters.inc(f"components_changed_r{self._index:02d}", n=self._changed)
            yield beam.pvalue.TaggedOutput(_CHANGES, WindowedValue(self._changed, MIN_TIMESTAMP, [GlobalWindow()]))


class _LabelsFn(beam.DoFn):
    """(bucket, converged edge file) -> (bucket, spill file of (node, "label", label) records).

    Converged, every edge joins a component's smallest node (the centre) to a
    leaf, in both directions, so a node's label is min(node, neighbour).
    """

    def __init__(self, directory: str):
        self._directory = directory

    def process(self, spill: tuple[int, str]) -> Iterator[tuple[int, str]]:
        bucket, path = spill
        records = [keyed_record(node, "label", min(node, *neighbours)) for node, neighbours in read_edges([path])]
        if records:
            yield from write_keyed_spills({bucket: records}, self._directory, "label")


class _RouteFn(beam.DoFn):
    def process(self, spill, previous_changes: list[int]):
        if sum(previous_changes) == 0:
            yield beam.pvalue.TaggedOutput("done", spill)
        else:
            yield spill


class _ConvergedFn(beam.DoFn):
    """Counts the rounds that ran; fails the job if the last round still changed edges."""

    def __init__(self, max_rounds: int, stage: str):
        self._max_rounds = max_rounds
        self._stage = stage

    def setup(self):
        self._counters = StageCounters(self._stage)

    def process(self, _unused, *changes_per_round: list[int]):
        totals = [sum(c) for c in changes_per_round]
        self._counters.inc("components_rounds", n=1 + sum(1 for t in totals[:-1] if t))
        if totals[-1]:
            raise RuntimeError(
                f"{self._stage}: connected components did not converge within near_dedup.max_rounds="
                f"{self._max_rounds} rounds ({totals[-1]} edges still changed in the last round); "
                f"raise near_dedup.max_rounds")
        yield from ()
