"""``diff`` of two real builds that differ in their policy, and of synthetic manifests."""
import copy
import io
import json
import os
import shutil
from contextlib import redirect_stdout

import pytest
import yaml

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import load_config
from beam_pipeline.dataset.diff import changed_paths, diff_manifests, flatten, format_diff, is_same
from conftest import IN_PROCESS, SAMPLE_CONFIG, dataset_id_from_output


@pytest.fixture(scope="module")
def stricter(built, tmp_path_factory):
    """The sample rebuilt with policy.min_words = 100 and no scoring cascade, reusing the earlier layers.

    Dropping the cascade (and the policy rules over its scores) keeps this second build to select and
    tokenize: any policy change would otherwise re-run every gated scorer.
    """
    base = tmp_path_factory.mktemp("stricter")
    root = base / "out"
    for folder in ("layers", "dead_letter"):  # select/tokenize keys will differ; the rest is reused
        if os.path.isdir(os.path.join(built["root"], folder)):
            shutil.copytree(os.path.join(built["root"], folder), root / folder)
    config = load_config(SAMPLE_CONFIG).model_dump(mode="json")
    config["policy"]["min_words"] = 100
    config["policy"].update({k: [] for k in ("rules", "overrides") if k in config["policy"]})
    if isinstance(config.get("cascade"), dict):
        config["cascade"]["stages"] = []
    elif "cascade" in config:
        config["cascade"] = []
    if isinstance(config.get("decontamination"), dict) and "index" in config["decontamination"]:
        config["decontamination"]["index"] = False
    config["output_root"] = str(root)
    path = base / "corpus.yaml"
    path.write_text(yaml.safe_dump(config))
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["run", "--config", str(path), "--output_root", str(root), *IN_PROCESS]) == 0
    assert "[ingest] layer" in out.getvalue() and "reused" in out.getvalue()
    return str(root / "datasets" / dataset_id_from_output(out.getvalue()))


def test_two_builds_differ_in_config_counts_and_shards(built, stricter, capsys):
    assert cli.main(["diff", built["dataset"], stricter]) == 1
    out = capsys.readouterr().out
    assert f"policy.min_words: {built['manifest']['config']['policy']['min_words']} -> 100" in out
    assert "output_root" in out and "not in config_digest" in out
    assert "filtered:too_few_words" in out
    d = diff_manifests(built["manifest"], _manifest(stricter))
    changed = {s["stage"]: s for s in d["stages"]}
    assert changed["select"]["config_changed"] and "tokenize" in changed
    assert all(s["version"][0] == s["version"][1] for s in d["stages"] if "version" in s)  # same code
    assert "ingest" not in changed
    # dedup is gated in the cascade: its gate holds the length rules, so a changed min_words recomputes it
    assert changed["exact_dedup"]["config_changed"]
    metrics = {(c["stage"], c["source"], c["metric"]) for c in d["counts"]}
    assert ("select", "total", "filtered:too_few_words") in metrics
    assert any(source != "total" for stage, source, _ in metrics if stage == "select")  # per source too
    assert not any(c["stage"] == "ingest" for c in d["counts"])
    assert ("exact_dedup", "total", "filtered:too_few_words") in metrics
    sh = d["shards"]
    assert sh["changed"] or sh["added"] or sh["removed"]
    assert d["totals"]["documents"][1] != d["totals"]["documents"][0]


def test_a_dataset_equals_itself(built, capsys):
    assert cli.main(["diff", built["dataset"], built["dataset"]]) == 0
    assert "0 differ" in capsys.readouterr().out


def test_stage_versions_and_takedown_relation():
    a = {"dataset_id": "a", "snapshot_id": "s", "config_digest": "c", "seq_len": 8, "tokenizer": {"sha256": "t"},
         "config": {"sources": [{"name": "x", "rank": 1}], "policy": {"min_words": 1}},
         "stages": [{"name": "ingest", "version": "1", "layer_key": "k1", "config_digest": "d",
                     "counts": {"in": 3, "passed": 3, "filtered": {}, "dead_letter": 0, "by_source": {}}}],
         "shards": [{"name": "docs-0", "leaf": "l0", "documents": 3, "tokens": 30, "sequences": 4},
                    {"name": "docs-1", "leaf": "l1", "documents": 3, "tokens": 30, "sequences": 4}]}
    b = copy.deepcopy(a)
    b.update(dataset_id="b", previous_dataset_id="a", tombstones=[{"doc_id": "x", "reason": "r"}])
    b["stages"][0].update(version="2", layer_key="k2")
    b["config"]["sources"][0]["rank"] = 2
    b["shards"][1]["leaf"] = "l1b"
    b["shards"].append({"name": "code-0", "leaf": "l2", "documents": 1, "tokens": 5, "sequences": 1})
    d = diff_manifests(a, b)
    assert d["stages"][0]["version"] == ["1", "2"]
    assert d["config"] == [{"path": "sources[x].rank", "a": 1, "b": 2}]
    assert d["shards"] == {"added": ["code-0"], "removed": [], "changed": ["docs-1"], "unchanged": 1}
    assert d["relation"] == "B is a takedown of A" and not is_same(d)
    assert "version 1 -> 2" in format_diff(d)


