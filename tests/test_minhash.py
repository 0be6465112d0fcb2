"""Shingling and MinHash signatures: normalization, short documents, exactness, the estimator."""
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipeline.dedup import minhash
from beam_pipeline.dedup.shingling import (NORMALIZATION_VERSION, _fold_unicode, combine_windows, normalize_for_shingles,
                                     shingle_hashes, words)

WIKI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample", "data", "wikipedia",
                    "part-0000.parquet")


def wiki_words() -> list[str]:
    texts = pq.read_table(WIKI, columns=["text"]).column("text").to_pylist()
    return words(" ".join(texts))


# --- normalization ---------------------------------------------------------------

def test_normalization_folds_case_punctuation_whitespace_and_unicode_forms():
    plain = "The quick brown fox, it jumps over the lazy dog."
    variants = [
        "THE QUICK BROWN FOX -- it jumps over the lazy dog!!!",
        "The\u00a0quick  brown\tfox,\n\nit jumps over\u2003the lazy dog.",       # no-break and em spaces
        "\uff34\uff48\uff45 quick brown fox, it jumps over the lazy dog.",      # full-width letters
        "The qu\u200bick brown fox, it jum\u00adps over the lazy dog.",          # zero-width space, soft hyphen
        "\u201cThe quick brown fox\u201d \u2014 it jumps over the lazy dog\u2026",  # curly quotes, dash, ellipsis
    ]
    assert normalize_for_shingles(plain) == "the quick brown fox it jumps over the lazy dog"
    for variant in variants:
        assert normalize_for_shingles(variant) == normalize_for_shingles(plain), variant
    assert normalize_for_shingles("Stra\u00dfe") == "strasse"  # casefold, not only lower
    assert NORMALIZATION_VERSION.startswith("sh-v1+unicode-")


def test_ascii_fast_path_equals_the_unicode_path():
    for text in ["Hello, World! x_y 3.14 a-b", "tabs\tand\nnewlines  here", "[brackets] {braces} #tag @me"]:
        assert " ".join(_fold_unicode(text).split()) == normalize_for_shingles(text)


def character_by_character(text: str) -> str:
    """Steps 1-4 of sh-v1 written out one character at a time (the module doc of shingling)."""
    out = []
    for ch in unicodedata.normalize("NFKC", text).casefold():
        category = unicodedata.category(ch)
        if ord(ch) > 0xFFFF or category[0] in "LNM":
            out.append(ch)
        elif category != "Cf":
            out.append(" ")
    return "".join(out)


def test_the_compiled_fold_equals_the_rule_on_every_kind_of_character():
    """Every BMP code point but the surrogates (in runs, so that combining marks meet letters), and a
    sample above the BMP: the compiled class lookup and UTF-8 encoding give the rule's text."""
    points = [p for p in range(0x10000) if not 0xD800 <= p <= 0xDFFF] + list(range(0x10000, 0x110000, 997))
    for start in range(0, len(points), 4096):
        text = "".join(map(chr, points[start : start + 4096]))
        assert _fold_unicode(text) == character_by_character(text), hex(points[start])
    mixed = "Stra\u00dfe \ufb01ne \uff21b e\u0301 \u00ad\u200b \U0001F600 \U0001D518 \u13a0\uab70 \u0130 \u01c5"
    assert _fold_unicode(mixed) == character_by_character(mixed)
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate fails the document, as it always did
        _fold_unicode("a\ud800b")


def test_documents_shorter_than_the_shingle_have_no_shingles():
    assert shingle_hashes("one two three four", size=5) is None
    assert shingle_hashes("", size=5) is None
    assert shingle_hashes("... !!! ---", size=1) is None  # punctuation only: no words at all
    one = shingle_hashes("one two three four five", size=5)
    assert one.shape == (1,)
    assert shingle_hashes("abcd", kind="char", size=5) is None
    assert shingle_hashes("abcde", kind="char", size=5).shape == (1,)


