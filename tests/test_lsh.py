"""LSH banding: band keys, the S-curve in practice, star candidates, deterministic key coders, verification."""
import os

import numpy as np
import pyarrow.parquet as pq
from apache_beam.coders import coders

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipeline.storage import schemas
from beam_pipeline.records.accounting import COUNTS, SumCounts, stage_counts
from beam_pipeline.dedup.config import NearDedupConfig
from beam_pipeline.dedup import minhash
from beam_pipeline.dedup.shingling import shingle_hashes, words
from beam_pipeline.storage.layers import write_partition
from beam_pipeline.transforms import near_dedup, near_dedup_blocks
from beam_pipeline.transforms.connected_components import node_group
from beam_pipeline.transforms.near_dedup_blocks import payload_of
from beam_pipeline.transforms.near_dedup_candidates import MinHashBucketFn
from beam_pipeline.transforms.near_dedup_clusters import member_of, representative_order
from beam_pipeline.transforms.near_dedup_params import NearDedupParams
from beam_pipeline.transforms.near_dedup_signing import PreviousSignaturesFn
from beam_pipeline.transforms.near_dedup_verify import VerifyPairs

OPTIONS = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
WIKI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample", "data", "wikipedia",
                    "part-0000.parquet")


def run_fn(fn, element):
    """(main outputs, [(tag, value)]) of one element in one bundle (counts left out)."""
    fn.setup()
    fn.start_bundle()
    out = list(fn.process(element)) + [o.value if isinstance(o, WindowedValue) else o for o in fn.finish_bundle()]
    out = [o for o in out if getattr(o, "tag", None) != COUNTS]
    main = [o for o in out if not hasattr(o, "tag")]
    tagged = [(o.tag, o.value) for o in out if hasattr(o, "tag")]
    return main, tagged


def bucket(key, entries):
    """The grouped element of a band key's bucket: its key group with one block holding the entries."""
    return 0, [(np.full(len(entries), key, dtype="<i8").tobytes(), tuple(entries))]


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
    main, tagged = run_fn(MinHashBucketFn(), bucket(7, [("d3", None), ("d1", None), ("d2", None), ("d1", None)]))
    assert main == [("d1", "d2"), ("d1", "d3")]
    assert tagged == []
    assert run_fn(MinHashBucketFn(), bucket(7, [("only", None)])) == ([], [])


@pytest.mark.parametrize("groups", [1, 3, 64])
def test_key_blocks_bring_every_entry_of_a_shared_key_together(groups):
    """Blocks from several tasks, merged per key group, give exactly the buckets of grouping by key."""
    rng = np.random.default_rng(groups)
    tasks = []
    for task in range(4):
        keys = rng.integers(0, 40, size=60).tolist() + [int(k) for k in rng.integers(0, 2**63, size=20)]
        tasks.append((keys, [(f"t{task}d{i}", None) for i in range(len(keys))]))
    expected = {}
    for keys, entries in tasks:
        for key, entry in zip(keys, entries):
            expected.setdefault(key, []).append(entry)
    expected = {key: sorted(entries) for key, entries in expected.items() if len(entries) > 1}
    by_group = {}
    for keys, entries in tasks:
        for group, block in near_dedup_blocks.key_blocks(keys, entries, groups):
            assert 0 <= group < groups and all(k % groups == group for k in np.frombuffer(block[0], dtype="<i8"))
            by_group.setdefault(group, []).append(block)
    found = {key: sorted(entries)
             for blocks in by_group.values() for key, entries in near_dedup_blocks.shared_keys(blocks)}
    assert found == expected and len(expected) > 10


def test_a_bundle_hands_on_a_pair_once_however_many_bands_it_shares():
    fn = MinHashBucketFn()
    fn.setup()
    fn.start_bundle()
    pairs = []
    for key in (3, 8, 13):  # three bands of one pair, in other key groups
        pairs += [o for o in fn.process(bucket(key, [("b", None), ("a", None)])) if not hasattr(o, "tag")]
    ended = list(fn.finish_bundle())
    assert pairs == [] and [o.value for o in ended if isinstance(o, WindowedValue)] == [("a", "b")]
    (counts,) = [o.value.value for o in ended if getattr(o, "tag", None) == COUNTS]
    assert list(counts.values()) == [3]  # every star edge is counted


