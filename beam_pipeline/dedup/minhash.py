"""MinHash signatures and LSH banding: numpy and one compiled loop (numba), no Beam.

Signatures
----------
A signature has ``num_perm`` values. Value ``i`` of a document is

    min over its shingles x of  ((a_i * x32 + b_i) mod 2^64) >> 32

where ``x32`` is the top 32 bits of the shingle's 64-bit hash
(:mod:`beam_pipeline.dedup.shingling`) and ``a_i``, ``b_i`` are uniform 64-bit
integers derived from the seed with :func:`beam_pipeline.records.hashing.stable_hash64`
(never numpy's RNG, whose streams may change between releases). This is
Dietzfelbinger's multiply-add-shift scheme: for 32-bit keys and 64-bit
arithmetic it is a strongly universal family of 32-bit hash functions, and
uint64 multiplication (numpy's, and the compiled loop's: C unsigned integers)
wraps exactly modulo 2^64, so the formula is computed exactly as written. (The tempting ``(a * x + b) mod (2^61 - 1)`` in
uint64 is *not* computed exactly once ``a * x`` overflows, and restricting
``a`` below 2^32 to avoid that breaks the estimator; ``tests/test_minhash.py``
checks the estimate against true Jaccard over many pairs.) Because ``>> 32``
is monotone, the minimum is taken over the 64-bit values and shifted once.

The probability that two documents agree on a value is their Jaccard
similarity J (up to 2^-32 collisions), so the fraction of equal values
estimates J with standard deviation sqrt(J (1 - J) / num_perm).

LSH
---
The first ``bands * rows`` values are cut into ``bands`` bands of ``rows``;
two documents become candidates when all rows of some band agree. For
similarity s that happens with probability

    P(s) = 1 - (1 - s^rows)^bands          (the S-curve)

:func:`optimal_bands` picks (bands, rows) for a target threshold t by
minimising ``fp_weight * FP + fn_weight * FN`` with
``FP = integral_0^t P(s) ds`` and ``FN = integral_t^1 (1 - P(s)) ds``
(numerical integration), as in Leskovec et al., *Mining of Massive
Datasets*, ch. 3.4, and ChenghaoMou/text-dedup. A band key is xxh3-64 of the
band's values, seeded per band index, as a non-negative 63-bit int (a
deterministic ``VarIntCoder`` key).
"""

from __future__ import annotations

import functools

import numpy as np
import xxhash

from beam_pipeline.dedup.compiled import compiled
from beam_pipeline.records.hashing import stable_hash64

MASK63 = (1 << 63) - 1


@functools.lru_cache(maxsize=16)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): uint64 arrays of shape (num_perm, 1), uniform over [0, 2^64), from the seed."""
    a = np.array([stable_hash64(seed, "minhash-a", i) for i in range(num_perm)], dtype=np.uint64)
    b = np.array([stable_hash64(seed, "minhash-b", i) for i in range(num_perm)], dtype=np.uint64)
    return a[:, None], b[:, None]


def signature(shingles: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """uint32 MinHash signature (length ``num_perm``) of a non-empty uint64 shingle array."""
    if shingles.size == 0:
        raise ValueError("a document without shingles has no signature")
    a, b = permutations(num_perm, seed)
    return _min_hashes(np.ascontiguousarray(shingles, dtype=np.uint64), a[:, 0], b[:, 0])


@compiled
def _min_hashes(shingles, a, b):  # pragma: no cover - compiled; tests/test_minhash.py checks it against Python ints
    """``min over x of ((a_i * (x >> 32) + b_i) mod 2^64) >> 32`` for every i, as uint32.

    Compiled (numba; docs/decisions.md, "MinHash in compiled code"): one pass over the shingles with the
    ``num_perm`` running minimums in registers and cache, where numpy made three passes (multiply, add,
    minimum) over a (num_perm, shingles) temporary: ~7x less time for the same values. uint64 arithmetic
    in numba wraps modulo 2^64 as numpy's does (C unsigned integers).
    """
    count = a.shape[0]
    best = np.full(count, np.uint64(0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
    shift = np.uint64(32)
    for j in range(shingles.shape[0]):
        key = shingles[j] >> shift  # 32-bit keys for the multiply-add-shift family
        for i in range(count):
            value = a[i] * key + b[i]
            if value < best[i]:
                best[i] = value
    out = np.empty(count, dtype=np.uint32)
    for i in range(count):
        out[i] = np.uint32(best[i] >> shift)  # ``>> 32`` is monotone: the minimum is shifted once
    return out


def to_bytes(sig: np.ndarray) -> bytes:
    """The wire and storage form: little-endian uint32 values."""
    return sig.astype("<u4", copy=False).tobytes()


def from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<u4")


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Fraction of equal signature values: an unbiased estimate of Jaccard similarity."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures of different lengths: {sig_a.shape} vs {sig_b.shape}")
    return float(np.count_nonzero(sig_a == sig_b)) / sig_a.size


def jaccard(shingles_a: np.ndarray, shingles_b: np.ndarray) -> float:
    """True Jaccard similarity of two shingle sets (arrays with or without repeats)."""
    a, b = np.unique(shingles_a), np.unique(shingles_b)
    union = np.union1d(a, b).size
    return float(np.intersect1d(a, b, assume_unique=True).size) / union if union else 1.0


@functools.lru_cache(maxsize=16)
def _band_seeds(bands: int, seed: int) -> tuple[int, ...]:
    return tuple(stable_hash64(seed, "lsh-band", j) for j in range(bands))


def band_keys(sig: np.ndarray, bands: int, rows: int, seed: int) -> list[int]:
    """One non-negative 63-bit key per band (a loop over bands, not shingles)."""
    data = to_bytes(sig[: bands * rows])
    width = rows * 4
    return [
        xxhash.xxh3_64_intdigest(data[j * width : (j + 1) * width], s) & MASK63
        for j, s in enumerate(_band_seeds(bands, seed))
    ]


# --- choosing bands and rows --------------------------------------------------


def collision_probability(s, bands: int, rows: int):
    """P(candidate | similarity s) = 1 - (1 - s^rows)^bands; s may be an array."""
    return 1.0 - (1.0 - np.power(s, rows)) ** bands


def _integral(f, lo: float, hi: float, points: int = 2001) -> float:
    if hi <= lo:
        return 0.0
    xs = np.linspace(lo, hi, points)
    return float(np.trapezoid(f(xs), xs))


def error_areas(threshold: float, bands: int, rows: int) -> tuple[float, float]:
    """(FP area, FN area) of the S-curve around ``threshold``."""
    fp = _integral(lambda s: collision_probability(s, bands, rows), 0.0, threshold)
    fn = _integral(lambda s: 1.0 - collision_probability(s, bands, rows), threshold, 1.0)
    return fp, fn


@functools.lru_cache(maxsize=256)
def optimal_bands(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_perm minimising the weighted FP + FN areas.

    Ties go to more bands, then fewer rows (deterministic).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    best, best_error = None, None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp, fn = error_areas(threshold, bands, rows)
            error = round(fp_weight * fp + fn_weight * fn, 12)
            if best_error is None or error < best_error:
                best, best_error = (bands, rows), error
    return best


def s_curve_table(
    bands: int, rows: int, similarities=(0.3, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
) -> list[tuple[float, float]]:
    """[(s, P(candidate))] for documentation and reports."""
    return [(float(s), float(collision_probability(s, bands, rows))) for s in similarities]


def curve_threshold(bands: int, rows: int) -> float:
    """The S-curve's approximate steepest point (1 / bands)^(1 / rows)."""
    return (1.0 / bands) ** (1.0 / rows)
