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
stars and changes nothing.

The rounds form one chain, with no branch that meets it again: Flink's batch
optimizer (the DataSet API the portable Flink runner uses) walks every route
through the job's plan, so a collection read by two steps that meet again
doubles the work of everything after it (``docs/flink.md``, "Routes through
the plan"). A round therefore does not read the previous round's count as a
side input, and the rounds' tallies are not side outputs: each step emits its
tally (``components_changed_rNN``, the edges it changed) into the edge stream
under the reserved node ``""`` (a doc_id is never empty), every later step
passes those elements on, and after the last round one step takes them out,
fails the job if the last round still changed edges (naming
``near_dedup.max_rounds``) and counts ``components_rounds`` (the rounds that
changed something, plus one).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipeline.accounting import COUNTS, Tally
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
        for index in range(1, self._max_rounds + 1):
            current = current | f"Round{index:02d}" >> _StarRound(index, self._stage)
        split = current | "TakeTallies" >> beam.ParDo(_TakeTallies()).with_outputs(_ROUND_TALLIES, main="edges")
        labels = (
            split["edges"]
            | "LabelCandidates"
            >> beam.MapTuple(lambda node, other: (node, min(node, other))).with_output_types(StrKeyed)
            | "SmallestPerNode" >> beam.CombinePerKey(min)
        )
        counts = (
            split[_ROUND_TALLIES]
            | "RoundTallies" >> beam.combiners.ToList()
            | "CheckConverged" >> beam.FlatMap(check_converged, self._max_rounds, self._stage)
        )
        return {LABELS: labels, COUNTS: counts}


#: The reserved node whose "edges" are the rounds' tallies (a doc_id is never empty).
TALLIES = ""
_ROUND_TALLIES = "round_tallies"


def both_directions(edge: tuple[str, str]) -> list[tuple[str, str]]:
    a, b = edge
    if TALLIES in (a, b):
        raise ValueError(f"an edge names the empty node, reserved for the rounds' tallies: {edge!r}")
    return [(a, b), (b, a)] if a != b else []


class _StarRound(beam.PTransform):
    """(node, neighbour) of both directions (+ the tallies so far under :data:`TALLIES`) -> the same
    after large-star + small-star, with this round's tallies added."""

    def __init__(self, index: int, stage: str):
        super().__init__()
        self._index = index
        self._stage = stage

    def expand(self, edges):
        return (
            edges
            | "GroupNeighbours" >> beam.GroupByKey()
            | "LargeStar"
            >> beam.ParDo(_StarFn(large_star, self._index, False, self._stage)).with_output_types(StrKeyed)
            | "GroupSmallerNeighbours" >> beam.GroupByKey()  # (larger, smaller)
            | "SmallStar" >> beam.ParDo(_StarFn(small_star, self._index, True, self._stage)).with_output_types(StrKeyed)
        )


class _StarFn(beam.DoFn):
    """(node, neighbours) -> the edges ``step`` emits at the node (``both``: in both directions);
    the tallies passed on, and this bundle's (its changed edges) added under :data:`TALLIES`."""

    def __init__(self, step, index: int, both: bool, stage: str):
        super().__init__()
        self._step = step
        self._changed = _CHANGED.format(index=index)
        self._both = both
        self._stage = stage

    def setup(self):
        self.tally = Tally(self._stage)

    def process(self, grouped: tuple[str, Iterable]) -> Iterator[tuple[str, object]]:
        node, neighbours = grouped
        if node == TALLIES:
            for tally in neighbours:
                yield TALLIES, tally
            return
        edges, changed = self._step(node, neighbours)
        self.tally.inc(self._changed, n=changed)
        for a, b in edges:
            yield a, b
            if self._both:
                yield b, a

    def finish_bundle(self):
        counts = self.tally.take()
        if counts:
            yield WindowedValue((TALLIES, counts), MIN_TIMESTAMP, [GlobalWindow()])


class _TakeTallies(beam.DoFn):
    """The last round's stream -> its edges (main) and the rounds' tallies (``round_tallies``)."""

    def process(self, edge: tuple[str, object]):
        if edge[0] == TALLIES:
            yield beam.pvalue.TaggedOutput(_ROUND_TALLIES, edge[1])
        else:
            yield edge


def check_converged(tallies: list[dict], max_rounds: int, stage: str) -> list[dict]:
    """Every round's tallies -> the same plus one counting ``components_rounds``; fails if the last
    round still changed edges."""
    totals = [_changed_in(tallies, index) for index in range(1, max_rounds + 1)]
    if totals[-1]:
        raise RuntimeError(
            f"{stage}: connected components did not converge within near_dedup.max_rounds="
            f"{max_rounds} rounds ({totals[-1]} edges still changed in the last round); "
            f"raise near_dedup.max_rounds"
        )
    tally = Tally(stage)
    tally.inc("components_rounds", n=1 + sum(1 for total in totals[:-1] if total))
    return [*tallies, tally.take()]


def _changed_in(tallies: list[dict], index: int) -> int:
    """The edges round ``index`` changed."""
    name = _CHANGED.format(index=index)
    return sum(n for tally in tallies for (_stage, counted, _source), n in tally.items() if counted == name)
