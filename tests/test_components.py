"""Connected components by large-star / small-star: pure steps and the Beam transform."""

import json
import random

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.records.accounting import COUNTS, SumCounts, stage_counts
from beam_pipeline.dedup.components import components, large_star, small_star, star_round, union_find
from beam_pipeline.transforms.connected_components import LABELS, ConnectedComponents, node_group

OPTIONS = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])


def node(i: int) -> str:
    return f"{i:06d}"


def random_graph(rng: random.Random, nodes: int, edges: int) -> list[tuple[str, str]]:
    names = [f"{rng.getrandbits(48):012x}" for _ in range(nodes)]
    return [(rng.choice(names), rng.choice(names)) for _ in range(edges)]


def test_large_star_attaches_larger_neighbours_to_the_smallest():
    assert large_star("c", ["a", "d", "e"]) == ([("d", "a"), ("e", "a")], 2)
    assert large_star("a", ["d", "c"]) == ([("c", "a"), ("d", "a")], 0)  # a is the minimum: no change
    assert large_star("e", ["a", "c"]) == ([], 0)                      # no larger neighbours
    assert large_star("a", ["a"]) == ([], 0)


def test_small_star_attaches_smaller_neighbours_and_self_to_the_smallest():
    assert small_star("e", ["c", "a", "b"]) == ([("a", "b"), ("a", "c"), ("a", "e")], 2)
    assert small_star("e", ["a"]) == ([("a", "e")], 0)
    assert small_star("a", []) == ([], 0)


def test_a_converged_star_forest_does_not_change():
    stars = [("a", "b"), ("a", "c"), ("d", "e")]
    assert star_round(stars) == (stars, 0)


@pytest.mark.parametrize("seed", range(6))
def test_components_equal_union_find_on_random_graphs(seed):
    rng = random.Random(seed)
    for _ in range(30):
        edges = random_graph(rng, rng.randint(2, 400), rng.randint(1, 500))
        labels, rounds = components(edges)
        assert labels == union_find([e for e in edges if e[0] != e[1]])
        assert rounds <= 12


def test_rounds_grow_slowly_with_path_length():
    rounds = {}
    for n in (10, 100, 1000, 4000):
        order = list(range(n))
        random.Random(n).shuffle(order)  # a path whose node order is unrelated to its shape
        edges = [(node(order[i]), node(order[i + 1])) for i in range(n - 1)]
        labels, rounds[n] = components(edges, max_rounds=40)
        assert set(labels.values()) == {node(0)}
    assert rounds[4000] <= 14 and rounds[10] <= rounds[100] <= rounds[4000]


def components_job(p, edges, max_rounds: int, node_groups: int = 64):
    """{"labels": (node, label), "counts": tallies} of the Beam transform on ``edges``."""
    return (p | beam.Create(edges)) | ConnectedComponents(max_rounds, "near_dedup", node_groups)


def summed_counts(counts):
    """The transform's tallies (one collection, from the chain of rounds), summed."""
    return counts | "SumCounts" >> beam.CombineGlobally(SumCounts())


@pytest.mark.parametrize("node_groups", [1, 7, 64])
def test_beam_components_match_union_find(node_groups):
    rng = random.Random(99)
    edges = random_graph(rng, 300, 260) + [(node(i), node(i + 1)) for i in range(12)]  # a path too
    expected = sorted(union_find([e for e in edges if e[0] != e[1]]).items())
    _, rounds = components(edges)
    with TestPipeline(options=OPTIONS) as p:
        assert_that(components_job(p, edges, rounds + 1, node_groups)[LABELS], equal_to(expected))


def test_edges_of_several_finders_make_one_graph():
    """MinHash and SimHash edges come from two steps; a component may need edges of both."""
    rng = random.Random(7)
    edges = random_graph(rng, 200, 180) + [(node(i), node(i + 1)) for i in range(20)]
    expected = sorted(union_find([e for e in edges if e[0] != e[1]]).items())
    _, rounds = components(edges)
    with TestPipeline(options=OPTIONS) as p:
        finders = (p | "Odd" >> beam.Create(edges[1::2]), p | "Even" >> beam.Create(edges[::2]))
        assert_that((finders | ConnectedComponents(rounds + 1, "near_dedup"))[LABELS], equal_to(expected))


