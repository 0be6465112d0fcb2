"""The training loader's lane plan and state, as pure functions of their arguments.

What a rank reads in an epoch: the shard order of each pass
(:func:`shard_order`), the unconsumed pieces of each pool cut into lanes whose
sizes differ by at most one (:func:`plan_lanes`, :func:`cut_pieces`), and the
pool a lane draws at a step (:func:`mixture_draw`, :func:`pick_pool`,
:func:`natural_mixture`); and what it has read: consumed ranges
(:func:`complement`, :func:`union`) and the state format, upgraded from format 1
and merged over the lanes of a run (:func:`upgrade_state`, :func:`merge_states`).
The rules they implement are in the docstring of ``dataset/loader.py``, whose
:class:`~beam_pipeline.dataset.loader.TokenLoader` calls them, and in
``docs/format.md``, "Loader". The loader's errors live here because
:func:`merge_states` raises them.
"""

from __future__ import annotations

from typing import Iterable

from beam_pipeline.records.hashing import stable_hash64

STATE_FORMAT = 2  # format 1 (one lane per rank, "ranks" instead of "lanes") is read too

Piece = list  # [shard name, v_start, v_end): a run of virtual sequence indexes of one shard


class LoaderError(ValueError):
    """The dataset, the arguments or a state cannot be used."""


class StateMismatchError(LoaderError):
    """A state that belongs to another dataset, seed, or layout."""


# --- pure planning functions ----------------------------------------------------


def shard_order(names: Iterable[str], *, dataset_id: str, seed: int, epoch: int, repeat: int = 0) -> list[str]:
    """Shards in the order of pass ``repeat`` of ``epoch``: a pure function of its arguments."""
    return sorted(names, key=lambda n: (stable_hash64(seed, "shard-order", dataset_id, epoch, repeat, n), n))


def complement(ranges: list[list[int]], lo: int, hi: int) -> list[list[int]]:
    """Sub-ranges of [lo, hi) not covered by sorted disjoint ``ranges``."""
    out, cursor = [], lo
    for a, b in ranges:
        if b <= cursor:
            continue
        if a >= hi:
            break
        if a > cursor:
            out.append([cursor, a])
        cursor = max(cursor, b)
    if cursor < hi:
        out.append([cursor, hi])
    return out


def union(*range_lists: list[list[int]]) -> list[list[int]]:
    """Sorted, merged union of ranges ``[a, b)``."""
    merged: list[list[int]] = []
    for a, b in sorted(r for ranges in range_lists for r in ranges if r[1] > r[0]):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def plan_lanes(
    pools: dict[str, list[tuple[str, int, int]]],
    consumed: dict[str, list[list[int]]],
    *,
    dataset_id: str,
    seed: int,
    epoch: int,
    world_size: int,
    workers: int = 1,
) -> dict[str, list[list[Piece]]]:
    """{pool: [lane 0, ..., lane L-1]}, ``L = world_size * workers``; pools map to (shard, sequences, repeats).

    The lane of worker ``k`` of rank ``r`` is ``r * workers + k``. A pool's
    unconsumed pieces, pass after pass (each pass in its shard order), are cut
    into ``L`` consecutive runs, lane 0 first, whose sizes differ by at most
    one. The runs that get the one more sequence go round the lanes in the
    order worker 0 of every rank, then worker 1 of every rank, ..., and the
    round goes on from pool to pool (in pool name order): every lane's total
    and every rank's total differ from the others' by at most one sequence, so
    ranks kept in step lose at most one step of the epoch.
    """
    lanes_n = world_size * workers
    extra_order = [rank * workers + k for k in range(workers) for rank in range(world_size)]
    offset = 0
    lanes = {}
    for pool, shards in sorted(pools.items()):
        size = {name: n for name, n, _ in shards}
        pieces = [
            [name, a, b]
            for p in range(max((r for _, _, r in shards), default=0))
            for name in shard_order(
                [name for name, _, r in shards if r > p], dataset_id=dataset_id, seed=seed, epoch=epoch, repeat=p
            )
            for a, b in complement(consumed.get(name, []), p * size[name], (p + 1) * size[name])
        ]
        base, extra = divmod(sum(b - a for _, a, b in pieces), lanes_n)
        longer = {extra_order[(offset + i) % lanes_n] for i in range(extra)}
        offset = (offset + extra) % lanes_n
        lanes[pool] = cut_pieces(pieces, [base + (lane in longer) for lane in range(lanes_n)])
    return lanes


