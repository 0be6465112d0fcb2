"""The heuristics' fast implementations against straightforward ones, column by column, on real text.

beam_pipeline/filters/heuristics.py and heuristics_reference.py compute
their columns with C-level ``map``/``filter`` passes, numpy arrays, n-gram
hashes sorted only where a repeat is possible, and one sentence search per
document (bench/bench_heuristics_reference.py times them). Each test here
recomputes columns the plain way (a loop per line, a Counter of n-gram
tuples, one sentencizer count per line) and asserts the very same values on
the bundled sample's documents (Python docs, Wikipedia, Debian copyright
files), so a faster implementation can never change a score.
"""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest

from beam_pipeline.filters import heuristics as h
from beam_pipeline.filters import heuristics_reference, reference_tokenizer
from beam_pipeline.filters.paragraphs import split_paragraphs
from tests.helpers import reference_fixture

PUNCTUATION = string.punctuation + "«»“”‘’„‚‹›…–—‐·•¡¿،؛؟۔।॥。、，！？：；（）【】《》〈〉「」『』〔〕"
LETTER = re.compile(r"[^\W\d_]")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [document["text"] for document in reference_fixture.sample_documents()]


# --- the project's definitions, written plainly --------------------------------------------


def plain_lines(text):
    return [line for line in (raw.strip() for raw in text.split("\n")) if line]


def plain_words(text):
    return [word for word in (token.strip(PUNCTUATION) for token in text.split()) if word]


def plain_repeats(parts):
    seen, dups, chars = set(), 0, 0
    for part in parts:
        if part in seen:
            dups += 1
            chars += len(part)
        else:
            seen.add(part)
    return dups, chars


def fraction(part, whole):
    return None if whole == 0 else part / whole


def plain_ngrams(words):
    """Every n-gram as a tuple of words, counted with a Counter."""
    out = {}
    if not words:
        return dict.fromkeys([f"rep_top_{n}gram" for n in (2, 3, 4)] + [f"rep_dup_{n}gram" for n in range(5, 11)])
    total = sum(map(len, words))
    for n in range(2, 11):
        starts = range(len(words) - n + 1)
        grams = [tuple(words[i : i + n]) for i in starts]
        counts = Counter(grams)
        if n <= 4:
            top = max(counts.values(), default=0)
            if top < 2:
                out[f"rep_top_{n}gram"] = 0.0
            else:
                chars = max(sum(map(len, grams[i])) for i in starts if counts[grams[i]] == top)
                out[f"rep_top_{n}gram"] = min(1.0, top * chars / total)
        else:
            covered = set()
            for i in starts:
                if counts[grams[i]] > 1:
                    covered.update(range(i, i + n))
            out[f"rep_dup_{n}gram"] = sum(len(words[i]) for i in covered) / total
    return out


def plain_project_scores(text, language):
    lines, spaced = plain_lines(text), language not in h.NO_SPACE_LANGUAGES
    words = plain_words(text) if spaced else []
    out = {
        "gopher_bullet_lines": fraction(sum(line.startswith(h.BULLETS) for line in lines), len(lines)),
        "gopher_ellipsis_lines": fraction(sum(line.endswith(h.ELLIPSES) for line in lines), len(lines)),
        "gopher_words": len(words) if spaced else None,
        "gopher_mean_word_length": fraction(sum(map(len, words)), len(words)),
        "gopher_hash_ratio": fraction(text.count("#"), len(words)),
        "gopher_ellipsis_ratio": fraction(text.count("...") + text.count("…"), len(words)),
        "gopher_alpha_words": fraction(sum(1 for w in words if LETTER.search(w)), len(words)),
        "gopher_stop_words": sum(w.lower() in h.GOPHER_STOP_WORDS["en"] for w in words) if language == "en" else None,
    }
    for unit, parts in (("line", lines), ("para", split_paragraphs(text))):
        dups, chars = plain_repeats(parts)
        out[f"rep_dup_{unit}_frac"] = fraction(dups, len(parts))
        out[f"rep_dup_{unit}_char_frac"] = fraction(chars, sum(map(len, parts)))
    out.update(plain_ngrams(words))
    terminal = short = javascript = policy = kept = 0
    for line in lines:
        lower = line.lower()
        ends = line.endswith(h.TERMINAL_PUNCTUATION) and not line.endswith(h.ELLIPSES)
        few = spaced and len(line.split()) < 3
        has_js = "javascript" in lower
        has_policy = any(p in lower for p in h.POLICY_SUBSTRINGS)
        terminal, short, javascript, policy = terminal + ends, short + few, javascript + has_js, policy + has_policy
        kept += ends and not few and not has_js and not has_policy
    out.update(
        {
            "c4_terminal_punct_lines": fraction(terminal, len(lines)),
            "c4_short_lines": fraction(short, len(lines)) if spaced else None,
            "c4_javascript_lines": javascript,
            "c4_policy_lines": policy,
            "c4_lorem_ipsum": "lorem ipsum" in text.lower(),
            "c4_curly_bracket": "{" in text,
            "c4_kept_lines": kept,
            "fw_line_punct_ratio": fraction(sum(line.endswith(h.FINEWEB_STOP_CHARS) for line in lines), len(lines)),
            "fw_short_line_ratio": fraction(sum(len(line) <= 30 for line in lines), len(lines)),
            "fw_dup_line_char_frac": fraction(plain_repeats(lines)[1], len(text) - text.count("\n")),
            "fw_newline_ratio": fraction(text.count("\n"), len(words)) if spaced else None,
        }
    )
    return out