def test_bucket_pairs_previous_versions_only_with_new_documents():
    old = {"doc_id": "a0", "source": "web", "source_rank": 1, "date": None}
    old_b = {**old, "doc_id": "b0"}
    entries = [("a0", member_of(old, previous=True)), ("b0", member_of(old_b, previous=True)), ("c9", None)]
    main, tagged = run_fn(MinHashBucketFn(), bucket(1, entries))
    # the old anchor a0 pairs with the new c9; old-old (a0, b0) is never proposed; b (second) is always new
    assert main == [("a0", "c9")]
    assert sorted(t[1][0] for t in tagged) == ["a0", "b0"]
    # a bucket of previous-version documents only produces nothing
    assert run_fn(MinHashBucketFn(), bucket(1, entries[:2])) == ([], [])
    # new anchor, old member: the old one goes first
    main, _ = run_fn(MinHashBucketFn(), bucket(1, [("z9", member_of({**old, "doc_id": "z9"}, previous=True)),
                                                   ("c1", None)]))
    assert main == [("z9", "c1")]


def test_a_document_of_several_previous_versions_is_reported_once_whatever_the_order():
    old = {"doc_id": "a0", "source": "web", "date": None}
    members = [member_of({**old, "source_rank": rank}, previous=True) for rank in (4, 2, 3)]
    for order in (members, members[::-1]):
        entries = [("a0", m) for m in order] + [("c9", None)]
        main, tagged = run_fn(MinHashBucketFn(), bucket(1, entries))
        assert main == [("a0", "c9")] and tagged == [("previous", ("a0", members[1]))]


# --- verification joins and previous versions -----------------------------------------------

def _signature_row(doc_id, band_keys, simhash=None, simhash_keys=(), rank=1, date=None):
    return {"doc_id": doc_id, "source": "web", "source_rank": rank, "date": date, "minhash": doc_id.encode(),
            "band_keys": list(band_keys), "simhash": simhash, "simhash_keys": list(simhash_keys), "shingles": None,
            "shingle_count": 60}


GROUPS = 3


def _signatures(rows_by_layer):
    """Blocks of (doc_id, layer, payload) of signature rows per doc group, as signing and the previous
    versions' reads emit them (one task per layer here)."""
    return [block for layer, rows in enumerate(rows_by_layer)
            for block in near_dedup_blocks.doc_blocks([(row["doc_id"], layer, payload_of(row)) for row in rows],
                                                     GROUPS)]


def test_verification_prefers_this_corpus_then_the_first_previous_version_and_checks_a_pair_once():
    new = [_signature_row(f"n{i}", [i]) for i in range(6)] + [_signature_row("both", [9])]
    old = [_signature_row("o1", [1]), {**_signature_row("both", [9]), "minhash": b"old"},
           {**_signature_row("twice", [8]), "minhash": b"first"}]
    older = [{**_signature_row("twice", [8]), "minhash": b"second"}, {**_signature_row("o1", [1]), "minhash": b"x"}]

    def check(a, b):  # the payloads' minhash bytes tell which row was used
        return (a[0], b[0])

    pairs = [("n0", "n1", None), ("o1", "n2", None), ("both", "n3", None), ("twice", "n4", None),
             ("n0", "n1", None), ("n0", "n1", None), ("n5", "n1", ("carried", 1))]

    def counted(results):
        (summed,) = results
        assert stage_counts(near_dedup.STAGE, summed)["other"] == {"test_verified": 5}  # repeats: checked once

    with beam.Pipeline(options=OPTIONS) as p:
        verified = ({"pairs": p | "Pairs" >> beam.Create(pairs),
                     "signature": p | "Signatures" >> beam.Create(_signatures([new, old, older]))}
                    | VerifyPairs(check, "test", GROUPS))
        assert_that(verified["checked"], equal_to([
            ("n0", "n1", None, (b"n0", b"n1")), ("o1", "n2", None, (b"o1", b"n2")),
            ("both", "n3", None, (b"both", b"n3")), ("twice", "n4", None, (b"first", b"n4")),
            ("n5", "n1", ("carried", 1), (b"n5", b"n1"))]), label="checked")
        assert_that(verified[COUNTS] | beam.CombineGlobally(SumCounts()), counted, label="counts")


