import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline

from beam_pipeline import schemas
from beam_pipeline.build import estimated_text_bytes, partition_count
from beam_pipeline.layers import (Layer, collect_partitions, commit_layer, layer_key, read_partition_rows,
                                  remove_temporaries, write_bytes_atomic, write_partition)
from beam_pipeline.transforms.layer_io import ReadLayerOutput, WriteLayerOutput

OPTIONS = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])


def rows(n):
    return [{"doc_id": f"{i:04d}", "source": "s", "kept": i % 3 != 0, "reason": None if i % 3 else "too_short"}
            for i in range(n)]


def test_layer_key_depends_on_version_config_and_inputs_only():
    base = layer_key("ingest", "1", {"a": 1}, ["x", "y"])
    assert base == layer_key("ingest", "1", {"a": 1}, ["y", "x"])
    assert base != layer_key("ingest", "2", {"a": 1}, ["x", "y"])
    assert base != layer_key("ingest", "1", {"a": 2}, ["x", "y"])
    assert base != layer_key("ingest", "1", {"a": 1}, ["x", "z"])
    assert base != layer_key("select", "1", {"a": 1}, ["x", "y"])


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    path = str(tmp_path / "f.bin")
    write_bytes_atomic(path, b"one")
    write_bytes_atomic(path, b"two")
    assert open(path, "rb").read() == b"two"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_partition_bytes_are_deterministic(tmp_path):
    a = write_partition(str(tmp_path / "a"), 0, 1, rows(50), schemas.DECISION)
    b = write_partition(str(tmp_path / "b"), 0, 1, rows(50), schemas.DECISION)
    assert a["sha256"] == b["sha256"] and a["rows"] == 50
    assert list(read_partition_rows(str(tmp_path / "a" / a["name"]))) == rows(50)


def test_collect_writes_empty_partitions(tmp_path):
    directory = str(tmp_path / "out")
    write_partition(directory, 1, 3, rows(2), schemas.DECISION)
    metas = collect_partitions(directory, 3, schemas.DECISION)
    assert [m["rows"] for m in metas] == [0, 2, 0]
    assert sorted(f for f in os.listdir(directory) if f.endswith(".parquet")) == [
        "part-00000-of-00003.parquet", "part-00001-of-00003.parquet", "part-00002-of-00003.parquet"]


def test_write_layer_output_is_independent_of_input_order(tmp_path):
    digests = []
    for name, data in (("fwd", rows(200)), ("rev", rows(200)[::-1])):
        with TestPipeline(options=OPTIONS) as p:
            _ = p | beam.Create(data) | WriteLayerOutput(str(tmp_path / name), schemas.DECISION, 4)
        digests.append([m["sha256"] for m in collect_partitions(str(tmp_path / name), 4, schemas.DECISION)])
    assert digests[0] == digests[1]


def test_layer_completion_and_read_back(tmp_path):
    layer = Layer(str(tmp_path), "select", "k1")
    assert not layer.is_complete()
    with TestPipeline(options=OPTIONS) as p:
        _ = p | beam.Create(rows(30)) | WriteLayerOutput(layer.output_path("decisions"), schemas.DECISION, 3)
    parts = collect_partitions(layer.output_path("decisions"), 3, schemas.DECISION)
    commit_layer(layer, version="1", config={}, inputs={}, outputs={"decisions": parts}, counts={})
    assert layer.is_complete()
    assert layer.ledger()["outputs"]["decisions"]["rows"] == 30
    with TestPipeline(options=OPTIONS) as p:
        back = p | ReadLayerOutput(layer.part_paths("decisions"), columns=["doc_id"])
        from apache_beam.testing.util import assert_that, equal_to
        assert_that(back, equal_to([{"doc_id": r["doc_id"]} for r in rows(30)]))


def test_remove_temporaries_deletes_only_half_written_files(tmp_path):
    layer = Layer(str(tmp_path), "ingest", "k")
    complete = collect_partitions(layer.output_path("documents"), 2, schemas.DEAD_LETTER)
    assert len(complete) == 2
    stray = [os.path.join(layer.output_path("documents"), ".tmp-part-00000-of-00002.parquet-abc"),
             os.path.join(layer.path, ".tmp-_LEDGER.json-def"),
             os.path.join(layer.dead_letter_path, ".tmp-part-00000-of-00001.parquet-0")]
    for path in stray:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").write(b"half")
    assert sorted(remove_temporaries(layer)) == sorted(stray)
    assert not any(os.path.exists(p) for p in stray)
    assert sorted(os.listdir(layer.output_path("documents"))) == [
        "part-00000-of-00002.parquet", "part-00000-of-00002.parquet.meta.json",
        "part-00001-of-00002.parquet", "part-00001-of-00002.parquet.meta.json"]
    assert remove_temporaries(layer) == []


def test_partition_count_grows_with_the_estimated_text():
    manifest = {"sources": {"a": {"files": [{"path": "/d/x.jsonl.zst", "size": 100 << 20},
                                            {"path": "/d/y.jsonl", "size": 50 << 20}]},
                            "b": {"files": [{"path": "s3://b/z.parquet", "size": 25 << 20}]}}}
    assert estimated_text_bytes(manifest) == (400 + 50 + 100) << 20  # compressed files count 4x
    assert partition_count(estimated_text_bytes(manifest), 64 << 20, 4) == 9
    assert partition_count(estimated_text_bytes(manifest), 1 << 30, 4) == 4  # min_partitions
    assert partition_count(2 * estimated_text_bytes(manifest), 64 << 20, 4) == 18
