"""The install block of docs/operations.md runs as written (issue 43, item 5).

A machine that only runs builds follows docs/operations.md, "Installing": a fresh ``python3.11 -m venv``,
the hashed runtime lock, the package, the model. The block is run as written, in a copy of this checkout
(``pip install .`` builds in the source tree), with pip's own cache (the first run downloads the runtime
lock's wheels; later runs reuse them). The model fetch is a no-op when the model cache holds the model,
as it does after ``make venv``."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers.newcomer import REPO, command_blocks

MARKER = "<!-- tests/test_operations_install.py runs this block"


def install_block() -> dict:
    path = os.path.join(REPO, "docs", "operations.md")
    text = open(path, encoding="utf-8").read()
    marked = [b for b in command_blocks(path)
              if text.splitlines()[b["line"] - 2].startswith(MARKER)]
    assert len(marked) == 1, f"docs/operations.md: expected one block marked {MARKER!r}"
    return marked[0]


_ANYWHERE = shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache",
                                   ".ruff_cache")
_AT_THE_ROOT = {"venv", "out", "build", "bench"}  # a setuptools build/ at the root, not beam_pipeline/build/


def _not_a_clone(folder: str, names: list[str]) -> set[str]:
    """What a fresh clone would not hold (shutil.copytree's ``ignore``)."""
    ignored = set(_ANYWHERE(folder, names))
    if os.path.samefile(folder, REPO):
        ignored |= _AT_THE_ROOT & set(names)
    return ignored


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(shutil.which("python3.11") is None, reason="the block needs python3.11 on the PATH")
def test_the_install_block_of_operations_md_runs_on_a_fresh_venv(tmp_path):
    block = install_block()
    assert block["text"].startswith("python3.11 -m venv venv\n"), block["text"]
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=_not_a_clone)
    script = "set -euo pipefail\n" + block["text"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    result = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True,
                            timeout=1700)
    assert result.returncode == 0, f"{block['text']}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    check = subprocess.run([str(checkout / "venv" / "bin" / "python"), "-m", "beam_pipeline", "run", "--help"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "--config" in check.stdout, check.stderr[-3000:]