def cut_pieces(pieces: list[Piece], sizes: list[int]) -> list[list[Piece]]:
    """Consecutive runs of ``sizes[i]`` sequences of ``pieces`` (which hold ``sum(sizes)``), pieces split as needed."""
    runs, queue, at = [], [list(p) for p in pieces], 0
    for size in sizes:
        run = []
        while size > 0:
            name, a, b = queue[at]
            take = min(size, b - a)
            run.append([name, a, a + take])
            size -= take
            if a + take == b:
                at += 1
            else:
                queue[at] = [name, a + take, b]
        runs.append(run)
    return runs


def mixture_draw(seed: int, epoch: int, rank: int, block: int) -> float:
    """The uniform number in [0, 1) that picks the pool of block ``step // run_length``."""
    return stable_hash64(seed, "mixture", epoch, rank, block) / 2.0**64


def pick_pool(u: float, weights: list[tuple[str, float]]) -> str:
    """The pool whose cumulative weight interval (in the given order) holds ``u * total``."""
    total = sum(w for _, w in weights)
    target, acc = u * total, 0.0
    for pool, w in weights:
        acc += w
        if target < acc:
            return pool
    return weights[-1][0]


def natural_mixture(manifest: dict, repeats: dict[str, int] | None = None) -> dict[str, float]:
    """Weights proportional to each bucket's tokens times its repeats: every bucket ends together."""
    repeats = repeats or {}
    weights: dict[str, float] = {}
    for shard in manifest["shards"]:
        weights[shard["domain"]] = weights.get(shard["domain"], 0.0) + shard["tokens"] * repeats.get(shard["domain"], 1)
    return weights


def merge_states(states: list[dict]) -> dict:
    """One state from the states of several lanes (ranks, workers) of the same run: the union of their consumption."""
    if not states:
        raise LoaderError("merge_states needs at least one state")
    states = [upgrade_state(s) for s in states]
    first = states[0]
    for state in states[1:]:
        for field in ("format", "dataset_id", "seed", "epoch", "world_size", "workers"):
            if state[field] != first[field]:
                raise StateMismatchError(
                    f"cannot merge states with different {field}: {first[field]} vs {state[field]}"
                )
        if state["layout"]["key"] != first["layout"]["key"] or state["layout"]["lanes"] != first["layout"]["lanes"]:
            raise StateMismatchError("cannot merge states with different lane layouts")
    consumed: dict[str, list[list[int]]] = {}
    for state in states:
        for shard, entry in state["consumed"].items():
            consumed[shard] = union(consumed.get(shard, []), entry["ranges"])
    steps: dict[str, int] = {}
    batches: dict[str, int] = {}
    for state in states:
        for lane, step in state["steps"].items():
            steps[lane] = max(step, steps.get(lane, 0))
        for lane, n in state.get("batches", {}).items():
            batches[lane] = max(n, batches.get(lane, 0))
    merged = {
        **first,
        "lanes": sorted({lane for s in states for lane in s["lanes"]}),
        "steps": dict(sorted(steps.items(), key=lambda kv: int(kv[0]))),
        "consumed": consumed_entries(consumed),
    }
    if batches:
        merged["batches"] = dict(sorted(batches.items(), key=lambda kv: int(kv[0])))
    return merged


def upgrade_state(state: dict) -> dict:
    """A state of format 1 (one lane per rank: ``ranks``) in format 2 (``workers`` lanes per rank: ``lanes``)."""
    if state.get("format") == 1:
        state = {k: v for k, v in state.items() if k != "ranks"}
        return {**state, "format": STATE_FORMAT, "workers": 1, "lanes": sorted(int(r) for r in state["steps"])}
    if state.get("format") != STATE_FORMAT:
        raise StateMismatchError(f"unknown loader state format {state.get('format')!r}")
    return state


def consumed_entries(consumed: dict[str, list[list[int]]]) -> dict:
    return {
        shard: {"sequences": sum(b - a for a, b in ranges), "ranges": ranges}
        for shard, ranges in sorted(consumed.items())
        if ranges
    }
