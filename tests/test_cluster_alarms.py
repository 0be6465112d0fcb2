"""Alarms on near-dup cluster sizes (beam_pipeline/dedup/cluster_alarms.py): console, report, fail mode."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from beam_pipeline.dedup.config import ClusterAlarmConfig
from beam_pipeline.dedup.cluster_alarms import cluster_alarms, large_cluster_line, size_bucket
from conftest import IN_PROCESS, SAMPLE_TOKENIZER


def test_size_buckets_are_powers_of_two():
    assert [size_bucket(n) for n in (2, 3, 4, 5, 8, 9, 16, 17, 1000)] == [
        "cluster_size_2", "cluster_size_3_4", "cluster_size_3_4", "cluster_size_5_8", "cluster_size_5_8",
        "cluster_size_9_16", "cluster_size_9_16", "cluster_size_17_32", "cluster_size_513_1024"]


def _ledger(sizes: list[int], documents: int, rejected: int = 0) -> dict:
    clusters = [{"cluster_id": f"c{i}", "representative": f"r{i}", "size": s, "sampled_members": [f"m{i}a", f"m{i}b"]}
                for i, s in enumerate(sorted(sizes, reverse=True))]
    return {"counts": {"in": documents, "other": {"large_clusters": len(sizes), "large_cluster_rejected": rejected}},
            "largest_clusters": clusters}


def test_size_and_share_alarms():
    ledger = _ledger([5000, 1200, 300], documents=1_000_000)
    (size,) = cluster_alarms(ClusterAlarmConfig(max_size=1000, max_share=0.01), ledger)
    assert size.kind == "size" and [c["size"] for c in size.clusters] == [5000, 1200] and size.count == 2
    assert "2 cluster(s) above near_dedup.alarms.max_size=1000" in size.message and "representative r0" in size.message
    kinds = [a.kind for a in cluster_alarms(ClusterAlarmConfig(max_size=None, max_share=0.001), ledger)]
    assert kinds == ["share"]  # 5000 / 1e6 = 0.5% > 0.1%; 1200 / 1e6 = 0.12% > 0.1%
    assert cluster_alarms(ClusterAlarmConfig(max_size=None, max_share=None), ledger) == []
    assert cluster_alarms(ClusterAlarmConfig(), _ledger([150], documents=1_000_000)) == []
    assert "3 near-dup clusters above" in large_cluster_line(_ledger([5000, 1200, 300], 10**6, rejected=42))
    assert "42 chain members" in large_cluster_line(_ledger([5000, 1200, 300], 10**6, rejected=42))
    assert large_cluster_line(_ledger([], 10**6)) is None


def test_alarm_config_is_validated():
    with pytest.raises(ValueError):
        ClusterAlarmConfig(action="explode")
    with pytest.raises(ValueError):
        ClusterAlarmConfig(max_share=0)


# --- a build -------------------------------------------------------------------------------------------

BASE = ("The river town library opened a new reading room this spring with long tables, quiet lamps "
        "and shelves of local history, maps of the old mill and letters from the families who built the bridge. ")


def _corpus(tmp_path, action: str, near_dedup: str | None = None) -> str:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    with open(data / "docs.jsonl", "w") as f:
        for i in range(6):  # one near-dup cluster of 6 (one word differs), and 6 unrelated documents
            f.write(json.dumps({"id": f"copy{i}", "text": BASE * 4 + f"Visitor number {i}."}) + "\n")
        for i in range(6):
            f.write(json.dumps({"id": f"other{i}", "text": f"Unrelated note {i} " + " ".join(
                f"w{i}x{j}" for j in range(80))}) + "\n")
    (tmp_path / "corpus.yaml").write_text(
        "name: alarms\noutput_root: out\n"
        "sources: [{name: docs, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}]\n"
        "cascade: [heuristics]\n"
        + (near_dedup or "near_dedup: {enabled: true, max_cluster_size: 2, "
           f"alarms: {{max_size: 4, max_share: null, action: {action}}}}}\n")
        + f"tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")
    return str(tmp_path / "corpus.yaml")


def _run(tmp_path, config):
    return subprocess.run([sys.executable, "-m", "beam_pipeline", "run", "--config", config, *IN_PROCESS],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_an_alarm_fails_the_build_then_warns_and_publishes_without_recomputing(tmp_path):
    failed = _run(tmp_path, _corpus(tmp_path, "fail"))
    assert failed.returncode == 1, failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "near-dup cluster alarm: 1 cluster(s) above near_dedup.alarms.max_size=4" in errors[0]
    assert "no dataset is published" in errors[0] and "6 documents" in errors[0]
    assert not glob.glob(str(tmp_path / "out" / "datasets" / "*"))
    (near_ledger,) = glob.glob(str(tmp_path / "out" / "layers" / "near_dedup" / "*" / "_LEDGER.json"))
    ledger = json.load(open(near_ledger))
    (cluster,) = ledger["largest_clusters"]
    assert cluster["size"] == 6 and len(cluster["sampled_members"]) == 6
    other = ledger["counts"]["other"]
    assert other["large_clusters"] == 1 and other["cluster_size_5_8"] == 1
    # rejected chain members: the large cluster's members kept (not duplicates) besides its representative
    rows = [r for path in glob.glob(os.path.join(os.path.dirname(near_ledger), "annotations", "*.parquet"))
            for r in pq.read_table(path).to_pylist()]
    members = {r["doc_id"] for r in rows if r["cluster_id"] == cluster["cluster_id"]}
    assert len(members) == 6 and cluster["representative"] in members
    assert set(cluster["sampled_members"]) == members
    kept = [r for r in rows if r["large_cluster"] and not r["is_duplicate"] and r["doc_id"] != r["representative"]]
    assert other.get("large_cluster_rejected", 0) == len(kept)

    warned = _run(tmp_path, _corpus(tmp_path, "warn"))
    assert warned.returncode == 0, warned.stderr[-3000:]
    assert "(reused)" in warned.stdout and all(  # the alarm settings are not in any layer key
        "(reused)" in line for line in warned.stdout.splitlines() if line.split()[:1] and line.split()[0] in (
            "ingest", "exact_dedup", "near_dedup", "heuristics", "select", "tokenize"))
    warnings = [line for line in warned.stdout.splitlines() if line.startswith("warning     near-dup cluster alarm")]
    assert len(warnings) == 1 and "6 documents (50.0%)" in warnings[0]
    clusters = [line for line in warned.stdout.splitlines() if line.startswith("clusters    ")]
    assert clusters == [f"clusters    1 near-dup clusters above near_dedup.max_cluster_size (largest 6 documents), "
                        f"not collapsed: each member checked against the representative; "
                        f"{len(kept)} chain members were not similar to it and were kept"]
    report = next(line.split(None, 1)[1] for line in warned.stdout.splitlines() if line.startswith("report"))
    page = open(report, encoding="utf-8").read()
    assert "near-dup cluster alarm: 1 cluster(s) above near_dedup.alarms.max_size=4" in page
    assert "chain members were not similar to it and were kept" in page


def test_the_share_alarm_sees_a_cluster_below_max_cluster_size(tmp_path):
    """A cluster of 6 (max_cluster_size 100: collapsed as usual) holding half of a small corpus alarms."""
    config = _corpus(tmp_path, "warn", near_dedup="near_dedup: {enabled: true, "
                     "alarms: {max_size: null, max_share: 0.1, action: warn}}\n")
    warned = _run(tmp_path, config)
    assert warned.returncode == 0, warned.stderr[-3000:]
    warnings = [line for line in warned.stdout.splitlines() if line.startswith("warning     near-dup cluster alarm")]
    assert len(warnings) == 1, warned.stdout
    assert "1 cluster(s) above near_dedup.alarms.max_share=0.1 of 12 documents" in warnings[0]
    assert "6 documents (50.0%)" in warnings[0]
    (near_ledger,) = glob.glob(str(tmp_path / "out" / "layers" / "near_dedup" / "*" / "_LEDGER.json"))
    ledger = json.load(open(near_ledger))
    (cluster,) = ledger["largest_clusters"]  # every cluster competes for the ledger's list, not only large ones
    assert cluster["size"] == 6 and len(cluster["sampled_members"]) == 6
    assert ledger["counts"]["other"].get("large_clusters", 0) == 0
    assert not [line for line in warned.stdout.splitlines() if line.startswith("clusters    ")]
