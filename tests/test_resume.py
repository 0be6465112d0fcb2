"""A build killed with SIGKILL at any point, then rerun, gives the clean build's bytes.

To kill inside a late stage without paying for the stages before it, the
output root starts with a copy of the reference build's layers of every
earlier stage (what an earlier, interrupted run would have committed); the
killed run reuses them and dies inside the stage under test; the rerun must
finish from there to the reference bytes.
"""
import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import IN_PROCESS, REPO, SAMPLE_CONFIG, dataset_id_from_output, layer_digests, run_cli
from tests.helpers.resume import copy_layers_before

pytestmark = pytest.mark.slow

# Kill as soon as the stage has started writing (its layer folder exists), or,
# for tokenize, once at least one shard file is in place.
KILL_POINTS = {
    "ingest": "layers/ingest/*/documents",
    "select": "layers/select/*",
    "tokenize": "layers/tokenize/*/shards/*.bin",
}


def start_and_kill(root: str, log_path: str, due, timeout: float = 300) -> bool:
    """Start a build (output to ``log_path``); SIGKILL it once ``due()`` is true. True if killed mid-way."""
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "beam_pipeline", "run", "--config", SAMPLE_CONFIG,
                                    "--output_root", root, *IN_PROCESS], cwd=REPO,
                                   stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if due():
                if process.poll() is not None:
                    return False
                process.send_signal(signal.SIGKILL)
                process.wait()
                return True
            if process.poll() is not None:
                return False
            time.sleep(0.02)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return False


def when_files(root: str, pattern: str):
    """Due as soon as a file matching ``pattern`` exists under ``root``."""
    return lambda: bool(glob.glob(os.path.join(root, pattern)))


def seconds_after_line(log_path: str, line: str, delay: float):
    """Due ``delay`` seconds after the build printed ``line``."""
    seen = []

    def due() -> bool:
        if not seen and line in open(log_path).read():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= delay
    return due


def rerun_matches_reference(root: str, built: dict) -> None:
    assert not glob.glob(os.path.join(root, "datasets", "*", "manifest.json"))
    result = run_cli(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *IN_PROCESS])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "report could not be written" not in result.stderr, result.stderr[-3000:]
    assert dataset_id_from_output(result.stdout) == built["manifest"]["dataset_id"]
    assert layer_digests(root) == layer_digests(built["root"])
    shard_files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "datasets", "*", "shards", "*")))
    expected = sorted(os.path.basename(p) for p in glob.glob(os.path.join(built["dataset"], "shards", "*")))
    assert shard_files == expected  # nothing duplicated, nothing half-written left beside them
    leftovers = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.startswith(".tmp-")]
    assert leftovers == []  # the killed run's half-written files are gone


@pytest.mark.parametrize("stage", list(KILL_POINTS))
def test_killed_build_resumes_to_the_same_dataset(stage, built, tmp_path):
    root = str(tmp_path / "out")
    copy_layers_before(stage, built["root"], root, list(built["stages"]))
    log_path = str(tmp_path / "killed-run.log")
    assert start_and_kill(root, log_path, when_files(root, KILL_POINTS[stage])), \
        f"the build finished before reaching {stage}: " + open(log_path).read()[-3000:]
    rerun_matches_reference(root, built)


def test_killed_during_near_dup_clustering_resumes_to_the_same_dataset(built, tmp_path):
    """Killed while the near-dup job hashes, bands and joins components (before it writes anything)."""
    root = str(tmp_path / "out")
    copy_layers_before("near_dedup", built["root"], root, list(built["stages"]))
    log_path = str(tmp_path / "killed-run.log")
    due = seconds_after_line(log_path, "[near_dedup] runs in this job", 3.0)
    assert start_and_kill(root, log_path, due), open(log_path).read()[-3000:]
    assert not glob.glob(os.path.join(root, "layers", "near_dedup", "*", "_LEDGER.json")), "killed too late"
    rerun_matches_reference(root, built)