def test_verification_fails_on_a_missing_signature():
    new = [_signature_row("n1", [1])]
    with pytest.raises(Exception, match="no signature for document ghost"):
        with beam.Pipeline(options=OPTIONS) as p:
            _ = ({"pairs": p | "Pairs" >> beam.Create([("ghost", "n1", None)]),
                  "signature": p | "Signatures" >> beam.Create(_signatures([new]))}
                 | VerifyPairs(lambda a, b: True, "test", GROUPS))


def test_a_previous_version_competes_with_its_member_and_its_own_signature(tmp_path):
    params = NearDedupParams.from_config(NearDedupConfig(enabled=True, method="both"))
    row = _signature_row("d1", [4, 7], simhash=0b1011, simhash_keys=[3], rank=2, date="2021-05-05")
    path = str(tmp_path / "part-00000-of-00001.parquet")
    write_partition(str(tmp_path), 0, 1, [row], schemas.NEAR_SIGNATURE)
    out = list(PreviousSignaturesFn(params, key_groups=4, budget=1 << 30).items((2, path), 0))
    main = [o for o in out if not hasattr(o, "tag")]
    tagged = sorted((o.tag, o.value) for o in out if hasattr(o, "tag"))
    member = member_of(row, previous=True)
    # its doc group's block: (doc_id, layer, (minhash, simhash, shingles, shingle_count))
    assert main == [(node_group("d1", 4), (("d1", 2, (b"d1", 0b1011, None, 60)),))]
    # keys travel in blocks per key group (key % 4): 4 -> group 0, 7 and 3 -> group 3
    assert [(tag, group, np.frombuffer(keys, dtype="<i8").tolist(), entries)
            for tag, (group, (keys, entries)) in tagged] == [
        ("bands", 0, [4], (("d1", member),)), ("bands", 3, [7], (("d1", member),)),
        ("blocks", 3, [3], (("d1", member, 0b1011),))]
    assert representative_order(member)[0] == 0  # a previous version goes first


def _apart(rows_by_layer):
    """(payload blocks, shingle set blocks) of signature rows as signing and the previous versions' reads
    emit them with ``shingles_apart``: the sets travel apart from the payloads."""
    payloads, shingle_sets = [], []
    for layer, rows in enumerate(rows_by_layer):
        for row in rows:
            near_dedup_blocks.add_payload(payloads, shingle_sets, row["doc_id"], layer, payload_of(row), True)
    return near_dedup_blocks.doc_blocks(payloads, GROUPS), near_dedup_blocks.doc_blocks(shingle_sets, GROUPS)


def test_shingle_sets_travel_apart_and_only_the_pairs_ends_are_put_back():
    """The sets leave the payloads (SHINGLES_APART in their place); verification puts the sets of the
    pairs' ends back, each from the layer its payload came from, and hands those sets on (selected)."""
    def row(doc_id, shingles):
        return {**_signature_row(doc_id, [1]), "shingles": shingles}

    new = [row("n1", b"set n1"), row("n2", b"set n2"), row("alone", b"set alone"), row("both", b"new both")]
    old = [row("o1", b"set o1"), row("both", b"old both")]
    payloads, shingle_sets = _apart([new, old])
    assert all(p[2] is near_dedup_blocks.SHINGLES_APART for block in payloads for _, _, p in block[1])
    pairs = [("n1", "n2", None), ("o1", "n1", None), ("both", "n2", None)]
    with beam.Pipeline(options=OPTIONS) as p:
        verified = ({"pairs": p | "Pairs" >> beam.Create(pairs),
                     "signature": p | "Signatures" >> beam.Create(payloads),
                     "shingles": p | "Sets" >> beam.Create(shingle_sets)}
                    | VerifyPairs(lambda a, b: (a[2], b[2]), "test", GROUPS))
        assert_that(verified["checked"], equal_to([
            ("n1", "n2", None, (b"set n1", b"set n2")), ("o1", "n1", None, (b"set o1", b"set n1")),
            ("both", "n2", None, (b"new both", b"set n2"))]), label="checked")
        selected = verified["selected"] | beam.FlatMap(lambda block: [(d, layer) for d, layer, _ in block[1]])
        assert_that(selected, equal_to([("n1", 0), ("n2", 0), ("o1", 1), ("both", 0), ("both", 1)]),
                    label="selected")


