"""The policy rule language (policy/conditions.py, policy/config.py, policy/rules.py): parsing, errors, three-valued logic, ordering, overrides."""
import pytest
import yaml

from beam_pipeline.config.corpus import ConfigError, parse_config
from beam_pipeline.policy.conditions import RuleError, parse_condition
from beam_pipeline.policy.config import PolicyConfig, RuleConfig
from beam_pipeline.policy.rules import Plan
from conftest import SAMPLE_CONFIG

COLUMNS = {"quality": {"score": "number"}, "language": {"lang": "string", "confidence": "number"},
           "decontamination": {"contaminated": "bool"}, "document": {"source": "string", "n_chars": "number"}}


def test_comparisons_and_boolean_logic():
    c = parse_condition("quality.score < 0.3 or (language.lang != 'en' and not decontamination.contaminated)",
                        COLUMNS)
    assert c.layers == {"quality", "language", "decontamination"}
    rows = {"quality": {"score": 0.5}, "language": {"lang": "fr"}, "decontamination": {"contaminated": False}}
    assert c.evaluate(rows) is True
    rows["language"]["lang"] = "en"
    assert c.evaluate(rows) is False


def test_in_is_null_and_bare_flags():
    assert parse_condition("language.lang in ['fr', \"de\"]", COLUMNS).evaluate({"language": {"lang": "de"}})
    assert parse_condition("language.lang not in ['fr']", COLUMNS).evaluate({"language": {"lang": "en"}})
    assert parse_condition("quality.score is null", COLUMNS).evaluate({"quality": {"score": None}}) is True
    assert parse_condition("quality.score is not null", COLUMNS).evaluate({}) is False
    assert parse_condition("decontamination.contaminated == true", COLUMNS).evaluate(
        {"decontamination": {"contaminated": True}}) is True
    assert parse_condition("quality.score >= -1e-3", COLUMNS).evaluate({"quality": {"score": 0}}) is True


def test_absent_scores_are_unknown_and_never_drop():
    c = parse_condition("quality.score < 0.3", COLUMNS)
    assert c.evaluate({}) is None                              # the layer never saw the document
    assert c.evaluate({"quality": {"score": None}}) is None    # undefined score
    assert parse_condition("not quality.score < 0.3", COLUMNS).evaluate({}) is None
    # Kleene: unknown or true = true, unknown and false = false
    assert parse_condition("quality.score < 0.3 or language.lang == 'fr'", COLUMNS).evaluate(
        {"language": {"lang": "fr"}}) is True
    assert parse_condition("quality.score < 0.3 and language.lang == 'fr'", COLUMNS).evaluate(
        {"language": {"lang": "en"}}) is False


@pytest.mark.parametrize("expression,message,column", [
    ("quality.scor < 0.3", "layer 'quality' has no column 'scor'; it has: score", 1),
    ("qualty.score < 0.3", "unknown layer 'qualty'", 1),
    ("score < 0.3", "'score' is not <layer>.<column>", 1),
    ("quality.score <", "expected a number to compare quality.score with, got the end", 16),
    ("quality.score < 'high'", "quality.score is a number column; got a string", 17),
    ("language.lang < 3", "language.lang is a string column: only == and != apply", 15),
    ("quality.score = 0.3", "unexpected character '=' (compare with '==')", 15),
    ("quality.score < 0.3 junk", "unexpected 'junk'", 21),
    ("(quality.score < 0.3", "expected ')'", 21),
    ("quality.score", "quality.score is a number column: compare it", 14),
    ("", "empty condition", 1),
    ("quality.score < 0.3; import os", "unexpected character ';'", 20),
    ("__import__('os').system('x')", "unexpected character '.'", 17),
])
def test_errors_point_at_the_problem(expression, message, column):
    with pytest.raises(RuleError) as err:
        parse_condition(expression, COLUMNS)
    assert message in str(err.value)
    assert f"at column {column}:" in str(err.value)
    assert str(err.value).splitlines()[-1].index("^") - 6 == column - 1   # the caret is under it


