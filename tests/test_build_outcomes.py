"""What the policy does to real documents in a real build: PII redaction of the gold text, its counters,
blocklist drops and bad-word drops, recomputed from the layers with the filters' own functions."""
from __future__ import annotations

import collections
import glob
import os

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import load_config
from beam_pipeline.filters import pii, safety
from beam_pipeline.filters.blocklist import Blocklist
from conftest import IN_PROCESS, SAMPLE_CONFIG, read_layer_rows, tiny_corpus


def _layer(root: str, stage: str, output: str) -> list[dict]:
    (directory,) = glob.glob(os.path.join(root, "layers", stage, "*", output))
    return read_layer_rows(directory)


def test_gold_text_holds_no_pii_and_the_counters_count_each_replacement(built):
    redact = load_config(SAMPLE_CONFIG).policy.redact
    assert redact.enabled
    texts = {row["doc_id"]: row["text"] for row in _layer(built["root"], "ingest", "documents")}
    gold = _layer(built["root"], "select", "gold")
    tokens = {**pii.DEFAULT_TOKENS, **redact.tokens}
    replaced = collections.Counter()
    for row in gold:   # the gold text is the text after select's line removal, then redacted
        assert pii.detect(row["text"], redact.kinds) == [], row["doc_id"]
        for kind in redact.kinds:
            added = row["text"].count(tokens[kind]) - texts[row["doc_id"]].count(tokens[kind])
            assert added >= 0, (row["doc_id"], kind)
            replaced[f"redacted:{kind}"] += added
    replaced = +replaced
    counters = {k: v for k, v in built["stages"]["select"]["counts"]["other"].items() if k.startswith("redacted:")}
    assert counters == dict(replaced)
    assert sum(replaced.values()) > 100


def test_blocked_urls_are_dropped_and_no_gold_url_is_blocked(built):
    config = load_config(SAMPLE_CONFIG)
    blocklist = Blocklist.from_files(config.blocklist.domain_files, config.blocklist.url_substring_files)
    urls = {row["doc_id"]: row["url"] for row in _layer(built["root"], "ingest", "documents")}
    decisions = _layer(built["root"], "select", "decisions")
    blocked = [d["doc_id"] for d in decisions if d["reason"] == "blocked_url"]
    assert blocked and all(blocklist.match(urls[doc_id]) for doc_id in blocked)
    assert built["stages"]["select"]["counts"]["filtered"]["blocked_url"] == len(blocked)
    assert not [row["url"] for row in _layer(built["root"], "select", "gold") if blocklist.match(row["url"])]


def test_bad_words_above_the_ratio_are_dropped(tmp_path):
    word = safety.builtin_words("en")[0]
    clean = "The committee met on Tuesday to review the annual budget and the plans for the new library."
    texts = [clean, f"{clean} {word} {word} and {word} again.", clean.replace("Tuesday", "Friday")]
    config = tiny_corpus(tmp_path, "badwords", texts, extra_yaml=(
        "cascade: [language, safety]\n"
        "policy: {min_chars: 10, rules: [{reason: bad_words, drop_if: 'safety.badword_ratio > 0.005'}]}\n"))
    config_text = open(config).read().replace("cascade: [heuristics]\n", "", 1)
    open(config, "w").write(config_text)
    root = str(tmp_path / "out")
    assert cli.main(["run", "--config", config, "--output_root", root, *IN_PROCESS]) == 0
    decisions = {d["doc_id"]: d["reason"] for d in _layer(root, "select", "decisions")}
    documents = {row["doc_id"]: row["text"] for row in _layer(root, "ingest", "documents")}
    dropped = {documents[doc_id] for doc_id, reason in decisions.items() if reason == "bad_words"}
    assert dropped == {texts[1]}
    assert len([r for r in decisions.values() if r is None]) == 2
