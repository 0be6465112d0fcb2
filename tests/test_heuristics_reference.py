"""The reference definitions decide like HF datatrove 0.10.1's filters, on 5,415 real documents.

datatrove (the implementation FineWeb was built with) is a test-only
dependency (requirements/test.txt). Its four filters run with their default
arguments (English) on the bundled sample (815 documents: Python docs,
Wikipedia, Debian copyright files) and 4,600 pages of pinned Debian
documentation packages (tests/helpers/reference_fixture.py: Apache, Debian
handbook and GNOME help pages in many languages, Git, OpenJDK API pages,
PostgreSQL, Django). Each family's ``reference`` preset, applied by the
policy machinery to this project's ``ref_*`` columns, must keep and drop the
same documents.
"""
from __future__ import annotations

import concurrent.futures
import os
import sys
import unicodedata

import numpy as np
import pytest

from beam_pipeline.filters import (
    heuristics,
    heuristics_reference,
    reference_affixes,
    reference_sentencizer,
    reference_tokenizer,
)
from beam_pipeline.filters.presets import PRESET_NAMES, preset_rules
from beam_pipeline.policy.config import RuleConfig
from beam_pipeline.policy.rules import Plan
from tests.helpers import reference_fixture

try:
    import datatrove  # noqa: F401
    import spacy  # noqa: F401
except ImportError as err:  # a failure, not a skip: the comparison is the point of this module
    raise ImportError(f"{err}: the reference comparison needs the test dependencies; "
                      f"install them with: .venv/bin/pip install --no-deps -r requirements/test.txt") from None

FAMILIES = {  # preset -> datatrove filter class name
    "gopher_quality": "GopherQualityFilter",
    "gopher_repetition": "GopherRepetitionFilter",
    "c4": "C4QualityFilter",
    "fineweb": "FineWebQualityFilter",
}
#: datatrove's drop reason -> the preset's rule reason that must fire first.
REASONS = {
    "gopher_short_doc": "gopher_too_few_words", "gopher_long_doc": "gopher_too_many_words",
    "gopher_below_avg_threshold": "gopher_mean_word_length", "gopher_above_avg_threshold": "gopher_mean_word_length",
    "gopher_too_many_hashes": "gopher_hash_ratio", "gopher_too_many_ellipsis": "gopher_ellipsis_ratio",
    "gopher_too_many_bullets": "gopher_bullet_lines", "gopher_too_many_end_ellipsis": "gopher_ellipsis_lines",
    "gopher_below_alpha_threshold": "gopher_alpha_words", "gopher_enough_stop_words": "gopher_stop_words",
    "dup_para_frac": "gopher_dup_para_frac", "dup_para_char_frac": "gopher_dup_para_char_frac",
    "dup_line_frac": "gopher_dup_line_frac", "dup_line_char_frac": "gopher_dup_line_char_frac",
    **{f"top_{n}_gram": f"gopher_top_{n}gram" for n in (2, 3, 4)},
    **{f"duplicated_{n}_n_grams": f"gopher_dup_{n}gram" for n in range(5, 11)},
    "lorem_ipsum": "c4_page", "curly_bracket": "c4_page", "too_few_sentences": "c4_too_few_sentences",
    "line_punct_ratio": "fineweb_line_punct", "short_line_ratio": "fineweb_short_lines",
    "char_dup_ratio": "fineweb_dup_line_chars", "list_ratio": "fineweb_newlines",
}
#: Disagreements this test accepts, each with its reason: (family, predicate over the text).
#: None occurs in the fixture; they are listed so that a corpus that has them knows why.
ALLOWED_DISAGREEMENTS = {
    "empty text": (("gopher_repetition", "fineweb"),
                   lambda text: not text.strip(),
                   "datatrove drops a text without a non-blank line as 'empty'; the reference scores of an "
                   "undefined ratio are null and never drop (the built-in min_chars rule drops empty text)"),
}
MIN_AGREEMENT = 0.99


def _datatrove_decisions(texts: list[str]) -> dict:
    """Run in a worker process: datatrove's decision (None = kept, else its reason) per family and text, its
    English words of each text, and the text its C4 filter keeps."""
    from datatrove.data import Document
    from datatrove.pipeline import filters
    from datatrove.utils.text import split_into_words

    instances = {family: getattr(filters, name)() for family, name in FAMILIES.items()}
    out = {family: [] for family in FAMILIES}
    out["words"], out["c4_text"] = [], []
    order = sorted(instances, key=lambda family: family == "c4")   # C4 splits each line: its calls evict
    for i, text in enumerate(texts):                                 # the text's words from datatrove's
        out["words"].append(split_into_words(text))                  # small cache, so it runs last
        for family in order:
            document = Document(text=text, id=str(i))
            result = instances[family].filter(document)
            out[family].append(None if result is True else result[1])
            if family == "c4":
                out["c4_text"].append(document.text if result is True else None)
    return out


