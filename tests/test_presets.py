"""Policy presets (beam_pipeline/filters/presets.py): the published rules without writing them out."""
from __future__ import annotations

import copy
import os

import pytest
import yaml

from beam_pipeline.config.corpus import ConfigError, parse_config
from beam_pipeline.filters import heuristics
from beam_pipeline.filters.presets import PRESETS, PRESET_NAMES, expand_presets, preset_rules
from beam_pipeline.scoring.cascade import plan_of
from tests.helpers import reference_fixture

SAMPLE_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample", "corpus.yaml")
SAMPLE_DIR = os.path.dirname(SAMPLE_CONFIG)


def sample_data() -> dict:
    with open(SAMPLE_CONFIG) as f:
        return yaml.safe_load(f)


def with_policy(**policy) -> dict:
    """The sample config with ``policy`` fields replaced (and no overrides unless given: the sample's
    refer to its own rules)."""
    data = sample_data()
    data["policy"] = {**data["policy"], "overrides": [], **policy}
    return data


HAND_WRITTEN_REFERENCE = [  # datatrove 0.10.1's defaults, as a user would copy them from its source
    {"reason": "gopher_too_few_words", "drop_if": "heuristics.ref_gopher_words < 50"},
    {"reason": "gopher_too_many_words", "drop_if": "heuristics.ref_gopher_words > 100000"},
    {"reason": "gopher_mean_word_length", "drop_if": "heuristics.ref_gopher_mean_word_length < 3 or "
                                                     "heuristics.ref_gopher_mean_word_length > 10"},
    {"reason": "gopher_hash_ratio", "drop_if": "heuristics.ref_gopher_hash_ratio > 0.1"},
    {"reason": "gopher_ellipsis_ratio", "drop_if": "heuristics.ref_gopher_ellipsis_ratio > 0.1"},
    {"reason": "gopher_bullet_lines", "drop_if": "heuristics.ref_gopher_bullet_lines > 0.9"},
    {"reason": "gopher_ellipsis_lines", "drop_if": "heuristics.ref_gopher_ellipsis_lines > 0.3"},
    {"reason": "gopher_alpha_words", "drop_if": "heuristics.ref_gopher_alpha_words < 0.8"},
    {"reason": "gopher_stop_words", "drop_if": "heuristics.ref_gopher_stop_words < 2"},
    {"reason": "gopher_dup_para_frac", "drop_if": "heuristics.ref_rep_dup_para_frac > 0.3"},
    {"reason": "gopher_dup_para_char_frac", "drop_if": "heuristics.ref_rep_dup_para_char_frac > 0.2"},
    {"reason": "gopher_dup_line_frac", "drop_if": "heuristics.ref_rep_dup_line_frac > 0.3"},
    {"reason": "gopher_dup_line_char_frac", "drop_if": "heuristics.ref_rep_dup_line_char_frac > 0.2"},
    {"reason": "gopher_top_2gram", "drop_if": "heuristics.ref_rep_top_2gram > 0.2"},
    {"reason": "gopher_top_3gram", "drop_if": "heuristics.ref_rep_top_3gram > 0.18"},
    {"reason": "gopher_top_4gram", "drop_if": "heuristics.ref_rep_top_4gram > 0.16"},
    {"reason": "gopher_dup_5gram", "drop_if": "heuristics.ref_rep_dup_5gram > 0.15"},
    {"reason": "gopher_dup_6gram", "drop_if": "heuristics.ref_rep_dup_6gram > 0.14"},
    {"reason": "gopher_dup_7gram", "drop_if": "heuristics.ref_rep_dup_7gram > 0.13"},
    {"reason": "gopher_dup_8gram", "drop_if": "heuristics.ref_rep_dup_8gram > 0.12"},
    {"reason": "gopher_dup_9gram", "drop_if": "heuristics.ref_rep_dup_9gram > 0.11"},
    {"reason": "gopher_dup_10gram", "drop_if": "heuristics.ref_rep_dup_10gram > 0.1"},
    {"reason": "c4_lorem_ipsum", "drop_if": "heuristics.ref_c4_lorem_ipsum"},
    {"reason": "c4_curly_bracket", "drop_if": "heuristics.ref_c4_curly_bracket"},
    {"reason": "c4_too_few_sentences", "drop_if": "heuristics.ref_c4_sentences < 5"},
    {"reason": "fineweb_line_punct", "drop_if": "heuristics.ref_fw_line_punct_ratio < 0.12"},
    {"reason": "fineweb_short_lines", "drop_if": "heuristics.ref_fw_short_line_ratio > 0.67"},
    {"reason": "fineweb_dup_line_chars", "drop_if": "heuristics.ref_fw_dup_line_char_frac > 0.01"},
    {"reason": "fineweb_newlines", "drop_if": "heuristics.ref_fw_newline_ratio > 0.3"},
]