def _sample_with_policy(policy_patch: dict, tmp_path) -> str:
    data = yaml.safe_load(open(SAMPLE_CONFIG))
    data["policy"] = {**data["policy"], **policy_patch}
    return data


def test_config_errors_name_the_rule(tmp_path):
    import os

    data = yaml.safe_load(open(SAMPLE_CONFIG))
    data["policy"]["rules"][3] = {"reason": "low_quality", "drop_if": "quality.scroe < 0.1"}
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir=os.path.dirname(SAMPLE_CONFIG), source_name="corpus.yaml")
    text = str(err.value)
    assert "policy.rules[3].drop_if" in text and "no column 'scroe'" in text and "^" in text


@pytest.mark.parametrize("rule,message", [
    ({"reason": "Low Quality", "drop_if": "quality.score < 0.1"}, "lowercase letters"),
    ({"reason": "exact_duplicate", "drop_if": "quality.score < 0.1"}, "built-in reason"),
    ({"reason": "x"}, "give either drop_if"),
    ({"reason": "x", "keep_top": 0.5}, "keep_top needs by"),
    ({"reason": "x", "keep_top": 0.5, "by": "language.lang"}, "a number is needed"),
    ({"reason": "x", "keep_top": 1.5, "by": "quality.score"}, "less than or equal to 1"),
    ({"reason": "x", "drop_if": "quality.score < 1", "floor": 0.5}, "belong to keep_top rules"),
    ({"reason": "x", "drop_if": "quality.score < 1", "dropif": "y"}, "unknown field"),
])
def test_rule_validation(rule, message):
    import os

    data = yaml.safe_load(open(SAMPLE_CONFIG))
    data["policy"]["rules"].append(rule)
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir=os.path.dirname(SAMPLE_CONFIG))
    assert message in str(err.value)


@pytest.mark.parametrize("patch,message", [
    ({"rules": [{"reason": "a", "drop_if": "quality.score < 1"}, {"reason": "a", "drop_if": "quality.score < 2"}]},
     "repeated: a"),
    ({"overrides": [{"source": "nope", "disable": []}]}, "unknown source 'nope'"),
    ({"overrides": [{"domain": "legal", "disable": ["missing"]}]}, "no rule named missing"),
    ({"overrides": [{"domain": "legal", "source": "wikipedia"}]}, "exactly one of source: or domain:"),
    ({"rules": [{"reason": "tox", "drop_if": "safety.toxicity > 0.5"}], "overrides": []},
     "safety.toxicity_model is not set"),
])
def test_cross_checks(patch, message):
    import os

    data = yaml.safe_load(open(SAMPLE_CONFIG))
    data["policy"].update(patch)
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir=os.path.dirname(SAMPLE_CONFIG))
    assert message in str(err.value)


def test_rule_reading_a_layer_outside_the_cascade_is_rejected():
    import os

    data = yaml.safe_load(open(SAMPLE_CONFIG))
    data["cascade"] = ["language", "heuristics"]
    data["policy"]["rules"] = [{"reason": "low_quality", "drop_if": "quality.score < 0.1"}]
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir=os.path.dirname(SAMPLE_CONFIG))
    assert "policy.rules[0] (low_quality) reads quality, which is not in cascade [language, heuristics]" in str(err.value)


def test_policy_file_referenced_by_the_config(tmp_path):
    import os

    data = yaml.safe_load(open(SAMPLE_CONFIG))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"min_words": 7, "rules": [{"reason": "low_quality",
                                                                 "drop_if": "quality.score < 0.2"}]}))
    data["policy"] = str(policy)
    config = parse_config(data, base_dir=os.path.dirname(SAMPLE_CONFIG))
    assert config.policy.min_words == 7 and config.policy.rules[0].reason == "low_quality"
    data["policy"] = str(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="cannot read the policy file"):
        parse_config(data, base_dir=os.path.dirname(SAMPLE_CONFIG))


