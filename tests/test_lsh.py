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


# --- buckets and signatures through files (transforms/lsh_files.py) --------------------------

def _signature_row(doc_id, band_keys, simhash=None, simhash_keys=(), rank=1, date=None):
    return {"doc_id": doc_id, "source": "web", "source_rank": rank, "date": date, "minhash": doc_id.encode(),
            "band_keys": list(band_keys), "simhash": simhash, "simhash_keys": list(simhash_keys), "shingles": None}


def test_spilled_band_records_come_back_grouped_by_key_whatever_the_files(tmp_path):
    from beam_pipeline.transforms.lsh_files import read_lsh_buckets, spill_lsh_records

    rows = [_signature_row("d2", [10, 13, 7]), _signature_row("d1", [13, 4]), _signature_row("d3", [7, 10])]
    count = 3
    first = list(spill_lsh_records(rows[:2], "band_keys", False, count, str(tmp_path), "a"))
    second = list(spill_lsh_records(rows[2:], "band_keys", True, count, str(tmp_path), "b"))
    assert sorted({bucket for bucket, _ in first + second}) == sorted({10 % 3, 13 % 3, 7 % 3, 4 % 3})
    by_bucket = {}
    for bucket, path in first + second:
        by_bucket.setdefault(bucket, []).append(path)
    groups = {}
    for bucket, paths in by_bucket.items():
        for key, records in read_lsh_buckets(paths + paths):  # a file named twice is read once
            assert key % count == bucket
            groups[key] = [(r["doc_id"], r["previous"]) for r in records]
    assert groups == {4: [("d1", False)], 7: [("d2", False), ("d3", True)], 10: [("d2", False), ("d3", True)],
                      13: [("d1", False), ("d2", False)]}
    # the same rows spill to the same file names (a retried task rewrites, never adds)
    assert list(spill_lsh_records(rows[:2], "band_keys", False, count, str(tmp_path), "a")) == first
    assert list(spill_lsh_records([_signature_row("x", [])], "band_keys", False, count, str(tmp_path), "c")) == []


def test_bucket_files_fn_hands_each_key_to_the_bucket_logic(tmp_path):
    from beam_pipeline.transforms.lsh_files import LshBucketFilesFn, spill_lsh_records
    from beam_pipeline.transforms.near_dedup import SimHashBucketFn, _band_entry, _block_entry

    rows = [_signature_row("d3", [5]), _signature_row("d1", [5]), _signature_row("d2", [8])]
    old = [_signature_row("a0", [5], rank=3, date="2020-01-01")]
    paths = [p for _, p in spill_lsh_records(rows, "band_keys", False, 1, str(tmp_path), "new")]
    paths += [p for _, p in spill_lsh_records(old, "band_keys", True, 1, str(tmp_path), "old")]
    main, tagged = run_fn(LshBucketFilesFn(MinHashBucketFn(), _band_entry), (0, paths))
    assert main == [("a0", "d1"), ("a0", "d3")]  # the star of key 5; key 8 holds one document
    assert tagged == [("previous", ("a0", member_of({"doc_id": "a0", "source": "web", "source_rank": 3,
                                                     "date": "2020-01-01"}, previous=True)))]
    close = [_signature_row("s1", [], simhash=0b1011, simhash_keys=[3]),
             _signature_row("s2", [], simhash=0b0011, simhash_keys=[3]),
             _signature_row("s3", [], simhash=(1 << 64) - 1, simhash_keys=[3])]
    paths = [p for _, p in spill_lsh_records(close, "simhash_keys", False, 1, str(tmp_path), "sim")]
    main, _ = run_fn(LshBucketFilesFn(SimHashBucketFn(max_hamming=1), _block_entry), (0, paths))
    assert main == [("s1", "s2")]


def test_signature_lookup_prefers_this_corpus_and_fails_on_a_missing_signature(tmp_path):
    import apache_beam as beam
    import pytest
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from beam_pipeline import schemas
    from beam_pipeline.hashing import bucket_of
    from beam_pipeline.layers import part_name, write_partition
    from beam_pipeline.transforms.lsh_files import SignatureFiles
    from beam_pipeline.transforms.near_dedup import VerifyPairs

    def layer(name, rows, count):
        directory = str(tmp_path / name)
        for i in range(count):
            write_partition(directory, i, count, sorted((r for r in rows if bucket_of(r["doc_id"], count) == i),
                                                        key=lambda r: r["doc_id"]), schemas.NEAR_SIGNATURE)
        return tuple(os.path.join(directory, part_name(i, count)) for i in range(count))

    new = [_signature_row(f"n{i}", [i]) for i in range(6)] + [_signature_row("both", [9])]
    old = [_signature_row("o1", [1]), {**_signature_row("both", [9]), "minhash": b"old"}]
    files = SignatureFiles((layer("new", new, 3), layer("old", old, 2)))
    assert [at[0] for at in files.partitions_of("o1")] == [0, 1]

    def check(a, b):  # the payloads' minhash bytes tell which row was used
        return (a[0], b[0])

    pairs = [("n0", "n1", None), ("o1", "n2", None), ("both", "n3", None), ("n0", "n1", None)]
    with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
        checked = p | beam.Create(pairs) | VerifyPairs(files, str(tmp_path / "spill"), check, "test")
        assert_that(checked, equal_to([("n0", "n1", None, (b"n0", b"n1")), ("o1", "n2", None, (b"o1", b"n2")),
                                       ("both", "n3", None, (b"both", b"n3"))]))
    with pytest.raises(Exception, match="no signature for document ghost"):
        with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
            _ = p | beam.Create([("ghost", "n1", None)]) | VerifyPairs(files, str(tmp_path / "spill"), check, "test")


