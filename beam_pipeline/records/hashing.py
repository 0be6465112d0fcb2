"""The one place where identities and digests are computed.

Every value that reaches the output is derived from content through an
explicit, seeded hash (never Python's ``hash()``, which is salted per process,
and never a counter or the wall clock):

* ``doc_id``        128-bit BLAKE2b of (source, normalized text), hex.
* ``content_hash``  128-bit xxh3 of the normalized text, hex: the exact-dedup
  key. Equal texts from different sources share it.
* ``order_key``     64-bit xxh3 of (seed, doc_id): the global shuffle order.
* ``digest``/``sha256_*``  integrity digests of files and canonical JSON.

Grouping keys built from these are ``str`` or ``int``, so Beam picks a
deterministic coder for them.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, BinaryIO, Iterable

import numpy as np
import xxhash

_SEP = b"\x1f"  # unit separator: cannot appear in a source name


def doc_id(source: str, normalized_text: str) -> str:
    """Content-derived document id: 32 hex chars of BLAKE2b-128(source, text)."""
    h = hashlib.blake2b(digest_size=16, person=b"beam-pipe-doc")
    h.update(source.encode("utf-8"))
    h.update(_SEP)
    h.update(normalized_text.encode("utf-8"))
    return h.hexdigest()


def content_hash(normalized_text: str) -> str:
    """Exact-duplicate key: 32 hex chars of xxh3-128 of the normalized text."""
    return xxhash.xxh3_128_hexdigest(normalized_text.encode("utf-8"))


def stable_hash64(seed: int, *parts: str | bytes | int) -> int:
    """Seeded 64-bit hash of the parts (each length-prefixed), as a Python int: xxh3-64 of the framed
    parts in one call (it runs for every document at every partitioned step, through :func:`bucket_of`)."""
    framed: list[bytes] = []
    for part in parts:
        if isinstance(part, int):
            part = str(part)
        if isinstance(part, str):
            part = part.encode("utf-8")
        framed += (len(part).to_bytes(8, "little"), part)
    return xxhash.xxh3_64_intdigest(b"".join(framed), seed & 0xFFFFFFFFFFFFFFFF)


def bucket_of(key: str, num_buckets: int, seed: int = 0) -> int:
    """Deterministic partition index of a string key in [0, num_buckets)."""
    return stable_hash64(seed, key) % num_buckets


def canonical_json(value: Any) -> bytes:
    """The canonical byte form used for every digest of structured data."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest_json(value: Any) -> str:
    """sha256 hex of the canonical JSON form of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_stream(stream: BinaryIO, chunk_size: int = 1 << 20) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: stream.read(chunk_size), b""):
        h.update(chunk)
    return h.hexdigest()


def sha256_file(path: "str | os.PathLike") -> str:
    """sha256 hex of a local file, read in 1 MiB pieces."""
    with open(path, "rb") as f:
        return sha256_stream(f)


def merkle_root(leaves: Iterable[str]) -> str:
    """sha256 Merkle root over hex leaf digests, in the given order.

    Leaves are hashed with a 0x00 prefix and inner nodes with 0x01 (RFC 6962
    style, so a leaf can never be confused with an inner node); an odd node at
    the end of a level is promoted unchanged. The root of no leaves is
    sha256 of the empty string.
    """
    level = [hashlib.sha256(b"\x00" + bytes.fromhex(leaf)).digest() for leaf in leaves]
    if not level:
        return hashlib.sha256(b"").hexdigest()
    while len(level) > 1:
        paired = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0].hex()


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer over a uint64 array (wrapping arithmetic): a cheap, well-mixed 64-bit
    permutation (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
