"""Exit codes match docs/config.md's table, a test per code (issue 43, item 5).

Each command runs in a subprocess, as a user runs it; every failure is one ``error:`` line. The dataset is
the tiny corpus, built once for the module. Ctrl-C (130) is tested in tests/test_newcomer.py
(``interrupt_cli``: a terminal's SIGINT to the process group)."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import time

import pytest

from beam_pipeline import errors
from beam_pipeline.cli import usage
from beam_pipeline.build.lease import LEASE, Holder
from conftest import IN_PROCESS, REPO, run_cli, tiny_corpus
from tests.helpers.newcomer import unwritable_folder

TEXTS = [f"Exit code document {i}. " + "Pack my box with five dozen liquor jugs, said the fox. " * (10 + i % 3)
         for i in range(16)]


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Errno" not in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("exit-codes")
    config = tiny_corpus(base, "exit-codes", TEXTS)
    result = run_cli(["run", "--config", config, "--output_root", str(base / "out"), *IN_PROCESS])
    assert result.returncode == 0, result.stderr[-3000:]
    (dataset,) = glob.glob(str(base / "out" / "datasets" / "*"))
    return {"base": base, "config": config, "dataset": dataset}


def test_the_table_of_docs_config_md_lists_every_code_the_cli_uses():
    text = open(os.path.join(REPO, "docs", "config.md"), encoding="utf-8").read()
    table = text[text.index("### Exit codes"):]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert documented == {0, *errors.EXIT_CODES.values()}


def test_0_done(tiny):
    result = run_cli(["inspect", tiny["dataset"]])
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_1_a_check_that_ran_and_failed(tiny, tmp_path):
    copy = str(tmp_path / "datasets" / os.path.basename(tiny["dataset"]))
    shutil.copytree(tiny["dataset"], copy)
    shard = json.load(open(os.path.join(copy, "manifest.json")))["shards"][0]
    tokens = os.path.join(copy, shard["tokens_file"])
    data = bytearray(open(tokens, "rb").read())
    data[0] ^= 0xFF
    open(tokens, "wb").write(bytes(data))
    result = run_cli(["verify", copy])
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]


def test_2_a_wrong_command_line(tiny):
    result = run_cli(["run", "--config", tiny["config"], "--output-root", "elsewhere"])
    assert result.returncode == 2
    assert "did you mean --output_root?" in one_error_line(result)


def test_3_a_glob_that_matches_nothing(tmp_path):
    config = tiny_corpus(tmp_path, "exit-codes", TEXTS)
    with open(config) as f:
        text = f.read().replace("data/*.jsonl", "nowhere/*.jsonl")
    with open(config, "w") as f:
        f.write(text)
    result = run_cli(["run", "--config", config, "--output_root", str(tmp_path / "out"), *IN_PROCESS])
    assert result.returncode == 3, result.stderr[-3000:]
    assert "source 'docs'" in one_error_line(result) and "matched no files" in result.stderr


def test_3_a_folder_that_holds_no_dataset(tmp_path):
    result = run_cli(["inspect", str(tmp_path)])
    assert result.returncode == 3
    one_error_line(result)


def test_4_an_export_target_that_cannot_be_written(tiny, tmp_path):
    with contextlib_unwritable(tmp_path / "locked") as locked:
        for prefix in (os.path.join(locked, "demo"), os.path.join(locked, "sub", "demo")):
            result = run_cli(["export-megatron", tiny["dataset"], prefix])
            assert result.returncode == 4, result.stderr[-3000:]
            line = one_error_line(result)
            assert f"cannot write the export {prefix}.bin/.idx" in line and "out_prefix" in line
        assert os.listdir(locked) == []  # no temporary file left


def test_4_an_output_root_that_cannot_be_written(tiny, tmp_path):
    with contextlib_unwritable(tmp_path / "locked") as locked:
        result = run_cli(["run", "--config", tiny["config"], "--output_root", os.path.join(locked, "out"),
                          *IN_PROCESS])
    assert result.returncode == 4
    assert "--output_root" in one_error_line(result)


def test_75_another_build_holds_the_output_root(tiny, tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    (root / LEASE).write_bytes(Holder("other", "elsewhere", 4242, "2026-01-02T03:04:05Z", time.time(), 120).encode())
    result = run_cli(["run", "--config", tiny["config"], "--output_root", str(root), *IN_PROCESS])
    assert result.returncode == 75, result.stderr[-3000:]
    assert "host elsewhere, pid 4242, started 2026-01-02T03:04:05Z" in one_error_line(result)


def contextlib_unwritable(path):
    return unwritable_folder(str(path))
