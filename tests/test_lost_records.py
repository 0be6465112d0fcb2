"""Records a runner loses are never lost silently: the stage's job runs again, or the build fails.

The local FnApiRunner lost records in our runs (``multi_threading`` on the
sample; ``multi_processing`` in the near-dup stage at 525 MB and 1 GB, before
that stage stopped handing its documents between two steps: docs/decisions.md). Two checks catch it: the counters of a
stage must balance (``in = passed + filtered + dead_letter``), and each output
must hold as many rows as the counter it mirrors. A stage that fails either
check is not committed; its files are deleted and its job runs again, up to
``--max_stage_attempts``.

The losses are injected in-process (the in-memory runner runs the DoFns in this
interpreter), once: the first attempt loses a record, the next does not.
"""
from __future__ import annotations

import glob
import json
import os

import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.transforms import exact_dedup, layer_io
from conftest import IN_PROCESS, stages_by_name, tiny_corpus

TEXTS = [f"Document {i} describes the rivers, hills and weather of valley number {i} in some detail. " * 2
         for i in range(30)]


def write_corpus(tmp_path, gated: bool = True) -> str:
    config = tiny_corpus(tmp_path, "lost", TEXTS)
    if not gated:  # every document into every stage (docs/filters.md, "Gates")
        with open(config) as f:
            text = f.read().replace("cascade: [heuristics]", "cascade: {stages: [heuristics], gate: false}")
        with open(config, "w") as f:
            f.write(text)
    return config


def dataset_id_of(config: str, root: str) -> str:
    """The dataset id of a clean build of ``config``."""
    assert build(config, root) == 0
    (path,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    return json.load(open(path))["dataset_id"]


def build(config: str, root: str, *extra: str) -> int:
    return cli.main(["run", "--config", config, "--output_root", root, *IN_PROCESS, *extra])


def run_metrics(root: str) -> dict:
    (path,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    return stages_by_name(json.load(open(path)))


@pytest.fixture(scope="module")
def clean_dataset_id(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("clean")
    config = write_corpus(tmp_path)
    assert build(config, str(tmp_path / "out")) == 0
    return json.load(open(os.path.join(str(tmp_path / "out"), "runs", os.listdir(tmp_path / "out" / "runs")[0],
                                       "metrics.json")))["dataset_id"]


def lose_first_member_joined(monkeypatch) -> list:
    """The first member exact_dedup joins with its representative (counted ``in`` when it was keyed)
    never reaches the annotation, once: as if the runner had lost a record in the shuffle."""
    lost = []
    process = exact_dedup._AnnotateFn.process

    def losing(self, joined):
        content_hash, groups = joined
        if not lost:
            members = list(groups["members"])
            lost.append(members[0][3])
            groups = {**groups, "members": members[1:]}
        yield from process(self, (content_hash, groups))

    monkeypatch.setattr(exact_dedup._AnnotateFn, "process", losing)
    return lost


def lose_first_row_joined(monkeypatch, stage: str, side: str) -> list:
    """The first row ``stage`` reads from ``side`` ("documents" or a layer's name) is missing from its
    partition, once (as if an upstream job had lost it)."""
    lost = []
    merge_join = layer_io.merge_join

    def losing(documents, layers, where, required=()):
        if where.startswith(f"{stage}, ") and not lost:
            if side == "documents":
                documents = iter(documents)
                lost.append(next(documents)["doc_id"])
            else:
                rows = iter(layers[side])
                lost.append(next(rows)["doc_id"])
                layers = {**layers, side: rows}
        return merge_join(documents, layers, where, required)

    monkeypatch.setattr(layer_io, "merge_join", losing)
    return lost


@pytest.fixture
def lose_once_after_counting(monkeypatch):
    return lose_first_member_joined(monkeypatch)


@pytest.fixture
def lose_once_before_writing(monkeypatch):
    """The first partition the select stage writes loses its last row (counted, never written)."""
    lost = []
    write = layer_io.write_partition

    def losing(directory, index, count, rows, schema):
        if "/layers/select/" in directory and "/gold" in directory and rows and not lost:
            lost.append(rows[-1]["doc_id"])
            rows = rows[:-1]
        return write(directory, index, count, rows, schema)

    monkeypatch.setattr(layer_io, "write_partition", losing)
    return lost


def test_a_record_lost_after_counting_reruns_the_stage(lose_once_after_counting, clean_dataset_id, tmp_path, capsys):
    config = write_corpus(tmp_path)
    root = str(tmp_path / "out")
    assert build(config, root) == 0
    assert len(lose_once_after_counting) == 1
    out = capsys.readouterr().out
    assert ("[exact_dedup] WARNING: attempt 1 of 3: stage exact_dedup failed: stage exact_dedup "
            "(all sources): in=30 but passed=29") in out
    stages = run_metrics(root)
    assert stages["exact_dedup"]["attempts"] == 2 and stages["ingest"]["attempts"] == 1
    assert f"dataset_id  {clean_dataset_id}" in out


def test_a_row_lost_before_writing_reruns_the_stage(lose_once_before_writing, clean_dataset_id, tmp_path, capsys):
    config = write_corpus(tmp_path)
    root = str(tmp_path / "out")
    assert build(config, root) == 0
    assert len(lose_once_before_writing) == 1
    out = capsys.readouterr().out
    assert ("[select] WARNING: attempt 1 of 3: stage select failed: stage select: passed=30 but its "
            "gold output holds 29 rows") in out
    assert run_metrics(root)["select"]["attempts"] == 2
    assert f"dataset_id  {clean_dataset_id}" in out


@pytest.mark.parametrize("stage,join,side,gated,message", [
    # dedup's gate joins the documents to the heuristics layer before it in the cascade
    ("exact_dedup", "exact_dedup gate", "documents", True,
     "annotations for doc_id {} but no document (records were lost on the way)"),
    # ungated, exact dedup annotates every document: select's join requires its row
    ("select", "select", "exact", False, "document {} has no exact row (records were lost on the way)"),
])
def test_a_row_missing_from_a_join_reruns_the_stage(stage, join, side, gated, message, monkeypatch, tmp_path, capsys):
    """A stage joins the documents to earlier annotations. A lost document leaves annotations
    without their document; a lost row of a layer that annotates every document leaves a document
    without it (not an absent score). Either way the stage raises, and the driver reruns the job."""
    clean = tmp_path / "clean"
    clean.mkdir()
    expected = dataset_id_of(write_corpus(clean, gated), str(clean / "out"))
    lost = lose_first_row_joined(monkeypatch, join, side)
    config = write_corpus(tmp_path, gated)
    root = str(tmp_path / "out")
    assert build(config, root) == 0
    assert len(lost) == 1
    out = capsys.readouterr().out
    warning = next(line for line in out.splitlines()
                   if f"[{stage}] WARNING: attempt 1 of 3: stage {stage} failed:" in line)
    assert message.format(lost[0]) in warning
    assert run_metrics(root)[stage]["attempts"] == 2
    assert f"dataset_id  {expected}" in out


def test_with_one_attempt_a_loss_fails_the_build(lose_once_after_counting, tmp_path, capsys):
    config = write_corpus(tmp_path)
    root = str(tmp_path / "out")
    assert build(config, root, "--max_stage_attempts=1") == 1
    err = capsys.readouterr().err
    assert "stage exact_dedup (all sources): in=30 but passed=29" in err and "records were lost" in err
    assert not glob.glob(os.path.join(root, "layers", "exact_dedup", "*", "_LEDGER.json"))
    assert not glob.glob(os.path.join(root, "datasets", "*"))
