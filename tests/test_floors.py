"""Policy-level keep-rate floors (``policy.floors``, docs/policy.md): per source, domain or language slice,
whatever rule or dedup drops the documents, and floors derived from the mixture weights and a token budget."""
import math

import pytest

from beam_pipeline.config.corpus import ConfigError, parse_config
from beam_pipeline.policy.config import PolicyConfig
from conftest import apply_policy


def document(doc_id, text, source="web", domain="d"):
    return {"doc_id": doc_id, "source": source, "domain": domain, "license": "L", "url": None,
            "text": text, "n_chars": len(text)}


def reasons_of(decisions):
    return {d["doc_id"]: (d["kept"], d["reason"]) for d in decisions}


def balanced(counts):
    assert counts["in"] == counts["passed"] + sum(counts["filtered"].values()) + counts["dead_letter"]
    for c in counts["by_source"].values():
        assert c["in"] == c["passed"] + sum(c["filtered"].values()) + c["dead_letter"]


def test_a_threshold_rule_cannot_push_a_source_below_its_floor(tmp_path):
    """low_quality drops 8 of 10; the floor 0.5 rescues the 3 best-scored dropped documents, recorded as
    decisions with reason floor:source=web; the other source has no floor and keeps its drops."""
    from beam_pipeline.policy.config import RuleConfig
    from beam_pipeline.policy.rules import Plan

    docs = [document(f"w{i:02d}", f"web text number {i} " * 2) for i in range(10)] + \
        [document(f"o{i:02d}", f"other text number {i} " * 2, "other") for i in range(4)]
    quality = [{"doc_id": d["doc_id"], "score": int(d["doc_id"][1:]) / 10} for d in docs]
    rules = [RuleConfig(reason="low_quality", drop_if="quality.score < 0.8")]
    policy = PolicyConfig(min_chars=2, rules=rules, floors={"source": {"web": 0.5}, "by": "quality.score"})
    plan = Plan(cascade=("quality",), rules=rules, overrides=[], domains={"web": "d", "other": "d"})
    gold, decisions, counts = apply_policy(tmp_path, policy, docs, {"quality": quality}, plan, partitions=3)
    reasons = reasons_of(decisions)
    assert {g["doc_id"] for g in gold} == {"w08", "w09", "w05", "w06", "w07"}
    assert all(reasons[d] == (True, "floor:source=web") for d in ("w05", "w06", "w07"))
    assert reasons["w04"] == (False, "low_quality") and reasons["o03"] == (False, "low_quality")
    assert counts["passed"] == 5 and counts["filtered"] == {"low_quality": 9}
    assert counts["other"]["floor:source=web"] == 3
    balanced(counts)


def test_the_floor_rescues_documents_dropped_by_dedup_last(tmp_path):
    """Exact duplicates (a copy of a kept document) are rescued only after every other dropped document;
    among the others, fewer firing rules first, then doc_id."""
    from beam_pipeline.policy.config import RuleConfig
    from beam_pipeline.policy.rules import Plan

    docs = [document(f"a{i}", f"text number {i} here") for i in range(8)]
    exact = [{"doc_id": d["doc_id"], "content_hash": d["doc_id"], "duplicate_count": 1, "representative": d["doc_id"],
              "is_duplicate": False} for d in docs]
    for i in (0, 1, 2):  # a0..a2 are copies of a7
        exact[i] = {**exact[i], "duplicate_count": 4, "representative": "a7", "is_duplicate": True}
    # a3 fails both rules, a4 and a5 one each, a6 one, a7 none
    quality = [{"doc_id": d["doc_id"], "score": 0.0 if d["doc_id"] in ("a3", "a4", "a5", "a6") else 1.0} for d in docs]
    safety = [{"doc_id": d["doc_id"], "badword_count": 0, "badword_ratio": 1.0 if d["doc_id"] == "a3" else 0.0,
               "badword_lang": "en", "toxicity": None} for d in docs]
    rules = [RuleConfig(reason="low_quality", drop_if="quality.score < 0.5"),
             RuleConfig(reason="bad_words", drop_if="safety.badword_ratio > 0.5")]
    plan = Plan(cascade=("quality", "safety"), rules=rules, overrides=[], domains={"web": "d"})
    kept = {}
    for floor in (0.5, 0.625, 1.0):
        policy = PolicyConfig(min_chars=2, rules=rules, floors={"domain": {"d": floor}})
        gold, decisions, counts = apply_policy(tmp_path / str(floor), policy, docs,
                                               {"exact": exact, "quality": quality, "safety": safety}, plan)
        kept[floor] = {g["doc_id"] for g in gold}
        balanced(counts)
        assert counts["passed"] == math.ceil(floor * 8)
    assert kept[0.5] == {"a7", "a4", "a5", "a6"}               # one rule each, by doc_id
    assert kept[0.625] == kept[0.5] | {"a3"}                  # two rules, but not a duplicate
    assert len(kept[1.0]) == 8


