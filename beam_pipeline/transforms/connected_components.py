"""Connected components of the near-duplicate graph, as large-star / small-star rounds of the runner's shuffles.

The pure steps (Kiveris et al., *Connected Components in MapReduce and
Beyond*, SoCC 2014) are in :mod:`beam_pipeline.dedup.components`. Each step is
one ``GroupByKey`` on the node (a doc_id, ``StrUtf8Coder``)::

    edges (a, b) -> (a, b), (b, a) without self-loops
      round r:  GroupByKey(node) -> large-star -> (larger, smaller)
                GroupByKey(larger) -> small-star -> (smaller, larger), (larger, smaller)
      labels:   (node, min(node, neighbour)) -> CombinePerKey(min)

A grouped value is one node's neighbours (doc_ids). ``max_rounds`` rounds are
unrolled in the job graph (``docs/near_dedup.md`` says why not one job per
round), and every round runs: a round after convergence regroups the final
stars and changes nothing. A round does not skip its groupings when the
previous round changed no edge: that test would read the previous round's
count as a side input, making each round a diamond of the graph (edges and
counts both from the round before), and Flink's batch optimizer (the DataSet
API the portable Flink runner uses) walks every path of the graph, 2^rounds
of them (``docs/decisions.md``). The changed-edge counts are
data: each step counts ``components_changed_rNN`` in its tally
(:mod:`beam_pipeline.accounting`); if the last round still changed edges,
the job fails with a message naming ``near_dedup.max_rounds``;
``components_rounds`` counts the rounds that changed something, plus one.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam

from beam_pipeline.accounting import COUNTS, CountingDoFn, Tally
from beam_pipeline.dedup.components import large_star, small_star
from beam_pipeline.transforms.keys import StrKeyed

LABELS = "labels"
_CHANGED = "components_changed_r{index:02d}"


class ConnectedComponents(beam.PTransform):
    """PCollection[(a, b)] edges (or a tuple/dict of them) -> {"labels": PCollection[(node, label)], "counts"}.

    A node's label is the smallest node of its component; a node in no edge
    (or only in self-loops) gets no label. ``counts`` holds the tallies of
    stage ``stage``: ``components_changed_rNN`` per round and ``components_rounds``.
    """

    def __init__(self, max_rounds: int, stage: str):
        super().__init__()
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {max_rounds}")
        self._max_rounds = max_rounds
        self._stage = stage

    def expand(self, edges):
        if isinstance(edges, dict):
            edges = tuple(edges[name] for name in sorted(edges))
        if isinstance(edges, (tuple, list)):
            edges = edges[0] if len(edges) == 1 else tuple(edges) | "AllEdges" >> beam.Flatten()
        current = edges | "BothDirections" >> beam.FlatMap(both_directions).with_output_types(StrKeyed)
        rounds = []
        for index in range(1, self._max_rounds + 1):
            result = current | f"Round{index:02d}" >> _StarRound(index, self._stage)
            current = result["edges"]
            rounds.append(result[COUNTS])  # (large star's, small star's)
        converged = (
            edges.pipeline
            | "Once" >> beam.Create([None])
            | "CheckConverged"
            >> beam.ParDo(
                _ConvergedFn(self._max_rounds, self._stage), *[beam.pvalue.AsList(c) for pair in rounds for c in pair]
            )
        )
        labels = (
            current
            | "LabelCandidates"
            >> beam.MapTuple(lambda node, other: (node, min(node, other))).with_output_types(StrKeyed)
            | "SmallestPerNode" >> beam.CombinePerKey(min)
        )
        # a flat tuple, never a Flatten's output: the Flink job server's fuser rejects a Flatten of Flattens
        return {LABELS: labels, COUNTS: (*(c for pair in rounds for c in pair), converged)}


def both_directions(edge: tuple[str, str]) -> list[tuple[str, str]]:
    a, b = edge
    return [(a, b), (b, a)] if a != b else []


class _StarRound(beam.PTransform):
    """(node, neighbour) of both directions -> {"edges": the same after large-star + small-star,
    "counts": the round's tallies}."""

    def __init__(self, index: int, stage: str):
        super().__init__()
        self._index = index
        self._stage = stage

    def expand(self, edges):
        large = (
            edges
            | "GroupNeighbours" >> beam.GroupByKey()
            | "LargeStar"
            >> beam.ParDo(_StarFn(large_star, self._index, False, self._stage))
            .with_output_types(StrKeyed)
            .with_outputs(COUNTS, main="edges")
        )
        small = (
            large["edges"]  # (larger, smaller)
            | "GroupSmallerNeighbours" >> beam.GroupByKey()
            | "SmallStar"
            >> beam.ParDo(_StarFn(small_star, self._index, True, self._stage))
            .with_output_types(StrKeyed)
            .with_outputs(COUNTS, main="edges")
        )
        return {"edges": small["edges"], COUNTS: (large[COUNTS], small[COUNTS])}


class _StarFn(CountingDoFn):
    """(node, neighbours) -> the edges ``step`` emits at the node (``both``: in both directions);
    counts the changed edges."""

    def __init__(self, step, index: int, both: bool, stage: str):
        super().__init__(stage)
        self._step = step
        self._changed = _CHANGED.format(index=index)
        self._both = both

    def process(self, grouped: tuple[str, Iterable[str]]) -> Iterator[tuple[str, str]]:
        node, neighbours = grouped
        edges, changed = self._step(node, neighbours)
        self.tally.inc(self._changed, n=changed)
        for a, b in edges:
            yield a, b
            if self._both:
                yield b, a


def changed_edges(counts: Iterable[dict]) -> int:
    """The changed edges in a round's tallies."""
    return sum(
        n for tally in counts for (_stage, name, _source), n in tally.items() if name.startswith("components_changed_r")
    )


class _ConvergedFn(beam.DoFn):
    """Counts the rounds that ran; fails the job if the last round still changed edges."""

    def __init__(self, max_rounds: int, stage: str):
        self._max_rounds = max_rounds
        self._stage = stage

    def process(self, _unused, *counts_per_step: list[dict]):
        totals = [changed_edges(large + small) for large, small in zip(counts_per_step[::2], counts_per_step[1::2])]
        if totals[-1]:
            raise RuntimeError(
                f"{self._stage}: connected components did not converge within near_dedup.max_rounds="
                f"{self._max_rounds} rounds ({totals[-1]} edges still changed in the last round); "
                f"raise near_dedup.max_rounds"
            )
        tally = Tally(self._stage)
        tally.inc("components_rounds", n=1 + sum(1 for total in totals[:-1] if total))
        yield tally.take()
