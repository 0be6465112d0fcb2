"""Connected components by alternating large-star and small-star: the pure steps.

Kiveris, Lattanzi, Mirrokni, Rastogi, Vassilvitskii, *Connected Components in
MapReduce and Beyond* (SoCC 2014). Nodes are totally ordered (here: doc_id
strings). Let N(u) be the neighbours of u and m(u) = min(N(u) + {u}).

* **large-star** at node u: every neighbour v > u is re-attached to m(u);
* **small-star** at node u: every neighbour v < u, and u itself, is
  re-attached to the smallest of them.

Each step is one grouping by node (in Beam: one ``GroupByKey``); the edges
never grow in number. Alternating them converges, in O(log^2 n) rounds in the
worst case and a handful in practice, to one star per component whose centre
is the component's minimum node; that centre is the component label.

A step *changes* the graph exactly when, in large-star, a node with a smaller
neighbour also has larger neighbours (each of those edges is rewired), or, in
small-star, a node has more than one smaller neighbour. When a whole round
(large-star then small-star) changes nothing, every node either has no
smaller neighbour (a centre, all of whose neighbours are leaves) or has
exactly one smaller neighbour and no larger one (a leaf): every component is
a star around its minimum, so the count of changed edges is the convergence
test. ``tests/test_components.py`` checks these functions against a
union-find on random graphs; the Beam transform lives in
:mod:`beam_pipeline.transforms.near_dedup`.
"""

from __future__ import annotations

from typing import Iterable, Iterator


def large_star(node: str, neighbours: Iterable[str]) -> tuple[list[tuple[str, str]], int]:
    """Edges (larger, smaller) emitted at ``node`` and the number of changed edges."""
    others = set(neighbours)
    others.discard(node)
    if not others:
        return [], 0
    smallest = min(min(others), node)
    larger = sorted(v for v in others if v > node)
    changed = len(larger) if smallest != node else 0
    return [(v, smallest) for v in larger], changed


def small_star(node: str, smaller: Iterable[str]) -> tuple[list[tuple[str, str]], int]:
    """Edges (smaller, larger) emitted at ``node`` from its smaller neighbours, and the changes."""
    others = {v for v in smaller if v < node}
    if not others:
        return [], 0
    smallest = min(others)
    edges = [(smallest, v) for v in sorted(others) if v != smallest]
    edges.append((smallest, node))
    return edges, len(others) - 1


def _group(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return grouped


def star_round(edges: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], int]:
    """One large-star + small-star round on an in-memory edge list (the Beam round, unkeyed)."""
    both = _group([(a, b) for a, b in edges if a != b] + [(b, a) for a, b in edges if a != b])
    towards_small: list[tuple[str, str]] = []
    changed = 0
    for node, neighbours in both.items():
        out, n = large_star(node, neighbours)
        towards_small.extend(out)
        changed += n
    result: list[tuple[str, str]] = []
    for node, smaller in _group(towards_small).items():
        out, n = small_star(node, smaller)
        result.extend(out)
        changed += n
    return sorted(set(result)), changed


def labels_from_stars(edges: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(node, label) for both ends of each converged star edge (centre, leaf)."""
    for centre, leaf in edges:
        yield leaf, centre
        yield centre, centre


def components(edges: Iterable[tuple[str, str]], max_rounds: int = 64) -> tuple[dict[str, str], int]:
    """{node: component label} by star rounds in memory, and the rounds used (for tests, benches)."""
    current = sorted({(min(a, b), max(a, b)) for a, b in edges if a != b})
    for rounds in range(1, max_rounds + 1):
        current, changed = star_round(current)
        if changed == 0:
            labels: dict[str, str] = {}
            for node, label in labels_from_stars(current):
                labels[node] = min(label, labels.get(node, label))
            return labels, rounds
    raise RuntimeError(f"connected components did not converge within {max_rounds} rounds")


def union_find(edges: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Reference labels (minimum node of each component) by a single-machine union-find."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {node: find(node) for node in list(parent)}
