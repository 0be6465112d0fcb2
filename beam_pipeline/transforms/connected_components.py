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
and each moved the whole graph twice (bench/README.md, "Side by side"). With
``label_blocks`` the labels leave in blocks per node group too.

``max_rounds`` rounds are unrolled in the job graph (``docs/near_dedup.md``
says why not one job per round), and every round runs; a round after
convergence changes nothing, so once the graph has converged the rounds hand
their blocks on unread (see "Converged rounds" below).

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

Converged rounds
----------------
A round that changes no edge leaves one star per component (see
:mod:`beam_pipeline.dedup.components`), and every later round would emit the
same edges again: the work of those rounds is per edge and buys nothing (on
real text the graph converges in 3-5 of the 20 default rounds). The
large-star step of round k reads the tallies of every earlier step (they are
complete there: the ``GroupByKey`` before it waits for the step before); when
round k - 1 changed nothing and round k - 2 did (or k = 2), it sends the
marker :data:`CONVERGED` to every node group. The small-star step of round k
computes as usual (its input holds one direction of each edge) and hands the
marker on in its group; from round k + 1 on, a step whose group holds
:data:`CONVERGED` or :data:`PASSING` hands its blocks on as they came, with
:data:`PASSING` (the large-star step) or the marker it got (the small-star
step), instead of rebuilding them edge by edge; the first such step packs a
group's edges into ``bytes`` values of at most 1 MiB (:func:`packed`, JSON), which the runner
then moves as it is, without encoding and decoding each edge at every step.
The markers are strings, the blocks tuples (or that ``bytes``); the labels
step ignores the markers. Labels, tallies and the
convergence check are those of the rounds computed in full.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

import apache_beam as beam
import xxhash

from beam_pipeline.dedup.components import large_star, small_star
from beam_pipeline.records.accounting import COUNTS, Tally
from beam_pipeline.transforms.blocks import BlocksFn, GroupBlocks, pieces, windowed
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
    depend on it). With ``label_blocks`` the labels come as one
    ``(node group, ((node, label), ...))`` block per group, in node order, for a
    join that groups by :func:`node_group` too.
    """

    def __init__(
        self, max_rounds: int, stage: str, node_groups: int = DEFAULT_NODE_GROUPS, *, label_blocks: bool = False
    ):
        super().__init__()
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {max_rounds}")
        if node_groups < 1:
            raise ValueError(f"node_groups must be at least 1, not {node_groups}")
        self._max_rounds = max_rounds
        self._stage = stage
        self._groups = node_groups
        self._label_blocks = label_blocks

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
            >> beam.ParDo(_LabelsFn(self._label_blocks))
            .with_output_types(IntKeyed if self._label_blocks else StrKeyed)
            .with_outputs(_ROUND_TALLIES, main=LABELS)
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

#: Sent to every node group by the large-star step that sees a round without changes (module doc).
CONVERGED = "converged"
#: Handed on with the blocks by a step that passed them on unread.
PASSING = "passing"


class NodeBlocks(GroupBlocks):
    """Items (edges, pairs, signatures) collected per node group of the node they are keyed by,
    taken as ``(group, block of items)`` pairs."""

    def __init__(self, groups: int):
        super().__init__(FLUSH_EDGES)
        self._groups = groups

    def add(self, node: str, item) -> None:
        self.add_to(node_group(node, self._groups), item)


def node_group(node: str, groups: int) -> int:
    """The group of a node: xxh3-64 of its UTF-8 bytes modulo ``groups`` (where it travels, not what it means)."""
    return xxhash.xxh3_64_intdigest(node.encode("utf-8")) % groups


class BundleBlocksFn(BlocksFn):
    """A :class:`BlocksFn` whose blocks are :class:`NodeBlocks` of ``groups`` node groups."""

    def __init__(self, groups: int):
        super().__init__(FLUSH_EDGES)
        self._groups = groups

    def new_blocks(self) -> NodeBlocks:
        return NodeBlocks(self._groups)


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


def neighbours_of(blocks: Iterable[Iterable], group: int) -> tuple[dict[str, list[str]], dict[str, int]]:
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


def blocks_and_markers(values: Iterable) -> tuple[list[tuple | bytes], set[str]]:
    """A group's values -> (its blocks of edges, packed or not, the markers among them)."""
    blocks: list[tuple | bytes] = []
    markers = set()
    for value in values:
        if isinstance(value, str):
            markers.add(value)
        else:
            blocks.append(value)
    return blocks, markers


