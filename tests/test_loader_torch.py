"""The loader in a real torch training loop: DataLoader batches, worker processes, exact resume, 8 -> 6 ranks.

Real ``torch.utils.data.DataLoader`` with the default collate and real worker
processes. Skipped only when torch cannot be imported (it is a test-only
dependency: ``requirements/torch.txt``); with ``BEAM_PIPELINE_REQUIRE_TORCH=1``
(CI) a missing torch fails instead.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from beam_pipeline.dataset.lanes import LoaderError, merge_states
from beam_pipeline.dataset.loader import TokenLoader
from beam_pipeline.dataset.torch_dataset import as_torch_dataset

if os.environ.get("BEAM_PIPELINE_REQUIRE_TORCH") == "1":
    import torch  # CI installs it: a missing torch fails there instead of skipping
else:
    torch = pytest.importorskip("torch", reason="torch is not installed (test-only: pip install "
                                                "--require-hashes --no-deps -r requirements/torch.txt)")
from torch.utils.data import DataLoader  # noqa: E402

BATCH = 4


@pytest.fixture(scope="module")
def dataset(built):
    return built["dataset"]


@pytest.fixture(scope="module")
def manifest(built):
    return built["manifest"]


def every_sequence(manifest) -> list[tuple]:
    return sorted((s["name"], 0, i) for s in manifest["shards"] for i in range(s["sequences"]))


def keys(batch) -> list[tuple]:
    """(shard, repeat, sequence) of each sequence of a collated batch."""
    return list(zip(batch["shard"], batch["repeat"].tolist(), batch["sequence"].tolist()))


def roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


def loader_of(ds, workers: int, **kwargs) -> DataLoader:
    return DataLoader(ds, batch_size=BATCH, num_workers=workers, **kwargs)


def test_default_collate_makes_batches_that_match_the_loader(dataset, manifest):
    """batch_size=4 with the default collate: fixed-shape tensors, the loader's sequences in its order."""
    plain = list(TokenLoader(dataset, rank=1, world_size=3))
    ds = as_torch_dataset(TokenLoader(dataset, rank=1, world_size=3))
    batches = list(loader_of(ds, 0))
    seq_len = manifest["seq_len"]
    assert [len(b["input_ids"]) for b in batches] == [BATCH] * (len(plain) // BATCH) + (
        [len(plain) % BATCH] if len(plain) % BATCH else [])
    first = batches[0]
    assert first["input_ids"].shape == (BATCH, seq_len) and first["input_ids"].dtype == torch.int64
    assert first["document_starts"].shape == (BATCH, seq_len) and first["document_starts"].dtype == torch.bool
    assert first["n_tokens"].shape == (BATCH,) and first["lane"].tolist() == [0] * BATCH
    rows = [(k, ids, starts, n) for b in batches
            for k, ids, starts, n in zip(keys(b), b["input_ids"], b["document_starts"], b["n_tokens"].tolist())]
    assert [r[0] for r in rows] == [item.key for item in plain]
    for (_, ids, starts, n), item in zip(rows, plain):
        assert np.array_equal(ids.numpy(), item.tokens.astype(np.int64))
        assert np.flatnonzero(starts.numpy()).tolist() == item.doc_starts.tolist()
        assert n == item.n_tokens
    assert any(not item.doc_starts.size for item in plain)  # sequences without a document start collate too
    assert ds.state_dict()["steps"] == {"1": len(plain)}  # 0 workers: the loader itself moved


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_read_their_own_lanes_and_every_sequence_once(dataset, manifest, workers):
    ds = as_torch_dataset(TokenLoader(dataset), num_workers=workers)
    batches = list(loader_of(ds, workers))
    seen = [k for b in batches for k in keys(b)]
    assert sorted(seen) == every_sequence(manifest)  # once each
    for b in batches:
        assert len(set(b["lane"].tolist())) == 1  # a batch comes from one worker's lane
    for lane in range(workers):  # each lane is what a TokenLoader of that lane reads, in its order
        expected = [item.key for item in TokenLoader(dataset, workers=workers, worker=lane)]
        assert [k for b in batches if b["lane"][0] == lane for k in keys(b)] == expected
    counts = [sum(len(b["lane"]) for b in batches if b["lane"][0] == lane) for lane in range(workers)]
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("workers, stop", [(2, 0), (2, 1), (2, 5), (3, 7), (2, 57), (1, 9)])
def test_resume_is_exact_with_worker_processes(dataset, workers, stop):
    """Stop after ``stop`` batches, save, resume in a new dataset and DataLoader: the same batches follow."""
    kwargs = dict(rank=1, world_size=2)
    reference = [(keys(b), b["input_ids"]) for b in loader_of(
        as_torch_dataset(TokenLoader(dataset, **kwargs), num_workers=workers), workers)]
    assert len(reference) > stop
    ds = as_torch_dataset(TokenLoader(dataset, **kwargs), num_workers=workers)
    got = []
    for batch in loader_of(ds, workers):
        if len(got) == stop:
            break
        got.append((keys(batch), batch["input_ids"]))
        ds.advance(batch)
    state = roundtrip(ds.state_dict())
    assert sum(e["sequences"] for e in state["consumed"].values()) == sum(len(k) for k, _ in got)
    resumed = as_torch_dataset(TokenLoader(dataset, **kwargs), num_workers=workers)
    resumed.load_state_dict(state)
    got += [(keys(b), b["input_ids"]) for b in loader_of(resumed, workers)]
    assert [k for k, _ in got] == [k for k, _ in reference]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, reference))


