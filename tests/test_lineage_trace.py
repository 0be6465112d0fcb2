"""Lineage written by the build, and ``trace``: token -> document -> raw source record."""
import glob
import json
import os
import random
import statistics
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from beam_pipeline.cli import commands as cli
from beam_pipeline.records.hashing import bucket_of, sha256_bytes
from beam_pipeline.storage.layers import Layer
from beam_pipeline.transforms import lineage as lineage_module
from beam_pipeline.dataset.lineage import read_lineage, trace_token
from beam_pipeline.transforms.lineage import annotation_outputs, parquet_bytes, sort_lineage
from beam_pipeline.records.normalize import normalize_text
from conftest import SAMPLE_CONFIG


@pytest.fixture(scope="module")
def lineage(built):
    return read_lineage(built["dataset"]).to_pylist()


def test_one_row_per_ingested_record(built, lineage):
    ingest = built["stages"]["ingest"]["counts"]
    documents = [r for r in lineage if not r["is_repeat"]]
    repeats = [r for r in lineage if r["is_repeat"]]
    assert len(documents) == ingest["passed"]
    assert len(repeats) == ingest["filtered"].get("repeated_record", 0) > 0
    assert len({r["doc_id"] for r in documents}) == len(documents)
    ids = {r["doc_id"] for r in documents}
    assert all(r["repeat_of"] == r["doc_id"] and r["doc_id"] in ids for r in repeats)
    assert {r["snapshot_id"] for r in lineage} == {built["manifest"]["snapshot_id"]}
    assert all(r["file"] and r["position"] is not None for r in lineage)


def test_every_stage_decision_and_the_placement(built, lineage):
    names = set(lineage[0])
    assert {"exact_dedup__duplicate_count", "exact_dedup__representative", "exact_dedup__is_duplicate",
            "select__kept", "select__reason", "shard", "token_start", "token_count"} <= names
    for stage, output, _ in annotation_outputs(built["root"], built["manifest"]):  # any later stage joins too
        assert any(name.startswith(f"{stage}__") for name in names), (stage, output)
    select = built["stages"]["select"]["counts"]
    documents = [r for r in lineage if not r["is_repeat"]]
    kept = [r for r in documents if r["select__kept"]]
    assert len(kept) == select["passed"]
    dropped = [r for r in documents if not r["select__kept"]]
    assert len(dropped) == sum(select["filtered"].values())
    assert all(r["select__reason"] and r["shard"] is None for r in dropped)
    exact = [r for r in dropped if r["select__reason"] == "exact_duplicate"]
    assert exact and all(r["exact_dedup__is_duplicate"] for r in exact)
    assert all(r["exact_dedup__representative"] != r["doc_id"] for r in exact)
    placed = {}
    for shard in built["manifest"]["shards"]:
        for row in pq.read_table(os.path.join(built["dataset"], shard["index_file"])).to_pylist():
            placed[row["doc_id"]] = (shard["name"], row["token_start"], row["token_count"])
    assert {r["doc_id"]: (r["shard"], r["token_start"], r["token_count"]) for r in kept} == placed


def whole_lineage_table(root: str, manifest: dict) -> pa.Table:
    """The lineage of a dataset as one table, every layer read whole: the reference the
    partition-by-partition build must equal byte for byte."""
    def read(paths, columns=None):
        return pa.concat_tables([pq.read_table(p, columns=columns) for p in paths])

    stages = {s["name"]: s["layer_key"] for s in manifest["stages"]}
    ingest = Layer(root, "ingest", stages["ingest"])
    documents = lineage_module.conform(read(ingest.part_paths("documents"), lineage_module._DOCUMENT_COLUMNS), lineage_module.BASE,
                                fill={"is_repeat": False, "snapshot_id": manifest["snapshot_id"]})
    for stage, _output, paths in annotation_outputs(root, manifest):
        annotations = read(paths)
        columns = [c for c in annotations.column_names if c not in lineage_module.SKIP_COLUMNS]
        documents = lineage_module.attach(documents, annotations, columns, prefix=f"{stage}{lineage_module.SEP}")
    placement = lineage_module.shard_placement(os.path.join(root, "datasets", manifest["dataset_id"]), manifest)
    documents = lineage_module.attach(documents, placement, [f.name for f in lineage_module.PLACEMENT])
    repeats = read(ingest.part_paths("repeats"), lineage_module._REPEAT_COLUMNS)
    repeats = lineage_module.conform(repeats.append_column("repeat_of", repeats.column("doc_id")), documents.schema,
                              fill={"is_repeat": True, "snapshot_id": manifest["snapshot_id"]})
    return pa.concat_tables([documents, repeats])


