"""SimHash fingerprints, pigeonhole block keys, in-bucket Hamming checks."""
import itertools
import os
import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipeline.dedup import simhash
from beam_pipeline.dedup.shingling import shingle_hashes
from beam_pipeline.transforms.near_dedup_candidates import SimHashBucketFn

WIKI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample", "data", "wikipedia",
                    "part-0000.parquet")


def articles() -> list[str]:
    return [t for t in pq.read_table(WIKI, columns=["text"]).column("text").to_pylist() if len(t.split()) > 300]


def test_fingerprint_bits_are_majority_votes():
    rows = np.array([0b1011, 0b0011, 0b1001], dtype=np.uint64)
    assert simhash.fingerprint(rows) == 0b1011  # bit 3: 2 of 3, bit 1: 2 of 3, bit 0: 3 of 3
    assert simhash.fingerprint(np.array([2**63 + 1], dtype=np.uint64)) == 2**63 + 1
    # repeats do not vote twice: the distinct shingle set decides
    assert simhash.fingerprint(np.array([1, 1, 1, 2, 4], dtype=np.uint64)) == 0


def test_near_duplicates_are_close_and_unrelated_texts_are_far():
    texts = articles()[:20]
    prints = [simhash.fingerprint(shingle_hashes(t)) for t in texts]
    close = []
    for text, value in zip(texts, prints):
        words = text.split()
        edited = words[:]
        for i in range(0, len(words), 200):  # 0.5% of the words changed
            edited[i] = "changed"
        variant = " ".join(edited[: len(edited) * 99 // 100])  # and the last 1% dropped
        close.append(simhash.hamming(value, simhash.fingerprint(shingle_hashes(variant))))
        assert simhash.hamming(value, simhash.fingerprint(shingle_hashes(text.replace(" ", "  \u00a0") + " !"))) == 0
    distances = [simhash.hamming(a, b) for a, b in itertools.combinations(prints, 2)]
    assert max(close) <= 16 and np.mean(close) < 9  # cos ~0.95: each bit flips with p ~ angle / pi ~ 0.1
    assert min(distances) > 12 and 24 < np.mean(distances) < 40


@pytest.mark.parametrize("max_hamming,blocks", [(3, None), (3, 6), (2, 3), (0, None)])
def test_pigeonhole_keys_find_every_pair_within_k_bits(max_hamming, blocks):
    blocks = blocks or max_hamming + 1
    rng = random.Random(max_hamming * 100 + blocks)
    for _ in range(300):
        value = rng.getrandbits(64)
        flipped = value
        for bit in rng.sample(range(64), rng.randint(0, max_hamming)):
            flipped ^= 1 << bit
        a = simhash.block_keys(value, max_hamming, blocks, seed=1)
        b = simhash.block_keys(flipped, max_hamming, blocks, seed=1)
        assert set(a) & set(b), (hex(value), hex(flipped))
    assert len(simhash.block_keys(1, max_hamming, blocks, 0)) == len(list(
        itertools.combinations(range(blocks), blocks - max_hamming)))


def test_block_masks_cover_64_bits_once():
    for blocks in (1, 4, 5, 7, 64):
        masks = simhash.block_masks(blocks)
        assert sum(bin(m).count("1") for m in masks) == 64
        combined = 0
        for m in masks:
            assert combined & m == 0
            combined |= m
        assert combined == 2**64 - 1
    with pytest.raises(ValueError):
        simhash.key_masks(3, 3)


def test_close_pairs_matches_brute_force():
    rng = random.Random(4)
    base = [rng.getrandbits(64) for _ in range(30)]
    values = base + [b ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64)) for b in base[:10]]
    expected = sorted((i, j) for i, j in itertools.combinations(range(len(values)), 2)
                      if simhash.hamming(values[i], values[j]) <= 3)
    assert sorted(simhash.close_pairs(values, 3, chunk=7)) == expected
    assert len(expected) >= 10


def test_bucket_checks_every_pair_exactly():
    fn = SimHashBucketFn(max_hamming=3)
    fn.setup()
    entries = [("a", None, 0b0000), ("b", None, 0b0111), ("c", None, 0b1111_0000), ("d", None, 0b1111)]
    block = (np.full(len(entries), 5, dtype="<i8").tobytes(), tuple(entries))  # one block key's bucket
    out = list(fn.process((0, [block])))
    assert sorted(out) == [("a", "b"), ("b", "d")]  # a-d differ in 4 bits; c is far from all
