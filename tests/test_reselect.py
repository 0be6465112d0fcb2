"""Re-selection: `select --config C` applies a changed policy to existing scores without running a scorer."""
import glob
import json
import os

import pyarrow.parquet as pq
import pytest
import yaml

from beam_pipeline.cli import commands as cli
from beam_pipeline.transforms import score
from conftest import IN_PROCESS, REPO, dataset_id_from_output
from test_language import UDHR_FR

SCORERS = ("language", "quality")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Ten real paragraphs (Wikipedia prose, Debian license text) and one French one, as JSONL."""
    import pyarrow.parquet as pq_

    base = tmp_path_factory.mktemp("reselect")
    wiki = pq_.read_table(sorted(glob.glob(os.path.join(REPO, "sample/data/wikipedia/*.parquet")))[0],
                          columns=["text"]).column("text").to_pylist()
    prose = [next(p for p in t.split("\n\n") if len(p.split()) > 60) for t in wiki[:6]]
    legal = [open(os.path.join(REPO, "sample/data/debian-copyright", f)).read()[:1500]
             for f in ("bash.txt", "grep.txt", "gzip.txt", "tar.txt")]
    os.makedirs(base / "data")
    with open(base / "data" / "part-0.jsonl", "w") as f:
        for i, text in enumerate(prose + legal + [UDHR_FR * 3]):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")
    return base


def write_config(base, name, rules, floors=None):
    config = {
        "name": "reselect-test", "output_root": str(base / "out"),
        "sources": [{"name": "web", "uri": str(base / "data" / "*.jsonl"), "format": "jsonl", "rank": 1,
                     "license": "CC-BY-SA-3.0", "domain": "general"}],
        "cascade": list(SCORERS),
        "quality": {"model": os.path.join(REPO, "sample/models/quality.bin")},
        "policy": {"min_words": 3, "rules": rules, **({"floors": floors} if floors else {})},
        "tokenize": {"tokenizer": os.path.join(REPO, "sample/tokenizer/tokenizer.json"), "pad_token": "<|pad|>",
                     "seq_len": 64, "shard_tokens": 4096},
        "layout": {"min_partitions": 1},
    }
    path = base / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


RULES_A = [{"reason": "not_english", "drop_if": "language.lang != 'en'"},
           {"reason": "low_quality", "drop_if": "quality.score < 0.1"}]
# B tightens both: a new rule before every scorer (a gate of both) and a higher quality threshold
RULES_B = [{"reason": "short_doc", "drop_if": "document.n_chars < 400"},
           {"reason": "not_english", "drop_if": "language.lang != 'en'"},
           {"reason": "low_quality", "drop_if": "quality.score < 0.9"}]
# C loosens the language gate: the French document was never scored by quality
RULES_C = [{"reason": "low_quality", "drop_if": "quality.score < 0.1"}]


def decisions(root, select_key):
    rows = [r for p in glob.glob(os.path.join(root, "layers", "select", select_key, "decisions", "*.parquet"))
            for r in pq.read_table(p).to_pylist()]
    return {r["doc_id"]: r["reason"] for r in rows}


def ledger_state(root):
    return {p: os.stat(p).st_mtime_ns for stage in SCORERS
            for p in glob.glob(os.path.join(root, "layers", stage, "*", "**"), recursive=True)}


def stages_of_last_run(root):
    latest = max(glob.glob(os.path.join(root, "runs", "*", "metrics.json")), key=os.path.getmtime)
    return {s["name"]: s for s in json.load(open(latest))["stages"]}


def test_reselect_reuses_scores_and_matches_a_fresh_run(corpus, monkeypatch, capsys):
    root = str(corpus / "out")
    assert cli.main(["run", "--config", write_config(corpus, "a", RULES_A), *IN_PROCESS]) == 0
    capsys.readouterr()
    before = ledger_state(root)
    assert before

    def no_scoring(*args, **kwargs):
        raise AssertionError("a scorer ran during re-selection")

    for cls in (score.LanguageScorer, score.QualityScorer):
        monkeypatch.setattr(cls, "score", no_scoring)
        monkeypatch.setattr(cls, "load", no_scoring)
    config_b = write_config(corpus, "b", RULES_B)
    assert cli.main(["select", "--config", config_b, *IN_PROCESS]) == 0
    out = capsys.readouterr().out
    reselected_id = dataset_id_from_output(out)
    assert "[language] layer" in out and "from the scored build: reused" in out
    assert ledger_state(root) == before                    # no scorer layer written or touched
    stages = stages_of_last_run(root)
    assert all(stages[s]["reused"] for s in ("ingest", "exact_dedup", *SCORERS))
    assert not stages["select"]["reused"] and not any(
        name in stages["select"]["counts"].get("other", {}) for name in ("passed", "in"))
    reasons = decisions(root, stages["select"]["layer_key"])
    assert len(reasons) == 11 and {"low_quality", "short_doc", "not_english"} <= set(reasons.values())
    # the select layer's key depends on the policy and the annotation layer keys only
    ledger = json.load(open(os.path.join(root, "layers", "select", stages["select"]["layer_key"], "_LEDGER.json")))
    assert set(ledger["inputs"]) == {"documents", "exact", *SCORERS}
    assert ledger["inputs"]["quality"] == stages["quality"]["layer_key"]

    # a fresh build with policy B (its own output root) computes every scorer again, with the
    # tighter gates, and publishes exactly the same dataset
    monkeypatch.undo()
    fresh_root = str(corpus / "fresh")
    assert cli.main(["run", "--config", config_b, "--output_root", fresh_root, *IN_PROCESS]) == 0
    assert dataset_id_from_output(capsys.readouterr().out) == reselected_id
    fresh = stages_of_last_run(fresh_root)
    assert fresh["quality"]["counts"]["passed"] < stages["quality"]["counts"]["passed"]  # the gate saved work


def test_loosened_gate_reports_unscored_documents(corpus, capsys):
    root = str(corpus / "out")
    if not glob.glob(os.path.join(root, "scores", "*.json")):
        assert cli.main(["run", "--config", write_config(corpus, "a", RULES_A), *IN_PROCESS]) == 0
    assert cli.main(["select", "--config", write_config(corpus, "c", RULES_C), *IN_PROCESS]) == 0
    capsys.readouterr()
    stages = stages_of_last_run(root)
    reasons = decisions(root, stages["select"]["layer_key"])
    # the French document was stopped right after language ID under the old policy, so dedup (between language
    # and quality in the seed's cascade order) never saw it: never judged as unique, nor on an invented score
    assert list(reasons.values()).count("not_scored:exact_dedup") == 1
    assert not any(reason == "not_scored:quality" for reason in reasons.values())


def test_reselect_refuses_a_config_changed_beyond_the_policy(corpus, capsys):
    path = write_config(corpus, "d", RULES_A)
    data = yaml.safe_load(open(path))
    data["language"] = {"max_chars": 100}
    open(path, "w").write(yaml.safe_dump(data))
    assert cli.main(["select", "--config", path, *IN_PROCESS]) == 1
    assert "no scored build of this corpus config" in capsys.readouterr().err


def test_reselect_honours_floors(corpus, capsys):
    """`select` alone (no scorer runs) applies policy.floors: policy B drops most of the 11 documents, the floor
    keeps 9 of them, rescued best-first with reason floor:source=web, and the counts add up."""
    root = str(corpus / "out")
    if not glob.glob(os.path.join(root, "scores", "*.json")):
        assert cli.main(["run", "--config", write_config(corpus, "a", RULES_A), *IN_PROCESS]) == 0
    config = write_config(corpus, "floors", RULES_B, {"source": {"web": 0.8}, "by": "quality.score"})
    assert cli.main(["select", "--config", config, *IN_PROCESS]) == 0
    capsys.readouterr()
    stages = stages_of_last_run(root)
    counts = stages["select"]["counts"]
    reasons = decisions(root, stages["select"]["layer_key"])
    assert counts["in"] == 11 and counts["passed"] == 9
    assert counts["in"] == counts["passed"] + sum(counts["filtered"].values()) + counts["dead_letter"]
    rescued = [r for r in reasons.values() if r == "floor:source=web"]
    assert rescued and counts["other"]["floor:source=web"] == len(rescued)
