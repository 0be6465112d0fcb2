"""Gopher, C4 and FineWeb heuristics against hand-checked examples (beam_pipeline/filters/heuristics.py)."""
import pytest

from beam_pipeline.filters import heuristics as h

# Article 1 of the Universal Declaration of Human Rights (UN, 1948), in several scripts.
UDHR_EN = ("All human beings are born free and equal in dignity and rights. They are endowed with reason "
           "and conscience and should act towards one another in a spirit of brotherhood.")
UDHR_AR = "يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق. وقد وهبوا عقلاً وضميرًا وعليهم أن يعامل بعضهم بعضًا بروح الإخاء."
UDHR_HE = ("כל בני האדם נולדו בני חורין ושווים בערכם ובזכויותיהם. כולם חוננו בתבונה ובמצפון, "
           "לפיכך חובה עליהם לנהוג איש ברעהו ברוח של אחוה.")
UDHR_ZH = "人人生而自由,在尊严和权利上一律平等。他们赋有理性和良心,并应以兄弟关系的精神相对待。"
UDHR_RU = ("Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом "
           "и совестью и должны поступать в отношении друг друга в духе братства.")


def test_empty_text_has_no_invented_scores():
    scores = h.score("", "en")
    assert scores["gopher_words"] == 0
    for name in ("gopher_mean_word_length", "gopher_alpha_words", "gopher_bullet_lines", "rep_dup_line_frac",
                 "rep_top_2gram", "rep_dup_5gram", "c4_terminal_punct_lines", "fw_line_punct_ratio",
                 "fw_dup_line_char_frac", "fw_newline_ratio"):
        assert scores[name] is None, name
    assert scores["c4_curly_bracket"] is False and scores["c4_kept_lines"] == 0


def test_one_word():
    scores = h.score("Hello", "en")
    assert scores["gopher_words"] == 1
    assert scores["gopher_mean_word_length"] == 5.0
    assert scores["gopher_stop_words"] == 0
    assert scores["rep_top_2gram"] == 0.0 and scores["rep_dup_5gram"] == 0.0  # too short to repeat
    assert scores["c4_terminal_punct_lines"] == 0.0      # "Hello" has no full stop
    assert scores["c4_short_lines"] == 1.0               # 1 word < 3
    assert scores["fw_short_line_ratio"] == 1.0


def test_gopher_quality_on_udhr_english():
    scores = h.gopher_quality(UDHR_EN, "en")
    # 30 words, 139 letters: hand count
    assert scores["gopher_words"] == 30
    assert scores["gopher_mean_word_length"] == pytest.approx(139 / 30)
    assert scores["gopher_alpha_words"] == 1.0
    # the, and (x3), to, with: 6 of Gopher's stop words ("the, be, to, of, and, that, have, with")
    assert scores["gopher_stop_words"] == 6
    assert scores["gopher_hash_ratio"] == 0.0 and scores["gopher_bullet_lines"] == 0.0


def test_gopher_symbols_bullets_and_ellipses():
    text = "# Title\n• first point\n• second point\n- third point...\nand a closing line…"
    scores = h.gopher_quality(text, "en")
    assert scores["gopher_bullet_lines"] == pytest.approx(3 / 5)
    assert scores["gopher_ellipsis_lines"] == pytest.approx(2 / 5)
    words = h.split_words(text)            # "#", "•", "-" are punctuation-only tokens: not words
    assert words == ["Title", "first", "point", "second", "point", "third", "point", "and", "a", "closing", "line"]
    assert scores["gopher_hash_ratio"] == pytest.approx(1 / 11)
    assert scores["gopher_ellipsis_ratio"] == pytest.approx(2 / 11)


def test_alpha_words_counts_numbers():
    scores = h.gopher_quality("In 1969 , 3 astronauts flew 384400 km", "en")
    assert scores["gopher_words"] == 7           # the lone comma is not a word
    assert scores["gopher_alpha_words"] == pytest.approx(4 / 7)  # In, astronauts, flew, km


