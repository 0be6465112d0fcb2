"""Training-side loader: fixed-length token sequences from a published dataset.

Reads the manifest and memory-maps the shard ``.bin`` files with numpy; needs
neither Beam nor torch (``TorchTokenDataset``, in ``dataset/torch_dataset.py``,
exists when torch is installed). Local files only. See "Loader" in
``docs/format.md`` for the state format. The rules below are computed by the
pure functions of ``dataset/lanes.py`` (shard order, lane plan, mixture draw,
state merging); :class:`TokenLoader` walks their plan and reads the shards.

What a rank reads in an epoch is a pure function of (dataset_id, seed, epoch,
world size, mixture config) and of the consumption recorded in a loaded state:

* **pools**: without a mixture every shard is in one pool (``"*"``); with a
  mixture each domain bucket is a pool (shards are homogeneous by bucket).
* **passes**: ``repeats[bucket]`` (default 1, 0 excludes it) is how many times
  a bucket's shards are read per epoch. A shard's sequences are numbered
  ``v = pass * sequences + i`` (its *virtual* index).
* **shard order** of pass ``p``: shards sorted by
  ``stable_hash64(seed, "shard-order", dataset_id, epoch, p, name)``.
* **lanes**: a rank reads one lane, or with ``workers`` processes per rank
  (a torch DataLoader's) ``workers`` lanes: lane ``rank * workers + worker``
  of ``world_size * workers``. Per pool, the not-yet-consumed pieces
  ``(shard, v_start, v_end)`` of pass 0 in shard order, then of pass 1, ...,
  are cut into consecutive runs whose sizes differ by at most one, lane 0
  first (:func:`~beam_pipeline.dataset.lanes.plan_lanes`), so every lane and
  every rank gets the same number of sequences within one, also after a
  world-size change. A lane reads its run in order.
* **mixture**: at local step ``s`` lane ``l`` draws a pool with probability
  proportional to its weight among the pools it has not exhausted,
  using ``u = stable_hash64(seed, "mixture", epoch, l, s // run_length) / 2**64``
  (seed 000, R5): one draw per run of ``run_length`` steps (default
  :data:`DEFAULT_RUN_LENGTH`), and the lane (the rank, and the DataLoader
  worker) in the hash so ranks draw independently and a global batch mixes
  the buckets; it then takes the next sequence of its lane of that pool. Weights can change
  between a save and a resume (reweighting needs no rebuild).

The state (:meth:`TokenLoader.state_dict`) records, per shard, which virtual
sequences have been consumed (ranges, and their count), the lane layout and
each lane's step. Loading a lane's own state on the same world size and
workers resumes exactly where it stopped. To resume on a different world size
or number of workers, merge the states of all ranks
(:func:`~beam_pipeline.dataset.lanes.merge_states`): every new rank gets the
same merged state, the remaining sequences are laid out again with the rule
above, and no sequence of the epoch is repeated or skipped.
:class:`~beam_pipeline.dataset.torch_dataset.TorchTokenDataset` (with torch)
serves one rank to a ``torch.utils.data.DataLoader`` with worker processes and
resumes it exactly (docs/format.md, "In a torch training loop").
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import os
from typing import Iterator

import numpy as np

from beam_pipeline.dataset.lanes import (
    STATE_FORMAT,
    LoaderError,
    StateMismatchError,
    complement,
    consumed_entries,
    mixture_draw,
    pick_pool,
    plan_lanes,
    union,
    upgrade_state,
)
from beam_pipeline.records.hashing import digest_json

ALL = "*"  # the pool holding every shard when no mixture is given
SUPERSEDED_BY = "SUPERSEDED_BY"  # written into an old dataset folder by a takedown
MANIFEST = "manifest.json"
#: Steps per mixture draw (seed 000, R5): a lane reads this many consecutive sequences of one bucket, then draws
#: again. Why 8 and not 1: docs/decisions.md, "The loader's mixture draws per run of steps".
DEFAULT_RUN_LENGTH = 8


class SupersededDatasetError(LoaderError):
    """The dataset version was superseded by a takedown."""


@dataclasses.dataclass
class TokenSequence:
    """One training sequence and where it came from."""

    tokens: np.ndarray  # (seq_len,) token ids, the shard's dtype (uint16 or uint32)
    doc_starts: np.ndarray  # int32 positions in [0, n_tokens) where a document starts
    n_tokens: int  # tokens before the padding (== seq_len except in a shard's last sequence)
    shard: str
    sequence: int  # sequence index within the shard
    repeat: int  # pass over the shard in this epoch (0 unless repeats > 1)
    bucket: str  # the shard's domain bucket
    epoch: int
    step: int  # this rank's step in the epoch (0-based)

    @property
    def key(self) -> tuple[str, int, int]:
        """(shard, repeat, sequence): unique within an epoch."""
        return self.shard, self.repeat, self.sequence


# --- dataset ------------------------------------------------------------------


def read_manifest(dataset: str) -> dict:
    """The manifest of a local dataset folder (or the path of its manifest.json)."""
    path = dataset if dataset.endswith(".json") else os.path.join(dataset, MANIFEST)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def superseded_by(dataset_dir: str) -> dict | None:
    """The ``SUPERSEDED_BY`` record of a dataset folder, or None if it is current."""
    path = os.path.join(dataset_dir, SUPERSEDED_BY)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclasses.dataclass
class _Shard:
    """A shard's tokens (memory-mapped on first use) and its document starts."""

    name: str
    domain: str
    sequences: int
    tokens: int  # before padding
    tokens_path: str
    index_path: str
    dtype: np.dtype
    seq_len: int
    _memmap: np.ndarray | None = None
    _starts: np.ndarray | None = None

    def __getstate__(self) -> dict:
        """Copied into a DataLoader worker without its maps (each process maps the file itself)."""
        return {**self.__dict__, "_memmap": None, "_starts": None}

    def array(self) -> np.ndarray:
        if self._memmap is None:
            # a plain ndarray view of the map: slicing it skips np.memmap's per-slice bookkeeping
            self._memmap = np.memmap(self.tokens_path, dtype=self.dtype, mode="r").view(np.ndarray)
        return self._memmap

    def starts(self) -> np.ndarray:
        if self._starts is None:
            import pyarrow.parquet as pq

            column = pq.read_table(self.index_path, columns=["token_start"]).column("token_start")
            self._starts = column.to_numpy(zero_copy_only=False).astype(np.int64)
        return self._starts

    def read(self, i: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Sequence ``i``: its tokens (a copy), document starts, tokens before padding."""
        lo, hi = i * self.seq_len, (i + 1) * self.seq_len
        starts = self.starts()
        first, last = np.searchsorted(starts, (lo, hi), side="left")
        return (
            np.array(self.array()[lo:hi]),
            (starts[first:last] - lo).astype(np.int32),
            int(min(self.seq_len, max(0, self.tokens - lo))),
        )


# --- the loader ---------------------------------------------------------------


class TokenLoader:
    """Iterates this rank's ``seq_len`` sequences of one epoch; resumable at any step.

    ``for seq in loader`` yields :class:`TokenSequence` until this rank's lanes
    are exhausted (the end of its epoch); then call :meth:`set_epoch`. After
    :meth:`load_state_dict` the loader continues the saved epoch.
    """

    def __init__(
        self,
        dataset: str,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int | None = None,
        epoch: int = 0,
        mixture: dict[str, float] | None = None,
        repeats: dict[str, int] | None = None,
        run_length: int = DEFAULT_RUN_LENGTH,
        allow_superseded: bool = False,
        workers: int = 1,
        worker: int = 0,
    ):
        self.dataset_dir = dataset[: -len(MANIFEST) - 1] if dataset.endswith(MANIFEST) else dataset
        self.manifest = read_manifest(self.dataset_dir)
        self.dataset_id = self.manifest["dataset_id"]
        successor = superseded_by(self.dataset_dir)
        if successor is not None and not allow_superseded:
            raise SupersededDatasetError(
                f"dataset {self.dataset_id} was superseded by {successor.get('dataset_id')} "
                f"({successor.get('reason', 'takedown')}); load the new version, or pass allow_superseded=True"
            )
        if not 0 <= rank < world_size:
            raise LoaderError(f"rank {rank} is not in [0, world_size={world_size})")
        if run_length < 1:
            raise LoaderError(f"run_length must be >= 1, got {run_length}")
        if not 0 <= worker < workers:
            raise LoaderError(f"worker {worker} is not in [0, workers={workers})")
        self.rank, self.world_size, self.run_length = rank, world_size, run_length
        self.workers, self.worker = workers, worker
        self.lane = rank * workers + worker  # this loader's lane among world_size * workers (plan_lanes)
        self.allow_superseded = allow_superseded
        self._mixture_arg = None if mixture is None else dict(mixture)
        self.seed = self.manifest["seed"] if seed is None else int(seed)
        self.seq_len = self.manifest["seq_len"]
        self._shards = self._open_shards()
        buckets = sorted({s.domain for s in self._shards.values()})
        self.repeats = _resolve_repeats(repeats, buckets)
        self.weights = _resolve_weights(mixture, buckets, self.repeats)
        self.mixture = mixture is not None
        self._pools = self._pool_shards()
        self._start(epoch, consumed={}, lanes=None, step=0)

    # -- setup

    def _open_shards(self) -> dict[str, _Shard]:
        dtype = np.dtype(self.manifest["tokenizer"]["dtype"]).newbyteorder("<")
        shards = {}
        for s in self.manifest["shards"]:
            path = os.path.join(self.dataset_dir, s["tokens_file"])
            size = os.path.getsize(path) if os.path.exists(path) else None
            if size != s["tokens_bytes"] or s["tokens_bytes"] != s["sequences"] * self.seq_len * dtype.itemsize:
                raise LoaderError(
                    f"shard {s['name']}: {path} has {size} bytes, the manifest says "
                    f"{s['tokens_bytes']} ({s['sequences']} x {self.seq_len} tokens); "
                    f"run `python -m beam_pipeline verify {self.dataset_dir}`"
                )
            shards[s["name"]] = _Shard(
                s["name"],
                s["domain"],
                s["sequences"],
                s["tokens"],
                path,
                os.path.join(self.dataset_dir, s["index_file"]),
                dtype,
                self.seq_len,
            )
        return shards

    def _pool_of(self, shard: _Shard) -> str | None:
        if self.repeats[shard.domain] == 0:
            return None
        pool = shard.domain if self.mixture else ALL
        return pool if self.weights.get(pool, 0) > 0 else None

    def _pool_shards(self) -> dict[str, list[tuple[str, int, int]]]:
        pools: dict[str, list[tuple[str, int, int]]] = {}
        for shard in self._shards.values():
            pool = self._pool_of(shard)
            if pool is not None:
                pools.setdefault(pool, []).append((shard.name, shard.sequences, self.repeats[shard.domain]))
        return pools

    def _layout_key(self) -> str:
        """What the lane layout depends on besides consumption: pools, repeats, world size."""
        fields = {
            "pools": {p: sorted(n for n, _, _ in s) for p, s in self._pools.items()},
            "repeats": self.repeats,
            "world_size": self.world_size,
            "seed": self.seed,
        }
        if self.workers != 1:  # (one worker per rank keeps the key of format 1)
            fields["workers"] = self.workers
        return digest_json(fields)[:16]

    def lane_loader(self, workers: int, worker: int) -> "TokenLoader":
        """A loader of the same dataset, rank and settings for lane ``worker`` of ``workers`` per rank."""
        return TokenLoader(
            self.dataset_dir,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.seed,
            epoch=self.epoch,
            mixture=self._mixture_arg,
            repeats={b: n for b, n in self.repeats.items()},
            run_length=self.run_length,
            allow_superseded=self.allow_superseded,
            workers=workers,
            worker=worker,
        )

    def _start(self, epoch: int, *, consumed: dict, lanes: dict | None, step: int) -> None:
        self.epoch = epoch
        self._base = consumed  # shard -> consumed ranges when this loader (re)started
        self._lanes = (
            lanes
            if lanes is not None
            else plan_lanes(
                self._pools,
                consumed,
                dataset_id=self.dataset_id,
                seed=self.seed,
                epoch=epoch,
                world_size=self.world_size,
                workers=self.workers,
            )
        )
        self._cursor = {
            pool: [0, lanes_[self.lane][0][1] if lanes_[self.lane] else 0] for pool, lanes_ in self._lanes.items()
        }
        self._order = [(pool, self.weights[pool]) for pool in sorted(self._lanes)]
        self._live: dict[str, bool] = {}
        self._moved = set(self._lanes)  # pools whose cursor moved since they were last settled
        self.step = step

    # -- iteration

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning (nothing consumed)."""
        self._start(epoch, consumed={}, lanes=None, step=0)

    def __iter__(self) -> Iterator[TokenSequence]:
        return self

    def __next__(self) -> TokenSequence:
        pool = self._next_pool()
        if pool is None:
            raise StopIteration
        shard, v = self._take(pool)
        tokens, doc_starts, n_tokens = shard.read(v % shard.sequences)
        item = TokenSequence(
            tokens,
            doc_starts,
            n_tokens,
            shard.name,
            v % shard.sequences,
            v // shard.sequences,
            shard.domain,
            self.epoch,
            self.step,
        )
        self.step += 1
        return item

    def skip(self, n: int) -> int:
        """Advance ``n`` steps without reading tokens (same state as reading them); returns steps taken."""
        for taken in range(n):
            pool = self._next_pool()
            if pool is None:
                return taken
            self._take(pool)
            self.step += 1
        return n

    def _next_pool(self) -> str | None:
        for pool in self._moved:
            self._live[pool] = self._settle(pool)
        self._moved.clear()
        available = [(pool, w) for pool, w in self._order if self._live[pool]]
        if not available:
            return None
        if len(available) == 1:
            return available[0][0]
        return pick_pool(mixture_draw(self.seed, self.epoch, self.lane, self.step // self.run_length), available)

    def _take(self, pool: str) -> tuple[_Shard, int]:
        cursor = self._cursor[pool]
        piece = self._lanes[pool][self.lane][cursor[0]]
        v = cursor[1]
        cursor[1] = v + 1
        self._moved.add(pool)
        return self._shards[piece[0]], v

    def _settle(self, pool: str) -> bool:
        """Move the pool's cursor to the next sequence not consumed before; False if the lane is done."""
        lane = self._lanes[pool][self.lane]
        i, v = self._cursor[pool]
        while i < len(lane):
            name, start, end = lane[i]
            v = max(v, start)
            v = _first_free(self._base.get(name, ()), v)
            if v < end:
                break
            i += 1
            v = lane[i][1] if i < len(lane) else 0
        self._cursor[pool] = [i, v]
        return i < len(lane)

    # -- sizes

    def remaining(self, lane: int | None = None) -> int:
        """Sequences lane ``lane`` (default: this loader's) still has in this epoch, from the lane layout.

        A lane is ``rank * workers + worker``; with one worker per rank, the rank.
        """
        index = self.lane if lane is None else lane
        total = 0
        for pool, lanes in self._lanes.items():
            lane = lanes[index]
            i, v = self._cursor[pool] if index == self.lane else (0, lane[0][1] if lane else 0)
            for j in range(i, len(lane)):
                name, start, end = lane[j]
                lo = max(start, v) if j == i else start
                free = complement(self._base.get(name, []), lo, end)
                total += sum(b - a for a, b in free)
        return total

    def __len__(self) -> int:
        return self.remaining()

    # -- state

    def consumed(self) -> dict[str, list[list[int]]]:
        """Shard -> consumed virtual ranges, including what this rank read since it started."""
        mine: dict[str, list[list[int]]] = {}
        for pool, cursor in self._cursor.items():
            lane = self._lanes[pool][self.lane]
            for j, (name, start, end) in enumerate(lane[: cursor[0] + 1]):
                stop = end if j < cursor[0] else min(max(cursor[1], start), end)
                if stop > start:
                    mine.setdefault(name, []).append([start, stop])
        return {
            name: union(self._base.get(name, []), mine.get(name, [])) for name in sorted(set(self._base) | set(mine))
        }

    def state_dict(self) -> dict:
        """JSON-serializable state: resume exactly with :meth:`load_state_dict`."""
        return {
            "format": STATE_FORMAT,
            "dataset_id": self.dataset_id,
            "seed": self.seed,
            "epoch": self.epoch,
            "world_size": self.world_size,
            "workers": self.workers,
            "lanes": [self.lane],
            "steps": {str(self.lane): self.step},
            "consumed": consumed_entries(self.consumed()),
            "layout": {"key": self._layout_key(), "lanes": self._lanes},
            "mixture": {"weights": dict(self._order), "repeats": self.repeats, "run_length": self.run_length},
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue the epoch a state describes (this lane's own, or :func:`merge_states` of all lanes)."""
        state = upgrade_state(state)
        if state["dataset_id"] != self.dataset_id:
            raise StateMismatchError(
                f"the state was saved for dataset {state['dataset_id']}, this loader reads {self.dataset_id}"
            )
        if state["seed"] != self.seed:
            raise StateMismatchError(f"the state was saved with seed {state['seed']}, this loader has {self.seed}")
        consumed = {shard: [list(r) for r in entry["ranges"]] for shard, entry in state["consumed"].items()}
        for shard, ranges in consumed.items():
            if shard not in self._shards:
                raise StateMismatchError(f"the state names shard {shard!r}, which this dataset does not have")
            limit = self._shards[shard].sequences * self.repeats[self._shards[shard].domain]
            if ranges and (ranges[0][0] < 0 or ranges[-1][1] > limit):
                raise StateMismatchError(f"the state's ranges of {shard} leave [0, {limit}) (repeats changed?)")
        same_layout = (state["world_size"], state["workers"]) == (self.world_size, self.workers) and state["layout"][
            "key"
        ] == self._layout_key()
        if same_layout and str(self.lane) in state["steps"]:
            self._start(
                state["epoch"], consumed=consumed, lanes=state["layout"]["lanes"], step=state["steps"][str(self.lane)]
            )
            return
        missing = sorted(set(range(state["world_size"] * state["workers"])) - {int(lane) for lane in state["steps"]})
        if missing:
            raise StateMismatchError(
                f"the state covers lanes {state['lanes']} of {state['world_size']} ranks x {state['workers']} "
                f"workers; to resume on a different world size, number of workers or mixture pools, merge the "
                f"states of all ranks with merge_states() (missing lanes {missing})"
            )
        self._start(state["epoch"], consumed=consumed, lanes=None, step=max(state["steps"].values(), default=0))

    def sequences_per_lane(self) -> list[int]:
        """Sequences each lane (``rank * workers + worker``) has left in this epoch."""
        return [self.remaining(lane) for lane in range(self.world_size * self.workers)]

    def sequences_per_rank(self) -> list[int]:
        """Sequences each rank has left in this epoch (its lanes together): equal within one (:func:`plan_lanes`)."""
        per_lane = self.sequences_per_lane()
        return [sum(per_lane[r * self.workers : (r + 1) * self.workers]) for r in range(self.world_size)]


def _first_free(ranges, v: int) -> int:
    """The first index >= v not inside sorted disjoint ``ranges``."""
    if not ranges:
        return v
    i = bisect.bisect_right(ranges, [v, math.inf]) - 1
    if i >= 0 and ranges[i][0] <= v < ranges[i][1]:
        return ranges[i][1]
    return v


def _resolve_repeats(repeats: dict[str, int] | None, buckets: list[str]) -> dict[str, int]:
    repeats = dict(repeats or {})
    unknown = sorted(set(repeats) - set(buckets))
    if unknown:
        raise LoaderError(f"repeats names unknown bucket(s) {unknown}; buckets: {buckets}")
    for bucket, count in repeats.items():
        if not isinstance(count, int) or count < 0:
            raise LoaderError(f"repeats[{bucket!r}] must be an integer >= 0, got {count!r}")
    return {b: repeats.get(b, 1) for b in buckets}


def _resolve_weights(mixture: dict[str, float] | None, buckets: list[str], repeats: dict[str, int]) -> dict:
    if mixture is None:
        return {ALL: 1.0}
    unknown = sorted(set(mixture) - set(buckets))
    if unknown:
        raise LoaderError(f"mixture names unknown bucket(s) {unknown}; buckets: {buckets}")
    weights = {b: float(mixture.get(b, 0.0)) for b in buckets}
    if any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise LoaderError(f"mixture weights must be finite and >= 0: {mixture}")
    if not any(w > 0 and repeats[b] > 0 for b, w in weights.items()):
        raise LoaderError(f"no bucket has a positive weight and repeats: {mixture}, repeats {repeats}")
    return weights