def test_a_language_slice_keeps_its_floor(tmp_path):
    """language=de is a slice: the not_english rule would drop every German document."""
    from beam_pipeline.policy.config import RuleConfig
    from beam_pipeline.policy.rules import Plan

    docs = [document(f"e{i}", f"english text {i} words") for i in range(6)] + \
        [document(f"g{i}", f"deutscher text {i} worte") for i in range(4)]
    language = [{"doc_id": d["doc_id"], "lang": "en" if d["doc_id"][0] == "e" else "de", "confidence": 0.9,
                 "paragraph_share": 1.0, "paragraph_languages": 1} for d in docs]
    rules = [RuleConfig(reason="not_english", drop_if="language.lang != 'en'")]
    plan = Plan(cascade=("language",), rules=rules, overrides=[], domains={"web": "d"})
    policy = PolicyConfig(min_chars=2, rules=rules, floors={"language": {"de": 0.5}})
    gold, decisions, counts = apply_policy(tmp_path, policy, docs, {"language": language}, plan)
    assert {g["doc_id"] for g in gold} == {f"e{i}" for i in range(6)} | {"g0", "g1"}
    assert reasons_of(decisions)["g0"] == (True, "floor:language=de")
    balanced(counts)


def test_never_rescue_and_a_floor_that_cannot_be_met(tmp_path):
    """Documents dropped for a never_rescue reason stay dropped; the slice's shortfall is counted so that the
    report and the console warn."""
    from beam_pipeline.policy.config import RuleConfig
    from beam_pipeline.policy.rules import Plan
    from beam_pipeline.report.floors import floor_warnings

    docs = [document(f"c{i}", f"contaminated text {i} here") for i in range(4)]
    decon = [{"doc_id": d["doc_id"], "contaminated": True, "max_overlap": 1.0, "matched_eval": "x", "ngram_hits": 3}
             for d in docs]
    rules = [RuleConfig(reason="eval_contamination", drop_if="decontamination.contaminated")]
    plan = Plan(cascade=("decontamination",), rules=rules, overrides=[], domains={"web": "d"})
    policy = PolicyConfig(min_chars=2, rules=rules,
                          floors={"source": {"web": 0.5}, "never_rescue": ["eval_contamination"]})
    gold, _, counts = apply_policy(tmp_path, policy, docs, {"decontamination": decon}, plan)
    assert gold == []
    assert counts["other"]["floor_short:source=web"] == 2
    warnings = floor_warnings({"select": counts})
    assert len(warnings) == 1 and "source=web" in warnings[0] and "2 documents short" in warnings[0]


def test_floors_derived_from_the_mixture_and_the_token_budget(tmp_path):
    """Domain big (10 docs of 40 chars = 100 tokens at 4 chars per token) must supply 0.5 * 120 = 60 tokens:
    a floor of 0.6, so 6 documents; domain small (4 docs, 40 tokens) cannot supply 60: all are kept and the
    shortfall is reported."""
    from beam_pipeline.policy.config import RuleConfig
    from beam_pipeline.policy.rules import Plan
    from beam_pipeline.report.floors import floor_warnings

    docs = [document(f"b{i}", "x" * 36 + f"b{i:03d}", domain="big") for i in range(10)] + \
        [document(f"s{i}", "y" * 36 + f"s{i:03d}", "small", domain="small") for i in range(4)]
    quality = [{"doc_id": d["doc_id"], "score": 0.0} for d in docs]
    rules = [RuleConfig(reason="low_quality", drop_if="quality.score < 0.5")]
    plan = Plan(cascade=("quality",), rules=rules, overrides=[], domains={"web": "big", "small": "small"})
    policy = PolicyConfig(min_chars=2, min_words=0, rules=rules,
                          floors={"mixture": {"big": 1, "small": 1}, "target_tokens": 120, "chars_per_token": 4})
    gold, decisions, counts = apply_policy(tmp_path, policy, docs, {"quality": quality}, plan)
    kept = {g["doc_id"] for g in gold}
    assert {d for d in kept if d[0] == "b"} == {f"b{i}" for i in range(6)}
    assert {d for d in kept if d[0] == "s"} == {f"s{i}" for i in range(4)}
    assert reasons_of(decisions)["b0"] == (True, "floor:domain=big")
    assert counts["other"]["floor_tokens_short:domain=small"] == 20
    assert any("domain=small" in w and "60" in w for w in floor_warnings({"select": counts}))
    balanced(counts)


def config_data(floors, report=None):
    return {
        "name": "t", "output_root": "/tmp/out",
        "sources": [{"name": "web", "uri": "/tmp/x/*.jsonl", "format": "jsonl", "domain": "general", "rank": 1,
                     "license": "L"}],
        "policy": {"floors": floors},
        "report": report or {},
        "tokenize": {"tokenizer": "/tmp/tok.json"},
    }


def test_from_mixture_reads_the_report_mixture_and_budget():
    config = parse_config(config_data({"from_mixture": True},
                                      {"mixture": {"general": 2.0}, "target_tokens": 1000}))
    assert dict(config.policy.floors.mixture) == {"general": 2.0} and config.policy.floors.target_tokens == 1000
    with pytest.raises(ConfigError, match="target_tokens"):
        parse_config(config_data({"from_mixture": True}, {"mixture": {"general": 1.0}}))
    with pytest.raises(ConfigError, match="language"):
        parse_config(config_data({"language": {"de": 1.5}}))


def test_without_floors_the_select_layer_key_is_unchanged():
    """No floors section: select's config (hence its layer key and the dataset id) is today's."""
    from beam_pipeline.scoring.cascade import select_config

    config = parse_config(config_data(None))
    assert "floors" not in select_config(config)
    with_floors = parse_config(config_data({"source": {"web": 0.5}}))
    assert select_config(with_floors)["floors"]["source"] == {"web": 0.5}