@pytest.fixture(scope="module")
def scored():
    """Heuristics rows of 600 real documents (sample + Debian pages), language 'en'."""
    documents = reference_fixture.documents()[::9]
    return [{"heuristics": heuristics.score(d["text"], "en")} for d in documents]


def decisions(config, rows) -> list:
    """First reason per row, the cascade's other stages taken as having scored every document."""
    plan = plan_of(config)
    rows = [{**{plan.row_name(i): {} for i in range(len(plan.cascade))}, **row} for row in rows]
    source = config.sources[0].name
    return [plan.first_reason(source, row) for row in rows]


def test_presets_expand_to_the_rules_written_by_hand():
    own, overrides = sample_data()["policy"]["rules"], sample_data()["policy"]["overrides"]
    presets = parse_config(with_policy(presets=list(PRESET_NAMES), preset_definition="reference",
                                       overrides=overrides), base_dir=SAMPLE_DIR)
    by_hand = parse_config(with_policy(rules=HAND_WRITTEN_REFERENCE + own, overrides=overrides),
                           base_dir=SAMPLE_DIR)
    assert presets.policy == by_hand.policy
    assert presets.digest() == by_hand.digest()        # same layer keys, same dataset
    default = parse_config(with_policy(presets=list(PRESET_NAMES), overrides=overrides), base_dir=SAMPLE_DIR)
    assert default.policy == presets.policy            # reference is the default definition


def test_presets_keep_and_drop_like_the_hand_written_rules(scored):
    presets = parse_config(with_policy(rules=[], presets=list(PRESET_NAMES)), base_dir=SAMPLE_DIR)
    by_hand = parse_config(with_policy(rules=HAND_WRITTEN_REFERENCE), base_dir=SAMPLE_DIR)
    ours, theirs = decisions(presets, scored), decisions(by_hand, scored)
    assert ours == theirs
    assert 0 < sum(r is not None for r in ours) < len(ours)


def test_a_preset_rule_is_overridden_or_disabled_one_by_one(scored):
    rules = [{"reason": "gopher_stop_words", "drop_if": "heuristics.ref_gopher_stop_words < 4"},
             {"reason": "short_pages", "drop_if": "document.n_chars < 200"}]
    config = parse_config(with_policy(rules=rules, presets=[
        "gopher_quality", {"name": "fineweb", "disable": ["fineweb_dup_line_chars"]}]), base_dir=SAMPLE_DIR)
    reasons = [r.reason for r in config.policy.rules]
    assert reasons[8] == "gopher_stop_words"                                   # replaced in place
    assert config.policy.rules[8].drop_if == "heuristics.ref_gopher_stop_words < 4"
    assert "fineweb_dup_line_chars" not in reasons and "fineweb_newlines" in reasons
    assert reasons[-1] == "short_pages"                                        # own rules follow
    hand = [r for r in HAND_WRITTEN_REFERENCE[:9]] + [r for r in HAND_WRITTEN_REFERENCE[25:]
                                                        if r["reason"] != "fineweb_dup_line_chars"]
    hand[8] = rules[0]
    by_hand = parse_config(with_policy(rules=hand + rules[1:]), base_dir=SAMPLE_DIR)
    assert config.policy == by_hand.policy
    assert decisions(config, scored) == decisions(by_hand, scored)
    stricter = [r for r, loose in zip(decisions(config, scored), decisions(parse_config(
        with_policy(rules=rules[1:], presets=["gopher_quality", {"name": "fineweb", "disable": [
            "fineweb_dup_line_chars"]}]), base_dir=SAMPLE_DIR), scored)) if r != loose]
    assert stricter and set(stricter) <= {"gopher_stop_words"}   # 2 -> 4 distinct stop words drops more


def test_project_presets_use_the_project_columns_and_the_papers_thresholds():
    config = parse_config(with_policy(rules=[], presets=list(PRESET_NAMES), preset_definition="project"),
                          base_dir=SAMPLE_DIR)
    conditions = {r.reason: r.drop_if for r in config.policy.rules}
    assert conditions["gopher_stop_words"] == "heuristics.gopher_stop_words < 2"
    assert conditions["gopher_dup_5gram"] == "heuristics.rep_dup_5gram > 0.15"
    assert conditions["c4_too_few_sentences"] == "heuristics.c4_kept_lines < 5"
    assert conditions["fineweb_dup_line_chars"] == "heuristics.fw_dup_line_char_frac >= 0.1"
    assert not any("ref_" in c for c in conditions.values())
    mixed = parse_config(with_policy(rules=[], presets=["c4", {"name": "fineweb", "definition": "project"}]),
                         base_dir=SAMPLE_DIR)
    assert [r.drop_if for r in mixed.policy.rules][2:4] == ["heuristics.ref_c4_sentences < 5",
                                                            "heuristics.fw_line_punct_ratio <= 0.12"]
    for name in PRESET_NAMES:      # same reasons in both definitions, so overrides work for either
        assert [r for r, _ in PRESETS[name]["reference"]] == [r for r, _ in PRESETS[name]["project"]]


