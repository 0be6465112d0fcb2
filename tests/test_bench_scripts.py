"""Every benchmark script still imports and parses its arguments.

The benchmarks run outside ``make test`` (they take minutes to hours), so a
rename inside ``beam_pipeline`` could break one silently: ``bench_near_dedup``
imported ``beam_pipeline.minhash`` for weeks after it moved to
``beam_pipeline.dedup``. ``--help`` imports everything a script needs and
exits before any work.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "profile_summary.py")  # no argparse: a usage line


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_bench_script_imports_and_parses_help(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_profile_summary_imports():
    done = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = ['x']; "
                           f"runpy.run_path({str(BENCH / 'profile_summary.py')!r}, run_name='not_main')"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
