"""Partition-level replay in the stages around the shuffles (beam_pipeline/transforms/task_ledger.py): ingest,
exact and near dedup, the n-gram index and tokenize. Each test leaves what a kill in one stage leaves (that
layer and every later one uncommitted, some of its tasks finished, others not), reruns the build and checks
that the finished partitions (shards) were kept, not written again, that the others were computed, and that
the dataset id and every layer's bytes are the clean build's.

One clean build is shared by the module: each test starts from and ends in a complete build of it."""
from __future__ import annotations

import glob
import hashlib
import os
import random
import shutil
import subprocess
import sys

import pytest

from beam_pipeline.storage.layers import Layer
from beam_pipeline.transforms.task_ledger import (SHARD_TASK, TaskLedger, clear_uncommitted, files_of,
                                                  finished_partitions, finished_shards, reuse_summary,
                                                  shard_files)
from conftest import IN_PROCESS, SAMPLE_TOKENIZER, dataset_id_from_output

WORDS = ("river town library book opening hours reading room rules visitor season mill bridge harbour market "
         "garden school bakery station museum tower street square council meeting winter summer festival "
         "painter fisher boat lantern orchard valley hill forest meadow weaver potter smith clock bell").split()


def _texts() -> list[str]:
    """Documents of varied words, with exact copies (exact dedup groups) and one-word edits (near dedup)."""
    rng = random.Random(44)
    texts = [" ".join(rng.choice(WORDS) for _ in range(60)) + f" note {i}." for i in range(48)]
    texts += texts[:4]  # exact copies
    texts += [text.replace(" note ", " remark ", 1) for text in texts[4:8]]  # near copies
    return texts


CONFIG = f"""name: replay-stages
output_root: out
sources: [{{name: docs, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}}]
cascade: [heuristics]
near_dedup: {{enabled: true}}
decontamination: {{index: true, ngram: 5}}
layout: {{min_partitions: 4}}
tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 64, shard_tokens: 512}}
"""


