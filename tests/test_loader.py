"""The training loader: order, coverage, exact resume, resharding, mixture, refusals, torch."""
import collections
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipeline.dataset.lanes import (
    LoaderError, StateMismatchError, merge_states, mixture_draw, pick_pool, shard_order,
)
from beam_pipeline.dataset.loader import SupersededDatasetError, TokenLoader, read_manifest

WEIGHTS = {"docs": 0.5, "encyclopedic": 0.3, "legal": 0.2}


@pytest.fixture(scope="module")
def dataset(built):
    return built["dataset"]


@pytest.fixture(scope="module")
def manifest(built):
    return built["manifest"]


def every_sequence(manifest, repeats=None):
    repeats = repeats or {}
    return sorted((s["name"], p, i) for s in manifest["shards"]
                  for p in range(repeats.get(s["domain"], 1)) for i in range(s["sequences"]))


def roundtrip(state):
    return json.loads(json.dumps(state))


def take(loader, n):
    return [next(loader) for _ in range(n)]


def test_shard_order_is_a_pure_function_of_dataset_seed_and_epoch(manifest):
    names = [s["name"] for s in manifest["shards"]]
    args = dict(dataset_id=manifest["dataset_id"], seed=7, epoch=3)
    assert shard_order(names, **args) == shard_order(list(reversed(names)), **args)
    assert sorted(shard_order(names, **args)) == sorted(names)
    assert shard_order(names, **args) != shard_order(names, **{**args, "epoch": 4})
    assert shard_order(names, **args) != shard_order(names, **{**args, "seed": 8})
    assert shard_order(names, **args) != shard_order(names, **{**args, "dataset_id": "0" * 64})


def test_one_rank_reads_every_sequence_once_with_document_starts(dataset, manifest):
    loader = TokenLoader(dataset)
    seq_len = manifest["seq_len"]
    seen = []
    raw = {s["name"]: np.fromfile(os.path.join(dataset, s["tokens_file"]), dtype="<u2") for s in manifest["shards"]}
    starts = {s["name"]: pq.read_table(os.path.join(dataset, s["index_file"])).column("token_start").to_numpy()
              for s in manifest["shards"]}
    tokens_of = {s["name"]: s["tokens"] for s in manifest["shards"]}
    for item in loader:
        seen.append(item.key)
        lo = item.sequence * seq_len
        assert item.tokens.shape == (seq_len,) and np.array_equal(item.tokens, raw[item.shard][lo:lo + seq_len])
        expected = [int(s) - lo for s in starts[item.shard] if lo <= s < lo + seq_len]
        assert item.doc_starts.tolist() == expected
        assert item.n_tokens == min(seq_len, tokens_of[item.shard] - lo)
        eos = manifest["tokenizer"]["eos_id"]
        # a new document starts right after every EOS inside the sequence (padding aside)
        after_eos = [p + 1 for p in np.flatnonzero(item.tokens[: item.n_tokens] == eos) if p + 1 < item.n_tokens]
        assert set(after_eos) <= set(item.doc_starts.tolist())
    assert sorted(seen) == every_sequence(manifest)
    assert len(seen) == sum(s["sequences"] for s in manifest["shards"])


@pytest.mark.parametrize("world, workers", [(4, 1), (3, 2), (8, 1), (6, 3)])
def test_ranks_take_equal_consecutive_runs_of_the_epoch_order(dataset, manifest, world, workers):
    """Lane after lane, the lanes read the epoch's shard order exactly once; lanes and ranks equal within one."""
    order = shard_order([s["name"] for s in manifest["shards"]], dataset_id=manifest["dataset_id"],
                        seed=manifest["seed"], epoch=2)
    sequences = {s["name"]: s["sequences"] for s in manifest["shards"]}
    epoch = [(name, 0, i) for name in order for i in range(sequences[name])]
    lanes = [[item.key for item in TokenLoader(dataset, rank=r, world_size=world, epoch=2, workers=workers, worker=k)]
             for r in range(world) for k in range(workers)]
    assert [key for lane in lanes for key in lane] == epoch
    per_lane = [len(lane) for lane in lanes]
    per_rank = [sum(per_lane[r * workers:(r + 1) * workers]) for r in range(world)]
    assert max(per_lane) - min(per_lane) <= 1 and max(per_rank) - min(per_rank) <= 1
    assert TokenLoader(dataset, world_size=world, epoch=2, workers=workers).sequences_per_rank() == per_rank