@pytest.mark.parametrize("policy,message", [
    ({"presets": ["gopher"]}, "policy.presets[0]: unknown preset 'gopher'; presets: gopher_quality"),
    ({"presets": [{"name": "c4", "definition": "datatrove"}]}, "definition 'datatrove' is not one of"),
    ({"presets": ["c4"], "preset_definition": "paper"}, "policy.preset_definition: 'paper' is not one of"),
    ({"presets": [{"name": "c4", "disable": ["c4_javascript"]}]}, "no rule named c4_javascript in this preset"),
    ({"presets": ["c4", "c4"]}, "each preset may appear once; repeated: c4"),
    ({"presets": [{"name": "c4", "thresholds": {}}]}, "unknown field(s) thresholds"),
    ({"presets": "c4"}, "policy.presets: a list of preset names"),
])
def test_preset_mistakes_are_config_errors(policy, message):
    with pytest.raises(ConfigError) as err:
        parse_config(with_policy(**policy), base_dir=SAMPLE_DIR, source_name="corpus.yaml")
    assert message in str(err.value)
    assert "corpus.yaml" in str(err.value)


def test_presets_need_the_heuristics_stage_and_its_definition():
    data = with_policy(rules=[], presets=["gopher_quality"])
    data["cascade"] = ["language"]
    with pytest.raises(ConfigError, match=r"\(gopher_too_few_words\) reads heuristics, which is not in cascade"):
        parse_config(data, base_dir=SAMPLE_DIR)
    data = with_policy(rules=[], presets=["gopher_quality"])
    data["heuristics"] = {"definitions": ["project"]}
    with pytest.raises(ConfigError, match=r"reads heuristics.ref_gopher_words of the reference definition, "
                                          r"but heuristics.definitions is \[project\]"):
        parse_config(data, base_dir=SAMPLE_DIR)
    data["heuristics"] = {"definitions": ["project"]}
    data["policy"]["preset_definition"] = "project"
    assert parse_config(data, base_dir=SAMPLE_DIR).heuristics.definitions == ["project"]


def test_presets_in_a_policy_file(tmp_path):
    (tmp_path / "policy.yaml").write_text("presets: [c4]\nrules:\n  - {reason: c4_too_few_sentences, "
                                          "drop_if: 'heuristics.ref_c4_sentences < 3'}\n")
    data = sample_data()
    data["policy"] = str(tmp_path / "policy.yaml")
    config = parse_config(data, base_dir=SAMPLE_DIR)
    assert [(r.reason, r.drop_if) for r in config.policy.rules] == [
        ("c4_lorem_ipsum", "heuristics.ref_c4_lorem_ipsum"), ("c4_curly_bracket", "heuristics.ref_c4_curly_bracket"),
        ("c4_too_few_sentences", "heuristics.ref_c4_sentences < 3")]


def test_expand_presets_leaves_other_policies_alone():
    policy = {"rules": [{"reason": "x", "drop_if": "heuristics.gopher_words < 5"}]}
    assert expand_presets(copy.deepcopy(policy)) == policy
    assert expand_presets("not a mapping") == "not a mapping"
    assert preset_rules("c4", "project")[2] == {"reason": "c4_too_few_sentences",
                                               "drop_if": "heuristics.c4_kept_lines < 5"}


def test_definitions_follow_the_policy_unless_the_config_says():
    assert parse_config(sample_data(), base_dir=SAMPLE_DIR).heuristics.definitions == ["project"]
    reference = parse_config(with_policy(rules=[], presets=["c4"]), base_dir=SAMPLE_DIR)
    assert reference.heuristics.definitions == ["project", "reference"]
    by_hand = parse_config(with_policy(rules=[{"reason": "few", "drop_if": "heuristics.ref_c4_sentences < 5"}]),
                           base_dir=SAMPLE_DIR)
    assert by_hand.heuristics.definitions == ["project", "reference"]
    in_override = with_policy(overrides=[{"source": "wikipedia", "rules": [
        {"reason": "few", "drop_if": "heuristics.ref_c4_sentences < 5"}]}])
    assert parse_config(in_override, base_dir=SAMPLE_DIR).heuristics.definitions == ["project", "reference"]
    project = parse_config(with_policy(rules=[], presets=["c4"], preset_definition="project"), base_dir=SAMPLE_DIR)
    assert project.heuristics.definitions == ["project"]
    explicit = with_policy(rules=[], presets=["c4"])
    explicit["heuristics"] = {"definitions": ["reference"]}
    assert parse_config(explicit, base_dir=SAMPLE_DIR).heuristics.definitions == ["reference"]
