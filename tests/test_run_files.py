"""Files of runs and datasets as the docs describe them (issue 43, item 5): ``report <root>`` takes the
latest run (a rerun included); a what-if report (``--target_tokens``, ``--mixture``) is a file of its own,
named on the console, and the run's report.html is unchanged; a rebuild of a dataset that a takedown
superseded says so, naming the successor. The tiny corpus, built once for the module (in a subprocess)."""
from __future__ import annotations

import glob
import json
import os

import pytest

from conftest import IN_PROCESS, dataset_id_from_output, run_cli, tiny_corpus

TEXTS = [f"Run files document {i}. " + "How vexingly quick daft zebras jump over the fence. " * (10 + i % 3)
         for i in range(16)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("run-files")
    config = tiny_corpus(base, "run-files", TEXTS)
    root = str(base / "out")
    first = run_cli(["run", "--config", config, "--output_root", root, *IN_PROCESS])
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_cli(["run", "--config", config, "--output_root", root, *IN_PROCESS])
    assert second.returncode == 0, second.stderr[-3000:]
    return {"base": base, "config": config, "root": root, "dataset_id": dataset_id_from_output(first.stdout)}


def report_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("report ")).split(None, 1)[1]


def test_report_of_an_output_root_takes_the_latest_run(runs):
    (rerun,) = glob.glob(os.path.join(runs["root"], "runs", "*", "rerun-2", "metrics.json"))
    result = run_cli(["report", runs["root"]])
    assert result.returncode == 0, result.stderr[-3000:]
    assert report_line(result.stdout) == os.path.join(os.path.dirname(rerun), "report.html")


def test_a_what_if_report_is_a_file_of_its_own_and_says_where(runs):
    (first_run,) = glob.glob(os.path.join(runs["root"], "runs", "*", "metrics.json"))
    folder = os.path.dirname(first_run)
    own = open(os.path.join(folder, "report.html"), "rb").read()
    result = run_cli(["report", folder, "--target_tokens", "50000", "--mixture", "d=1"])
    assert result.returncode == 0, result.stderr[-3000:]
    path = report_line(result.stdout)
    assert os.path.dirname(path) == folder and os.path.basename(path) != "report.html"
    assert "50,000" in open(path, encoding="utf-8").read()
    assert open(os.path.join(folder, "report.html"), "rb").read() == own  # the run's own report is unchanged
    assert "what-if" in result.stdout and "report.html" in result.stdout


def test_a_rebuild_of_a_superseded_dataset_warns_naming_its_successor(runs, tmp_path):
    dataset = os.path.join(runs["root"], "datasets", runs["dataset_id"])
    from pyarrow import parquet

    shard = json.load(open(os.path.join(dataset, "manifest.json")))["shards"][0]
    index = os.path.join(dataset, shard["index_file"])
    victim = parquet.read_table(index, columns=["doc_id"]).column("doc_id")[0].as_py()
    (tmp_path / "ids.txt").write_text(victim + "\n")
    taken = run_cli(["takedown", "--dataset", dataset, "--doc-ids", str(tmp_path / "ids.txt")])
    assert taken.returncode == 0, taken.stderr[-3000:]
    successor = json.load(open(os.path.join(dataset, "SUPERSEDED_BY")))["dataset_id"]
    again = run_cli(["run", "--config", runs["config"], "--output_root", runs["root"], *IN_PROCESS])
    assert again.returncode == 0, again.stderr[-3000:]
    assert dataset_id_from_output(again.stdout) == runs["dataset_id"]
    (warning,) = [line for line in again.stdout.splitlines() if "superseded" in line]
    assert warning.startswith("warning ") and runs["dataset_id"] in warning
    assert os.path.join(runs["root"], "datasets", successor) in warning