def test_epochs_reshuffle_and_repeat_deterministically(dataset):
    a = [i.key for i in TokenLoader(dataset, epoch=0)]
    b = [i.key for i in TokenLoader(dataset, epoch=1)]
    assert sorted(a) == sorted(b) and a != b
    loader = TokenLoader(dataset, epoch=0)
    list(loader)
    loader.set_epoch(1)
    assert [i.key for i in loader] == b


@pytest.mark.parametrize("mixture", [None, WEIGHTS])
def test_resume_is_exact_at_any_step(dataset, mixture):
    kwargs = dict(rank=1, world_size=3, mixture=mixture, repeats={"legal": 2} if mixture else None, run_length=2)
    reference = TokenLoader(dataset, **kwargs)
    expected = take(reference, 60)
    for step in (0, 1, 17, 41):
        first = TokenLoader(dataset, **kwargs)
        take(first, step)
        state = roundtrip(first.state_dict())
        resumed = TokenLoader(dataset, **kwargs)
        resumed.load_state_dict(state)
        rest = take(resumed, 60 - step)
        assert [i.key for i in rest] == [i.key for i in expected[step:]]
        assert [i.step for i in rest] == list(range(step, 60))
        assert all(np.array_equal(x.tokens, y.tokens) for x, y in zip(rest, expected[step:]))


def test_skip_reaches_the_same_state_without_reading(dataset):
    a, b = TokenLoader(dataset, mixture=WEIGHTS), TokenLoader(dataset, mixture=WEIGHTS)
    take(a, 25)
    assert b.skip(25) == 25
    assert a.state_dict() == b.state_dict()


@pytest.mark.parametrize("mixture,repeats", [(None, None), (WEIGHTS, {"legal": 3, "encyclopedic": 2})])
def test_world_size_change_8_to_6_repeats_and_skips_nothing(dataset, manifest, mixture, repeats):
    kwargs = dict(mixture=mixture, repeats=repeats)
    old = [TokenLoader(dataset, rank=r, world_size=8, **kwargs) for r in range(8)]
    seen = []
    for _ in range(9):  # lockstep: every rank takes one sequence per step
        for loader in old:
            item = next(loader, None)
            if item is not None:
                seen.append(item.key)
    states = [roundtrip(loader.state_dict()) for loader in old]
    merged = merge_states(states)
    assert sum(e["sequences"] for e in merged["consumed"].values()) == len(seen)
    new = [TokenLoader(dataset, rank=r, world_size=6, **kwargs) for r in range(6)]
    for loader in new:
        loader.load_state_dict(merged)
    planned = new[0].sequences_per_rank()
    assert sum(planned) == len(every_sequence(manifest, repeats)) - len(seen)
    assert max(planned) - min(planned) <= 1, planned  # ranks kept in step lose at most one step
    for loader, count in zip(new, planned):
        keys = [item.key for item in loader]
        assert len(keys) == count
        seen += keys
    assert len(seen) == len(set(seen)), "a sequence was read twice"
    assert sorted(seen) == every_sequence(manifest, repeats), "a sequence was skipped"


def test_resharding_needs_the_states_of_all_ranks(dataset):
    old = [TokenLoader(dataset, rank=r, world_size=8) for r in range(8)]
    for loader in old:
        take(loader, 2)
    partial = merge_states([loader.state_dict() for loader in old[:7]])
    with pytest.raises(StateMismatchError, match="merge the states of all ranks"):
        TokenLoader(dataset, rank=0, world_size=6).load_state_dict(partial)
    # on the same world size a rank's own state is enough
    TokenLoader(dataset, rank=3, world_size=8).load_state_dict(old[3].state_dict())


def test_state_records_consumption_per_shard(dataset):
    loader = TokenLoader(dataset)
    items = take(loader, 30)
    consumed = loader.state_dict()["consumed"]
    per_shard = collections.Counter(i.shard for i in items)
    assert {s: e["sequences"] for s, e in consumed.items()} == dict(per_shard)


