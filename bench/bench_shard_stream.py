"""Peak memory of writing one token shard as a stream (beam_pipeline/transforms/shard_stream.py).

Feeds ``--gb`` of uint32 tokens (documents of 512 tokens, random ids, in no order) through
``SpillSorter`` (``--sort-mb`` of memory) and ``write_packed_shard``, as the tokenize stage does
for one shard, and reports wall time, the sorted runs spilled and the process's peak RSS against
the shard's size. Result: bench/results/shard-stream-<date>.md.

    .venv/bin/python bench/bench_shard_stream.py --gb 1 --sort-mb 256
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

import numpy as np

from beam_pipeline.transforms.shard_stream import SpillSorter, write_packed_shard
from beam_pipeline.transforms.tokenize_shard import shuffle_order


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--sort-mb", type=int, default=256)
    parser.add_argument("--doc-tokens", type=int, default=512)
    args = parser.parse_args()
    documents = int(args.gb * (1 << 30) / 4 / args.doc_tokens)
    rng = np.random.default_rng(0)
    block = rng.integers(0, 100_000, size=(1024, args.doc_tokens)).astype("<u4")  # reused rows: cheap to make
    out = tempfile.mkdtemp(prefix="bench-shard-")
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    with SpillSorter(args.sort_mb << 20) as sorter:
        for i in range(documents):
            doc_id = f"doc-{i:09d}"
            sorter.add(shuffle_order(0, doc_id), "src", block[i % 1024].tobytes())
        fed = time.perf_counter() - started
        meta = write_packed_shard(out, "s", sorter.sorted_items(), domain="d", eos_id=0, pad_id=0, seq_len=8192,
                                  dtype="uint32")
        runs = sorter.spilled_runs
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = os.path.getsize(os.path.join(out, "s.bin")) / (1 << 20)
    shutil.rmtree(out)
    print(f"documents {documents:,}  shard {size:,.0f} MB  tokens {meta['tokens']:,}  sort memory {args.sort_mb} MB")
    print(f"runs spilled {runs}  feed {fed:.1f} s  total {seconds:.1f} s  ({size / seconds:.0f} MB/s)")
    print(f"peak RSS {peak:,.0f} MB (before feeding {baseline:,.0f} MB): {peak / size:.2f} x the shard")


if __name__ == "__main__":
    main()
