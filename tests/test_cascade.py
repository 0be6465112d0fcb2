"""The cascade: order validation, gates, absent scores for stopped documents (scoring/cascade.py, transforms/score.py)."""
import os

import pytest
import yaml

from beam_pipeline.storage import schemas
from beam_pipeline.scoring.cascade import plan_of, scoring_digest, select_config
from beam_pipeline.config.corpus import ConfigError, parse_config
from beam_pipeline.config.scorers import CascadeConfig, check_order
from beam_pipeline.transforms.score import Gate, PiiScorer, ScoreCascade
from beam_pipeline.transforms.layer_io import PartitionInputs
from conftest import SAMPLE_CONFIG, apply_policy, read_layer_rows, run_stage_job, write_layer_rows

SAMPLE_DIR = os.path.dirname(SAMPLE_CONFIG)


def sample_data():
    return yaml.safe_load(open(SAMPLE_CONFIG))


@pytest.mark.parametrize("order,message", [
    (["language", "tokenize", "decontamination"],
     "tokenize must be last in [language, tokenize, decontamination]: decontamination operate(s) on text"),
    (["language", "quality", "select", "pii"], "select must come after every scorer"),
    (["safety", "language"], "safety must come after language in [safety, language]: bad-word lists are per language"),
    (["pii", "pii"], "pii listed more than once"),
    (["language", "toxicity"], "unknown stage(s) 'toxicity'"),
])
def test_invalid_orders_are_rejected_with_the_reason(order, message):
    with pytest.raises(ValueError) as err:
        check_order(order)
    assert message in str(err.value)


def test_invalid_order_in_a_config_file_is_a_config_error():
    data = sample_data()
    data["cascade"] = ["pii", "tokenize", "decontamination"]
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir=SAMPLE_DIR, source_name="corpus.yaml")
    assert "cascade.stages" in str(err.value) and "tokenize must be last" in str(err.value)


def test_valid_orders_and_forms():
    assert CascadeConfig.model_validate(["language", "safety", "select", "tokenize"]).stages == ["language", "safety"]
    assert CascadeConfig.model_validate({"stages": ["pii"], "gate": False}).gate is False
    check_order(["pii", "quality", "decontamination", "tokenize"])   # cost order is free; only true dependencies


def test_stage_needs_what_it_uses():
    data = sample_data()
    data["quality"] = {}
    with pytest.raises(ConfigError, match="quality.model: required when quality is in the cascade"):
        parse_config(data, base_dir=SAMPLE_DIR)


def test_select_key_depends_on_policy_and_cascade_not_on_scorer_settings():
    config = parse_config(sample_data(), base_dir=SAMPLE_DIR)
    changed_policy = sample_data()
    changed_policy["policy"]["rules"][3]["drop_if"] = "quality.score < 0.2"
    other = parse_config(changed_policy, base_dir=SAMPLE_DIR)
    assert select_config(config) != select_config(other)
    assert scoring_digest(config) == scoring_digest(other)       # the same scores serve both policies
    changed_scorer = sample_data()
    changed_scorer["language"] = {"max_chars": 500}
    assert scoring_digest(parse_config(changed_scorer, base_dir=SAMPLE_DIR)) != scoring_digest(config)


# --- gates in a Beam job -------------------------------------------------------------

def documents():
    def doc(i, text, source="web"):
        return {"doc_id": f"d{i}", "source": source, "domain": "general", "url": None, "license": "L",
                "date": None, "n_chars": len(text), "text": text}
    return [doc(1, "Write to jane@example.org for details about the project."),
            doc(2, "Schreiben Sie an max@example.de für weitere Informationen."),
            doc(3, "A duplicate copy: write to jane@example.org for details."),
            doc(4, "ok")]