@pytest.mark.parametrize("language", ["en", "de"])
def test_project_columns_equal_the_plain_definitions(texts, language):
    """Every project column of every sample document (English: with stop words; German: without)."""
    for index, text in enumerate(texts):
        fast = h.score(text, language, definitions=("project",))
        plain = plain_project_scores(text, language)
        assert {name: fast[name] for name in plain} == plain, index
        assert all(type(fast[name]) is type(plain[name]) for name in plain), index  # ints stay Python ints


def test_project_line_columns_without_spaces(texts):
    """A no-space language: line and character columns only (the n-grams are None)."""
    for text in texts[::5]:
        fast = h.score(text, "zh", definitions=("project",))
        plain = plain_project_scores(text, "zh")
        assert {name: fast[name] for name in plain} == plain


# --- the reference definitions, written plainly (datatrove's expressions) ------------------------


def test_reference_line_and_stop_word_columns_equal_datatroves_expressions(texts):
    for index, text in enumerate(texts):
        fast = heuristics_reference.score(text, "en")
        lines = text.splitlines()
        words = reference_tokenizer.words(text)
        regex_lines = re.split(r"\n+", text)
        fw_lines = [line for line in text.split("\n") if line.strip()]
        distinct_lines: set[str] = set()
        dup_lines = dup_line_chars = 0
        for line in regex_lines:  # datatrove find_duplicates
            if line in distinct_lines:
                dup_lines += 1
                dup_line_chars += len(line)
            else:
                distinct_lines.add(line)
        plain = {
            "ref_gopher_bullet_lines": fraction(sum(ln.lstrip().startswith(("•", "-")) for ln in lines), len(lines)),
            "ref_gopher_ellipsis_lines": fraction(sum(ln.rstrip().endswith(("...", "…")) for ln in lines), len(lines)),
            "ref_gopher_stop_words": len(set(words) & set(h.GOPHER_STOP_WORDS["en"])),
            "ref_rep_dup_line_frac": dup_lines / len(regex_lines) if text else None,
            "ref_rep_dup_line_char_frac": dup_line_chars / len(text) if text else None,
            "ref_fw_line_punct_ratio": (
                sum(ln.endswith(tuple(heuristics_reference._TERMINAL)) for ln in fw_lines) / len(fw_lines)
                if fw_lines
                else None
            ),
            "ref_fw_short_line_ratio": sum(len(ln) <= 30 for ln in fw_lines) / len(fw_lines) if fw_lines else None,
        }
        assert {name: fast[name] for name in plain} == plain, index


def test_sentence_total_is_the_sum_of_line_counts(texts):
    """C4's sentence count: one search over a document's kept lines equals the per-line sentencizer count."""
    checked = 0
    for text in texts:
        kept = [line for line, outcome in heuristics_reference._c4_lines(text.splitlines()) if outcome == "kept"]
        assert reference_tokenizer.sentence_total(kept) == sum(map(reference_tokenizer.sentence_count, kept))
        checked += len(kept)
    assert checked > 10_000
    odd = [
        "",
        "   ",
        "a\tb.  c! d",
        "One. Two. Three",
        "x",
        "Tabs\tand  spaces. Here",
        " lead. Space",
        "a .  .",
        "x.  \t y",
        "end.\u00a0Next",
        "(1) one.) two!  ?three",
        "a . . b",
    ]
    assert reference_tokenizer.sentence_total(odd) == sum(map(reference_tokenizer.sentence_count, odd))


