"""Rules that could not judge a source because a score they read is null for all of it (scoring/null_scores.py).

Real builds (``cli.main(["run", ...])``, in-process runner) of 40 real documents
in two sources, the Gopher presets in the policy; the warnings are computed
from the ledgers the build wrote, as the console and the run report do.
"""
from __future__ import annotations

import glob
import json
import os

import markupsafe
import pyarrow.parquet as pq

from beam_pipeline.cli import commands as cli
from beam_pipeline.policy.config import RuleConfig
from beam_pipeline.policy.rules import Plan
from beam_pipeline.report.null_scores import null_score_warnings, warnings_from_ledgers
from tests.helpers import reference_fixture

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(REPO, "sample", "tokenizer", "tokenizer.json")
IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def write_corpus(tmp_path, cascade: str, extra: str = "") -> str:
    documents = reference_fixture.sample_documents()
    sources = {"wiki": [d for d in documents if d["kind"] == "wikipedia"][:20],
               "copyright": [d for d in documents if d["kind"] == "debian-copyright"][:20]}
    for name, docs in sources.items():
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "docs.jsonl", "w") as f:
            for d in docs:
                f.write(json.dumps({"id": d["id"], "text": d["text"]}) + "\n")
    config = tmp_path / "corpus.yaml"
    config.write_text(
        "name: null-scores\noutput_root: out\n"
        "sources:\n"
        "  - {name: wiki, uri: 'wiki/*.jsonl', format: jsonl, rank: 1, license: CC-BY-SA-3.0, domain: web}\n"
        "  - {name: copyright, uri: 'copyright/*.jsonl', format: jsonl, rank: 2, license: various, domain: legal}\n"
        "policy:\n  presets: [gopher_quality, gopher_repetition]\n"
        "  rules:\n    - {reason: long_lines, drop_if: 'heuristics.c4_short_lines < 0.01'}\n"
        f"cascade: {cascade}\n"
        f"tokenize: {{tokenizer: {TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n" + extra)
    return str(config)


def build(tmp_path, cascade: str, extra: str = "") -> dict:
    config = write_corpus(tmp_path, cascade, extra)
    root = str(tmp_path / "out")
    assert cli.main(["run", "--config", config, "--output_root", root, *IN_PROCESS]) == 0
    (manifest_path,) = glob.glob(os.path.join(root, "datasets", "*", "manifest.json"))
    ledgers = {}
    for path in glob.glob(os.path.join(root, "layers", "*", "*", "_LEDGER.json")):
        ledger = json.load(open(path))
        ledgers[ledger["stage"]] = ledger
    (report,) = glob.glob(os.path.join(root, "runs", "*", "report.html"))
    return {"root": root, "config": json.load(open(manifest_path))["config"], "ledgers": ledgers,
            "report": open(report, encoding="utf-8").read()}


def heuristics_rows_by_source(result) -> dict[str, int]:
    (layer,) = glob.glob(os.path.join(result["root"], "layers", "heuristics", "*"))
    counts: dict[str, int] = {}
    for part in glob.glob(os.path.join(layer, "annotations", "*.parquet")):
        for source in pq.read_table(part, columns=["source"]).column("source").to_pylist():
            counts[source] = counts.get(source, 0) + 1
    return counts


def test_stop_word_rule_without_language_is_a_warning_in_the_report(tmp_path):
    result = build(tmp_path, "[heuristics]")
    warnings = warnings_from_ledgers(result["config"], result["ledgers"])
    scored = heuristics_rows_by_source(result)
    assert scored and all(n > 0 for n in scored.values())
    assert [(w.source, w.rule, w.column, w.documents) for w in warnings] == [
        (source, "gopher_stop_words", "heuristics.ref_gopher_stop_words", scored[source])
        for source in sorted(scored)]
    assert "heuristics.default_language" in warnings[0].hint and "language before heuristics" in warnings[0].hint
    for warning in warnings:       # the run report lists them with its warnings
        assert str(markupsafe.escape(warning.message)) in result["report"]  # the page's Jinja2 autoescape
    # the same rule, column and counts from the config object the build loaded
    from beam_pipeline.config.corpus import load_config

    again = warnings_from_ledgers(load_config(os.path.join(tmp_path, "corpus.yaml")), result["ledgers"])
    assert again == warnings


def test_no_warning_when_the_language_stage_runs_first(tmp_path):
    result = build(tmp_path, "[language, heuristics]")
    warnings = warnings_from_ledgers(result["config"], result["ledgers"])
    assert warnings == []
    assert "could not judge" not in result["report"]


def test_default_language_gives_stop_words_without_language_identification(tmp_path):
    result = build(tmp_path, "[heuristics]", "heuristics: {default_language: en}\n")
    assert warnings_from_ledgers(result["config"], result["ledgers"]) == []


def test_warning_per_rule_column_and_source_from_histograms():
    rules = [RuleConfig(reason="few_stop_words", drop_if="heuristics.gopher_stop_words < 2"),
             RuleConfig(reason="bad", drop_if="safety.badword_ratio > 0.1 or heuristics.gopher_words < 10"),
             RuleConfig(reason="rank", keep_top=0.5, by="safety.badword_ratio")]
    plan = Plan(cascade=("language", "heuristics", "safety"), rules=rules, overrides=[],
                domains={"a": "web", "b": "web"})

    def summary(rows, null):
        return {"rows": rows, "null": null}

    histograms = {
        "heuristics": {"gopher_stop_words": {"by_source": {"a": summary(10, 10), "b": summary(5, 4)}},
                       "gopher_words": {"by_source": {"a": summary(10, 0), "b": summary(5, 0)}}},
        "safety": {"badword_ratio": {"by_source": {"a": summary(0, 0), "b": summary(5, 5)}}},
    }
    found = [(w.source, w.rule, w.column, w.documents)
             for w in null_score_warnings(plan, histograms, {"language_known": True})]
    assert found == [("a", "few_stop_words", "heuristics.gopher_stop_words", 10),
                     ("b", "bad", "safety.badword_ratio", 5),
                     ("b", "rank", "safety.badword_ratio", 5)]
    (first,) = [w for w in null_score_warnings(plan, histograms, {"language_known": True}) if w.source == "a"]
    assert first.message == ("rule 'few_stop_words' could not judge 10 documents of source 'a': "
                             "heuristics.gopher_stop_words is null for all of them "
                             "(no heuristics.stop_words list for the documents' language)")
