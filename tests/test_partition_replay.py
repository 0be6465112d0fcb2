"""The partition-level task ledger (beam_pipeline/transforms/task_ledger.py): a rerun of a killed build
computes only the partitions its tasks did not finish."""
from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import sys

from beam_pipeline.storage.layers import Layer
from beam_pipeline.transforms.task_ledger import TaskLedger, files_of, replayed_counts, replayed_dead_letters
from conftest import IN_PROCESS, dataset_id_from_output, tiny_corpus

TEXTS = [f"Entry {i}: the river town library lists new books, opening hours and the reading room rules for "
         f"visitors in season {i}, with notes on the old mill and the bridge." for i in range(40)]


def test_a_task_record_round_trips_counts_and_dead_letters(tmp_path):
    layer = tmp_path / "layer"
    (layer / "annotations").mkdir(parents=True)
    ledger = TaskLedger(str(layer), 4)
    sidecar = {"name": "part-00001-of-00004.parquet", "rows": 2, "bytes": 10, "sha256": "x"}
    dead = {"stage": "heuristics", "doc_id": "d", "raw_prefix": b"\xff\x00bytes", "error": "ValueError: x"}
    ledger.write(1, {"annotations": sidecar}, {("heuristics", "in", "web"): 3, ("heuristics", "passed", ""): 2}, [dead])
    assert ledger.done(1) is None  # the partition files it names are not there
    for path in files_of(str(layer), {"outputs": {"annotations": sidecar}}):
        open(path, "wb").close()
    record = ledger.done(1)
    assert record["outputs"] == {"annotations": sidecar} and ledger.done(0) is None
    assert replayed_counts(record) == {("heuristics", "in", "web"): 3, ("heuristics", "passed", ""): 2}
    assert replayed_dead_letters(record) == [dead]


def _run(tmp_path, config):
    result = subprocess.run([sys.executable, "-m", "beam_pipeline", "run", "--config", config, *IN_PROCESS],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _files(root) -> dict[str, str]:
    """sha256 of every layer partition file under ``root``/layers (the shards: the dataset id)."""
    return {os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in glob.glob(str(root / "layers" / "**" / "*.parquet"), recursive=True)
            if "/tokenize/" not in p}


def test_a_rerun_after_a_kill_replays_only_the_unfinished_partitions(tmp_path):
    config = tiny_corpus(tmp_path, "replay", TEXTS, extra_yaml="layout: {min_partitions: 4}\n")
    first = _run(tmp_path, config)
    root = tmp_path / "out"
    files = _files(root)

    # what a build killed in the scorers' pass leaves: heuristics and the stages after it uncommitted, and
    # only partitions 0, 1, 3 of heuristics and 0 of select finished (their task records written)
    def layer(stage):
        (path,) = glob.glob(str(root / "layers" / stage / "*"))
        return Layer(str(root), stage, os.path.basename(path))

    unfinished = {"heuristics": [2], "select": [1, 2, 3]}
    kept = {}
    for stage in ("heuristics", "select", "tokenize"):
        os.remove(layer(stage).ledger_path)
    for stage, indexes in unfinished.items():
        ledger = TaskLedger(layer(stage).path, 4)
        for index in range(4):
            record = ledger.done(index)
            assert record is not None
            if index in indexes:
                os.remove(ledger.path(index))
                os.remove(files_of(layer(stage).path, record)[0])  # the task died before its record
            else:
                kept.update({path: os.stat(path) for path in files_of(layer(stage).path, record)})

    again = _run(tmp_path, config)
    assert "[heuristics] 3 of 4 partitions finished by an earlier, interrupted run: reused" in again.stdout
    assert "[select] 1 of 4 partitions finished by an earlier, interrupted run: reused" in again.stdout
    assert "[tokenize] runs in this job" in again.stdout and "[ingest] layer" in again.stdout
    assert dataset_id_from_output(again.stdout) == dataset_id_from_output(first.stdout)
    assert _files(root) == files  # every layer byte for byte
    for path, before in kept.items():  # the finished partitions were not written again
        after = os.stat(path)
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), path
