"""LSH banding: band keys, the S-curve in practice, star candidates, deterministic key coders."""
import os

import numpy as np
import pyarrow.parquet as pq
from apache_beam.coders import coders

from beam_pipeline.dedup import minhash
from beam_pipeline.dedup.shingling import shingle_hashes, words
from beam_pipeline.transforms.near_dedup import MinHashBucketFn, member_of

WIKI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample", "data", "wikipedia",
                    "part-0000.parquet")


def run_fn(fn, element):
    fn.setup()
    out = list(fn.process(element))
    main = [o for o in out if not hasattr(o, "tag")]
    tagged = [(o.tag, o.value) for o in out if hasattr(o, "tag")]
    return main, tagged


def test_band_keys_are_deterministic_non_negative_ints_per_band():
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=112, dtype=np.uint64).astype(np.uint32)
    keys = minhash.band_keys(sig, 12, 9, seed=0)
    assert len(keys) == 12 and all(isinstance(k, int) and 0 <= k < 2**63 for k in keys)
    assert keys == minhash.band_keys(sig.copy(), 12, 9, seed=0)
    assert keys != minhash.band_keys(sig, 12, 9, seed=1)
    other = sig.copy()
    other[9 * 3] ^= 1  # change one value of band 3 only
    changed = minhash.band_keys(other, 12, 9, seed=0)
    assert [a == b for a, b in zip(keys, changed)] == [j != 3 for j in range(12)]
    # the same values in two different bands give different keys (seeded per band index)
    same = np.zeros(112, dtype=np.uint32)
    assert len(set(minhash.band_keys(same, 12, 9, seed=0))) == 12


def test_band_keys_encode_deterministically_as_grouping_keys():
    coder = coders.VarIntCoder()
    assert coder.is_deterministic()
    rng = np.random.default_rng(3)
    sig = rng.integers(0, 2**32, size=112, dtype=np.uint64).astype(np.uint32)
    for key in minhash.band_keys(sig, 12, 9, seed=0):
        assert type(key) is int  # never a numpy scalar (apache/beam #33020)
        assert coder.decode(coder.encode(key)) == key


def test_candidate_rate_follows_the_s_curve():
    """Over many real-text pairs, the share that collide in some band matches 1 - (1 - s^r)^b."""
    texts = pq.read_table(WIKI, columns=["text"]).column("text").to_pylist()
    pool = np.unique(shingle_hashes(" ".join(words(" ".join(texts)))))
    rng = np.random.default_rng(11)
    bands, rows = 12, 9
    for target in (0.5, 0.7, 0.85):
        hits, trials = 0, 400
        for trial in range(trials):
            chosen = rng.choice(pool, size=600, replace=False)
            overlap = int(round(2 * 300 * target / (1 + target)))
            a = chosen[:300]
            b = np.concatenate([a[:overlap], chosen[300:600 - overlap]])
            ka = minhash.band_keys(minhash.signature(a, 108, trial), bands, rows, trial)
            kb = minhash.band_keys(minhash.signature(b, 108, trial), bands, rows, trial)
            hits += any(x == y for x, y in zip(ka, kb))
        expected = minhash.collision_probability(target, bands, rows)
        sigma = np.sqrt(expected * (1 - expected) / trials)
        assert abs(hits / trials - expected) < 4 * sigma + 0.01, (target, hits / trials, expected)


def test_bucket_emits_a_star_to_its_smallest_document():
    main, tagged = run_fn(MinHashBucketFn(), (7, [("d3", None), ("d1", None), ("d2", None), ("d1", None)]))
    assert main == [("d1", "d2"), ("d1", "d3")]
    assert tagged == []
    assert run_fn(MinHashBucketFn(), (7, [("only", None)])) == ([], [])


def test_bucket_pairs_previous_versions_only_with_new_documents():
    old = {"doc_id": "a0", "source": "web", "source_rank": 1, "date": None}
    old_b = {**old, "doc_id": "b0"}
    entries = [("a0", member_of(old, previous=True)), ("b0", member_of(old_b, previous=True)), ("c9", None)]
    main, tagged = run_fn(MinHashBucketFn(), (1, entries))
    # the old anchor a0 pairs with the new c9; old-old (a0, b0) is never proposed; b (second) is always new
    assert main == [("a0", "c9")]
    assert sorted(t[1][0] for t in tagged) == ["a0", "b0"]
    # a bucket of previous-version documents only produces nothing
    assert run_fn(MinHashBucketFn(), (1, entries[:2])) == ([], [])
    # new anchor, old member: the old one goes first
    main, _ = run_fn(MinHashBucketFn(), (1, [("z9", member_of({**old, "doc_id": "z9"}, previous=True)),
                                             ("c1", None)]))
    assert main == [("z9", "c1")]