def test_stop_words_only_for_languages_with_a_list():
    assert h.gopher_quality(UDHR_EN, None)["gopher_stop_words"] is None   # language unknown
    assert h.gopher_quality(UDHR_RU, "ru")["gopher_stop_words"] is None
    assert h.gopher_quality(UDHR_RU, "ru", {"ru": ["и", "в"]})["gopher_stop_words"] == 7  # 4 x и, 3 x в


def test_non_latin_scripts_and_rtl():
    for text, lang in ((UDHR_AR, "ar"), (UDHR_HE, "he"), (UDHR_RU, "ru")):
        scores = h.score(text, lang)
        assert scores["gopher_words"] > 15
        assert scores["gopher_alpha_words"] == 1.0, lang      # Arabic and Hebrew letters are letters
        assert 3 <= scores["gopher_mean_word_length"] <= 10, lang
        assert scores["c4_terminal_punct_lines"] == 1.0, lang  # ends in '.'
    # Chinese has no spaces: word-based scores are not defined, line-based ones are
    scores = h.score(UDHR_ZH, "zh")
    assert scores["gopher_words"] is None and scores["rep_dup_5gram"] is None and scores["c4_short_lines"] is None
    assert scores["c4_terminal_punct_lines"] == 1.0          # '。' is a sentence end
    assert scores["fw_line_punct_ratio"] == 1.0


def test_gopher_repetition_lines_and_paragraphs():
    text = "Buy now\nBuy now\nBuy now\nReal content here\n\nBuy now"
    scores = h.gopher_repetition(text, "en")
    lines = ["Buy now", "Buy now", "Buy now", "Real content here", "Buy now"]
    assert scores["rep_dup_line_frac"] == pytest.approx(3 / 5)
    assert scores["rep_dup_line_char_frac"] == pytest.approx(21 / sum(map(len, lines)))
    assert scores["rep_dup_para_frac"] == pytest.approx(0 / 2)


def test_gopher_ngram_fractions_hand_checked():
    words = "a b c d e a b c d e x".split()
    scores = h.ngram_repetition(words)
    assert scores["rep_top_2gram"] == pytest.approx(4 / 11)   # "a b" twice, 2 characters each
    assert scores["rep_top_3gram"] == pytest.approx(6 / 11)
    assert scores["rep_dup_5gram"] == pytest.approx(10 / 11)  # both copies of "a b c d e"
    assert scores["rep_dup_6gram"] == 0.0                     # no 6-gram repeats
    # a run of one word: every n-gram repeats, the fraction is capped at 1
    assert h.ngram_repetition(["spam"] * 20)["rep_top_2gram"] == 1.0
    assert h.ngram_repetition(["spam"] * 20)["rep_dup_10gram"] == 1.0


def test_c4_line_rules():
    text = ("Please enable JavaScript to view this page.\nWe use cookies. See our privacy policy.\n"
            "This is a real sentence with words.\nshort line\n{\"json\": true}\nLorem ipsum dolor sit amet.")
    scores = h.c4(text, "en")
    assert scores["c4_javascript_lines"] == 1
    assert scores["c4_policy_lines"] == 1
    assert scores["c4_lorem_ipsum"] is True and scores["c4_curly_bracket"] is True
    assert scores["c4_terminal_punct_lines"] == pytest.approx(4 / 6)
    assert scores["c4_short_lines"] == pytest.approx(2 / 6)  # "short line", '{"json": true}'
    assert scores["c4_kept_lines"] == 2                      # the real sentence and the lorem ipsum line


def test_fineweb_rules():
    text = "Title\nA first full sentence of this page.\nMenu\nMenu\nAnother sentence that ends here!"
    scores = h.fineweb(text, "en")
    assert scores["fw_line_punct_ratio"] == pytest.approx(2 / 5)
    assert scores["fw_short_line_ratio"] == pytest.approx(3 / 5)   # Title, Menu, Menu
    assert scores["fw_dup_line_char_frac"] == pytest.approx(4 / (len(text) - 4))
    assert scores["fw_newline_ratio"] == pytest.approx(4 / 15)   # 4 newlines, 15 words


def test_score_has_every_schema_column():
    from beam_pipeline.storage.schemas import HEURISTICS

    assert set(h.score(UDHR_EN, "en")) == {f.name for f in HEURISTICS} - {"doc_id", "source"}