def test_beam_components_run_after_convergence_and_count_the_rounds_as_data():
    edges = [(node(i), node(i + 1)) for i in range(40)]
    _, rounds = components(edges)

    def counted(results):
        (summed,) = results
        other = stage_counts("near_dedup", summed)["other"]
        assert other["components_rounds"] == rounds
        changed = {name: n for name, n in other.items() if name.startswith("components_changed_r")}
        assert changed and all(int(name[-2:]) < rounds for name in changed)  # nothing changes after convergence

    with TestPipeline(options=OPTIONS) as p:
        found = components_job(p, edges, rounds + 3)
        assert_that(found[LABELS], equal_to([(node(i), node(0)) for i in range(41)]), label="labels")
        assert_that(summed_counts(found[COUNTS]), counted, label="counts")


def test_beam_components_of_no_edges_is_empty():
    with TestPipeline(options=OPTIONS) as p:
        assert_that(components_job(p, [("a", "a")], 1)[LABELS], equal_to([]))


def test_not_converging_within_max_rounds_fails_loudly():
    edges = [(node(i), node(i + 1)) for i in range(64)]
    with pytest.raises(Exception, match=r"did not converge within near_dedup.max_rounds=2"):
        with TestPipeline(options=OPTIONS) as p:
            _ = components_job(p, edges, 2)


# --- rounds after convergence ---------------------------------------------------------------


def star_fn(step, index: int, groups: int = 4):
    from beam_pipeline.transforms.connected_components import _StarFn

    fn = _StarFn(step, index, step is small_star, "near_dedup", groups)
    fn.setup()
    fn.start_bundle()
    return fn


def changed_in_round(index: int, n: int) -> dict:
    return {("near_dedup", f"components_changed_r{index:02d}", ""): n}


def test_the_first_large_star_after_a_round_without_changes_tells_every_group():
    from beam_pipeline.transforms.connected_components import CONVERGED, TALLIES

    tallies = [changed_in_round(1, 9), changed_in_round(2, 3), {}]  # round 3 ran and changed nothing
    out = list(star_fn(large_star, 4).process((TALLIES, tallies)))
    assert out == [(TALLIES, t) for t in tallies] + [(g, CONVERGED) for g in range(4)]
    # one round later the news is old: round 3 changed nothing either, nobody is told again
    assert list(star_fn(large_star, 5).process((TALLIES, tallies))) == [(TALLIES, t) for t in tallies]
    # a small-star step never tells: its input holds one direction of each edge
    assert list(star_fn(small_star, 4).process((TALLIES, tallies))) == [(TALLIES, t) for t in tallies]
    # while rounds still change, nobody is told
    assert list(star_fn(large_star, 3).process((TALLIES, tallies[:2])))[-1] == (TALLIES, tallies[1])


def test_after_convergence_steps_hand_their_blocks_on_unread():
    from beam_pipeline.transforms.connected_components import CONVERGED, PASSING, TALLIES

    block = (("b", "a", 1), ("a", "b", 1), ("a", "c", 2))  # not even a star: proof that nobody looked
    fn = star_fn(large_star, 6)
    (marker, (group, packed)) = fn.process((1, [block, CONVERGED, block[:1]]))  # one piece: a small group
    assert marker == (1, PASSING) and group == 1 and json.loads(packed) == [list(e) for e in block + block[:1]]
    assert list(fn.finish_bundle()) == []  # no edges rebuilt, no tally
    fn = star_fn(small_star, 6)
    out = list(fn.process((1, [PASSING, packed])))
    assert out == [(1, PASSING), (1, packed)] and out[1][1] is packed  # handed on as it came
    assert list(star_fn(large_star, 7).process((1, [PASSING]))) == [(1, PASSING)]  # a group without edges
    # the small-star step that gets the news computes (its input is one direction) and hands it on
    fn = star_fn(small_star, 5)
    assert list(fn.process((1, [CONVERGED, (("b", "a", 1),)]))) == [(1, CONVERGED)]
    assert [wv.value for wv in fn.finish_bundle()] == [(1, (("a", "b", 1), ("b", "a", 1))), (TALLIES, {})]


@pytest.mark.parametrize("node_groups", [1, 5])
def test_many_rounds_after_convergence_keep_the_labels(node_groups):
    rng = random.Random(5)
    edges = random_graph(rng, 250, 220) + [(node(i), node(i + 1)) for i in range(30)]
    expected = sorted(union_find([e for e in edges if e[0] != e[1]]).items())
    _, rounds = components(edges)

    def counted(results):
        (summed,) = results
        assert stage_counts("near_dedup", summed)["other"]["components_rounds"] == rounds

    with TestPipeline(options=OPTIONS) as p:
        found = components_job(p, edges, rounds + 8, node_groups)
        assert_that(found[LABELS], equal_to(expected), label="labels")
        assert_that(summed_counts(found[COUNTS]), counted, label="counts")