def test_flatten_and_changed_paths():
    assert flatten({"a": {"b": [1, {"c": 2}]}, "s": [{"name": "n", "v": 1}], "w": ["x", "y"]}) == \
        {"a.b[0]": 1, "a.b[1].c": 2, "s[n].v": 1, "w": ["x", "y"]}
    assert changed_paths({"a": 1, "b": 2}, {"a": 1, "c": 3}) == [("b", 2, "<absent>"), ("c", "<absent>", 3)]


def _manifest(path):
    return json.load(open(os.path.join(path, "manifest.json")))


PORTABLE_TEXTS = [f"Document number {i} talks about the weather, the river and the town library. " * 6
                  for i in range(12)] + ["The eval question about the seven bridges of the old town and its river."]


def _checkout(folder, sample_tokenizer: str) -> str:
    """A config with its data, lists, eval set and tokenizer beside it, all named by relative paths."""
    for sub in ("data", "lists", "evals", "tok"):
        (folder / sub).mkdir(parents=True)
    with open(folder / "data" / "docs.jsonl", "w") as f:
        for i, text in enumerate(PORTABLE_TEXTS):
            f.write(json.dumps({"id": str(i), "text": text, "url": f"https://site{i % 3}.example/{i}"}) + "\n")
    (folder / "lists" / "domains.txt").write_text("site2.example\n")
    (folder / "evals" / "ev.jsonl").write_text(json.dumps({"text": "seven bridges of the old town and its"}) + "\n")
    shutil.copy(sample_tokenizer, folder / "tok" / "tokenizer.json")
    config = folder / "corpus.yaml"
    config.write_text(
        "name: portable\noutput_root: out\n"
        "sources: [{name: docs, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}]\n"
        "cascade: [heuristics, blocklist, decontamination]\n"
        "blocklist: {domain_files: [lists/domains.txt]}\n"
        "decontamination: {ngram: 5, evalsets: [{name: ev, path: evals/ev.jsonl}]}\n"
        "policy: {rules: [{reason: blocked_url, drop_if: blocklist.blocked},"
        " {reason: eval_contamination, drop_if: decontamination.contaminated}]}\n"
        "tokenize: {tokenizer: tok/tokenizer.json, seq_len: 256, shard_tokens: 65536}\n")
    return str(config)


def test_the_same_build_from_two_checkouts_is_the_same(tmp_path, capsys):
    """manifest.json names no path of the machine it was built on: two folders, one build, `diff` says same."""
    from conftest import SAMPLE_TOKENIZER

    datasets = []
    for name in ("checkout-a", "elsewhere/checkout-b"):
        config = _checkout(tmp_path / name, SAMPLE_TOKENIZER)
        out = io.StringIO()
        with redirect_stdout(out):
            assert cli.main(["run", "--config", config, *IN_PROCESS]) == 0
        datasets.append(os.path.join(os.path.dirname(config), "out", "datasets", dataset_id_from_output(out.getvalue())))
    a, b = (_manifest(d) for d in datasets)
    assert a["dataset_id"] == b["dataset_id"]
    text = json.dumps(a)
    assert str(tmp_path) not in text, [k for k, v in flatten(a).items() if str(tmp_path) in json.dumps(v)]
    assert a["config"]["sources"][0]["uri"] == "data/*.jsonl" and a["tokenizer"]["path"] == "tok/tokenizer.json"
    assert a["config"]["blocklist"]["domain_files"] == ["lists/domains.txt"]
    assert a["config"]["decontamination"]["evalsets"][0]["path"] == "evals/ev.jsonl"
    capsys.readouterr()
    assert cli.main(["diff", *datasets]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "config (0 key paths differ)" in out and "stage versions (0 differ)" in out
    # trace still decodes the token's context: the tokenizer is found beside the config, by the document's file
    from beam_pipeline.dataset.lineage import trace_token

    shard = b["shards"][0]
    trace = trace_token(datasets[1], shard["name"], 3)
    assert trace.kind == "document" and trace.context and "[[" in trace.context