def _run(cwd) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "beam_pipeline", "run", "--config", "corpus.yaml", *IN_PROCESS],
                            cwd=cwd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _digests(root) -> dict[str, str]:
    """sha256 of every layer and shard file under ``root``/layers (task records and ledgers aside)."""
    paths = glob.glob(str(root / "layers" / "**" / "*"), recursive=True)
    return {os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest() for p in paths
            if os.path.isfile(p) and "/_tasks/" not in p and not p.endswith("_LEDGER.json")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(folder of a clean build, its dataset id, its layer files' digests)."""
    folder = tmp_path_factory.mktemp("replay_stages")
    (folder / "data").mkdir()
    with open(folder / "data" / "docs.jsonl", "w") as f:
        for i, text in enumerate(_texts()):
            f.write(f'{{"id": "{i}", "text": "{text}"}}\n')
    (folder / "corpus.yaml").write_text(CONFIG)
    result = _run(folder)
    return folder, dataset_id_from_output(result.stdout), _digests(folder / "out")


def _layer(root, stage: str) -> Layer:
    (path,) = glob.glob(str(root / "layers" / stage / "*"))
    return Layer(str(root), stage, os.path.basename(path))


STAGES = ("ingest", "heuristics", "exact_dedup", "near_dedup", "select", "ngram_index", "tokenize")


def _kill_in(root, stage: str) -> Layer:
    """What a kill while ``stage`` runs leaves: its layer uncommitted (its task records and files as they
    are), the layers committed after it not started (deleted), no dataset published (the shards still in
    the tokenize layer: publishing moves them out). Returns the stage's layer."""
    complete = [glob.glob(str(root / "layers" / s / "*" / "_LEDGER.json")) for s in STAGES]
    if not all(complete) or not glob.glob(str(root / "datasets" / "*" / "manifest.json")):
        _run(root.parent)  # an earlier test failed half-way: build it whole again first
    layer = _layer(root, stage)
    shards = _layer(root, "tokenize").output_path("shards")
    for path in glob.glob(str(root / "datasets" / "*" / "shards" / "*")):
        os.rename(path, os.path.join(shards, os.path.basename(path)))
    shutil.rmtree(root / "datasets")
    committed_at = os.stat(layer.ledger_path).st_mtime_ns
    os.remove(layer.ledger_path)
    for ledger in glob.glob(str(root / "layers" / "*" / "*" / "_LEDGER.json")):
        if os.stat(ledger).st_mtime_ns > committed_at:  # a later stage (it waited for this one's commit)
            shutil.rmtree(os.path.dirname(ledger))
    return layer


def _published(root, path: str) -> str:
    """Where a shard file of the tokenize layer is once the dataset is published (moved: same inode)."""
    if "/shards/" not in path or path.endswith(".meta.json"):
        return path
    (dataset,) = glob.glob(str(root / "datasets" / "*"))
    return os.path.join(dataset, "shards", os.path.basename(path))


def _unfinish(layer: Layer, ledger: TaskLedger, tasks: list[str], unfinished: list[str]) -> dict[str, os.stat_result]:
    """Delete the records of ``unfinished`` tasks and the first file each names (the task died before its
    record); return the stat of every file the finished ``tasks`` name."""
    kept = {}
    for task in tasks:
        record = ledger.done_task(task)
        assert record is not None, f"{layer.stage}: no task record {task} in the clean build"
        if task in unfinished:
            os.remove(ledger.record_path(task))
            os.remove(files_of(layer.path, record)[0])
        else:
            kept.update({path: os.stat(path) for path in files_of(layer.path, record)})
    return kept


def _rerun_and_check(built, kept: dict, message: str, recomputed: list[str]) -> str:
    folder, dataset_id, digests = built
    again = _run(folder)
    assert message in again.stdout, again.stdout
    assert dataset_id_from_output(again.stdout) == dataset_id
    assert _digests(folder / "out") == digests  # every layer and shard byte for byte
    for path, before in kept.items():  # the finished tasks' files were not written again
        after = os.stat(_published(folder / "out", path))
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), path
    for path in recomputed:  # the unfinished ones were
        assert os.path.exists(_published(folder / "out", path)), path
    return again.stdout


def _partition_tasks(layer: Layer, output: str | None = None) -> TaskLedger:
    return TaskLedger(layer.path, 4, output)


def test_ingest_replays_its_finished_partitions(built):
    root = built[0] / "out"
    layer = _kill_in(root, "ingest")
    ledger = _partition_tasks(layer)
    kept = _unfinish(layer, ledger, [ledger.task(i) for i in range(4)], [ledger.task(2)])
    redone = [os.path.join(layer.path, "documents", "part-00002-of-00004.parquet")]
    _rerun_and_check(built, kept, "[ingest] 3 of 4 partitions finished by an earlier, interrupted run: reused",
                     redone)


def test_exact_dedup_rewrites_only_its_unfinished_partitions(built):
    root = built[0] / "out"
    layer = _kill_in(root, "exact_dedup")
    ledger = _partition_tasks(layer, "annotations")
    kept = _unfinish(layer, ledger, [ledger.task(i) for i in range(4)], [ledger.task(1), ledger.task(3)])
    redone = [os.path.join(layer.path, "annotations", f"part-0000{i}-of-00004.parquet") for i in (1, 3)]
    _rerun_and_check(built, kept, "[exact_dedup] 2 of 4 annotations partitions finished by an earlier, "
                     "interrupted run: reused", redone)


def test_near_dedup_rewrites_only_its_unfinished_annotation_partitions(built):
    root = built[0] / "out"
    layer = _kill_in(root, "near_dedup")
    ledger = _partition_tasks(layer, "annotations")
    kept = _unfinish(layer, ledger, [ledger.task(i) for i in range(4)], [ledger.task(0)])
    signatures = glob.glob(os.path.join(layer.path, "signatures", "*.parquet"))
    before = {path: os.stat(path).st_ino for path in signatures}
    _rerun_and_check(built, kept, "3 of 4 annotations partitions", [os.path.join(
        layer.path, "annotations", "part-00000-of-00004.parquet")])
    # signing restarts whole (its members and keys feed the LSH shuffle): its partitions are written again
    assert all(os.stat(path).st_ino != ino for path, ino in before.items())


def test_the_ngram_index_replays_its_finished_partitions(built):
    root = built[0] / "out"
    layer = _kill_in(root, "ngram_index")
    ledger = _partition_tasks(layer)
    kept = _unfinish(layer, ledger, [ledger.task(i) for i in range(4)], [ledger.task(0)])
    _rerun_and_check(built, kept, "[ngram_index] 3 of 4 partitions finished by an earlier, interrupted run: "
                     "reused", [os.path.join(layer.path, "index", "part-00000-of-00004.parquet")])


def test_tokenize_keeps_its_finished_shards(built):
    root = built[0] / "out"
    layer = _kill_in(root, "tokenize")
    ledger = TaskLedger(layer.path, 0)
    names = sorted(os.path.basename(p)[: -len(".meta.json")]
                   for p in glob.glob(os.path.join(layer.path, "shards", "*.meta.json")))
    assert len(names) >= 3, names
    tasks = [SHARD_TASK + name for name in names]
    kept = _unfinish(layer, ledger, tasks, tasks[1:2])
    redone = [os.path.join(layer.path, "shards", f"{names[1]}.bin")]
    _rerun_and_check(built, kept, f"[tokenize] {len(names) - 1} shards finished by an earlier, interrupted run: "
                     "reused", redone)


def test_clear_uncommitted_keeps_the_files_of_finished_output_partitions_and_shards(tmp_path):
    layer = Layer(str(tmp_path), "tokenize", "k")
    for folder in ("annotations", "shards"):
        os.makedirs(os.path.join(layer.path, folder))

    def touch(*parts):
        open(os.path.join(layer.path, *parts), "wb").close()

    annotations = TaskLedger(layer.path, 2, "annotations")
    for index in range(2):
        touch("annotations", f"part-0000{index}-of-00002.parquet")
        touch("annotations", f"part-0000{index}-of-00002.parquet.meta.json")
    annotations.write(0, {"annotations": {"name": "part-00000-of-00002.parquet"}}, {}, [])
    for name in ("d-00000-of-00002", "d-00001-of-00002"):
        for suffix in (".bin", ".idx.parquet", ".meta.json"):
            touch("shards", name + suffix)
    shards = TaskLedger(layer.path, 0)
    shards.write_task(SHARD_TASK + "d-00001-of-00002", {}, files=shard_files("shards", "d-00001-of-00002"))
    os.remove(os.path.join(layer.path, "shards", "d-00001-of-00002.idx.parquet"))  # not finished after all
    shards.write_task(SHARD_TASK + "d-00000-of-00002", {}, files=shard_files("shards", "d-00000-of-00002"))

    kept = clear_uncommitted(layer)
    assert kept == ["annotations.part-00000-of-00002", "shard.d-00000-of-00002"]
    assert reuse_summary(kept, 2) == ["1 of 2 annotations partitions", "1 shards"]
    assert finished_partitions(layer.path, 2, "annotations") == [0] and finished_partitions(layer.path, 2) == []
    assert finished_shards(layer.path) == ["d-00000-of-00002"]
    left = sorted(os.path.relpath(p, layer.path) for p in glob.glob(os.path.join(layer.path, "**", "*"),
                                                                   recursive=True) if os.path.isfile(p))
    assert left == ["_tasks/annotations.part-00000-of-00002.json", "_tasks/shard.d-00000-of-00002.json",
                    "annotations/part-00000-of-00002.parquet", "annotations/part-00000-of-00002.parquet.meta.json",
                    "shards/d-00000-of-00002.bin", "shards/d-00000-of-00002.idx.parquet",
                    "shards/d-00000-of-00002.meta.json"]
