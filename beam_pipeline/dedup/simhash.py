"""64-bit SimHash (Charikar 2002) and its pigeonhole block keys: pure numpy.

The fingerprint of a document is computed over its *distinct* shingle hashes
(:mod:`beam_pipeline.dedup.shingling`): bit ``i`` is 1 when more than half of the
shingles have bit ``i`` set. Documents whose fingerprints differ in at most
``k`` bits (Hamming distance) are near duplicates (Manku et al., WWW 2007,
use k = 3 for 64-bit fingerprints of web pages).

Candidates come from block keys. The 64 bits are cut into ``blocks``
contiguous blocks; if two fingerprints differ in at most ``k`` bits, at least
``blocks - k`` blocks are identical (pigeonhole). So every document gets one
key per choice of ``blocks - k`` blocks (``blocks = k + 1`` by default: one
key per block); two documents within distance k share at least one key, and
every candidate pair is then checked exactly by its Hamming distance. More
blocks make keys longer (fewer random collisions per bucket) at the price of
C(blocks, k) keys per document.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import xxhash

from beam_pipeline.dedup import shingling
from beam_pipeline.records.hashing import stable_hash64

MASK63 = (1 << 63) - 1
BITS = 64


def fingerprint(shingles: np.ndarray) -> int:
    """The 64-bit SimHash of a non-empty uint64 shingle array, as a Python int in [0, 2^64)."""
    distinct = shingling.distinct(shingles)
    bits = np.unpackbits(distinct.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    ones = bits.sum(axis=0, dtype=np.int64)  # column j is bit j of the little-endian uint64
    set_bits = ones * 2 > distinct.size
    return int(np.packbits(set_bits, bitorder="little").view("<u8")[0])


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


@functools.lru_cache(maxsize=32)
def block_masks(blocks: int) -> tuple[int, ...]:
    """Bit masks of ``blocks`` contiguous blocks covering 64 bits, sizes as equal as possible."""
    if not 1 <= blocks <= BITS:
        raise ValueError(f"blocks must be in [1, 64], got {blocks}")
    masks, start = [], 0
    for index in range(blocks):
        width = BITS // blocks + (1 if index < BITS % blocks else 0)
        masks.append(((1 << width) - 1) << start)
        start += width
    return tuple(masks)


@functools.lru_cache(maxsize=32)
def key_masks(max_hamming: int, blocks: int) -> tuple[int, ...]:
    """One mask per choice of ``blocks - max_hamming`` blocks (sorted choice order)."""
    if blocks <= max_hamming:
        raise ValueError(f"blocks ({blocks}) must exceed max_hamming ({max_hamming}) for the pigeonhole")
    masks = block_masks(blocks)
    return tuple(
        functools.reduce(lambda x, y: x | y, (masks[i] for i in chosen))
        for chosen in itertools.combinations(range(blocks), blocks - max_hamming)
    )


@functools.lru_cache(maxsize=32)
def _key_seeds(count: int, seed: int) -> tuple[int, ...]:
    return tuple(stable_hash64(seed, "simhash-key", j) for j in range(count))


def block_keys(value: int, max_hamming: int, blocks: int, seed: int) -> list[int]:
    """Candidate keys of a fingerprint: two fingerprints within ``max_hamming`` share one."""
    masks = key_masks(max_hamming, blocks)
    return [
        xxhash.xxh3_64_intdigest((value & mask).to_bytes(8, "little"), s) & MASK63
        for mask, s in zip(masks, _key_seeds(len(masks), seed))
    ]


def close_pairs(fingerprints: list[int], max_hamming: int, chunk: int = 2048) -> list[tuple[int, int]]:
    """Index pairs (i < j) whose fingerprints are within ``max_hamming`` bits, vectorised in chunks."""
    values = np.array(fingerprints, dtype=np.uint64)
    pairs: list[tuple[int, int]] = []
    for start in range(0, values.size, chunk):
        block = values[start : start + chunk]
        distance = np.bitwise_count(block[:, None] ^ values[None, :])
        rows, cols = np.nonzero(distance <= max_hamming)
        rows += start
        keep = rows < cols
        pairs.extend(zip(rows[keep].tolist(), cols[keep].tolist()))
    return pairs
