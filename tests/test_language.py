"""Language ID with lid.176 (filters/language.py) and per-language bad words (filters/safety.py)."""
import os
import random

import pytest

from beam_pipeline.filters import models
from beam_pipeline.filters import language, safety
from test_heuristics import UDHR_AR, UDHR_EN, UDHR_HE, UDHR_RU, UDHR_ZH

UDHR_FR = ("Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison "
           "et de conscience et doivent agir les uns envers les autres dans un esprit de fraternité.")
UDHR_DE = ("Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen "
           "begabt und sollen einander im Geist der Brüderlichkeit begegnen.")
UDHR_JA = ("すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。"
           "人間は、理性と良心とを授けられており、互いに同胞の精神をもって行動しなければならない。")


@pytest.fixture(scope="module")
def lid():
    return language.load_model(language.builtin_lid_path())


@pytest.mark.parametrize("text,code", [(UDHR_EN, "en"), (UDHR_FR, "fr"), (UDHR_DE, "de"), (UDHR_RU, "ru"),
                                       (UDHR_AR, "ar"), (UDHR_HE, "he"), (UDHR_ZH, "zh"), (UDHR_JA, "ja")])
def test_top_language_of_real_text(lid, text, code):
    found, confidence = language.identify(lid, text)
    assert found == code
    assert 0.5 < confidence <= 1.0
    assert confidence == round(confidence, language.DECIMALS)


def test_newlines_and_empty_text(lid):
    assert language.identify(lid, UDHR_EN.replace(" ", "\n"))[0] == "en"  # fastText wants one line
    assert language.identify(lid, "") == (None, None)
    assert language.identify(lid, " \n\t ") == (None, None)
    assert language.score(lid, "")["lang"] is None


def test_max_chars_classifies_a_prefix(lid):
    text = UDHR_FR + "\n\n" + UDHR_EN * 20
    assert language.identify(lid, text, max_chars=len(UDHR_FR))[0] == "fr"
    assert language.identify(lid, text)[0] == "en"


def test_paragraph_mode_measures_mixed_documents(lid):
    paragraphs = [UDHR_EN, UDHR_FR, UDHR_EN, UDHR_DE, UDHR_EN]
    row = language.score(lid, "\n\n".join(paragraphs), paragraphs=True)
    # one label for a mixed document is unreliable (low confidence): that is what this mode shows
    assert row["confidence"] < 0.5
    labels = {"en": UDHR_EN, "fr": UDHR_FR, "de": UDHR_DE}
    same = sum(len(p) for p in paragraphs if p == labels[row["lang"]])
    assert row["paragraph_share"] == pytest.approx(same / sum(map(len, paragraphs)), abs=1e-6)
    assert row["paragraph_languages"] == 3
    off = language.score(lid, "\n\n".join(paragraphs))
    assert off["paragraph_share"] is None and off["paragraph_languages"] is None


def test_builtin_model_is_the_cached_file_with_the_pinned_hash():
    path = language.builtin_lid_path()
    assert path == os.path.join(models.cache_dir(), "lid.176.ftz")
    assert models.sha256_of(path) == models.LID_176.sha256
    assert language.model_path(language.BUILTIN_LID) == path


# --- bad words (LDNOOBW lists from the glin-profanity wheel) -------------------

@pytest.fixture(scope="module")
def badwords():
    return safety.BadWords(safety.load_word_lists())


def test_builtin_lists_cover_the_ldnoobw_languages(badwords):
    assert set(badwords.languages) == set(safety.BUILTIN_LANGUAGES)
    english = safety.builtin_words("en")
    assert "2g1c" in english and "bollocks" in english and len(english) > 400


def test_word_boundaries(badwords):
    clean = "The class passed its assessment; Dickens wrote about Scunthorpe and analysis."
    assert badwords.score(clean, "en")["badword_count"] == 0
    row = badwords.score("What a load of bollocks, said the bollocks-detector.", "en")
    assert row["badword_count"] == 2 and row["badword_lang"] == "en"
    assert row["badword_ratio"] == pytest.approx(16 / len("Whataloadofbollocks,saidthebollocks-detector."))


def test_phrases_and_symbol_entries(badwords):
    assert badwords.score("he said: blow job, then BLOW   JOB", "en")["badword_count"] == 2
    assert badwords.score("a$$ and s&m", "en")["badword_count"] == 2
    # symbol entries are whole words too: not inside a word, and a text without them skips their regex
    assert badwords.score("xa$$ s&mx (a$$) $hit!", "en")["badword_count"] == 2
    assert badwords.score("costs $5 & more - at @home!", "en")["badword_count"] == 0


def test_word_and_phrase_counts_equal_a_walk_over_every_position(badwords):
    """The counting (a set of the words, a phrase looked for only when all its words occur) against the
    plain definition: every single-word entry at every token, every multi-word entry at every position."""
    entries = [e for e in safety.builtin_words("en") if " ".join(safety._WORD.findall(e)) == e]
    phrases = [tuple(e.split()) for e in entries if " " in e]
    single = {e for e in entries if " " not in e}
    pieces = [*entries, *{w for p in phrases for w in p}, "the", "a", "-", ".", "\n", "Two", "GIRLS"]
    rng = random.Random(11)
    walked_phrases = 0
    for _ in range(3000):
        text = " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        tokens = safety._WORD.findall(text.lower())
        count = sum(t in single for t in tokens)
        found = sum(tuple(tokens[i : i + len(p)]) == p for i in range(len(tokens)) for p in phrases)
        walked_phrases += found
        assert badwords.score(text, "en")["badword_count"] == count + found, text
    assert walked_phrases > 500  # the texts do hold phrases, partial ones and whole ones


def test_language_without_list_has_no_score(badwords):
    assert badwords.score("whatever", "xx") == {"badword_count": None, "badword_ratio": None, "badword_lang": None}
    assert badwords.score("whatever", None)["badword_ratio"] is None


def test_no_space_languages_match_substrings_minus_the_c4_allowlist(badwords):
    assert badwords.score("这是性别平等的问题", "zh")["badword_count"] == 0   # 性 alone is allow-listed (C4)
    assert badwords.score(UDHR_ZH, "zh")["badword_count"] == 0


def test_configured_list_replaces_the_builtin(tmp_path):
    words = tmp_path / "en.txt"
    words.write_text("# my list\nfrobnicate\n")
    lists = safety.load_word_lists(builtin=False, files={"en": str(words)})
    assert lists == {"en": ["frobnicate"]}
    assert safety.BadWords(lists).score("Do not frobnicate.", "en")["badword_count"] == 1
