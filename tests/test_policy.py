from beam_pipeline.policy.config import PolicyConfig
from beam_pipeline.policy.decision import count_words, decide

DOC = {"n_chars": 40, "text": "A sentence with exactly seven words here."}


def test_keep_by_default():
    assert decide(DOC, None, PolicyConfig()) is None


def test_exact_duplicate_first():
    exact = {"is_duplicate": True}
    assert decide(DOC, exact, PolicyConfig(min_chars=1000)) == "exact_duplicate"
    assert decide(DOC, exact, PolicyConfig(drop_exact_duplicates=False)) is None
    assert decide(DOC, {"is_duplicate": False}, PolicyConfig()) is None


def test_length_bounds_and_words():
    assert decide(DOC, None, PolicyConfig(min_chars=41)) == "too_short"
    assert decide(DOC, None, PolicyConfig(max_chars=39)) == "too_long"
    assert decide(DOC, None, PolicyConfig(min_words=8)) == "too_few_words"
    assert decide(DOC, None, PolicyConfig(min_words=7)) is None


def test_count_words():
    assert count_words("") == 0
    assert count_words("one") == 1
    assert count_words(" a  b\n\tc ") == 3
    assert count_words("a b c d e", stop_at=2) == 3  # stops splitting early: enough to compare