def steps_by_hand(edges, rounds: int, groups: int) -> list[int]:
    """The rounds' steps run as a runner would (group by key between steps, one bundle per group)
    -> how many groups each step handed on unread (PASSING)."""
    from collections import defaultdict

    from beam_pipeline.transforms.connected_components import PASSING, _EdgeBlocksFn, _StarFn

    fn = _EdgeBlocksFn(groups)
    fn.start_bundle()
    out = [block for edge in edges for block in fn.process(edge)] + [wv.value for wv in fn.finish_bundle()]
    passed = []
    for index in range(1, rounds + 1):
        for step in (large_star, small_star):
            grouped = defaultdict(list)
            for key, value in out:
                grouped[key].append(value)
            fn, out, passing = _StarFn(step, index, step is small_star, "near_dedup", groups), [], 0
            fn.setup()
            for key in sorted(grouped):
                fn.start_bundle()
                produced = list(fn.process((key, grouped[key]))) + [wv.value for wv in fn.finish_bundle()]
                passing += (key, PASSING) in produced
                out += produced
            passed.append(passing)
    return passed


def test_a_graph_that_no_round_changes_is_passed_on_from_the_third_round():
    # disjoint pairs (smaller, larger): already stars rooted at their smallest node, no step changes an edge;
    # the large-star step of round 2 learns it from round 1's tallies, which are all empty
    edges = [(node(2 * i), node(2 * i + 1)) for i in range(40)]
    groups = 4
    with_edges = len({node_group(a, groups) for edge in edges for a in edge})
    assert components(edges)[1] == 1
    assert steps_by_hand(edges, 5, groups) == [0, 0, 0, 0] + [with_edges] * 6
    # a graph that keeps changing: round r changes nothing, r + 1 computes and tells, r + 2 passes on
    path = [(node(i), node(i + 1)) for i in range(20)]
    _, rounds = components(path)
    passed = steps_by_hand(path, rounds + 3, groups)
    assert passed[: 2 * (rounds + 1)] == [0] * (2 * (rounds + 1)) and all(passed[2 * (rounds + 1) :])


def test_a_converged_group_is_packed_in_pieces_of_at_most_a_mebibyte(monkeypatch):
    """A group's edges, packed once the graph converged, leave in several ``bytes`` values when they are
    many (a runner bounds one element); the next steps hand the pieces on, and the labels are the same."""
    from beam_pipeline.transforms import blocks
    from beam_pipeline.transforms.connected_components import CONVERGED, PASSING, packed, unpacked

    block = tuple((f"n{i:05d}", "n00000", 1) for i in range(1, 3000))
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 16 * 1024)
    pieces_out = list(star_fn(large_star, 6).process((1, [block, CONVERGED])))
    assert pieces_out[0] == (1, PASSING) and len(pieces_out) > 3
    values = [value for _, value in pieces_out[1:]]
    assert all(isinstance(v, bytes) and len(v) <= 16 * 1024 for v in values)
    assert [tuple(e) for piece in unpacked(values) for e in piece] == list(block)
    assert packed(values) == values  # packed already: handed on as they came


def test_blocks_are_taken_in_pieces_of_at_most_the_bound_with_every_item_in_order():
    from beam_pipeline.transforms.blocks import GroupBlocks, pieces
    from beam_pipeline.transforms.bundle_budget import output_bytes

    out = GroupBlocks(flush_at=10**6)
    items = [("d%05d" % i, "x" * (i % 50)) for i in range(5000)]
    for i, item in enumerate(items):
        out.add_to(i % 3, item)
    taken = out.take()
    assert [group for group, _ in taken] == sorted(group for group, _ in taken)
    for group in range(3):
        mine = [block for g, block in taken if g == group]
        assert [item for block in mine for item in block] == items[group::3]
    assert pieces(items, 4096) == pieces(items, 4096) and len(pieces(items, 4096)) > 10
    for block in pieces(items, 4096):
        assert sum(output_bytes(item) for item in block) <= 4096
    huge = ["y" * 10_000, "z"]
    assert pieces(huge, 4096) == [("y" * 10_000,), ("z",)]  # a larger item travels alone
    assert pieces([], 4096) == [] and pieces(items[:3]) == [tuple(items[:3])]