def test_verification_fails_on_a_missing_shingle_set():
    payloads, _ = _apart([[{**_signature_row("n1", [1]), "shingles": b"a"},
                           {**_signature_row("n2", [1]), "shingles": b"b"}]])
    with pytest.raises(Exception, match="no shingle set for document n"):
        with beam.Pipeline(options=OPTIONS) as p:
            _ = ({"pairs": p | "Pairs" >> beam.Create([("n1", "n2", None)]),
                  "signature": p | "Signatures" >> beam.Create(payloads),
                  "shingles": p | "Sets" >> beam.Create([])}
                 | VerifyPairs(lambda a, b: True, "test", GROUPS))


def test_shingle_sets_travel_apart_only_where_a_minhash_check_reads_them():
    assert near_dedup_blocks.shingles_apart(NearDedupParams.from_config(NearDedupConfig(enabled=True)))
    for config in ({"verify": "signature"}, {"two_tier": {"measure": "estimate"}}, {"method": "simhash"}):
        assert not near_dedup_blocks.shingles_apart(
            NearDedupParams.from_config(NearDedupConfig(enabled=True, **config)))
    payloads, shingle_sets = [], []
    # a layer without sets
    near_dedup_blocks.add_payload(payloads, shingle_sets, "legacy", 1, (b"m", None, None, None), True)
    assert payloads == [("legacy", 1, (b"m", None, None, None))] and shingle_sets == []


def test_a_large_key_group_leaves_in_blocks_of_at_most_a_mebibyte(monkeypatch):
    """A task's keys of one group in several elements when they are many (a runner bounds an element:
    Flink's sorter failed with "Record too large" on ~2 MB blocks); the buckets are the same."""
    from beam_pipeline.transforms import blocks
    from beam_pipeline.transforms.bundle_budget import output_bytes

    keys = [7 * k for k in range(30_000)] * 2  # 30,000 keys shared by two entries each, all in group 0 of 7
    entries = [(f"{i:032x}", None) for i in range(len(keys))]
    per_entry = 8 + output_bytes(entries[0])
    by_default = list(near_dedup_blocks.key_blocks(keys, entries, 7))  # 60,000 entries of ~56 B: ~3.4 MB
    assert len(by_default) == -(-len(keys) // (blocks.BLOCK_BYTES // per_entry)) > 1 and all(len(block[1]) * per_entry <= blocks.BLOCK_BYTES for _, block in by_default)
    monkeypatch.setattr(near_dedup_blocks, "BLOCK_BYTES", 10**9)
    whole = list(near_dedup_blocks.key_blocks(keys, entries, 7))
    monkeypatch.setattr(near_dedup_blocks, "BLOCK_BYTES", 64 * 1024)
    split = list(near_dedup_blocks.key_blocks(keys, entries, 7))
    assert len(whole) == 1 and len(split) > 20 and {group for group, _ in split} == {0}
    assert all(len(block[1]) * per_entry <= 64 * 1024 for _, block in split)
    assert sorted(near_dedup_blocks.shared_keys([b for _, b in split])) == sorted(
        near_dedup_blocks.shared_keys([whole[0][1]]))