def test_what_travels_with_a_pair_comes_back_unchanged():
    from beam_pipeline.transforms.lsh_files import decode_carry, encode_carry

    member = member_of({"doc_id": "d1", "source": "wéb", "source_rank": 2, "date": None}, boilerplate=(3, 9))
    carry = (member, ((0, 12), (40, 52)), "d0", 101)
    assert decode_carry(encode_carry(carry)) == carry
    assert isinstance(decode_carry(encode_carry(carry))[0][-1], tuple)  # tuples stay tuples (hashable)
    assert decode_carry(encode_carry(None)) is None
    assert encode_carry(carry) == encode_carry(decode_carry(encode_carry(carry)))


def test_pairs_spill_in_bounded_files_and_repeats_are_checked_once(tmp_path, monkeypatch):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from beam_pipeline import schemas
    from beam_pipeline.layers import part_name, write_partition
    from beam_pipeline.transforms import lsh_files
    from beam_pipeline.transforms.lsh_files import SignatureFiles
    from beam_pipeline.transforms.near_dedup import VerifyPairs

    monkeypatch.setattr(lsh_files, "SPILL_PAIRS", 2)  # a spill every two pairs: one bundle, several files
    rows = [_signature_row(f"n{i}", [i]) for i in range(4)]
    directory = str(tmp_path / "signatures")
    write_partition(directory, 0, 1, rows, schemas.NEAR_SIGNATURE)
    files = SignatureFiles(((os.path.join(directory, part_name(0, 1)),),))
    def check(a, b):
        return a[0] < b[0]

    pairs = [("n0", "n1", None)] * 5 + [("n2", "n1", None), ("n0", "n3", None)]
    p = beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"]))
    checked = p | beam.Create(pairs) | VerifyPairs(files, str(tmp_path / "spill"), check, "test")
    assert_that(checked, equal_to([("n0", "n1", None, True), ("n2", "n1", None, False), ("n0", "n3", None, True)]))
    result = p.run()
    result.wait_until_finish()
    counts = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
    assert (counts["test_verified"], counts["test_rejected"]) == (2, 1)  # each distinct pair checked once
    assert len(os.listdir(tmp_path / "spill")) >= 4  # >= 2 first-hop files (4 pairs + 3) and the attached ones


def test_band_records_carry_source_rank_and_date_only_for_previous_versions(tmp_path):
    from beam_pipeline.layers import read_partition_rows
    from beam_pipeline.transforms.lsh_files import spill_lsh_records

    rows = [_signature_row("d1", [4], rank=2, date="2021-05-05")]
    (_, new), = spill_lsh_records(rows, "band_keys", False, 1, str(tmp_path), "new")
    (_, old), = spill_lsh_records(rows, "band_keys", True, 1, str(tmp_path), "old")
    assert [(r["source"], r["source_rank"], r["date"]) for r in read_partition_rows(new)] == [(None, None, None)]
    assert [(r["source"], r["source_rank"], r["date"]) for r in read_partition_rows(old)] == [("web", 2, "2021-05-05")]


def test_keyed_records_come_back_grouped_by_key_and_kind_whatever_the_files(tmp_path):
    from beam_pipeline.hashing import bucket_of
    from beam_pipeline.transforms.lsh_files import SpillKeyedFn, keyed_record, read_keyed_groups, write_keyed_spills

    member = member_of({"doc_id": "d1", "source": "web", "source_rank": 2, "date": None}, boilerplate=(3, 9))
    first = list(write_keyed_spills({0: [keyed_record("d1", "member", member), keyed_record("d2", "label", "d0")]},
                                    str(tmp_path), "a"))
    second = list(write_keyed_spills({0: [keyed_record("d1", "label", "d1"), keyed_record("d1", "label", "d0"),
                                          keyed_record("d1", "span", (4, 9))]}, str(tmp_path), "b"))
    paths = [p for _, p in first + second]
    groups = list(read_keyed_groups(paths + paths))  # a file named twice is read once
    assert groups == [("d1", {"label": ["d0", "d1"], "member": [member], "span": [(4, 9)]}),
                      ("d2", {"label": ["d0"]})]
    assert list(read_keyed_groups(list(reversed(paths)))) == groups  # the order of the files does not matter
    assert list(write_keyed_spills({0: [keyed_record("d2", "label", "d0"), keyed_record("d1", "member", member)]},
                                   str(tmp_path), "a")) == first  # same records, same file, whatever their order

    fn = SpillKeyedFn(str(tmp_path / "spill"), 4, "label")
    fn.start_bundle()
    keyed = [(f"doc{i}", f"label{i % 3}") for i in range(40)]
    spilled = [pair for element in keyed for pair in fn.process(element)]
    spilled += [wv.value for wv in fn.finish_bundle()]
    assert sorted(bucket for bucket, _ in spilled) == sorted({bucket_of(k, 4) for k, _ in keyed})
    found = {}
    for bucket, path in spilled:
        for key, parts in read_keyed_groups([path]):
            assert bucket_of(key, 4) == bucket
            found[key] = parts["label"]
    assert found == {k: [v] for k, v in keyed}


def test_a_spill_fn_without_its_hooks_fails_at_construction():
    import pytest

    from beam_pipeline.transforms.layer_io import BufferedSpillFn

    class Incomplete(BufferedSpillFn):
        def targets(self, element):
            return []

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