def test_mixture_matches_the_weights_within_four_sigma(dataset):
    # repeats large enough that no bucket runs dry in the window: the draw is the only source of variance
    steps, run_length = 2000, 4
    loader = TokenLoader(dataset, mixture=WEIGHTS, repeats={"docs": 8, "encyclopedic": 20, "legal": 40},
                         run_length=run_length)
    counts = collections.Counter(item.bucket for item in take(loader, steps))
    blocks = steps / run_length  # draws are per block of run_length sequences
    for bucket, weight in WEIGHTS.items():
        tolerance = 4 * math.sqrt(weight * (1 - weight) / blocks)
        assert abs(counts[bucket] / steps - weight) <= tolerance, (bucket, counts, tolerance)


def test_mixture_draw_is_calibrated():
    weights = [("a", 0.1), ("b", 0.6), ("c", 0.3)]
    n = 50_000
    counts = collections.Counter(pick_pool(mixture_draw(5, 0, 3, block), weights) for block in range(n))
    for pool, w in weights:
        assert abs(counts[pool] / n - w) <= 4 * math.sqrt(w * (1 - w) / n)


def test_exhausted_buckets_leave_the_mixture(dataset, manifest):
    loader = TokenLoader(dataset, mixture=WEIGHTS)  # repeats 1: small buckets run out first
    items = list(loader)
    assert sorted(i.key for i in items) == every_sequence(manifest)
    legal = [i.step for i in items if i.bucket == "legal"]
    assert items[-1].bucket != "legal" and max(legal) < len(items) - 1


def test_reweighting_resumes_without_rebuilding(dataset, manifest):
    before = TokenLoader(dataset, mixture=WEIGHTS)
    seen = [i.key for i in take(before, 40)]
    after = TokenLoader(dataset, mixture={"docs": 0.1, "encyclopedic": 0.1, "legal": 0.8})
    after.load_state_dict(roundtrip(before.state_dict()))
    rest = list(after)
    assert sum(i.bucket == "legal" for i in rest[:20]) >= 10  # the new weights govern what follows
    assert sorted(seen + [i.key for i in rest]) == every_sequence(manifest)


def test_refuses_a_state_of_another_dataset(dataset):
    state = TokenLoader(dataset).state_dict()
    with pytest.raises(StateMismatchError, match="saved for dataset"):
        TokenLoader(dataset).load_state_dict({**state, "dataset_id": "f" * 64})
    with pytest.raises(StateMismatchError, match="seed"):
        TokenLoader(dataset).load_state_dict({**state, "seed": state["seed"] + 1})


def test_refuses_a_superseded_dataset_unless_allowed(dataset, tmp_path):
    copy = tmp_path / "datasets" / os.path.basename(dataset)
    shutil.copytree(dataset, copy)
    TokenLoader(str(copy))
    (copy / "SUPERSEDED_BY").write_text(json.dumps({"dataset_id": "a" * 64, "reason": "takedown"}))
    with pytest.raises(SupersededDatasetError, match="superseded by a{64}"):
        TokenLoader(str(copy))
    assert len(list(TokenLoader(str(copy), allow_superseded=True))) > 0


def test_bad_arguments_are_clear_errors(dataset):
    with pytest.raises(LoaderError, match="rank 8"):
        TokenLoader(dataset, rank=8, world_size=8)
    with pytest.raises(LoaderError, match="unknown bucket"):
        TokenLoader(dataset, mixture={"code": 1.0})
    with pytest.raises(LoaderError, match="repeats"):
        TokenLoader(dataset, repeats={"legal": -1})