def test_shingles_are_order_sensitive_windows_and_seeded():
    a = shingle_hashes("a b c d e f", size=3)
    assert a.shape == (4,)
    assert shingle_hashes("c b a d e f", size=3)[0] != a[0]
    assert not np.array_equal(shingle_hashes("a b c d e f", size=3, seed=1), a)
    np.testing.assert_array_equal(shingle_hashes("A b, C d e F", size=3), a)  # normalization first
    units = np.array([1, 2, 3, 1, 2, 3], dtype=np.uint64)
    h = combine_windows(units, 3)
    assert h[0] == h[3] and len(set(h.tolist())) == 3


def test_char_shingles_span_word_boundaries():
    h = shingle_hashes("ab cd", kind="char", size=3)
    assert h.shape == (3,)  # "ab ", "b c", " cd"


# --- signatures ----------------------------------------------------------------------

def exact_signature(shingles: np.ndarray, num_perm: int, seed: int) -> list[int]:
    """The formula of the module doc with Python's unbounded ints."""
    a, b = minhash.permutations(num_perm, seed)
    keys = [int(x) >> 32 for x in shingles]
    return [min(((int(a[i, 0]) * k + int(b[i, 0])) % 2**64) >> 32 for k in keys) for i in range(num_perm)]


@pytest.mark.parametrize("size,num_perm,seed", [(1, 16, 9), (50, 16, 9), (700, 112, 0), (5000, 112, 3)])
def test_signature_is_exact_multiply_add_shift(size, num_perm, seed):
    """The compiled loop's result equals the formula computed with Python's unbounded ints."""
    rng = np.random.default_rng(size)
    shingles = rng.integers(0, 2**63, size=size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    shingles[: min(size, 2)] = [2**64 - 1, 0][: min(size, 2)]  # the extremes of the key range
    sig = minhash.signature(shingles, num_perm, seed=seed)
    assert sig.tolist() == exact_signature(shingles, num_perm, seed)
    assert sig.dtype == np.uint32
    # a strided (non-contiguous) view gives the same signature
    doubled = np.repeat(shingles, 2)[::2]
    assert minhash.signature(doubled, num_perm, seed).tolist() == sig.tolist()


def test_signature_is_deterministic_and_ignores_shingle_order_and_repeats():
    shingles = shingle_hashes(" ".join(wiki_words()[:400]))
    sig = minhash.signature(shingles, 112, 0)
    np.testing.assert_array_equal(sig, minhash.signature(shingles[::-1].copy(), 112, 0))
    np.testing.assert_array_equal(sig, minhash.signature(np.concatenate([shingles, shingles]), 112, 0))
    assert not np.array_equal(sig, minhash.signature(shingles, 112, 1))
    assert minhash.from_bytes(minhash.to_bytes(sig)).tolist() == sig.tolist()
    long = np.tile(shingles, 40)  # more than one 4096-shingle block
    np.testing.assert_array_equal(minhash.signature(long, 112, 0), sig)
    with pytest.raises(ValueError):
        minhash.signature(np.zeros(0, dtype=np.uint64), 8, 0)


def test_estimated_jaccard_tracks_true_jaccard_across_many_pairs():
    """Pairs of real-text shingle sets with true Jaccard from 0.05 to 0.98: the estimate is unbiased
    and within 4.5 standard deviations sqrt(J (1 - J) / num_perm) for every pair."""
    vocabulary = wiki_words()
    shingles = np.unique(shingle_hashes(" ".join(vocabulary)))
    rng = np.random.default_rng(2026)
    num_perm = 128
    errors, z_scores = [], []
    for trial in range(300):
        size = int(rng.integers(50, 1500))
        chosen = rng.choice(shingles, size=2 * size, replace=False)
        overlap = int(rng.integers(0, size + 1))
        a = chosen[:size]
        b = np.concatenate([a[:overlap], chosen[size:2 * size - overlap]])
        true = minhash.jaccard(a, b)
        estimate = minhash.estimate_jaccard(minhash.signature(a, num_perm, trial), minhash.signature(b, num_perm, trial))
        sigma = max(np.sqrt(true * (1 - true) / num_perm), 1e-9)
        errors.append(estimate - true)
        z_scores.append((estimate - true) / sigma if 0 < true < 1 else 0.0)
    errors, z_scores = np.array(errors), np.array(z_scores)
    assert abs(errors.mean()) < 0.006              # unbiased
    assert np.abs(z_scores).max() < 4.5            # no pair far off
    assert 0.85 < np.mean(np.abs(z_scores) < 2) < 0.995  # about 95% within 2 sigma, as a binomial should be


def test_identical_and_disjoint_sets():
    vocabulary = wiki_words()
    a = shingle_hashes(" ".join(vocabulary[:300]))
    b = shingle_hashes(" ".join(vocabulary[5000:5300]))
    sig_a, sig_b = minhash.signature(a, 112, 0), minhash.signature(b, 112, 0)
    assert minhash.estimate_jaccard(sig_a, sig_a) == 1.0
    assert minhash.estimate_jaccard(sig_a, sig_b) < 0.05
    assert minhash.jaccard(a, a) == 1.0


# --- choosing bands and rows --------------------------------------------------------------

def test_optimal_bands_minimises_the_weighted_error():
    bands, rows = minhash.optimal_bands(0.7, 112)
    assert (bands, rows) == (12, 9)
    best = 0.5 * sum(minhash.error_areas(0.7, bands, rows))
    for b in range(1, 113):
        for r in range(1, 112 // b + 1):
            assert 0.5 * sum(minhash.error_areas(0.7, b, r)) >= best - 1e-12
    # weighting false negatives more gives a curve that starts earlier
    b2, r2 = minhash.optimal_bands(0.7, 112, fp_weight=0.2, fn_weight=0.8)
    assert minhash.curve_threshold(b2, r2) < minhash.curve_threshold(bands, rows)
    with pytest.raises(ValueError):
        minhash.optimal_bands(1.0, 112)


def test_s_curve():
    table = dict(minhash.s_curve_table(12, 9))
    probabilities = list(table.values())
    assert probabilities == sorted(probabilities)
    assert table[0.3] < 0.001 and table[0.95] > 0.999
    assert 0.3 < minhash.collision_probability(0.7, 12, 9) < 0.6
    fp, fn = minhash.error_areas(0.7, 12, 9)
    assert 0 < fp < 0.05 and 0 < fn < 0.06


def test_the_compiled_loops_are_cached_for_the_next_process(tmp_path):
    """The first process compiles and writes numba's cache; the next one loads the machine code."""
    code = (
        "import numpy as np\n"
        "from beam_pipeline.dedup import minhash, shingling\n"
        "minhash.signature(np.arange(9, dtype=np.uint64), 8, 0)\n"
        "shingling.shingle_hashes('\\u00e9 a b c d e f')\n"
        "stats = [f.dispatcher.stats for f in (minhash._min_hashes, shingling._fold_points, shingling._combined_windows)]\n"
        "print(sum(sum(s.cache_hits.values()) for s in stats), sum(sum(s.cache_misses.values()) for s in stats))\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}  # a fresh cache (where the package's folder is not used)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    hits = [tuple(map(int, run.stdout.split())) for run in runs]
    assert hits[1][0] == 3, hits  # every loop loaded by the second process


def test_a_loop_compiles_per_process_where_nothing_can_cache_it(monkeypatch):
    import numba

    from beam_pipeline.dedup.compiled import compiled

    real = numba.njit

    def refusing(*args, cache=False, **kwargs):
        if cache:
            raise RuntimeError("cannot cache function 'add': no locator available for file 'x.py'")
        return real(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", refusing)

    @compiled
    def add(a, b):
        return a + b

    assert add(2, 3) == 5 and add.__name__ == "add"


def test_numba_is_imported_only_when_a_loop_first_runs():
    code = (
        "import sys\n"
        "from beam_pipeline.transforms import near_dedup\n"
        "from beam_pipeline.dedup import minhash\n"
        "before = 'numba' in sys.modules\n"
        "import numpy as np\n"
        "minhash.signature(np.arange(9, dtype=np.uint64), 8, 0)\n"
        "print(before, 'numba' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "True"]
