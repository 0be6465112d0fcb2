"""The whole build on the bundled sample, in-process, checked from its outputs."""
import glob
import hashlib
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import load_config
from beam_pipeline.records.hashing import merkle_root
from beam_pipeline.storage.manifest import shard_leaf
from conftest import IN_PROCESS, SAMPLE_CONFIG

SCORERS = ["language", "heuristics", "blocklist", "quality", "safety", "pii", "decontamination"]  # sample cascade
# the cascade as it runs: dedup after the cheap scorers, before the quality classifier (the seed's order)
STAGES = ["ingest", *SCORERS[:3], "exact_dedup", "near_dedup", *SCORERS[3:], "select", "ngram_index", "tokenize"]


def test_every_stage_accounts_for_every_record(built):
    stages = built["stages"]
    assert list(stages) == STAGES
    for name, stage in stages.items():
        for label, c in [("total", stage["counts"])] + list(stage["counts"]["by_source"].items()):
            assert c["in"] == c["passed"] + sum(c["filtered"].values()) + c["dead_letter"], (name, label)
        assert stage["counts"]["in"] > 0


def test_stages_chain_without_loss(built):
    c = {name: s["counts"] for name, s in built["stages"].items()}
    assert c["ingest"]["passed"] == c["exact_dedup"]["in"] == c["select"]["in"]
    assert c["select"]["passed"] == c["tokenize"]["in"] == c["tokenize"]["passed"]
    shards = built["manifest"]["shards"]
    assert sum(s["documents"] for s in shards) == c["tokenize"]["passed"]
    # natural duplicates in the sample are found and resolved
    assert c["select"]["filtered"]["exact_duplicate"] > 0
    assert c["ingest"]["filtered"].get("repeated_record", 0) + c["select"]["filtered"]["exact_duplicate"] > 0


def test_mirror_copies_lose_to_the_curated_source(built):
    by_source = built["stages"]["select"]["counts"]["by_source"]
    mirror = by_source["python-docs-mirror"]
    assert mirror["in"] > 0
    assert mirror["filtered"].get("exact_duplicate") == mirror["in"]  # every mirror page is a verbatim copy
    assert by_source["python-docs"]["filtered"].get("exact_duplicate", 0) == 0


def test_manifest_digests_and_dataset_id_verify(built):
    manifest = built["manifest"]
    for shard in manifest["shards"]:
        for field in ("tokens", "index"):
            data = open(os.path.join(built["dataset"], shard[f"{field}_file"]), "rb").read()
            assert hashlib.sha256(data).hexdigest() == shard[f"{field}_sha256"]
            assert len(data) == shard[f"{field}_bytes"]
        assert shard["leaf"] == shard_leaf(shard)
    leaves = [s["leaf"] for s in sorted(manifest["shards"], key=lambda s: s["name"])]
    assert merkle_root(leaves) == manifest["dataset_id"] == os.path.basename(built["dataset"])
    assert [s["name"] for s in manifest["stages"]] == STAGES
    assert manifest["tokenizer"]["dtype"] == "uint16"


def test_shards_hold_packed_sequences_that_decode_to_the_gold_text(built):
    manifest = built["manifest"]
    seq_len = manifest["seq_len"]
    tokenizer = Tokenizer.from_file(os.path.join(os.path.dirname(SAMPLE_CONFIG), manifest["tokenizer"]["path"]))
    select_key = next(s["layer_key"] for s in manifest["stages"] if s["name"] == "select")
    gold = {}
    for path in glob.glob(os.path.join(built["root"], "layers", "select", select_key, "gold", "*.parquet")):
        for row in pq.read_table(path, columns=["doc_id", "text", "domain"]).to_pylist():
            gold[row["doc_id"]] = row
    seen = set()
    for shard in manifest["shards"]:
        tokens = np.fromfile(os.path.join(built["dataset"], shard["tokens_file"]), dtype="<u2")
        assert tokens.size == shard["sequences"] * seq_len
        index = pq.read_table(os.path.join(built["dataset"], shard["index_file"])).to_pylist()
        for row in index[:5]:
            span = tokens[row["token_start"]:row["token_start"] + row["token_count"]]
            assert tokenizer.decode(span.tolist()) == gold[row["doc_id"]]["text"]
        assert all(gold[r["doc_id"]]["domain"] == shard["domain"] for r in index)  # homogeneous by bucket
        seen.update(r["doc_id"] for r in index)
    assert seen == set(gold)


def test_rerun_reuses_every_layer(built, tmp_path, capsys):
    root = str(tmp_path / "out")
    shutil.copytree(built["root"], root)  # the reference stays read only: the other xdist worker reads it
    assert cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *IN_PROCESS]) == 0
    out = capsys.readouterr().out
    assert out.count("(reused)") == len(STAGES)
    assert f"dataset_id  {built['manifest']['dataset_id']}" in out


def test_no_temporary_files_remain(built):
    """Neither half-written files nor the spill files of ingest (transforms/layer_io.SpillByPartition)
    and near dedup (transforms/lsh_files.py)."""
    leftovers = [p for p in glob.glob(os.path.join(built["root"], "**", "*"), recursive=True)
                 if os.path.basename(p).startswith((".tmp-", "_spill"))]
    assert leftovers == []
    (ingest,) = glob.glob(os.path.join(built["root"], "layers", "ingest", "*"))
    assert sorted(os.listdir(ingest)) == ["_LEDGER.json", "_tasks", "documents", "repeats"]  # docs/format.md
    (near,) = glob.glob(os.path.join(built["root"], "layers", "near_dedup", "*"))
    assert sorted(os.listdir(near)) == ["_LEDGER.json", "_tasks", "annotations", "large_clusters", "largest_clusters", "signatures"]


def test_inspect_summarizes_the_manifest(built, capsys):
    assert cli.main(["inspect", built["dataset"]]) == 0
    out = capsys.readouterr().out
    assert built["manifest"]["dataset_id"] in out
    assert "filtered:exact_duplicate" in out and "legal" in out


def test_config_errors_exit_2_with_the_field(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text(open(SAMPLE_CONFIG).read().replace("format: parquet", "format: parket"))
    assert cli.main(["run", "--config", str(bad), *IN_PROCESS]) == 2
    err = capsys.readouterr().err
    assert "sources[2].format" in err and "parket" in err


def test_sample_config_is_valid():
    config = load_config(SAMPLE_CONFIG)
    assert len(config.sources) >= 3