def test_with_one_worker_the_state_advances(dataset):
    """One worker process: the trainer's state_dict is what it received, not 0 and not what was prefetched."""
    ds = as_torch_dataset(TokenLoader(dataset), num_workers=1)
    it = iter(loader_of(ds, 1, prefetch_factor=4))
    for n in range(1, 6):
        batch = next(it)
        ds.advance(batch)
        state = ds.state_dict()
        assert state["steps"] == {"0": n * BATCH}
        assert sum(e["sequences"] for e in state["consumed"].values()) == n * BATCH
    del it


def test_batches_must_be_advanced_in_order(dataset):
    """Each lane's batches in order, none left out, none twice (lanes may interleave as the trainer likes)."""
    ds = as_torch_dataset(TokenLoader(dataset), num_workers=2)
    batches = []
    for batch in loader_of(ds, 2):
        batches.append(batch)
        if len(batches) == 5:
            break
    assert [b["lane"][0].item() for b in batches] == [0, 1, 0, 1, 0]
    ds.advance(batches[0])
    with pytest.raises(LoaderError, match="got steps 8..11, expected 4: advance every batch, in the order"):
        ds.advance(batches[4])  # lane 0's third batch before its second
    ds.advance(batches[2])  # lane 0's second batch before lane 1's first: fine
    with pytest.raises(LoaderError, match="got steps 4..7, expected 8"):
        ds.advance(batches[2])  # the same batch twice
    ds.advance(batches[1])
    assert ds.state_dict()["steps"] == {"0": 8, "1": 4} and ds.batches == [2, 1]
    assert ds.rotation() == 1  # lane 1 delivers next


def test_mismatched_worker_counts_are_refused(dataset):
    ds = as_torch_dataset(TokenLoader(dataset), num_workers=2)
    with pytest.raises(RuntimeError, match="give both the same number"):
        next(iter(loader_of(ds, 0)))
    loader = TokenLoader(dataset)
    next(loader)
    with pytest.raises(LoaderError, match="load_state_dict"):
        as_torch_dataset(loader, num_workers=2)


def test_spawned_workers_get_a_copy_without_the_memory_maps(dataset, manifest):
    """With the spawn start method the dataset is pickled into each worker (the maps are not)."""
    ds = as_torch_dataset(TokenLoader(dataset), num_workers=2)
    next(iter(ds.loaders[0]))  # maps are open in this process
    ds = as_torch_dataset(TokenLoader(dataset), num_workers=2)
    seen = [k for b in loader_of(ds, 2, multiprocessing_context="spawn") for k in keys(b)]
    assert sorted(seen) == every_sequence(manifest)


def test_world_size_change_8_to_6_in_lockstep_with_workers(dataset, manifest):
    """8 ranks x 2 workers train in lockstep, stop; 6 ranks x 2 workers resume: equal ranks, every sequence once.

    A loop that keeps ranks in step stops when the first rank runs out: with
    ranks equal within one sequence that loses at most one step per rank.
    """
    def ranks(world: int, state: dict | None = None):
        out = []
        for rank in range(world):
            ds = as_torch_dataset(TokenLoader(dataset, rank=rank, world_size=world), num_workers=2)
            if state is not None:
                ds.load_state_dict(state)
            out.append(ds)
        return out

    old = ranks(8)
    assert max(old[0].loaders[0].sequences_per_rank()) - min(old[0].loaders[0].sequences_per_rank()) <= 1
    iterators = [iter(loader_of(ds, 2)) for ds in old]
    seen = []
    for _ in range(3):  # three lockstep steps of one batch per rank
        for ds, it in zip(old, iterators):
            batch = next(it)
            seen += keys(batch)
            ds.advance(batch)
    merged = merge_states([roundtrip(ds.state_dict()) for ds in old])
    del iterators
    new = ranks(6, merged)
    planned = new[0].loaders[0].sequences_per_rank()
    assert sum(planned) == len(every_sequence(manifest)) - len(seen)
    assert max(planned) - min(planned) <= 1, planned
    iterators = [iter(loader_of(ds, 2)) for ds in new]
    per_rank = [0] * 6
    while True:  # lockstep: every rank takes one batch per step, until one rank has none
        batches = [next(it, None) for it in iterators]
        if any(b is None for b in batches):
            break
        for rank, batch in enumerate(batches):
            seen += keys(batch)
            per_rank[rank] += len(batch["lane"])
    rest = [k for b in batches if b is not None for k in keys(b)] + [k for it in iterators for b in it for k in keys(b)]
    assert max(per_rank) - min(per_rank) <= 1, per_rank
    assert len(rest) <= 6 * BATCH, f"{len(rest)} sequences fell out of the lockstep loop"
    assert sorted(seen + rest) == every_sequence(manifest)  # every sequence once over the change