def test_partitions_by_doc_id_and_bytes_are_reproducible(built):
    directory = os.path.join(built["dataset"], "lineage")
    marker = json.load(open(os.path.join(directory, "_LINEAGE.json")))
    n = len(marker["parts"])
    ingest = Layer(built["root"], "ingest", built["stages"]["ingest"]["layer_key"])
    assert n == len(ingest.part_paths("documents"))  # part i of lineage = partition i of the layers
    for index, part in enumerate(marker["parts"]):
        ids = pq.read_table(os.path.join(directory, part["name"]), columns=["doc_id"]).column("doc_id").to_pylist()
        assert ids == sorted(ids) and all(bucket_of(d, n) == index for d in ids)
    assert sorted(os.listdir(directory)) == sorted([p["name"] for p in marker["parts"]] + ["_LINEAGE.json"])
    # built partition by partition (write_lineage) == the whole table split afterwards
    table = sort_lineage(whole_lineage_table(built["root"], built["manifest"]))
    buckets = np.array([bucket_of(d, n) for d in table.column("doc_id").to_pylist()])
    parts = [table.filter(pa.array(buckets == index)).combine_chunks() for index in range(n)]
    assert [sha256_bytes(parquet_bytes(part)) for part in parts] == [p["sha256"] for p in marker["parts"]]
    assert table.schema.names == marker["columns"] and table.num_rows == marker["rows"]


def sample_offsets(manifest, count, seed=0):
    rng = random.Random(seed)
    shards = manifest["shards"]
    return [(s["name"], rng.randrange(s["tokens"])) for s in (rng.choice(shards) for _ in range(count))]


def gold_texts(built):
    """doc_id -> the text select passed to tokenize (it may strip boilerplate from the raw text)."""
    key = next(s["layer_key"] for s in built["manifest"]["stages"] if s["name"] == "select")
    texts = {}
    for path in Layer(built["root"], "select", key).part_paths("gold"):
        texts.update((r["doc_id"], r["text"]) for r in pq.read_table(path, columns=["doc_id", "text"]).to_pylist())
    return texts


def test_trace_round_trip_token_to_raw_record(built):
    manifest = built["manifest"]
    tokenizer = Tokenizer.from_file(os.path.join(os.path.dirname(SAMPLE_CONFIG), manifest["tokenizer"]["path"]))
    gold = gold_texts(built)
    seconds, unedited = [], 0
    for name, offset in sample_offsets(manifest, 12):
        started = time.perf_counter()
        trace = trace_token(built["dataset"], name, offset)
        seconds.append(time.perf_counter() - started)
        shard = next(s for s in manifest["shards"] if s["name"] == name)
        tokens = np.fromfile(os.path.join(built["dataset"], shard["tokens_file"]), dtype="<u2")
        start, count = trace.index_row["token_start"], trace.index_row["token_count"]
        assert start <= offset <= start + count and trace.token_id == tokens[offset]
        assert trace.lineage["doc_id"] == trace.doc_id and trace.lineage["shard"] == name
        # token -> document: the shard holds exactly the tokens of the document's gold text
        assert tokenizer.encode(gold[trace.doc_id], add_special_tokens=False).ids == tokens[start:start + count].tolist()
        # document -> raw record: re-read from the source file, it normalizes to this doc_id
        assert trace.record is not None and trace.record_matches
        assert trace.record["position"] == trace.lineage["position"]
        unedited += normalize_text(trace.record["text"]) == gold[trace.doc_id]
    # select may strip boilerplate or redact; where it did not, raw record -> exactly the shard's tokens
    assert unedited >= 1
    assert statistics.median(seconds) < 1.0, seconds


def test_trace_names_eos_padding_and_repeats(built, lineage):
    manifest = built["manifest"]
    shard = manifest["shards"][0]
    assert trace_token(built["dataset"], shard["name"], shard["tokens"] - 1).kind == "eos"
    if shard["pad_tokens"]:
        assert trace_token(built["dataset"], shard["name"], shard["tokens"]).kind == "padding"
    repeated = next(r for r in lineage if r["is_repeat"])
    document = next(r for r in lineage if r["doc_id"] == repeated["doc_id"] and not r["is_repeat"])
    trace = trace_token(built["dataset"], document["shard"], document["token_start"])
    assert trace.doc_token == 0 and repeated["file"] in {r["file"] for r in trace.repeats}


def test_trace_cli(built, capsys):
    name = built["manifest"]["shards"][0]["name"]
    assert cli.main(["trace", "--dataset", built["dataset"], "--shard", name, "--offset", "5"]) == 0
    out = capsys.readouterr().out
    assert "matches doc_id" in out and "select" in out and "exact_dedup" in out and "source record" in out
    assert cli.main(["trace", "--dataset", built["dataset"], "--shard", "nope", "--offset", "5"]) == 1
    assert "no shard 'nope'" in capsys.readouterr().err


def test_the_build_wrote_lineage_for_its_dataset(built):
    assert glob.glob(os.path.join(built["dataset"], "lineage", "part-*.parquet"))
    assert cli.main(["lineage", built["dataset"]]) == 0  # already complete: nothing rewritten
