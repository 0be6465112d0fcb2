"""The run report: its numbers equal the run's metrics, ledgers and layers; compare; CLI."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.records.hashing import stable_hash64
from beam_pipeline.storage.layers import Layer, commit_layer, write_partition
from beam_pipeline.report import locate, write_compare, write_report
from beam_pipeline.report.compare import compare, compare_data
from beam_pipeline.report.annotation_scores import thresholds_for
from beam_pipeline.report.drop_samples import SAMPLE_TEXT_CHARS
from beam_pipeline.report.gather import gather
from beam_pipeline.report.mixture import token_budget
from beam_pipeline.report.stage_counts import stage_flow


@pytest.fixture(scope="module")
def run_dir(built):
    return os.path.join(built["root"], "runs", built["metrics"]["run_id"])


@pytest.fixture(scope="module")
def data(run_dir):
    return gather(locate(run_dir))


def ledger(root: str, stage: dict) -> dict:
    return json.load(open(os.path.join(root, "layers", stage["name"], stage["layer_key"], "_LEDGER.json")))


# --- numbers come from the run ------------------------------------------------

def test_run_writes_its_report(built, run_dir, tmp_path):
    path = os.path.join(run_dir, "report.html")
    assert os.path.getsize(path) > 10_000
    page = open(path, encoding="utf-8").read()
    assert built["metrics"]["dataset_id"] in page and built["metrics"]["run_id"] in page
    # the job draws the plots in parallel tasks (transforms/publish.py: WriteReport); `report` draws them one
    # after another: the same bytes
    again = write_report(run_dir, output=str(tmp_path / "again.html"))
    assert open(again, encoding="utf-8").read() == page


def test_stage_counts_are_the_metrics(built, data):
    assert [s["name"] for s in data["stages"]] == [s["name"] for s in built["metrics"]["stages"]]
    for mine, theirs in zip(data["stages"], built["metrics"]["stages"]):
        c = theirs["counts"]
        assert (mine["in"], mine["passed"], mine["filtered"], mine["dead_letter"]) == \
               (c["in"], c["passed"], c["filtered"], c["dead_letter"])
        assert mine["layer_key"] == theirs["layer_key"] and mine["version"] == theirs["version"]
        for source, counts in c["by_source"].items():
            assert mine["by_source"][source]["filtered"] == counts["filtered"]
            assert mine["by_source"][source]["in"] == counts["in"]


def test_drops_by_source_add_up_to_the_metrics(built, data):
    """Only stages that remove records from the flow drop them (the next stage reads what they passed)."""
    stages = built["metrics"]["stages"]
    expected: dict = {}
    for stage, following in zip(stages, stages[1:] + [None]):
        c = stage["counts"]
        if following is not None and following["counts"]["in"] != c["passed"]:
            assert following["counts"]["in"] == c["in"]  # a scoring stage: its "filtered" were only not scored
            continue
        for source, counts in c["by_source"].items():
            for reason, n in counts["filtered"].items():
                expected.setdefault(source, {})[f"{stage['name']}:{reason}"] = n
    actual = {s: {r: n for r, n in per.items()} for s, per in data["drops_by_source"].items() if per}
    assert actual == {s: per for s, per in expected.items() if per}
    first, last = stages[0]["counts"]["by_source"], stages[-1]["counts"]["by_source"]
    for source, per in actual.items():
        assert sum(per.values()) == first[source]["in"] - last.get(source, {}).get("passed", 0)
    # the sample has verbatim repeats (ingest) and cross-source exact duplicates (select)
    assert data["drops_by_source"]["python-docs-mirror"] == {"select:exact_duplicate": 51} == {
        "select:exact_duplicate": built["stages"]["select"]["counts"]["by_source"]["python-docs-mirror"]["filtered"][
            "exact_duplicate"]}


def test_funnel_documents_are_exact_and_tokens_end_at_the_dataset(built, data):
    steps = data["funnel"]["steps"]
    stages = built["metrics"]["stages"]
    assert steps[0]["documents"] == stages[0]["counts"]["in"]
    assert [s["documents"] for s in steps[1:]] == [s["counts"]["in"] for s in stages[1:]] + [
        stages[-1]["counts"]["passed"]]
    scorers = built["manifest"]["config"]["cascade"]["stages"]
    assert [s["scored"] for s in steps[1:]] == [s["counts"]["passed"] if s["name"] in scorers else None for s in stages]
    manifest_tokens = sum(s["tokens"] for s in built["manifest"]["shards"])
    assert steps[-1]["tokens"] == manifest_tokens and not steps[-1]["estimated"]
    tokens = [s["tokens"] for s in steps]
    assert tokens == sorted(tokens, reverse=True)
    assert steps[0]["estimated"] and steps[0]["tokens"] > manifest_tokens  # drops before tokenize cost tokens


def test_tokens_per_bucket_and_source_are_the_manifests(built, data):
    shards = built["manifest"]["shards"]
    for bucket, b in data["mixture"]["buckets"].items():
        assert b["tokens"] == sum(s["tokens"] for s in shards if s["domain"] == bucket)
        assert b["documents"] == sum(s["documents"] for s in shards if s["domain"] == bucket)
    assert sum(v["tokens"] for v in data["tokens_by_source"].values()) == sum(s["tokens"] for s in shards)
    assert sum(v["documents"] for v in data["tokens_by_source"].values()) == sum(s["documents"] for s in shards)
    assert [s["name"] for s in data["shards"]] == [s["name"] for s in shards]


def test_histograms_cover_every_row_and_carry_the_policy_thresholds(built, data):
    by_column = {(h["layer"], h["column"]): h for h in data["histograms"]}
    n_chars = by_column[("ingest/documents", "n_chars")]
    policy = built["manifest"]["config"]["policy"]
    assert {(t["name"], t["value"]) for t in n_chars["thresholds"]} == \
        {("min_chars", policy["min_chars"]), ("max_chars", policy["max_chars"])}
    assert ("exact_dedup/annotations", "duplicate_count") in by_column
    for h in data["histograms"]:
        stage = built["stages"][h["stage"]]
        rows = ledger(built["root"], stage)["outputs"][h["layer"].split("/")[1]]["rows"]
        assert sum(h["counts"]) + h["zeros"] == h["n"] == rows - h["nulls"]
        assert h["column"] not in ("position", "byte_offset", "source_rank")  # provenance, not scores


def test_exact_duplicate_clusters_match_the_annotations_and_the_drops(built, data):
    (exact,) = [c for c in data["clusters"] if c["layer"] == "exact_dedup/annotations"]
    rows = ledger(built["root"], built["stages"]["exact_dedup"])["outputs"]["annotations"]["rows"]
    assert sum(int(k) * n for k, n in exact["sizes"].items()) == rows
    assert exact["redundant"] == built["stages"]["select"]["counts"]["filtered"]["exact_duplicate"]
    (top,) = [g for g in data["top_clusters"] if g["layer"] == "exact_dedup/annotations"]
    for cluster in top["clusters"]:
        assert cluster["size"] >= 2 and len(cluster["members"]) >= 2
        assert sum(m["representative"] for m in cluster["members"]) == 1
        assert len({m["text"] for m in cluster["members"]}) == 1  # exact duplicates: the same text


def test_dropped_samples_are_the_lowest_hashes_per_reason(built, data):
    seed = built["manifest"]["seed"]
    select = built["stages"]["select"]
    k = data["settings"]["samples_per_reason"]
    decisions = pa.concat_tables(
        pq.read_table(p) for p in sorted(glob.glob(os.path.join(
            built["root"], "layers", "select", select["layer_key"], "decisions", "*.parquet"))))
    for reason, total in select["counts"]["filtered"].items():
        sample = data["samples"][f"select:{reason}"]
        ids = [r["doc_id"] for r in decisions.to_pylist() if r["reason"] == reason]
        assert sample["total"] == total == len(ids)
        expected = sorted(ids, key=lambda d: (stable_hash64(seed, d), d))[:k]
        assert [r["doc_id"] for r in sample["rows"]] == expected
        for row in sample["rows"]:
            assert row["text"] and len(row["text"]) <= SAMPLE_TEXT_CHARS and row["source"]
    repeats = data["samples"]["ingest:repeated_record"]
    assert repeats["total"] == built["stages"]["ingest"]["counts"]["filtered"]["repeated_record"]
    assert repeats["shown"] == min(k, repeats["total"]) and all(r["repeat_at"] for r in repeats["rows"])


def test_language_mix_is_plotted_only_when_a_language_column_exists(run_dir, data):
    from beam_pipeline.report.html import render_run

    page = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    if data["language"] is None:
        assert "No language annotation in this run" in page and 'id="plot-language"' not in page
    else:
        assert 'id="plot-language"' in page and "No language annotation" not in page
        assert sum(data["language"]["documents"].values()) == data["language"]["total"]
    note = render_run({**data, "language": None}, {})
    assert "No language annotation in this run" in note and "<img" not in note


def test_versions_section_names_every_stage_and_digest(built, run_dir):
    page = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    for stage in built["manifest"]["stages"]:
        assert stage["layer_key"] in page and stage["version"] in page
    for field in ("snapshot_id", "config_digest", "dataset_id"):
        assert built["manifest"][field] in page


def test_report_is_self_contained_and_deterministic(run_dir, tmp_path):
    one, two = str(tmp_path / "one.html"), str(tmp_path / "two.html")
    write_report(run_dir, output=one)
    write_report(run_dir, output=two)
    page = open(one, "rb").read()
    assert page == open(two, "rb").read()
    text = page.decode("utf-8")
    assert "Content-Security-Policy" in text
    assert not re.search(r'(src|href)="(?!data:|#)', text), "only data: images and in-page links"
    assert "<link" not in text and "@import" not in text and "url(" not in text
    srcs = re.findall(r'<img [^>]*src="([^"]{0,40})', text)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)


def test_html_special_names_in_the_data_are_escaped(data):
    """A source name, a URL and a rule name are data: the page shows them as text, never as markup."""
    import copy
    import html
    import html.parser

    from beam_pipeline.report.html import render_run

    source, url, rule = '<b id="src">s&1</b>', 'javascript:"><img src=x onerror=alert(1)>', "</code><script>bad()</script>"
    evil = copy.deepcopy(data)
    evil["name"] = "<i>corpus</i>"
    evil["sources"].append(source)
    reason = f"{evil['stages'][-1]['name']}:{rule}"
    evil["stages"][-1]["dropped"][rule] = 1
    evil["drops_by_source"][source] = {reason: 1}
    evil["read_by_source"][source] = 1
    evil["samples"] = {**(evil.get("samples") or {}), reason: {"shown": 1, "total": 1, "rows": [
        {"source": source, "url": url, "doc_id": "d" * 16, "n_chars": 3, "text": "<p>x</p>"}]}}
    page = render_run(evil, {})

    class Tags(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.attributes = [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            self.attributes.extend(attrs)

    tags = Tags()
    tags.feed(page)
    assert tags.tags.count("script") == 1 and "i" not in tags.tags and "img" not in tags.tags
    assert ("id", "src") not in tags.attributes and not any(name == "onerror" for name, _ in tags.attributes)
    for value in (source, url, rule, "<i>corpus</i>", "<p>x</p>"):
        assert value not in page
        assert html.escape(value).replace("&quot;", "&#34;").replace("&#x27;", "&#39;") in page
    text = html.unescape(page)
    assert source in text and url in text and reason in text


# --- token budget -------------------------------------------------------------

def test_token_budget_epochs_and_the_four_epoch_warning(run_dir, built):
    settings = {"target_tokens": 20_000_000, "mixture": {"docs": 5, "encyclopedic": 3, "legal": 2}}
    data = gather(locate(run_dir), report_config=settings, detail=False)
    rows = {r["bucket"]: r for r in data["budget"]["rows"]}
    for bucket, weight in settings["mixture"].items():
        unique = sum(s["tokens"] for s in built["manifest"]["shards"] if s["domain"] == bucket)
        assert rows[bucket]["unique_tokens"] == unique
        assert rows[bucket]["epochs"] == pytest.approx(20_000_000 * weight / 10 / unique)
    flagged = {b for b, r in rows.items() if r["epochs"] > 4}
    assert flagged and all(any(f"bucket {b} " in w for w in data["warnings"]) for b in flagged)
    assert all("Muennighoff" in w for w in data["warnings"])
    small = gather(locate(run_dir), report_config={"target_tokens": 1000}, detail=False)
    assert not small["warnings"] and small["budget"]["mixture_from"].startswith("natural")


def test_token_budget_flags_a_bucket_without_data():
    mix = {"buckets": {"web": {"tokens": 100, "share": 1.0, "target_share": 0.5},
                       "code": {"tokens": 0, "share": 0.0, "target_share": 0.5}}, "has_target": True}
    budget = token_budget(mix, {"target_tokens": 100, "mixture": {"web": 1, "code": 1, "math": 0}})
    assert any("code has a mixture weight but no tokens" in w for w in budget["warnings"])
    assert any("math" in w for w in budget["warnings"])


def test_thresholds_match_columns_by_name():
    policy = {"min_chars": 1, "max_chars": 9, "min_words": 5, "drop_exact_duplicates": True,
              "filters.min_quality": 0.3, "max_toxicity_score": 0.8}
    assert {t["name"] for t in thresholds_for("n_chars", policy)} == {"min_chars", "max_chars"}
    assert [t["name"] for t in thresholds_for("quality_score", policy)] == ["filters.min_quality"]
    assert [t["kind"] for t in thresholds_for("toxicity_score", policy)] == ["max"]
    assert thresholds_for("duplicate_count", policy) == []


# --- data-driven: a new stage's annotations show up ---------------------------

def test_new_annotation_layers_appear_without_code_changes(built, tmp_path):
    """A new scoring stage: its score histogram, language mix and clusters are found."""
    root = str(tmp_path / "out")
    shutil.copytree(built["root"], root)
    metrics_path = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))[0]
    metrics = json.load(open(metrics_path))
    docs = pa.concat_tables(pq.read_table(p, columns=["doc_id", "source"]) for p in sorted(glob.glob(
        os.path.join(root, "layers", "ingest", built["stages"]["ingest"]["layer_key"], "documents", "*.parquet"))))
    rows = [{"doc_id": d, "cluster_id": f"c{i % 7}" if i < 70 else None, "language": ["en", "de", "fr"][i % 3],
             "quality_score": (i % 100) / 100.0} for i, d in enumerate(sorted(docs["doc_id"].to_pylist()))]
    schema = pa.schema([("doc_id", pa.string()), ("cluster_id", pa.string()), ("language", pa.string()),
                        ("quality_score", pa.float64())])
    layer = Layer(root, "fake_scores", "f" * 24)
    part = write_partition(layer.output_path("annotations"), 0, 1, rows, schema)
    counts = {"in": len(rows), "passed": len(rows), "filtered": {}, "dead_letter": 0, "by_source": {}}
    commit_layer(layer, version="test", config={}, inputs={}, outputs={"annotations": [part]}, counts=counts)
    metrics["stages"].insert(1, {"name": "fake_scores", "layer_key": layer.key, "version": "test", "reused": False,
                                 "counts": counts})
    json.dump(metrics, open(metrics_path, "w"))

    data = gather(locate(os.path.dirname(metrics_path)))
    assert ("fake_scores/annotations", "quality_score") in {(h["layer"], h["column"]) for h in data["histograms"]}
    assert data["language"]["documents"] == {"en": 256, "de": 256, "fr": 256}
    (near,) = [c for c in data["clusters"] if c["stage"] == "fake_scores"]
    assert near["sizes"] == {1: 768 - 70, 10: 7} and near["largest"] == 10 and near["redundant"] == 63
    assert any(g["layer"] == "fake_scores/annotations" and len(g["clusters"]) == 5 for g in data["top_clusters"])
    assert [s["label"] for s in data["funnel"]["steps"]][2] == "after fake_scores"
    path = write_report(os.path.dirname(metrics_path))
    page = open(path, encoding="utf-8").read()
    assert 'id="plot-language"' in page and "No language annotation" not in page


# --- locating runs, the CLI, compare -------------------------------------------

def test_every_way_of_naming_a_run_finds_the_same_run(built, run_dir):
    dataset = built["dataset"]
    forms = [run_dir, os.path.join(run_dir, "metrics.json"), dataset, os.path.join(dataset, "manifest.json"),
             built["root"]]
    refs = [locate(f) for f in forms]
    assert {r.run_id for r in refs} == {built["metrics"]["run_id"]}
    assert {r.report_path for r in refs} == {os.path.join(run_dir, "report.html")}
    # (other tests may rerun the build into this root: timings and "reused" change, counts do not)
    assert all(r.metrics["dataset_id"] == built["metrics"]["dataset_id"] for r in refs)
    assert all([s["counts"] for s in r.metrics["stages"]] == [s["counts"] for s in built["metrics"]["stages"]]
               for r in refs)


def test_cli_report_writes_the_page_and_prints_its_path(built, run_dir, tmp_path, capsys):
    out = str(tmp_path / "r.html")
    assert cli.main(["report", built["dataset"], "--output", out, "--target_tokens", "50000000",
                     "--mixture", "docs=1,legal=1"]) == 0
    assert capsys.readouterr().out.strip() == f"report      {out}"
    page = open(out, encoding="utf-8").read()
    assert "report.target_tokens = 50,000,000" in page and 'id="plot-mixture"' in page
    assert cli.main(["report", str(tmp_path / "nothing-here")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert cli.main(["report", run_dir, "--mixture", "docs"]) == 2
    assert "bucket=weight" in capsys.readouterr().err


def test_compare_a_run_with_itself(built, run_dir):
    cmp = compare(locate(run_dir), locate(built["dataset"]))
    assert cmp["same_data"] and not cmp["config_changes"]
    assert all(r["a"] == r["b"] for r in cmp["counts"] + cmp["drops"])
    assert all(v["a"] == v["b"] for v in cmp["versions"])


def test_compare_shows_what_changed(built, run_dir):
    ref = locate(run_dir)
    a = gather(ref, detail=False)
    b = json.loads(json.dumps(a))
    b["run"]["dataset_id"] = "0" * 64
    select = next(s for s in b["stages"] if s["name"] == "select")
    select["passed"] -= 10
    select["filtered"]["too_few_words"] = 10
    select["version"] = "2"
    for stage in b["stages"][[s["name"] for s in b["stages"]].index("select") + 1:]:
        stage["in"] -= 10
        stage["passed"] -= 10
    stage_flow(b["stages"])  # as gather() does (only the stage totals were changed: per-source warnings are moot)
    assert select["dropped"]["too_few_words"] == 10
    b["mixture"]["buckets"]["docs"]["tokens"] -= 1000
    config_b = json.loads(json.dumps(ref.manifest["config"]))
    config_b["policy"]["min_words"] = 50
    config_b["sources"][0]["rank"] = 9
    config_b["output_root"] = "/elsewhere"
    cmp = compare_data(a, b, ref.manifest["config"], config_b)
    assert not cmp["same_data"]
    assert {c["field"] for c in cmp["config_changes"]} == {"policy.min_words", f"sources[{config_b['sources'][0]['name']}].rank"}
    assert {"field": "policy.min_words", "a": "5", "b": "50"} in cmp["config_changes"]
    passed = next(r for r in cmp["counts"] if r["what"] == "select · passed")
    assert passed["b"] - passed["a"] == -10
    assert {"reason": "select:too_few_words", "a": 0, "b": 10} in cmp["drops"]
    version_a = next(s for s in a["stages"] if s["name"] == "select")["version"]
    assert version_a.startswith("1+code.")  # the stage's version and its code digest (beam_pipeline/build/code_version.py)
    assert any(v["what"] == "select version" and v["a"] == version_a and v["b"] == "2" for v in cmp["versions"])
    docs = next(m for m in cmp["mixture"] if m["bucket"] == "docs")
    assert docs["a_tokens"] - docs["b_tokens"] == 1000


def test_cli_compare_writes_a_page_and_a_summary(built, run_dir, tmp_path, capsys):
    out = str(tmp_path / "cmp.html")
    assert cli.main(["report", "--compare", run_dir, built["dataset"], "--output", out]) == 0
    printed = capsys.readouterr().out
    assert "same data (dataset ids equal)" in printed and f"report      {out}" in printed
    page = open(out, encoding="utf-8").read()
    assert page.count('class="plot"') == 3 and "Configs are identical" in page
    path, _ = write_compare(run_dir, built["dataset"])
    assert path == os.path.join(run_dir, f"compare-{built['metrics']['run_id']}.html") and os.path.exists(path)


def test_report_config_is_optional_validated_and_not_part_of_the_digest():
    import yaml

    from beam_pipeline.config.corpus import ConfigError, load_config, parse_config
    from conftest import SAMPLE_CONFIG

    raw = yaml.safe_load(open(SAMPLE_CONFIG))
    base = load_config(SAMPLE_CONFIG)
    with_report = parse_config({**raw, "report": {"target_tokens": 10**9, "mixture": {"docs": 1.0}}},
                               base_dir=os.path.dirname(SAMPLE_CONFIG))
    assert with_report.report.target_tokens == 10**9 and base.report.target_tokens is None
    assert with_report.digest() == base.digest()
    with pytest.raises(ConfigError, match="report.target_tokens"):
        parse_config({**raw, "report": {"target_tokens": 0}}, base_dir=os.path.dirname(SAMPLE_CONFIG))
    with pytest.raises(ConfigError, match="report.epochs: unknown field"):
        parse_config({**raw, "report": {"epochs": 4}}, base_dir=os.path.dirname(SAMPLE_CONFIG))


def test_the_jobs_report_step_logs_a_failure_and_writes_nothing(tmp_path, caplog):
    """transforms/publish.py: WriteReport. A run folder without metrics (the numbers cannot be gathered):
    a warning naming the retry command, no page; the job itself succeeds, and the metrics go on to the
    next step (removing temporaries) as they came."""
    import logging

    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_pipeline.transforms.publish import WriteReport

    caplog.set_level(logging.WARNING)
    run_dir = str(tmp_path / "runs" / "0123456789abcdef")
    os.makedirs(run_dir)
    with beam.Pipeline(runner="DirectRunner") as p:
        passed_on = p | beam.Create([{"run_id": "0123456789abcdef"}]) | WriteReport(run_dir)
        assert_that(passed_on, equal_to([{"run_id": "0123456789abcdef"}]))
    assert "the run report could not be written" in caplog.text
    assert f"python -m beam_pipeline report {run_dir}/metrics.json" in caplog.text
    assert not os.path.exists(os.path.join(run_dir, "report.html"))


def test_the_gathered_plots_carry_the_numbers_once(run_dir):
    """transforms/publish.py: WriteReport gathers every drawn plot into one record (``AllPlots``), which a
    Flink combiner must fit in its sort buffer: the run's numbers ride on one plot, not on each (a copy per
    plot made that record over 11 MB at 1 GB of text and failed the cluster build)."""
    import pickle

    from beam_pipeline.report import report_numbers
    from beam_pipeline.transforms.publish import _draw_plot, _plot_tasks

    gathered = report_numbers(os.path.join(run_dir, "metrics.json"))
    drawn = [_draw_plot("", task) for _metrics, task in _plot_tasks({}, gathered)]
    assert len(drawn) > 1
    assert [name for name, _plot, ref, data in drawn if ref is not None and data is not None] == [drawn[0][0]]
    numbers = len(pickle.dumps(gathered))
    plots = sum(len(pickle.dumps(plot)) for _name, plot, _ref, _data in drawn)
    assert len(pickle.dumps(drawn)) < numbers + plots + 200 * len(drawn)
