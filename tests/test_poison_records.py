"""A record that makes a scorer raise costs that record (a dead letter), not the run; too many
such records fail the run with a message that names the stage and the threshold.

The fault is injected into the heuristics scorer in-process (the in-memory runner runs the
DoFns in this interpreter): it raises for any document containing the word POISON.
"""
from __future__ import annotations

import glob
import json

import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.filters import heuristics
from conftest import IN_PROCESS, stages_by_name, tiny_corpus

GOOD = [f"Document number {i} talks about rivers, mountains and the weather of region {i}. " * 3
        for i in range(20)]


@pytest.fixture
def poisoned_heuristics(monkeypatch):
    real = heuristics.score

    def score(text, *args, **kwargs):
        if "POISON" in text:
            raise RuntimeError("injected fault: this record crashes the scorer")
        return real(text, *args, **kwargs)

    monkeypatch.setattr(heuristics, "score", score)


def write_corpus(tmp_path, poisoned: int, max_dead_letter_fraction: float) -> str:
    texts = GOOD + [f"POISON record {i} with enough words to pass every length rule of the policy." for i in
                    range(poisoned)]
    return tiny_corpus(tmp_path, "poison", texts,
                       f"accounting: {{max_dead_letter_fraction: {max_dead_letter_fraction}}}\n")


def test_one_poison_record_is_dead_lettered_and_the_run_succeeds(poisoned_heuristics, tmp_path):
    config = write_corpus(tmp_path, poisoned=1, max_dead_letter_fraction=0.1)
    assert cli.main(["run", "--config", config, *IN_PROCESS]) == 0
    (metrics,) = glob.glob(str(tmp_path / "out" / "runs" / "*" / "metrics.json"))
    stages = stages_by_name(json.load(open(metrics)))
    counts = stages["heuristics"]["counts"]
    assert counts["in"] == 21 and counts["dead_letter"] == 1 and counts["passed"] == 20
    for name, stage in stages.items():
        c = stage["counts"]
        assert c["in"] == c["passed"] + sum(c["filtered"].values()) + c["dead_letter"], name
    (part,) = glob.glob(str(tmp_path / "out" / "dead_letter" / "heuristics" / "*" / "*.parquet"))
    (row,) = pq.read_table(part).to_pylist()
    assert row["stage"] == "heuristics" and "injected fault" in row["error"] and row["doc_id"]
    assert row["raw_prefix"].startswith(b"POISON record 0")


def test_too_many_poison_records_fail_the_run_with_a_clear_message(poisoned_heuristics, tmp_path, capsys):
    config = write_corpus(tmp_path, poisoned=5, max_dead_letter_fraction=0.1)
    assert cli.main(["run", "--config", config, *IN_PROCESS]) == 1
    err = capsys.readouterr().err
    assert "stage heuristics: 5 of 25 records" in err and "max_dead_letter_fraction=10.00%" in err
    assert not glob.glob(str(tmp_path / "out" / "layers" / "heuristics" / "*" / "_LEDGER.json"))
    assert not glob.glob(str(tmp_path / "out" / "datasets" / "*"))
