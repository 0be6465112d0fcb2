"""A newcomer's first hour (issue 27): the documented commands run as written, mistakes are refused
before any work with one line and an exit code, Ctrl-C ends cleanly, every run keeps its report, a
dead-letter stop shows where and what, and a copied config finds its scores.

The CLI runs in subprocesses, as a user runs it; the builds are the tiny corpus (in process) or, for
the documented commands, the session's built sample (``built``)."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

import pytest

from conftest import IN_PROCESS, dataset_id_from_output, run_cli, tiny_corpus
from tests.helpers.newcomer import DOC_FILES, REPO, RUNS_MARKER, command_blocks, demo_workdir, error_lines, \
    interrupt_cli, unwritable_folder

SAMPLE_DATASET_ID = "63456ac6117ef4675437ec09b4e62ba00a9b767dae2f0d8b1051aa59988bb772"
TEXTS = [f"Document number {i} of the tiny corpus. " + "The quick brown fox jumps over the lazy dog. " * (12 + i % 5)
         for i in range(20)]


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


# --- the documented commands ---------------------------------------------------------------------

def test_documented_command_blocks_run_as_written_on_the_demo(built, tmp_path):
    assert built["manifest"]["dataset_id"] == SAMPLE_DATASET_ID  # the id the docs write out
    workdir = demo_workdir(built["root"], str(tmp_path / "checkout"))
    blocks = {path: [b for b in command_blocks(os.path.join(REPO, path)) if b["marked"]] for path in DOC_FILES}
    assert all(blocks.values()), f"a documented quick start lost its {RUNS_MARKER!r} marker: {blocks}"
    readme = command_blocks(os.path.join(REPO, "README.md"))
    unmarked_demo = [b["line"] for b in readme if "out/demo" in b["text"] and b["lang"] == "sh" and not b["marked"]]
    assert not unmarked_demo, f"README command blocks on the demo's output that no test runs (lines {unmarked_demo})"
    printed = ""
    for path, marked in blocks.items():
        for block in marked:
            assert "<" not in block["text"].replace("<<", ""), f"{path}:{block['line']}: a placeholder in a block"
            # every command runs; each that fails is reported (`diff` exits 1 when the datasets differ, as diff(1))
            script = "set -uo pipefail\ntrap 'echo \"FAILED($?): $BASH_COMMAND\" >&2' ERR\n" + block["text"]
            result = subprocess.run(["bash", "-c", script], cwd=workdir, capture_output=True, text=True, timeout=600)
            failed = [line for line in result.stderr.splitlines() if line.startswith("FAILED(")]
            unexpected = [line for line in failed if not line.startswith("FAILED(1): .venv/bin/beam-pipeline diff ")]
            assert not unexpected, f"{path}:{block['line']}:\n{block['text']}\n{result.stderr[-3000:]}"
            printed += result.stdout
    # what the README's commands did, checked against the data
    assert "dataset_id  d9037f943cd0214ccae9d176baaa5165b7099a9e2c100231efe00645a6825b5a" in printed  # takedown
    assert "changed  encyclopedic-00002-of-00003" in printed  # diff: the one shard the takedown rebuilt
    takedown = os.path.join(workdir, "out", "demo", "datasets")
    assert len(os.listdir(takedown)) == 2 and open(os.path.join(takedown, SAMPLE_DATASET_ID, "SUPERSEDED_BY")).read()
    assert os.path.getsize(os.path.join(workdir, "out", "megatron", "demo.bin")) > 0
    assert json.load(open(os.path.join(workdir, "out", "contamination.json")))
    assert not os.path.exists(os.path.join(built["root"], "datasets", SAMPLE_DATASET_ID, "SUPERSEDED_BY"))


# --- mistakes refused before any work ---------------------------------------------------------------

def test_a_mistyped_option_is_refused_naming_the_intended_one(tmp_path):
    config = tiny_corpus(tmp_path, "tiny", TEXTS)
    result = run_cli(["run", "--config", config, "--output-root", str(tmp_path / "elsewhere"), *IN_PROCESS])
    assert result.returncode == 2
    assert one_line(result.stderr) == "error: run: unknown option --output-root; did you mean --output_root?"
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(tmp_path / "elsewhere")  # nothing built


def test_an_unknown_beam_option_is_refused_and_the_known_ones_pass(tmp_path):
    config = tiny_corpus(tmp_path, "tiny", TEXTS)
    result = run_cli(["snapshot", "--config", config, "--direct_num_worker=2"])
    assert result.returncode == 2
    assert "unknown option --direct_num_worker; did you mean --direct_num_workers?" in one_line(result.stderr)
    result = run_cli(["snapshot", "--config", config, "--direct_num_workers=1", *IN_PROCESS])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("snapshot ")


def test_a_dataset_command_suggests_its_own_option(built):
    result = run_cli(["verify", built["dataset"], "--skip_lineage"])
    assert result.returncode == 2
    assert one_line(result.stderr) == "error: verify: unknown option --skip_lineage; did you mean --skip-lineage?"


def test_a_bad_runner_is_one_line_before_the_snapshot(tmp_path):
    config = tiny_corpus(tmp_path, "tiny", TEXTS)
    result = run_cli(["run", "--config", config, "--runner=Foo"])
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith("error: --runner=Foo: Beam has no such runner") and "DirectRunner" in line
    result = run_cli(["run", "--config", config, "--runner=FlinkRuner"])
    assert "did you mean --runner=FlinkRunner?" in one_line(result.stderr)
    assert not os.path.exists(tmp_path / "out")


def test_an_unwritable_output_root_is_refused_before_the_snapshot(tmp_path):
    config = tiny_corpus(tmp_path, "tiny", TEXTS)
    with unwritable_folder(str(tmp_path / "read-only")) as folder:
        result = run_cli(["run", "--config", config, "--output_root", os.path.join(folder, "out"), *IN_PROCESS])
    assert result.returncode == 4
    assert one_line(result.stderr).startswith(f"error: the output root {folder}/out cannot be written")
    assert "[snapshot]" not in result.stdout


@pytest.mark.parametrize("case", ["output root", "empty folder", "another manifest", "snapshot manifest"])
def test_inspect_on_something_else_than_a_dataset_is_one_line(built, tmp_path, case):
    target, expected = {
        "output root": (built["root"], f"is an output root, not a dataset: pass one of its datasets, "
                                       f"{built['root']}/datasets/{SAMPLE_DATASET_ID}"),
        "empty folder": (str(tmp_path), "no dataset manifest at"),
        "another manifest": (os.path.join(REPO, "sample"), "manifest.json is not a dataset manifest"),
        "snapshot manifest": (glob.glob(os.path.join(built["root"], "snapshots", "*.json"))[0],
                              "is not a dataset manifest (it is a snapshot manifest"),
    }[case]
    result = run_cli(["inspect", target])
    assert result.returncode == 3
    assert expected in one_line(result.stderr)
    assert run_cli(["inspect", built["dataset"]]).returncode == 0


def test_a_config_folder_names_the_yaml_in_it():
    for command in ("run", "select"):
        result = run_cli([command, "--config", "sample"])
        assert result.returncode == 2
        assert one_line(result.stderr) == ("error: --config sample is a folder: pass the corpus YAML file, "
                                           "e.g. sample/corpus.yaml")


def test_paths_that_cannot_be_read_or_written_are_one_line(built, tmp_path):
    result = run_cli(["dead-letter", str(tmp_path / "no-such-root")])
    assert result.returncode == 3
    assert one_line(result.stderr).startswith(f"error: no output root at {tmp_path / 'no-such-root'}")
    with unwritable_folder(str(tmp_path / "read-only")) as folder:
        result = run_cli(["export-megatron", built["dataset"], os.path.join(folder, "megatron", "demo")])
    assert result.returncode == 4
    target = os.path.join(folder, "megatron", "demo")
    assert one_line(result.stderr) in (
        f"error: cannot write the export {target}.bin/.idx ({reason}: {folder}/megatron); "
        f"pass an out_prefix in a folder you can write" for reason in ("Permission denied", "Operation not permitted"))


# --- Ctrl-C ---------------------------------------------------------------------------------------------

def test_ctrl_c_during_a_build_is_one_line_and_the_rerun_resumes(tmp_path):
    config = tiny_corpus(tmp_path, "tiny", TEXTS)
    # the local runner as `make demo` uses it (worker processes), interrupted as a terminal does
    result = interrupt_cli(["run", "--config", config], cwd=str(tmp_path), after_line="runs in this job", delay=1.0)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "CRITICAL" not in result.stderr, result.stderr[-3000:]
    (line,) = error_lines(result.stderr)
    assert line.startswith("interrupted; ") and line.endswith("; rerun the same command to resume")
    assert " of 5 layers of this build are committed" in line
    resumed = run_cli(["run", "--config", config, *IN_PROCESS])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path / "data", fresh / "data")
    shutil.copy(config, fresh / "corpus.yaml")
    reference = run_cli(["run", "--config", str(fresh / "corpus.yaml"), *IN_PROCESS])
    assert dataset_id_from_output(resumed.stdout) == dataset_id_from_output(reference.stdout)


# --- every run keeps its report ---------------------------------------------------------------------

def test_a_rerun_keeps_the_first_runs_report_and_writes_its_own(tmp_path):
    config = tiny_corpus(tmp_path, "tiny", TEXTS)
    first = run_cli(["run", "--config", config, *IN_PROCESS])
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = glob.glob(str(tmp_path / "out" / "runs" / "*"))
    kept = {name: open(os.path.join(run_dir, name), "rb").read() for name in ("metrics.json", "report.html")}
    assert not any(s["reused"] for s in json.loads(kept["metrics.json"])["stages"])

    for number in (2, 3):
        again = run_cli(["run", "--config", config, *IN_PROCESS])
        assert again.returncode == 0, again.stderr[-3000:]
        rerun = os.path.join(run_dir, f"rerun-{number}")
        assert f"metrics     {rerun}/metrics.json" in again.stdout
        assert f"report      {rerun}/report.html" in again.stdout
        metrics = json.load(open(os.path.join(rerun, "metrics.json")))
        assert all(s["reused"] for s in metrics["stages"]) and metrics["run_id"] == os.path.basename(run_dir)
        assert os.path.getsize(os.path.join(rerun, "report.html")) > 0
        assert {name: open(os.path.join(run_dir, name), "rb").read() for name in kept} == kept  # untouched

    # `report <root>`: the latest run (issue 43); `report <dataset>`: the run that built it; a rerun: its folder
    (dataset,) = glob.glob(str(tmp_path / "out" / "datasets" / "*"))
    latest = run_cli(["report", str(tmp_path / "out")])
    assert latest.returncode == 0 and latest.stdout.strip() == f"report      {run_dir}/rerun-3/report.html"
    again = run_cli(["report", dataset])
    assert again.returncode == 0 and again.stdout.strip() == f"report      {run_dir}/report.html"
    rerun = run_cli(["report", os.path.join(run_dir, "rerun-3")])
    assert rerun.returncode == 0 and rerun.stdout.strip() == f"report      {run_dir}/rerun-3/report.html"
    assert json.load(open(os.path.join(run_dir, "metrics.json"))) == json.loads(kept["metrics.json"])


# --- dead letters ----------------------------------------------------------------------------------------

def test_a_dead_letter_stop_prints_where_they_are_and_the_first_records(tmp_path):
    config = tiny_corpus(tmp_path, "tiny", TEXTS)
    with open(tmp_path / "data" / "docs.jsonl", "a") as f:
        f.write('{"id": "20", "text": "a record with a missing comma" "x": 1}\n')
    result = run_cli(["run", "--config", config, *IN_PROCESS])
    assert result.returncode == 1
    (folder,) = glob.glob(str(tmp_path / "out" / "dead_letter" / "ingest" / "*"))
    lines = error_lines(result.stderr)
    assert lines[0].startswith("error: stage ingest failed: ") and "max_dead_letter_fraction" in lines[0]
    assert lines[1] == (f"dead letters: 1 records of ingest in {folder}/ (first 1; all: python -m beam_pipeline "
                        f"dead-letter {tmp_path / 'out'} --stage ingest)")
    assert lines[2].startswith(f"  [docs] {tmp_path / 'data' / 'docs.jsonl'}, record 20 (line 21), byte ")
    assert "json" in lines[2].lower() and "delimiter" in lines[2]
    assert len(lines) == 3

    listed = run_cli(["dead-letter", str(tmp_path / "out")])
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[0] == f"ingest {os.path.basename(folder)}: 1 records in {folder}/"
    assert listed.stdout.splitlines()[1] == lines[2]


# --- re-selection from a copied config ----------------------------------------------------------------

def test_select_finds_the_scores_from_a_copy_of_the_config_and_inputs(tmp_path):
    original = tmp_path / "original"
    original.mkdir()
    config = tiny_corpus(original, "tiny", TEXTS)
    root = str(original / "out")
    assert run_cli(["run", "--config", config, *IN_PROCESS]).returncode == 0

    copy = tmp_path / "copy"
    shutil.copytree(original / "data", copy / "data")
    (copy / "corpus.yaml").write_text(open(config).read() + "policy: {min_words: 30}\n")  # only the policy changes
    result = run_cli(["select", "--config", str(copy / "corpus.yaml"), "--output_root", root, *IN_PROCESS])
    assert result.returncode == 0, result.stderr[-3000:]
    stages = {line.split()[0]: line for line in result.stdout.splitlines()
              if line.split() and line.split()[0] in ("ingest", "exact_dedup", "heuristics", "select", "tokenize")}
    assert stages["ingest"].endswith("(reused)") and stages["heuristics"].endswith("(reused)")
    assert not stages["select"].endswith("(reused)")