def test_no_torch_needed(dataset):
    """Without torch (its import fails) the loader works and only the torch wrapper says what is missing.

    The torch wrapper itself is tested with real torch in tests/test_loader_torch.py.
    """
    script = (
        "import sys; sys.modules['torch'] = None  # import torch raises ImportError\n"
        "from beam_pipeline.dataset.loader import TokenLoader\n"
        "from beam_pipeline.dataset.torch_dataset import as_torch_dataset\n"
        f"loader = TokenLoader({dataset!r})\n"
        "print(sum(1 for _ in loader))\n"
        "try:\n    as_torch_dataset(loader)\nexcept ImportError as err:\n    print(err)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    count, message = run.stdout.strip().splitlines()
    assert int(count) == sum(s["sequences"] for s in read_manifest(dataset)["shards"])
    assert message == "TorchTokenDataset needs PyTorch (pip install torch); TokenLoader itself does not"


def test_states_of_format_1_still_resume(dataset):
    """A state saved before lanes had workers (format 1: "ranks", no "workers") resumes exactly."""
    reference = TokenLoader(dataset, rank=2, world_size=4)
    expected = [i.key for i in take(reference, 30)]
    first = TokenLoader(dataset, rank=2, world_size=4)
    take(first, 12)
    state = roundtrip(first.state_dict())
    old = {k: v for k, v in state.items() if k not in ("workers", "lanes")}
    old.update(format=1, ranks=[2])
    resumed = TokenLoader(dataset, rank=2, world_size=4)
    resumed.load_state_dict(old)
    assert [i.key for i in take(resumed, 18)] == expected[12:]


# --- the mixture as seed 000 (R5) states it: hash of (seed, epoch, rank, step // run_length) -------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A hand-written dataset of three large buckets (no build): enough steps that no bucket runs dry."""
    import pyarrow as pa
    import pyarrow.parquet as pq_

    folder = tmp_path_factory.mktemp("synthetic")
    (folder / "shards").mkdir()
    seq_len, shards = 4, []
    for domain in WEIGHTS:
        for k in range(2):
            name, n = f"{domain}-{k:05d}-of-00002", 400
            np.zeros(n * seq_len, dtype="<u2").tofile(folder / "shards" / f"{name}.bin")
            pq_.write_table(pa.table({"token_start": pa.array(range(0, n * seq_len, seq_len), pa.int64())}),
                            folder / "shards" / f"{name}.idx.parquet")
            shards.append({"name": name, "domain": domain, "sequences": n, "tokens": n * seq_len,
                           "tokens_file": f"shards/{name}.bin", "tokens_bytes": n * seq_len * 2,
                           "index_file": f"shards/{name}.idx.parquet"})
    (folder / "manifest.json").write_text(json.dumps(
        {"dataset_id": "ab" * 32, "seed": 11, "seq_len": seq_len, "tokenizer": {"dtype": "uint16"}, "shards": shards}))
    return str(folder)


def buckets_of(dataset, steps, **kwargs):
    return [item.bucket for item in take(TokenLoader(dataset, mixture=WEIGHTS, **kwargs), steps)]


def test_mixture_draws_once_per_run_of_steps(synthetic):
    from beam_pipeline.dataset.loader import DEFAULT_RUN_LENGTH

    assert DEFAULT_RUN_LENGTH > 1  # R5: draws per run of steps, not per step
    assert TokenLoader(synthetic, mixture=WEIGHTS).run_length == DEFAULT_RUN_LENGTH
    for run_length in (DEFAULT_RUN_LENGTH, 5):
        kwargs = {} if run_length == DEFAULT_RUN_LENGTH else {"run_length": run_length}
        seen = buckets_of(synthetic, 60 * run_length, **kwargs)
        runs = [seen[i:i + run_length] for i in range(0, len(seen), run_length)]
        assert all(len(set(run)) == 1 for run in runs), runs  # one draw per run: the run is one bucket
        firsts = [run[0] for run in runs]
        assert len(set(firsts)) == len(WEIGHTS)  # and the runs do draw again
        assert sum(a != b for a, b in zip(firsts, firsts[1:])) > len(firsts) // 4
    assert buckets_of(synthetic, 200, run_length=1) != buckets_of(synthetic, 200, run_length=2)


def test_mixture_draws_differ_between_ranks(synthetic):
    """The rank is in the hash: at one step the ranks draw independently, so a global batch mixes domains."""
    world, steps = 4, 400
    per_rank = [buckets_of(synthetic, steps, rank=r, world_size=world, run_length=1) for r in range(world)]
    all_same = sum(len({per_rank[r][s] for r in range(world)}) == 1 for s in range(steps))
    expected = steps * sum(w ** world for w in WEIGHTS.values())  # ~0.08 of the steps
    assert all_same < 3 * expected, (all_same, expected)  # a hash without the rank gives all_same == steps
    runs = [buckets_of(synthetic, steps, rank=r, world_size=world, run_length=8)[::8] for r in range(world)]
    assert len({tuple(r) for r in runs}) == world
    lanes = [buckets_of(synthetic, steps, world_size=1, workers=2, worker=k, run_length=1) for k in range(2)]
    assert lanes[0] != lanes[1]  # a DataLoader's workers are lanes of their own too