def packed(blocks: list[tuple | bytes]) -> list[bytes]:
    """A group's edges as JSON arrays of [node, neighbour, neighbour's group] (UTF-8), in pieces of at most
    :data:`~beam_pipeline.transforms.blocks.BLOCK_BYTES`: what a converged round hands on. Beam copies
    bytes as they are, where it would encode and decode every edge at every step. (JSON, not pickle: the
    package never unpickles, ``tests/test_security.py``.)"""
    already = [block for block in blocks if isinstance(block, bytes)]
    if len(already) == len(blocks):
        return already  # packed by an earlier step
    edges = [edge for block in unpacked(blocks) for edge in block]
    return [json.dumps(list(piece), separators=(",", ":")).encode() for piece in pieces(edges)]


def unpacked(blocks: Iterable[tuple | bytes]) -> Iterator[Iterable]:
    """Blocks of edges, whether they came packed (:func:`packed`, one block of lists) or not."""
    for block in blocks:
        if isinstance(block, bytes):
            yield json.loads(block)
        else:
            yield block


class _StarFn(BundleBlocksFn):
    """(group, blocks) -> blocks of the edges ``step`` emits at each node of the group (``both``: in both
    directions); the tallies passed on, and this bundle's (its changed edges) added under :data:`TALLIES`.
    After convergence the blocks are handed on unread (module doc, "Converged rounds")."""

    def __init__(self, step, index: int, both: bool, stage: str, groups: int):
        super().__init__(groups)
        self._step = step
        self._index = index
        self._changed = _CHANGED.format(index=index)
        self._both = both
        self._stage = stage

    def setup(self):
        self.tally = Tally(self._stage)

    def start_bundle(self):
        super().start_bundle()
        self._worked = False

    def process(self, grouped: tuple[int, Iterable]) -> Iterator[tuple[int, object]]:
        group, values = grouped
        if group == TALLIES:
            yield from self._tallies(values)
            return
        blocks, markers = blocks_and_markers(values)
        if PASSING in markers or (CONVERGED in markers and not self._both):
            yield group, PASSING
            for piece in packed(blocks):
                yield group, piece
            return
        if CONVERGED in markers:
            yield group, CONVERGED
        self._worked = True
        changed, add, both = 0, self._out.add_to, self._both
        neighbours, group_of = neighbours_of(unpacked(blocks), group)
        for node, others in neighbours.items():
            edges, n = self._step(node, others)
            changed += n
            for a, b in edges:  # every end is the node or one of its neighbours: its group is known
                add(group_of[a], (a, b, group_of[b]))
                if both:
                    add(group_of[b], (b, a, group_of[a]))
        self.tally.inc(self._changed, n=changed)
        yield from self._flush_if_full()

    def _tallies(self, tallies: Iterable[dict]) -> Iterator[tuple[int, object]]:
        """The tallies so far, passed on; at a large-star step, :data:`CONVERGED` to every group when the
        previous round was the first to change nothing."""
        tallies = list(tallies)
        for tally in tallies:
            yield TALLIES, tally
        if self._both or self._index < 2:
            return
        previous = _changed_in(tallies, self._index - 1)
        before = _changed_in(tallies, self._index - 2) if self._index > 2 else 1
        if previous == 0 and before > 0:
            for group in range(self._groups):
                yield group, CONVERGED

    def finish_bundle(self):
        yield from super().finish_bundle()
        counts = self.tally.take()
        if counts or self._worked:  # an empty tally still tells the next step that this one ran
            yield windowed((TALLIES, counts))


class _LabelsFn(beam.DoFn):
    """The last round's groups -> (node, smallest of the node and its neighbours) per node, or one block
    of them per group (main), and the rounds' tallies (``round_tallies``)."""

    def __init__(self, blocks: bool):
        super().__init__()
        self._blocks = blocks

    def process(self, grouped: tuple[int, Iterable]):
        group, blocks = grouped
        if group == TALLIES:
            for tally in blocks:
                if tally:
                    yield beam.pvalue.TaggedOutput(_ROUND_TALLIES, tally)
            return
        neighbours, _ = neighbours_of(unpacked(blocks_and_markers(blocks)[0]), group)
        labels = [(node, min(node, min(others))) for node, others in sorted(neighbours.items())]
        if self._blocks:
            if labels:
                yield group, tuple(labels)
        else:
            yield from labels


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