def config_with(rules, gate=True):
    data = sample_data()
    data["sources"] = [{"name": "web", "uri": "x/*.jsonl", "format": "jsonl", "rank": 1, "license": "L",
                        "domain": "general"}]
    data["cascade"] = {"stages": ["language", "pii"], "gate": gate}
    data["near_dedup"] = {"enabled": False}
    data["policy"] = {"min_chars": 3, "rules": rules}
    return parse_config(data, base_dir=SAMPLE_DIR)


def run_pii_stage(tmp_path, config, gate, expected_rows):
    exact = [{"doc_id": f"d{i}", "is_duplicate": i == 3} for i in range(1, 5)]
    language = [{"doc_id": "d1", "lang": "en"}, {"doc_id": "d2", "lang": "de"}, {"doc_id": "d3", "lang": "en"},
                {"doc_id": "d4", "lang": "en"}]
    layers = {}
    if gate is not None:
        layers["exact"] = (write_layer_rows(str(tmp_path / "exact"), exact), None)
        layers["language"] = (write_layer_rows(str(tmp_path / "language"), language), None)
    inputs = PartitionInputs.of(write_layer_rows(str(tmp_path / "documents"), documents()), None, layers)
    scorer = PiiScorer(config, cascade_before=("language",))
    ledger = run_stage_job(
        str(tmp_path / "out"), "pii",
        lambda p, layer: (p | ScoreCascade([(scorer, gate, layer.output_path("annotations"))], inputs))["pii"],
        {"annotations": schemas.PII, "dead_letter": schemas.DEAD_LETTER}, inputs.count, {"annotations": "passed"})
    rows = read_layer_rows(str(tmp_path / "out" / "layers" / "pii" / "test" / "annotations"))
    assert sorted((r["doc_id"], r["source"], r["email"]) for r in rows) == expected_rows
    return ledger["counts"]


def test_gate_stops_documents_before_the_expensive_stage(tmp_path):
    config = config_with([{"reason": "not_english", "drop_if": "language.lang != 'en'"},
                          {"reason": "has_email", "drop_if": "pii.email > 0"}])
    gate = Gate(config.policy, plan_of(config), index=1)
    # d2 not English, d3 a duplicate, d4 too short: only d1 reaches the scorer
    counts = run_pii_stage(tmp_path, config, gate, [("d1", "web", 1)])
    assert counts["in"] == 4 and counts["passed"] == 1
    assert counts["filtered"] == {"exact_duplicate": 1, "not_english": 1, "too_short": 1}
    # the rule over pii itself is not a gate of pii: it applies after the stage
    assert gate.reason({**documents()[0]}, {"language": {"lang": "en"}}) is None


def test_without_gates_every_document_is_scored(tmp_path):
    config = config_with([{"reason": "not_english", "drop_if": "language.lang != 'en'"}], gate=False)
    counts = run_pii_stage(tmp_path, config, None, [("d1", "web", 1), ("d2", "web", 1), ("d3", "web", 1), ("d4", "web", 0)])
    assert counts["passed"] == 4 and counts["filtered"] == {}


def test_stopped_documents_get_null_scores_at_select(tmp_path):
    """A document the gate stopped has no row: select sees None, never an invented score."""
    config = config_with([{"reason": "not_english", "drop_if": "language.lang != 'en'"},
                          {"reason": "has_email", "drop_if": "pii.email > 1"}])
    gold, decisions, _ = apply_policy(tmp_path, config.policy, documents(), {
        "exact": [{"doc_id": f"d{i}", "is_duplicate": i == 3} for i in range(1, 5)],
        "language": [{"doc_id": "d1", "lang": "en"}, {"doc_id": "d2", "lang": "de"},
                     {"doc_id": "d3", "lang": "en"}, {"doc_id": "d4", "lang": "en"}],
        "pii": [{"doc_id": "d1", "email": 1}]}, plan_of(config))
    assert sorted((d["doc_id"], d["reason"]) for d in decisions) == [
        ("d1", None), ("d2", "not_english"), ("d3", "exact_duplicate"), ("d4", "too_short")]
    assert [g["text"] for g in gold] == ["Write to jane@example.org for details about the project."]
