"""Connected components of the near-duplicate graph, as large-star / small-star rounds of the runner's shuffles.

The pure steps (Kiveris et al., *Connected Components in MapReduce and
Beyond*, SoCC 2014) are in :mod:`beam_pipeline.dedup.components`. Each step is
one ``GroupByKey``; its key is the *node group* of the edge's first node
(:func:`node_group`), and its values are blocks of edges whose
first nodes are in that group (an edge carries its second node's group, so
only the first step hashes doc_ids)::

    edges (a, b) -> blocks of (a, b), (b, a) without self-loops
      round r:  GroupByKey(group of node) -> large-star per node -> blocks of (larger, smaller)
                GroupByKey(group of larger) -> small-star per node -> blocks of both directions
      labels:   GroupByKey(group of node) -> (node, min(node, neighbours)) per node

A group's blocks hold every edge of each of its nodes, so a step's per-node
work is that of a ``GroupByKey`` on the node itself. The blocks are what the
runner moves: one element per producing bundle and node group (a bundle
flushes at :data:`FLUSH_EDGES`), not one per edge. Edge by edge, the rounds
were the largest cost of the near-dedup stage: every round runs (see below),
and each moved the whole graph twice (bench/README.md, "Side by side").

``max_rounds`` rounds are unrolled in the job graph (``docs/near_dedup.md``
says why not one job per round), and every round runs: a round after
convergence regroups the final stars and changes nothing.

The rounds form one chain, with no branch that meets it again: Flink's batch
optimizer (the DataSet API the portable Flink runner uses) walks every route
through the job's plan, so a collection read by two steps that meet again
doubles the work of everything after it (``docs/flink.md``, "Routes through
the plan"). A round therefore does not read the previous round's count as a
side input, and the rounds' tallies are not side outputs: each step emits its
tally (``components_changed_rNN``, the edges it changed) into the edge stream
under the reserved group :data:`TALLIES` (a node group is never negative),
every later step passes those elements on, and after the last round the label
step takes them out; ``check_converged`` fails the job if the last round
still changed edges (naming ``near_dedup.max_rounds``) and counts
``components_rounds`` (the rounds that changed something, plus one).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
import xxhash
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipeline.accounting import COUNTS, Tally
from beam_pipeline.dedup.components import large_star, small_star
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed

LABELS = "labels"
_CHANGED = "components_changed_r{index:02d}"

#: Node groups when the caller gives none.
DEFAULT_NODE_GROUPS = 64

#: A bundle hands its blocks to the runner once it holds this many edges (and at its end).
FLUSH_EDGES = 1 << 20


class ConnectedComponents(beam.PTransform):
    """PCollection[(a, b)] edges (or a tuple/dict of them) -> {"labels": PCollection[(node, label)], "counts"}.

    A node's label is the smallest node of its component; a node in no edge
    (or only in self-loops) gets no label. ``counts`` holds the tallies of
    stage ``stage``: ``components_changed_rNN`` per round and ``components_rounds``.
    ``node_groups`` sets how many groups the edges travel in (the labels do not
    depend on it).
    """

    def __init__(self, max_rounds: int, stage: str, node_groups: int = DEFAULT_NODE_GROUPS):
        super().__init__()
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {max_rounds}")
        if node_groups < 1:
            raise ValueError(f"node_groups must be at least 1, not {node_groups}")
        self._max_rounds = max_rounds
        self._stage = stage
        self._groups = node_groups

    def expand(self, edges):
        if isinstance(edges, dict):
            edges = tuple(edges[name] for name in sorted(edges))
        if isinstance(edges, (tuple, list)):
            edges = edges[0] if len(edges) == 1 else tuple(edges) | "AllEdges" >> beam.Flatten()
        current = edges | "BothDirections" >> beam.ParDo(_EdgeBlocksFn(self._groups)).with_output_types(IntKeyed)
        for index in range(1, self._max_rounds + 1):
            current = current | f"Round{index:02d}" >> _StarRound(index, self._stage, self._groups)
        labelled = (
            current
            | "GroupFinalStars" >> beam.GroupByKey()
            | "SmallestPerNode"
            >> beam.ParDo(_LabelsFn()).with_output_types(StrKeyed).with_outputs(_ROUND_TALLIES, main=LABELS)
        )
        counts = (
            labelled[_ROUND_TALLIES]
            | "RoundTallies" >> beam.combiners.ToList()
            | "CheckConverged" >> beam.FlatMap(check_converged, self._max_rounds, self._stage)
        )
        return {LABELS: labelled[LABELS], COUNTS: counts}


#: The reserved group whose "blocks" are the rounds' tallies (a node group is never negative).
TALLIES = -1
_ROUND_TALLIES = "round_tallies"


class NodeBlocks:
    """Items (edges, pairs, signatures) collected per node group of the node they are keyed by,
    taken as ``(group, block of items)`` pairs."""

    def __init__(self, groups: int):
        self._groups = groups
        self._pending: dict[int, list] = {}
        self._size = 0

    def add(self, node: str, item) -> None:
        self.add_to(node_group(node, self._groups), item)

    def add_to(self, group: int, item) -> None:
        """Add an item to a group known already (``node_group`` of its node)."""
        found = self._pending.get(group)
        if found is None:
            self._pending[group] = [item]
        else:
            found.append(item)
        self._size += 1

    def full(self) -> bool:
        return self._size >= FLUSH_EDGES

    def take(self) -> list[tuple[int, tuple]]:
        blocks = [(group, tuple(items)) for group, items in sorted(self._pending.items())]
        self._pending, self._size = {}, 0
        return blocks


def node_group(node: str, groups: int) -> int:
    """The group of a node: xxh3-64 of its UTF-8 bytes modulo ``groups`` (where it travels, not what it means)."""
    return xxhash.xxh3_64_intdigest(node.encode("utf-8")) % groups


def _windowed(element) -> WindowedValue:
    return WindowedValue(element, MIN_TIMESTAMP, (GlobalWindow(),))


class BundleBlocksFn(beam.DoFn):
    """A DoFn that hands its output on as :class:`NodeBlocks` (``self._out``) at the end of each bundle,
    or earlier when they are full (``_flush_if_full``)."""

    def __init__(self, groups: int):
        super().__init__()
        self._groups = groups

    def start_bundle(self):
        self._out = NodeBlocks(self._groups)

    def _flush_if_full(self) -> Iterator:
        if self._out.full():
            yield from self._out.take()

    def finish_bundle(self):
        for block in self._out.take():
            yield _windowed(block)


class _EdgeBlocksFn(BundleBlocksFn):
    """(a, b) -> blocks of (a, b) and (b, a), by node group of the first node."""

    def process(self, edge: tuple[str, str]) -> Iterator:
        if not (isinstance(edge, tuple) and len(edge) == 2 and all(isinstance(n, str) and n for n in edge)):
            raise ValueError(f"an edge is a pair of non-empty doc_ids, not {edge!r}")
        a, b = edge
        if a != b:
            group_a, group_b = node_group(a, self._groups), node_group(b, self._groups)
            self._out.add_to(group_a, (a, b, group_b))
            self._out.add_to(group_b, (b, a, group_a))
        yield from self._flush_if_full()


def neighbours_of(blocks: Iterable[tuple], group: int) -> tuple[dict[str, list[str]], dict[str, int]]:
    """({node: its neighbours}, {node or neighbour: its node group}) of group ``group``'s blocks of
    edges (node, neighbour, the neighbour's group)."""
    neighbours: dict[str, list[str]] = {}
    group_of: dict[str, int] = {}
    for block in blocks:
        for node, other, other_group in block:
            group_of[other] = other_group
            found = neighbours.get(node)
            if found is None:
                neighbours[node] = [other]
            else:
                found.append(other)
    group_of.update(dict.fromkeys(neighbours, group))
    return neighbours, group_of


class _StarRound(beam.PTransform):
    """Blocks of (node, neighbour), both directions (+ the tallies so far under :data:`TALLIES`) -> the
    same after large-star + small-star, with this round's tallies added."""

    def __init__(self, index: int, stage: str, groups: int):
        super().__init__()
        self._index = index
        self._stage = stage
        self._groups = groups

    def expand(self, blocks):
        return (
            blocks
            | "GroupNeighbours" >> beam.GroupByKey()
            | "LargeStar"
            >> beam.ParDo(_StarFn(large_star, self._index, False, self._stage, self._groups)).with_output_types(
                IntKeyed
            )
            | "GroupSmallerNeighbours" >> beam.GroupByKey()  # blocks of (larger, smaller)
            | "SmallStar"
            >> beam.ParDo(_StarFn(small_star, self._index, True, self._stage, self._groups)).with_output_types(IntKeyed)
        )


class _StarFn(BundleBlocksFn):
    """(group, blocks) -> blocks of the edges ``step`` emits at each node of the group (``both``: in both
    directions); the tallies passed on, and this bundle's (its changed edges) added under :data:`TALLIES`."""

    def __init__(self, step, index: int, both: bool, stage: str, groups: int):
        super().__init__(groups)
        self._step = step
        self._changed = _CHANGED.format(index=index)
        self._both = both
        self._stage = stage

    def setup(self):
        self.tally = Tally(self._stage)

    def process(self, grouped: tuple[int, Iterable]) -> Iterator[tuple[int, object]]:
        group, blocks = grouped
        if group == TALLIES:
            for tally in blocks:
                yield TALLIES, tally
            return
        changed, add, both = 0, self._out.add_to, self._both
        neighbours, group_of = neighbours_of(blocks, group)
        for node, others in neighbours.items():
            edges, n = self._step(node, others)
            changed += n
            for a, b in edges:  # every end is the node or one of its neighbours: its group is known
                add(group_of[a], (a, b, group_of[b]))
                if both:
                    add(group_of[b], (b, a, group_of[a]))
        self.tally.inc(self._changed, n=changed)
        yield from self._flush_if_full()

    def finish_bundle(self):
        yield from super().finish_bundle()
        counts = self.tally.take()
        if counts:
            yield _windowed((TALLIES, counts))


class _LabelsFn(beam.DoFn):
    """The last round's groups -> (node, smallest of the node and its neighbours) per node (main) and
    the rounds' tallies (``round_tallies``)."""

    def process(self, grouped: tuple[int, Iterable]):
        group, blocks = grouped
        if group == TALLIES:
            for tally in blocks:
                yield beam.pvalue.TaggedOutput(_ROUND_TALLIES, tally)
            return
        neighbours, _ = neighbours_of(blocks, group)
        for node, others in sorted(neighbours.items()):
            yield node, min(node, min(others))


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