def test_chunk_cache_cleared_when_full_gives_the_same_words(texts, monkeypatch):
    """A full chunk cache is cleared between documents (a new generation) and the words stay the same."""
    sample = texts[:40]
    expected = [reference_tokenizer.words(text) for text in sample]
    monkeypatch.setattr(reference_tokenizer, "VOCABULARY", reference_tokenizer._Vocabulary())
    monkeypatch.setattr(reference_tokenizer, "CACHE_SIZE", 2_000)
    generation = reference_tokenizer.VOCABULARY.generation
    assert [reference_tokenizer.words(text) for text in sample] == expected
    assert reference_tokenizer.VOCABULARY.generation > generation + 1


def plain_sentences(line):
    """The sentencizer's count of one line from its tokens, each token classed on its own (no cache)."""
    classes = "".join(map(reference_tokenizer._token_class, reference_tokenizer.tokens(line)))
    return 1 + len(re.findall("F[FP]*W", classes))


def test_sentence_counts_equal_the_per_token_classes(texts):
    """The per-token-id class table and the ASCII shortcut for one-sentence lines count what classing every
    token of every kept line does."""
    lines = [
        line
        for text in texts
        for line, outcome in heuristics_reference._c4_lines(text.splitlines())
        if outcome == "kept"
    ]
    lines += ["Ünïcode. Line", "日本語。次の文", "a\u2026 b? c", "x\u0964 y", "ascii only? yes! sure. ok"]
    assert len(lines) > 10_000
    assert [reference_tokenizer.sentence_count(line) for line in lines] == list(map(plain_sentences, lines))
    assert reference_tokenizer.sentence_total(lines) == sum(map(plain_sentences, lines))


@pytest.mark.parametrize("cache_size", [reference_tokenizer.CACHE_SIZE, 3_000])
def test_word_ids_equal_each_chunks_tokens(texts, monkeypatch, cache_size):
    """A document's token ids come from flat per-chunk arrays (and survive the cache's new generations):
    they are the ids of each chunk's tokens, tokenized one chunk at a time."""
    monkeypatch.setattr(reference_tokenizer, "VOCABULARY", reference_tokenizer._Vocabulary())
    monkeypatch.setattr(reference_tokenizer, "CACHE_SIZE", cache_size)
    for text in texts[:300]:
        ids = reference_tokenizer.word_ids(text).tolist()
        strings = reference_tokenizer.VOCABULARY.strings
        plain = [token for chunk in text.split() for token in reference_tokenizer._tokenize_chunk(chunk)]
        assert [strings[i] for i in ids] == plain


def plain_reference_ngrams(words, text):
    """datatrove's n-gram scores written out: a Counter's most common n-gram (the first seen among equals)
    and ``find_all_duplicate``'s scan over every position (n-grams as tuples of tokens)."""
    out = {}
    for n in heuristics_reference.TOP_NGRAM_SIZES:
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        if not grams:
            out[f"ref_rep_top_{n}gram"] = 0.0
            continue
        gram, count = Counter(grams).most_common(1)[0]
        out[f"ref_rep_top_{n}gram"] = len(" ".join(gram)) * count / len(text)
    for n in heuristics_reference.DUP_NGRAM_SIZES:
        seen, chars, at = set(), 0, 0
        while at < len(words) - n + 1:
            gram = tuple(words[at : at + n])
            if gram in seen:
                chars += sum(map(len, gram))
                at += n
            else:
                seen.add(gram)
                at += 1
        out[f"ref_rep_dup_{n}gram"] = chars / len(text)
    return out


def test_reference_ngram_columns_equal_the_plain_scan(texts):
    """Top and duplicate n-grams (candidates only, no sort once nothing repeats) against the plain scan, on
    sample documents and on texts where nothing, or only short n-grams, repeat."""
    for text in texts[::6] + ["one two three four five six", "a b a b c d e f g h i j k", "x y", "lone"]:
        fast = heuristics_reference.score(text, "en")
        plain = plain_reference_ngrams(reference_tokenizer.words(text), text)
        assert {name: fast[name] for name in plain} == plain, text[:60]