@pytest.fixture(scope="module")
def comparison():
    documents = reference_fixture.documents()
    texts = [d["text"] for d in documents]
    halves = [texts[: len(texts) // 2], texts[len(texts) // 2:]]
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        futures = [pool.submit(_datatrove_decisions, half) for half in halves]
        ours = [heuristics.score(text, "en", definitions=("reference",)) for text in texts]
        theirs = [future.result() for future in futures]
    datatrove_out = {key: theirs[0][key] + theirs[1][key] for key in theirs[0]}
    return documents, ours, datatrove_out


def _preset_reason(family: str, scores: dict) -> str | None:
    rules = [RuleConfig(**rule) for rule in preset_rules(family, "reference")]
    plan = Plan(cascade=("heuristics",), rules=rules, overrides=[], domains={"s": "d"})
    reason = plan.first_reason("s", {"heuristics": scores})
    return "c4_page" if reason in ("c4_lorem_ipsum", "c4_curly_bracket") else reason


def test_the_fixture_has_at_least_5000_documents_of_several_kinds():
    documents = reference_fixture.documents()
    kinds = {d["kind"] for d in documents}
    assert len(documents) >= 5000
    assert {"python-docs", "wikipedia", "debian-copyright", "gnome-user-docs", "openjdk-17-doc",
            "debian-handbook"} <= kinds
    languages = {d["id"].split("/")[2] for d in documents if d["kind"] == "debian-handbook"}
    assert len(languages) >= 5, languages     # the handbook in several languages


@pytest.mark.parametrize("family", PRESET_NAMES)
def test_reference_preset_decides_like_datatrove(comparison, family):
    documents, ours, theirs = comparison
    disagreements, unexplained = [], []
    for document, scores, their_reason in zip(documents, ours, theirs[family]):
        our_reason = _preset_reason(family, scores)
        if (our_reason is None) == (their_reason is None):
            if their_reason is not None:     # both drop: for the same check
                assert our_reason == REASONS[their_reason], (document["id"], our_reason, their_reason)
            continue
        disagreements.append((document["id"], their_reason, our_reason))
        if not any(family in families and allowed(document["text"])
                   for families, allowed, _ in ALLOWED_DISAGREEMENTS.values()):
            unexplained.append((document["id"], their_reason, our_reason))
    agreement = 1 - len(disagreements) / len(documents)
    dropped = sum(reason is not None for reason in theirs[family])
    print(f"\n{family}: {len(documents)} documents, datatrove drops {dropped}, "
          f"same decision {agreement:.2%}, disagreements {disagreements[:10]}")
    assert 0 < dropped < len(documents)          # the family decides something on this corpus
    assert agreement >= MIN_AGREEMENT
    assert not unexplained, unexplained[:20]


def test_words_are_datatroves_on_every_document(comparison):
    """Tokens equal spaCy's, but for the one simplification (reference_tokenizer's docstring): spaCy's
    special-case matcher runs over the whole document, and a match across a space can hide a match inside
    a chunk (one page of the fixture: "( =)" keeps "=" ")" apart, where "=)" alone is one token). Such a
    document must equal spaCy's tokens of each chunk on its own, and stay rare."""
    import spacy

    tokenizer = spacy.blank("en").tokenizer
    documents, _, theirs = comparison
    different = [d for d, their in zip(documents, theirs["words"]) if reference_tokenizer.words(d["text"]) != their]
    for d in different:
        per_chunk = [t.text for chunk in d["text"].split() for t in tokenizer(chunk)]
        assert reference_tokenizer.words(d["text"]) == per_chunk, d["id"]
    assert len(different) <= len(documents) // 1000, [d["id"] for d in different]


def test_c4_kept_text_is_datatroves(comparison):
    documents, _, theirs = comparison
    kept = [(d, text) for d, text in zip(documents, theirs["c4_text"]) if text is not None]
    assert len(kept) > 1000
    assert [d["id"] for d, text in kept if heuristics_reference.c4_kept_text(d["text"]) != text] == []


def test_sentence_counts_are_spacys_sentencizer():
    """Every line C4 keeps in the sample, counted by spaCy (blank English + sentencizer) and here."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    lines = [line for d in reference_fixture.sample_documents()[::3]
             for line, outcome in heuristics_reference._c4_lines(d["text"].splitlines()) if outcome == "kept"]
    lines += ["Hello.\tWorld is here. Mr. Smith went to Washington! Did he? Yes...  ok.",
              "A line .  with spaces ( and \u00a0 odd ) whitespace ."]
    assert len(lines) > 5000
    different = [line for line in lines
                 if reference_sentencizer.sentence_count(line) != max(1, len(list(nlp(line).sents)))]
    assert different == []


def test_rule_data_is_the_pinned_spacy_and_datatrove():
    from tests.helpers.reference_rules import main

    assert main(["--check"]) == 0, "beam_pipeline/filters/reference_rules.py is stale"
    import re._constants as constants
    import re._parser as parser

    parsed = parser.parse(reference_tokenizer._rules.PREFIX).data    # every alternative starts with ^ (the
    assert parsed[0] == (constants.AT, constants.AT_BEGINNING)       # parser factors it out): .match == .search
    assert reference_affixes._SUFFIX_GEOMETRY is not None


def test_letters_and_digits_take_the_fast_paths():
    """Chunks of letters only are one token (no affix or infix rule applies), and an infix never consumes
    a letter or digit: checked over every alphabetic and alphanumeric code point of Unicode."""
    split = reference_affixes.split_chunk
    infix = reference_affixes._infix_match
    alpha = [chr(c) for c in range(0x110000) if chr(c).isalpha()]
    alnum = [chr(c) for c in range(0x110000) if chr(c).isalnum()]
    for c in alpha:
        for chunk in (c, c + c, "a" + c, c + "a", "Z" + c + "z"):
            if chunk not in reference_affixes.SPECIALS:
                assert split(chunk, specials=True) == [chunk], chunk
    contexts = ("a", "A", "0", "\u00e9", "\u4e2d")
    for c in alnum:
        for left in contexts:
            assert infix(left + c + "a", 1) is None, left + c       # no infix starts at the character
            assert infix(left + c + "0", 1) is None, left + c
    assert [t for t in (chr(c) for c in range(0x30, 0x3A))] == [d for d in "0123456789"]


def _affixed_chunks() -> list[str]:
    """Words of three letters or more (ASCII, Latin-1, Cyrillic, Greek, CJK, uppercase and lowercase, words
    that end special cases) between every affix the tokenizer knows and other non-word characters."""
    rng = np.random.default_rng(24)
    affix_characters = sorted(
        {c for c in reference_affixes._PREFIX_START if not c.isalnum() and c != "_"}
        | set("()[]{}<>\"'`.,;:!?%$#&*+-=/\\|~^@°²…—–‘’“”«»¶§。、，：；！？·")
    )
    affix_characters += ["..", "...", "US$", "C$", "A$", "'s", "’s", "(?", "°F", "°c"]
    words = ["word", "the", "USA", "Mr", "etc", "dont", "gonna", "Inc", "km", "abc", "ßtraße", "слово",
             "ΛΟΓΟΣ", "日本語", "ÉTÉ", "Capitals", "aB", "Ab", "vs", "etc", "Jan", "Feb", "Sept", "am", "pm"]
    alphabet = list("abcxyzAXZéßÉøĳ") + ["я", "Ж", "λ", "Ω", "中", "ا"]
    for _ in range(300):
        words.append("".join(rng.choice(alphabet, int(rng.integers(3, 8)))))
    chunks = []
    for _ in range(40_000):
        lead = "".join(rng.choice(affix_characters, int(rng.integers(0, 3))))
        trail = "".join(rng.choice(affix_characters, int(rng.integers(0, 4))))
        chunks.append(lead + str(rng.choice(words)) + trail)
    return chunks


def test_affixed_words_split_as_the_general_loop():
    """The fast path for a word with affixes around it (its affixes' split memoized by the affixes and the
    word's last two letters) gives the tokens of the general affix loop, on every chunk of the reference
    fixture and on generated ones."""
    documents = reference_fixture.documents()
    chunks = set(_affixed_chunks())
    chunks.update(chunk for document in documents for chunk in document["text"].split())
    taken = 0
    for chunk in sorted(chunks):
        fast = reference_tokenizer._affixed_word(chunk)
        if fast is not None:
            taken += 1
            assert fast == reference_affixes.split_chunk(chunk, specials=True), chunk
    assert taken > 20_000


def test_special_case_pass_inside_chunks():
    assert reference_tokenizer.words("Don't stop, Mr. Smith's U.S. (a.m.) e.g. gonna cannot") == [
        "Do", "n't", "stop", ",", "Mr.", "Smith", "'s", "U.S.", "(", "a.m.", ")", "e.g.", "gon", "na", "can", "not"]


def test_skipping_duplicates_is_datatroves_loop():
    """find_all_duplicate itself, on crafted token sequences where jumps hide first occurrences."""
    from datatrove.pipeline.filters.gopher_repetition_filter import find_all_duplicate

    rng = np.random.default_rng(7)
    for trial in range(300):
        size = int(rng.integers(5, 120))
        vocabulary = ["a", "bb", "c", "dd", "e"][: int(rng.integers(1, 6))]
        words = [vocabulary[i] for i in rng.integers(0, len(vocabulary), size)]
        text = " ".join(words)
        tokens = heuristics_reference._Tokens(reference_tokenizer.word_ids(text))
        scores = heuristics_reference._ngram_scores(tokens, len(text))
        for n in range(5, 11):
            expected = find_all_duplicate(words, n) / len(text) if len(words) >= n else 0.0
            assert scores[f"ref_rep_dup_{n}gram"] == expected, (trial, n, words)


def test_stop_words_need_a_language_and_default_language_supplies_it():
    text = "The cat and the dog sat with a friend to be happy, that is all."
    assert heuristics.score(text)["ref_gopher_stop_words"] is None
    assert heuristics.score(text)["gopher_stop_words"] is None
    with_default = heuristics.score(text, default_language="en")
    assert with_default["ref_gopher_stop_words"] == 6      # the, and, with, to, be, that (distinct, case-sensitive)
    assert with_default["gopher_stop_words"] == 7          # the project counts occurrences, any case
    assert heuristics.score(text, "de", default_language="en")["ref_gopher_stop_words"] is None


def test_definitions_select_the_columns():
    text = "Some words here. And more words there, for a test."
    both = heuristics.score(text, "en")
    only_reference = heuristics.score(text, "en", definitions=("reference",))
    only_project = heuristics.score(text, "en", definitions=["project"])
    assert set(both) == set(only_reference) == set(only_project)
    assert all(only_reference[c] is None for c in heuristics.PROJECT_COLUMNS)
    assert all(only_project[c] is None for c in heuristics_reference.COLUMNS)
    assert {c: both[c] for c in heuristics_reference.COLUMNS} == \
        {c: only_reference[c] for c in heuristics_reference.COLUMNS}
    with pytest.raises(ValueError, match="unknown definition"):
        heuristics.score(text, definitions=("datatrove",))
    assert {heuristics.definition_of(c) for c in heuristics.PROJECT_COLUMNS} == {"project"}
    assert {heuristics.definition_of(c) for c in heuristics_reference.COLUMNS} == {"reference"}


def test_unicode_categories_of_punctuation_tokens():
    """The sentencizer's 'punctuation' is spaCy's is_punct: every character in a Unicode P* category."""
    assert reference_tokenizer.token_class(".") == "F"
    assert reference_tokenizer.token_class("(") == "P"
    assert reference_tokenizer.token_class("«»") == "P"
    assert reference_tokenizer.token_class("$") == "W" and unicodedata.category("$") == "Sc"
    assert reference_tokenizer.token_class("\n") == "W"


EDGE_CASES = ["", " ", "\n\n", "...", "a", "x" * 200000, "word " * 50000, "a\r\nb\r\n\r\nc",
              "\x0b\x0c\x1c text \u2028 more", "中文没有空格。" * 100, "(=) ( =) :) :-) e.g. U.S.A. don't",
              "\n".join(["same line here ok."] * 300), "{" * 10, "lorem ipsum dolor sit amet.\n" * 10,
              "Intro.\n\nThe same paragraph, with the words of a sentence.\n\n" * 6 + "End of the story here.",
              "\n".join(f"Line {i} of the list, and it has to be long enough for the rules." for i in range(40))]


@pytest.mark.parametrize("family", PRESET_NAMES)
def test_edge_cases_decide_like_datatrove(family):
    from datatrove.data import Document
    from datatrove.pipeline import filters

    instance = getattr(filters, FAMILIES[family])()
    for text in EDGE_CASES:
        result = instance.filter(Document(text=text, id="edge"))
        theirs = None if result is True else result[1]
        ours = _preset_reason(family, heuristics.score(text, "en", definitions=("reference",)))
        if (theirs is None) != (ours is None):
            assert any(family in families and allowed(text) for families, allowed, _ in
                       ALLOWED_DISAGREEMENTS.values()), (family, text[:40], theirs, ours)
        elif theirs is not None:
            assert ours == REASONS.get(theirs, theirs) or theirs == "empty", (family, text[:40], theirs, ours)
