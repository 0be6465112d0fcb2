"""Shared fixtures: the bundled sample, runner arguments, a fresh output root."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_CONFIG = os.path.join(REPO, "sample", "corpus.yaml")

#: In-process runner, one thread: the fastest setting for small test inputs.
IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def run_cli(args: list[str], env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python -m beam_pipeline`` in a fresh interpreter (own PYTHONHASHSEED)."""
    return subprocess.run([sys.executable, "-m", "beam_pipeline", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def dataset_id_from_output(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("dataset_id"):
            return line.split()[1]
    raise AssertionError(f"no dataset_id in output:\n{stdout}")


@pytest.fixture
def output_root(tmp_path):
    root = tmp_path / "out"
    yield str(root)
    shutil.rmtree(root, ignore_errors=True)
