"""Ingest groups its records by slice of an output partition (beam_pipeline/transforms/ingest.py): what one
grouped element carries to a worker is a slice, and the layer is the same bytes for any number of slices."""
from __future__ import annotations

import glob
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.config.corpus import load_config
from beam_pipeline.storage.layers import SCRATCH
from beam_pipeline.sources.snapshot import estimated_text_bytes
from beam_pipeline.transforms import ingest
from beam_pipeline.transforms.task_ledger import TaskLedger, clear_uncommitted, files_of
from conftest import IN_PROCESS, SAMPLE_CONFIG
from near_dedup_harness import MULTI_PROCESS, add_ingest, ingest_spec, ledger, part_digests

PARTITIONS = 4
ONE_SLICE = 1 << 40  # more than the sample's text: one slice per partition, as before slices
SMALLEST = 1 << 16  # the least ingest.slice_bytes allows: 64 slices per partition of the sample


def _config(root: str, slice_bytes: int):
    config = load_config(SAMPLE_CONFIG).model_copy(update={"output_root": root})
    return config.model_copy(update={"ingest": config.ingest.model_copy(update={"slice_bytes": slice_bytes})})


def _snapshot(config):
    from beam_pipeline.sources.snapshot import take_snapshot

    return take_snapshot(config, PipelineOptions(IN_PROCESS), log=lambda message: None)


def _ingest(config, snapshot_id: str, manifest: dict, options=IN_PROCESS):
    spec = ingest_spec(config.output_root, config, snapshot_id, PARTITIONS)
    pipeline = beam.Pipeline(options=PipelineOptions(options))
    add_ingest(pipeline, spec, config, manifest)
    pipeline.run().wait_until_finish()
    return spec.layer


def _leftovers(layer) -> list[str]:
    """Files and folders a committed layer should not hold: the scratch folder, temporaries."""
    return sorted(glob.glob(os.path.join(layer.path, SCRATCH)) + glob.glob(os.path.join(layer.path, "**", ".tmp-*"),
                                                                                 recursive=True))


@pytest.fixture(scope="module")
def one_slice(tmp_path_factory):
    config = _config(str(tmp_path_factory.mktemp("one-slice")), ONE_SLICE)
    snapshot_id, manifest = _snapshot(config)
    assert ingest.slices_per_partition(estimated_text_bytes(manifest), PARTITIONS, ONE_SLICE) == 1
    return _ingest(config, snapshot_id, manifest)


def _same_layer(layer, reference) -> None:
    for output in (ingest.DOCUMENTS, ingest.REPEATS):
        assert part_digests(layer, output) == part_digests(reference, output), output
    assert ledger(layer)["counts"] == ledger(reference)["counts"]
    assert ledger(layer)["outputs"] == ledger(reference)["outputs"]


@pytest.mark.parametrize("slice_bytes,options", [(SMALLEST, IN_PROCESS), (1 << 20, IN_PROCESS),
                                                 (SMALLEST, MULTI_PROCESS)])
def test_more_slices_give_the_same_layer_and_exact_counts(one_slice, tmp_path, slice_bytes, options):
    config = _config(str(tmp_path), slice_bytes)
    snapshot_id, manifest = _snapshot(config)
    assert ingest.slices_per_partition(estimated_text_bytes(manifest), PARTITIONS, slice_bytes) > 1
    layer = _ingest(config, snapshot_id, manifest, options)
    _same_layer(layer, one_slice)
    counts = ledger(layer)["counts"]
    assert (counts["in"], counts["passed"], counts["dead_letter"]) == (815, 768, 0)
    assert ledger(layer)["outputs"]["documents"]["rows"] == counts["passed"]
    assert ledger(layer)["outputs"]["repeats"]["rows"] == counts["filtered"]["repeated_record"]
    assert _leftovers(layer) == []


def test_a_rerun_after_a_kill_replays_finished_partitions_and_drops_the_pieces_left(one_slice, tmp_path):
    """What a build killed during ingest's writes leaves: no ledger, the task records and files of
    partitions 0 and 3, and pieces in the scratch folder (of finished and unfinished partitions)."""
    config = _config(str(tmp_path), SMALLEST)
    snapshot_id, manifest = _snapshot(config)
    layer = _ingest(config, snapshot_id, manifest)
    os.remove(layer.ledger_path)
    tasks = TaskLedger(layer.path, PARTITIONS)
    kept = {}
    for index in range(PARTITIONS):
        record = tasks.done(index)
        assert record is not None
        if index in (1, 2):
            os.remove(tasks.path(index))
            for path in files_of(layer.path, record):
                os.remove(path)
        else:
            kept.update({path: os.stat(path) for path in files_of(layer.path, record)})
    os.makedirs(os.path.join(layer.path, SCRATCH))
    stale = [ingest.piece_path(layer.path, index, PARTITIONS, index + PARTITIONS * 5) for index in range(PARTITIONS)]
    for path in stale:
        with open(path, "wb") as f:
            f.write(b"what a killed slice task wrote")

    assert clear_uncommitted(layer) == ["part-00000-of-00004", "part-00003-of-00004"]  # what the build calls
    assert not any(os.path.exists(path) for path in stale)
    again = _ingest(config, snapshot_id, manifest)
    _same_layer(again, one_slice)
    for path, before in kept.items():  # the finished partitions were not written again
        after = os.stat(path)
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), path
    assert _leftovers(again) == []


def test_a_retried_partition_task_whose_pieces_are_gone_replays_its_record(one_slice):
    """A runner may run a partition's task again after an attempt that wrote its record and deleted its
    pieces: the retry emits what the record holds. Pieces missing without a record are an error."""
    write = ingest._WritePartitionFn(one_slice.path, PARTITIONS)
    record = TaskLedger(one_slice.path, PARTITIONS).done(2)
    missing = {"slice": 0, "path": ingest.piece_path(one_slice.path, 2, PARTITIONS, 2), "counts": {}}
    emitted = list(write.process((2, {"pieces": [missing]})))
    assert emitted[0] == record["outputs"][ingest.DOCUMENTS]
    assert emitted[1].value == record["outputs"][ingest.REPEATS]
    assert emitted[2].value == {tuple(entry[:3]): entry[3] for entry in record["counts"]}

    elsewhere = ingest._WritePartitionFn(one_slice.path + "-not-written", PARTITIONS)
    with pytest.raises(FileNotFoundError):
        list(elsewhere.process((2, {"pieces": [missing]})))


def test_a_slice_is_a_share_of_its_partition():
    """Slice key ``xxh3(doc_id) % (n x s)`` is in partition ``key % n``, the partition of every layer."""
    from beam_pipeline.records.hashing import bucket_of

    for doc_id in (f"{i:032x}" for i in range(0, 10**6, 9973)):
        assert bucket_of(doc_id, 12 * 7) % 12 == bucket_of(doc_id, 12)
    assert ingest.slices_per_partition(0, 4, 1 << 20) == 1
    assert ingest.slices_per_partition(4 << 30, 48, 1 << 20) == 86
