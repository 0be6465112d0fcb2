"""A build killed with SIGKILL at any point, then rerun, gives the clean build's bytes.

To kill inside a late stage without paying for the stages before it, the
output root starts with a copy of the reference build's layers of every
earlier stage (what an earlier, interrupted run would have committed); the
killed run reuses them and dies inside the stage under test; the rerun must
finish from there to the reference bytes.
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import IN_PROCESS, REPO, SAMPLE_CONFIG, dataset_id_from_output, layer_digests, run_cli

pytestmark = pytest.mark.slow

# Kill as soon as the stage has started writing (its layer folder exists), or,
# for tokenize, once at least one shard file is in place.
KILL_POINTS = {
    "ingest": "layers/ingest/*/documents",
    "select": "layers/select/*",
    "tokenize": "layers/tokenize/*/shards/*.bin",
}


def copy_layers_before(stage: str, reference_root: str, root: str, run_order: list[str]) -> None:
    """Copy the reference's snapshot and the complete layers of the stages that run before ``stage``."""
    shutil.copytree(os.path.join(reference_root, "snapshots"), os.path.join(root, "snapshots"))
    for earlier in run_order[:run_order.index(stage)]:
        shutil.copytree(os.path.join(reference_root, "layers", earlier), os.path.join(root, "layers", earlier))


def start_and_kill_when(root: str, pattern: str, timeout: float = 300) -> bool:
    """Start a build; SIGKILL it when ``pattern`` appears. Returns True if killed mid-way."""
    process = subprocess.Popen([sys.executable, "-m", "beam_pipeline", "run", "--config", SAMPLE_CONFIG,
                                "--output_root", root, *IN_PROCESS], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if glob.glob(os.path.join(root, pattern)):
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


@pytest.mark.parametrize("stage", list(KILL_POINTS))
def test_killed_build_resumes_to_the_same_dataset(stage, built, tmp_path):
    root = str(tmp_path / "out")
    copy_layers_before(stage, built["root"], root, list(built["stages"]))
    assert start_and_kill_when(root, KILL_POINTS[stage]), f"the build finished before reaching {stage}"
    assert not glob.glob(os.path.join(root, "datasets", "*", "manifest.json"))
    result = run_cli(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *IN_PROCESS])
    assert result.returncode == 0, result.stderr[-3000:]
    assert dataset_id_from_output(result.stdout) == built["manifest"]["dataset_id"]
    assert layer_digests(root) == layer_digests(built["root"])
    shard_files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "datasets", "*", "shards", "*")))
    expected = sorted(os.path.basename(p) for p in glob.glob(os.path.join(built["dataset"], "shards", "*")))
    assert shard_files == expected  # nothing duplicated, nothing half-written left beside them
