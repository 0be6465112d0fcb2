import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.storage import schemas
from beam_pipeline.build.corpus_build import estimated_text_bytes, partition_count
from beam_pipeline.records.accounting import COUNTS, Tally
from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.storage.layers import (Layer, commit_layer, layer_key, part_name, read_partition_rows, remove_temporaries,
                                  write_bytes_atomic, write_partition)
from beam_pipeline.transforms.layer_io import CommitLayer, LayerSpec, ReadLayerRows, WriteLayerOutput, \
    complete_partitions


def collect_partitions(directory: str, count: int, schema) -> list[dict]:
    """The sidecars of a written layer output (what the commit step holds), empty partitions written."""
    import glob
    import json
    sidecars = [json.load(open(p)) for p in glob.glob(os.path.join(directory, "*.meta.json"))]
    return complete_partitions(directory, count, schema, sidecars)

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
        back = p | ReadLayerRows(layer.part_paths("decisions"), columns=["doc_id"])
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
    # 550 MiB: 9 partitions of at most 64 MiB, rounded up to a multiple of min_partitions (equal shares for
    # min_partitions workers or a divisor of it: 9 partitions on 2 workers would leave one idle a ninth of a stage)
    assert partition_count(estimated_text_bytes(manifest), 64 << 20, 4) == 12
    assert partition_count(estimated_text_bytes(manifest), 64 << 20, 2) == 10
    assert partition_count(estimated_text_bytes(manifest), 64 << 20, 1) == 9
    assert partition_count(estimated_text_bytes(manifest), 1 << 30, 4) == 4  # min_partitions
    assert partition_count(2 * estimated_text_bytes(manifest), 64 << 20, 4) == 20
    assert partition_count(0, 64 << 20, 3) == 3
    for size in range(0, 2000 << 20, 37 << 20):
        for minimum in (1, 2, 3, 4, 8):
            count = partition_count(size, 64 << 20, minimum)
            assert count % minimum == 0 and count >= minimum and count * (64 << 20) >= size
            needed = -(-size // (64 << 20))
            assert count == minimum or count < needed + minimum  # never a whole round more than needed


# --- partition-wise joins (transforms/layer_io.py) --------------------------------------

def test_merge_join_pairs_rows_by_doc_id_and_leaves_absent_rows_none():
    from beam_pipeline.transforms.layer_io import merge_join

    docs = [{"doc_id": d} for d in ("a", "b", "c", "d")]
    joined = list(merge_join(docs, {"x": [{"doc_id": "b", "v": 1}, {"doc_id": "d", "v": 2}], "y": []}, "t"))
    assert [(d["doc_id"], rows["x"] and rows["x"]["v"], rows["y"]) for d, rows in joined] == \
        [("a", None, None), ("b", 1, None), ("c", None, None), ("d", 2, None)]


@pytest.mark.parametrize("layer,message", [
    ([{"doc_id": "b"}, {"doc_id": "bb"}], "x annotations for doc_id bb but no document (records were lost"),
    ([{"doc_id": "0"}], "x annotations for doc_id 0 but no document"),
    ([{"doc_id": "z"}], "x annotations for doc_id z but no document"),
    ([{"doc_id": "c"}, {"doc_id": "b"}], "x rows are not sorted by doc_id, or repeat one"),
    ([{"doc_id": "b"}, {"doc_id": "b"}], "x rows are not sorted by doc_id, or repeat one"),
])
def test_merge_join_refuses_orphans_and_disorder(layer, message):
    from beam_pipeline.transforms.layer_io import merge_join

    docs = [{"doc_id": d} for d in ("a", "b", "c")]
    with pytest.raises(ValueError, match="t, partition 1: ") as err:
        list(merge_join(docs, {"x": layer}, "t, partition 1"))
    assert message in str(err.value)
    with pytest.raises(ValueError, match="documents are not sorted"):
        list(merge_join([{"doc_id": "b"}, {"doc_id": "a"}], {}, "t"))


def test_partition_inputs_need_one_partition_count(tmp_path):
    from beam_pipeline.transforms.layer_io import PartitionInputs

    docs = [str(tmp_path / part_name(i, 3)) for i in range(3)]
    other = [str(tmp_path / "x" / part_name(i, 2)) for i in range(2)]
    assert PartitionInputs.of(docs, None, {"x": (docs, ["doc_id"])}).count == 3
    with pytest.raises(ValueError, match="cannot join x partition by partition: it has 2 partitions"):
        PartitionInputs.of(docs, None, {"x": (other, None)})


# --- committing a layer inside a job (transforms/layer_io.CommitLayer) ---------------------

class _CountRows(beam.DoFn):
    """Counts every row ``in`` and ``passed`` (or ``filtered:even`` for every ``drop``-th), as data."""

    def __init__(self, lose_one: bool = False):
        self._lose_one = lose_one

    def setup(self):
        self._tally = Tally("select")

    def process(self, row):
        self._tally.entered(row["source"])
        self._tally.passed(row["source"], 2 if self._lose_one and row["doc_id"] == "0001" else 1)
        yield row
        yield from self._tally.tagged()


def _commit_job(tmp_path, data, partitions=3, lose_one=False):
    layer = Layer(str(tmp_path), "select", "k")
    spec = LayerSpec(layer=layer, version="1", config={"c": 1}, inputs={"documents": "d"},
                     outputs={"decisions": schemas.DECISION}, partitions=partitions,
                     rows_match={"decisions": "passed"}, max_dead_letter_fraction=0.0)
    p = beam.Pipeline(options=OPTIONS)
    counted = p | beam.Create(data) | beam.ParDo(_CountRows(lose_one)).with_outputs(COUNTS, main="rows")
    sidecars = counted["rows"] | WriteLayerOutput(layer.output_path("decisions"), schemas.DECISION, partitions)
    committed = {"decisions": sidecars, COUNTS: counted[COUNTS]} | CommitLayer(spec)
    back = p | "ReadBack" >> ReadLayerRows(
        [os.path.join(layer.output_path("decisions"), part_name(i, partitions)) for i in range(partitions)],
        ["doc_id"], after=[committed])
    return p, layer, committed, back


def test_commit_writes_every_partition_then_the_ledger_and_a_later_step_reads_the_layer(tmp_path):
    p, layer, committed, back = _commit_job(tmp_path, rows(2), partitions=3)
    assert_that(back, equal_to([{"doc_id": "0000"}, {"doc_id": "0001"}]), label="ReadAfterCommit")
    assert_that(committed | beam.Map(lambda c: (c.stage, c.key, c.reused, c.ledger["counts"]["passed"])),
                equal_to([("select", "k", False, 2)]), label="Committed")
    p.run().wait_until_finish()
    ledger = layer.ledger()
    assert [part["rows"] for part in ledger["outputs"]["decisions"]["parts"]] == \
        [sum(1 for r in rows(2) if bucket_of(r["doc_id"], 3) == i) for i in range(3)]  # no row: written empty
    assert ledger["counts"]["in"] == 2 and ledger["counts"]["by_source"]["s"]["passed"] == 2
    assert ledger["config"] == {"c": 1} and ledger["inputs"] == {"documents": "d"}


def test_commit_refuses_counts_that_do_not_balance(tmp_path):
    p, layer, _, _ = _commit_job(tmp_path, rows(5), lose_one=True)
    with pytest.raises(Exception, match=r"stage select \(all sources\): in=5 but passed=6 .* records were lost or "
                                        r"counted twice"):
        p.run().wait_until_finish()
    assert not layer.is_complete()


def test_merge_join_requires_a_row_where_every_document_has_one():
    from beam_pipeline.transforms.layer_io import merge_join

    docs = [{"doc_id": d} for d in ("a", "b", "c")]
    exact = [{"doc_id": "a"}, {"doc_id": "c"}]
    assert [rows["exact"] for _, rows in merge_join(docs, {"exact": exact}, "t")][1] is None  # optional: absent
    with pytest.raises(ValueError, match=r"t: document b has no exact row \(records were lost on the way\)"):
        list(merge_join(docs, {"exact": exact}, "t", required=("exact",)))