# --- ordering, gates and overrides -------------------------------------------------

def plan(rules, overrides=(), cascade=("language", "quality")):
    return Plan(cascade=tuple(cascade), rules=[RuleConfig(**r) for r in rules],
                overrides=[__import__("beam_pipeline.policy.config", fromlist=["OverrideConfig"]).OverrideConfig(**o)
                           for o in overrides],
                domains={"web": "general", "wiki": "encyclopedic", "law": "legal"})


RULES = [{"reason": "low_quality", "drop_if": "quality.score < 0.3"},
         {"reason": "not_english", "drop_if": "language.lang != 'en'"},
         {"reason": "tiny", "drop_if": "document.n_chars < 10"}]


def test_rules_run_in_cascade_order_then_file_order():
    p = plan(RULES)
    assert [r.reason for r in p.rules_for("web")] == ["tiny", "not_english", "low_quality"]
    rows = {"document": {"n_chars": 5}, "language": {"lang": "fr"}, "quality": {"score": 0.1}}
    assert p.first_reason("web", rows) == "tiny"
    rows["document"]["n_chars"] = 50
    assert p.first_reason("web", rows) == "not_english"       # language comes before quality
    assert p.first_reason("web", rows, upto=1) == "not_english"
    rows["language"]["lang"] = "en"
    assert p.first_reason("web", rows, upto=1) is None       # the gate before quality
    assert p.first_reason("web", rows) == "low_quality"


def test_a_stage_that_never_saw_a_document_drops_it_as_not_scored():
    p = plan(RULES)
    rows = {"document": {"n_chars": 50}, "language": {"lang": "en"}}   # no quality row
    assert p.first_reason("web", rows) == "not_scored:quality"
    assert p.first_reason("web", rows, upto=1) is None


def test_overrides_source_beats_domain():
    p = plan(RULES, overrides=[
        {"domain": "legal", "disable": ["low_quality"]},
        {"source": "law", "rules": [{"reason": "low_quality", "drop_if": "quality.score < 0.05"}]},
        {"domain": "encyclopedic", "rules": [{"reason": "stubby", "drop_if": "document.n_chars < 100"}]},
    ])
    rows = {"document": {"n_chars": 50}, "language": {"lang": "en"}, "quality": {"score": 0.1}}
    assert p.first_reason("law", rows) is None                 # source override replaced the threshold
    assert p.first_reason("web", rows) == "low_quality"
    assert p.first_reason("wiki", rows) == "stubby"             # added rule for the domain


def test_rule_scope_by_source_and_domain():
    p = plan([{"reason": "low_quality", "drop_if": "quality.score < 0.3", "sources": ["web"]},
              {"reason": "short_law", "drop_if": "document.n_chars < 100", "domains": ["legal"]}])
    rows = {"document": {"n_chars": 50}, "language": {"lang": "en"}, "quality": {"score": 0.1}}
    assert p.first_reason("web", rows) == "low_quality"
    assert p.first_reason("wiki", rows) is None
    assert p.first_reason("law", rows) == "short_law"


def test_gate_spec_only_covers_rules_before_the_stage():
    p = plan(RULES)
    assert p.gate_spec(0) == {s: [("tiny", "document.n_chars < 10", -1)] for s in ("law", "web", "wiki")}
    assert [r[0] for r in p.gate_spec(1)["web"]] == ["tiny", "not_english"]
    assert p.layers_read(1) == {"language": {"lang"}}


def test_builtin_rules_keep_working():
    from beam_pipeline.policy.decision import decide

    document = {"n_chars": 40, "text": "A sentence with exactly seven words here."}
    assert decide(document, {"is_duplicate": True}, PolicyConfig()) == "exact_duplicate"
    assert decide(document, None, PolicyConfig(min_words=8)) == "too_few_words"
