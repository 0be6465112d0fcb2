import hashlib
import os
import subprocess
import sys

import xxhash

from beam_pipeline.records import hashing


def test_doc_id_is_content_derived_and_source_scoped():
    a = hashing.doc_id("wiki", "The same text.")
    assert a == hashing.doc_id("wiki", "The same text.")
    assert a != hashing.doc_id("mirror", "The same text.")
    assert a != hashing.doc_id("wiki", "The same text!")
    assert len(a) == 32 and int(a, 16) >= 0


def test_doc_id_separator_prevents_ambiguity():
    assert hashing.doc_id("ab", "c") != hashing.doc_id("a", "bc")


def test_golden_values_pin_the_hash_functions():
    # Changing these breaks every existing doc_id and dataset: bump versions instead.
    assert hashing.doc_id("src", "hello") == hashlib.blake2b(
        b"src\x1fhello", digest_size=16, person=b"beam-pipe-doc").hexdigest()
    assert hashing.content_hash("hello") == "b5e9c1ad071b3e7fc779cfaa5e523818"
    assert hashing.stable_hash64(0, "a") == hashing.stable_hash64(0, "a")
    assert hashing.stable_hash64(0, "a") != hashing.stable_hash64(1, "a")
    assert hashing.stable_hash64(0, "a", "b") != hashing.stable_hash64(0, "ab")


def _streamed(seed: int, *parts) -> int:
    """The framing stable_hash64 promises, streamed part by part: an 8-byte little-endian length, then the bytes."""
    h = xxhash.xxh3_64(seed=seed & 0xFFFFFFFFFFFFFFFF)
    for part in parts:
        data = str(part) if isinstance(part, int) else part
        data = data.encode("utf-8") if isinstance(data, str) else data
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.intdigest()


def test_stable_hash_and_buckets_are_the_length_prefixed_parts_hashed():
    """stable_hash64 hashes its framed parts in one call; every id, key and partition of every layer depends on it."""
    keys = ["", "a", "doc-0001", "Stra\u00dfe", "\U0001F600 x", "k" * 300] + [f"{i:032x}" for i in range(2000)]
    parts = [(), ("a",), ("a", "b"), ("ab",), (b"\x00\xff", 7, -3), ("x", 2**70, b"", "")]
    for seed in (0, 3, 2**64 - 1, -1, 2**70):
        assert [hashing.stable_hash64(seed, *p) for p in parts] == [_streamed(seed, *p) for p in parts]
        assert [hashing.stable_hash64(seed, k) for k in keys] == [_streamed(seed, k) for k in keys]
    for count, seed in ((1, 0), (7, 0), (97, 3), (1 << 20, 2**64 - 1), (5, -1)):
        assert [hashing.bucket_of(k, count, seed) for k in keys] == [_streamed(seed, k) % count for k in keys]
    assert hashing.bucket_of("k", 97) == 60  # pinned: a change moves every document to another partition


def test_stable_hash_does_not_depend_on_pythonhashseed():
    code = "from beam_pipeline.records.hashing import stable_hash64, bucket_of; print(stable_hash64(5, 'x', 3), bucket_of('k', 97))"
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outputs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert len(outputs) == 1


def test_merkle_root():
    leaves = [hashlib.sha256(bytes([i])).hexdigest() for i in range(5)]
    root = hashing.merkle_root(leaves)
    assert root == hashing.merkle_root(list(leaves))
    assert root != hashing.merkle_root(leaves[:4])
    assert root != hashing.merkle_root(leaves[::-1])
    # one leaf: the root is the leaf hashed with the leaf prefix, never the leaf itself
    one = hashing.merkle_root(leaves[:1])
    assert one == hashlib.sha256(b"\x00" + bytes.fromhex(leaves[0])).hexdigest()
    assert hashing.merkle_root([]) == hashlib.sha256(b"").hexdigest()
    # two leaves by hand
    l0, l1 = (hashlib.sha256(b"\x00" + bytes.fromhex(x)).digest() for x in leaves[:2])
    assert hashing.merkle_root(leaves[:2]) == hashlib.sha256(b"\x01" + l0 + l1).hexdigest()


def test_canonical_json_is_order_independent():
    assert hashing.digest_json({"a": 1, "b": [1, 2]}) == hashing.digest_json({"b": [1, 2], "a": 1})
