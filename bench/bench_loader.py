"""Loader throughput from local disk vs a plain numpy memmap read of the same shards.

    .venv/bin/python bench/bench_loader.py --dataset out/demo/datasets/<dataset_id> [--repeat 5]

Every row reads every sequence of the dataset once (``seq_len`` tokens each,
padding included, so all rows count the same tokens) into a fresh array:

* ``memmap copy``      np.memmap each shard, copy sequence by sequence (the floor
                       any Python loader pays per sequence);
* ``memmap bulk``      one copy of each whole shard (memory bandwidth, the ceiling);
* ``loader``           TokenLoader, one rank, no mixture (tokens + document starts);
* ``loader mixture``   TokenLoader with the natural mixture (a draw per step);
* ``loader 8 ranks``   8 TokenLoaders, one after another, every rank's lane;
* ``loader skip``      TokenLoader.skip over the epoch (bookkeeping only, no reads);
* ``construct+1st seq`` a new TokenLoader and its first sequence (reads the manifest,
                       checks file sizes, loads one shard index): seconds only.

Loader rows reuse loaders built before timing and read a new epoch per run.

Files are read once before timing (warm page cache): this measures the
loader's CPU overhead over a memmap, not the disk. The best of ``--repeat``
runs is reported.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from beam_pipeline.dataset.lanes import natural_mixture  # noqa: E402
from beam_pipeline.dataset.loader import TokenLoader  # noqa: E402


def memmap_copy(dataset: str, manifest: dict) -> int:
    seq_len, n = manifest["seq_len"], 0
    dtype = np.dtype(manifest["tokenizer"]["dtype"]).newbyteorder("<")
    for shard in manifest["shards"]:
        tokens = np.memmap(os.path.join(dataset, shard["tokens_file"]), dtype=dtype, mode="r")
        for i in range(shard["sequences"]):
            np.array(tokens[i * seq_len:(i + 1) * seq_len])
            n += seq_len
    return n


def memmap_bulk(dataset: str, manifest: dict) -> int:
    dtype = np.dtype(manifest["tokenizer"]["dtype"]).newbyteorder("<")
    n = 0
    for shard in manifest["shards"]:
        n += np.array(np.memmap(os.path.join(dataset, shard["tokens_file"]), dtype=dtype, mode="r")).size
    return n


class Epochs:
    """Loaders built once (their construction is timed on its own row); each call reads one more epoch."""

    def __init__(self, loaders: list[TokenLoader]):
        self.loaders, self.epoch = loaders, 0
        for loader in loaders:  # first epoch: shard indexes load, maps open
            for _ in loader:
                pass

    def read(self) -> int:
        self.epoch += 1
        tokens = 0
        for loader in self.loaders:
            loader.set_epoch(self.epoch)
            tokens += sum(item.tokens.size for item in loader)
        return tokens

    def skip(self) -> int:
        self.epoch += 1
        steps = 0
        for loader in self.loaders:
            loader.set_epoch(self.epoch)
            steps += loader.skip(10 ** 12)
        return steps * self.loaders[0].seq_len


def construct(dataset: str) -> int:
    loader = TokenLoader(dataset)
    next(loader)
    return loader.seq_len


def best_of(repeat: int, fn) -> tuple[float, int]:
    times, tokens = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        tokens = fn()
        times.append(time.perf_counter() - started)
    return min(times), tokens


def default_dataset() -> str | None:
    found = sorted(glob.glob("out/demo/datasets/*/manifest.json"), key=os.path.getmtime)
    return os.path.dirname(found[-1]) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=default_dataset(), help="a dataset folder (default: newest out/demo)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--world-size", type=int, default=8)
    args = parser.parse_args()
    if not args.dataset:
        parser.error("no dataset: pass --dataset, or build the demo first (make demo)")
    manifest = json.load(open(os.path.join(args.dataset, "manifest.json")))
    memmap_copy(args.dataset, manifest)  # warm the page cache
    mixture = natural_mixture(manifest)
    plain = Epochs([TokenLoader(args.dataset)])
    mixed = Epochs([TokenLoader(args.dataset, mixture=mixture)])
    ranks = Epochs([TokenLoader(args.dataset, rank=r, world_size=args.world_size) for r in range(args.world_size)])
    skipping = Epochs([TokenLoader(args.dataset)])
    rows = [
        ("memmap copy", lambda: memmap_copy(args.dataset, manifest)),
        ("memmap bulk", lambda: memmap_bulk(args.dataset, manifest)),
        ("loader", plain.read),
        ("loader mixture", mixed.read),
        (f"loader {args.world_size} ranks", ranks.read),
        ("loader skip", skipping.skip),
        ("construct+1st seq", lambda: construct(args.dataset)),
    ]
    sequences = sum(s["sequences"] for s in manifest["shards"])
    print(f"dataset {manifest['dataset_id'][:16]}: {len(manifest['shards'])} shards, {sequences} sequences x "
          f"{manifest['seq_len']} tokens ({manifest['tokenizer']['dtype']}), best of {args.repeat}")
    print(f"{'reader':<18} {'tokens':>10} {'seconds':>9} {'Mtokens/s':>10} {'vs memmap copy':>15}")
    baseline = None
    for name, fn in rows:
        seconds, tokens = best_of(args.repeat, fn)
        if name.startswith("construct"):
            print(f"{name:<18} {'':>10} {seconds:>9.4f}")
            continue
        rate = tokens / seconds / 1e6
        baseline = baseline or rate
        print(f"{name:<18} {tokens:>10} {seconds:>9.4f} {rate:>10.1f} {rate / baseline:>14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
