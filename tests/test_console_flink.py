"""The console on embedded Flink and in landing runs (issue 43): ``land`` takes the runner defaults ``run``
takes (``--runner=FlinkRunner --flink_master=[local]`` alone: the job server ``make flink`` assembled,
Flink 1.19, LOOPBACK workers; it used to try to download a Flink 2.2 job server and die with a
169-line traceback), and no Beam, Maven or gRPC line reaches the console unless ``--verbose``: the job
server's output, "Really destroying service ...", "Matching Continuously is stateful ...", "Waiting for
grpc channel ..." go to the run's ``beam.log`` (``land``: ``<root>/logs/land-*/beam.log``).

tests/test_console.py has the same checks for the local runner; the console of a build on embedded Flink
is checked on the sample's build in tests/test_flink_embedded.py (one embedded build serves both). The
commands run in subprocesses, as a user runs them; every test is marked ``flink_embedded`` and skips when
Java or the jar is missing."""
from __future__ import annotations

import glob
import os
import shutil

import pytest

from arrivals_helpers import landing_config, write_text
from beam_pipeline.options.corpus_options import flink_job_server_jar
from conftest import run_cli
from tests.helpers.console import assert_quiet_console

pytestmark = [
    pytest.mark.flink_embedded,
    pytest.mark.skipif(shutil.which("java") is None, reason="embedded Flink needs Java (a JRE 11 or 17) on PATH"),
    pytest.mark.skipif(not os.path.exists(flink_job_server_jar()),
                       reason=f"no Flink job server jar at {flink_job_server_jar()}: run `make flink` once"),
]

#: What the user types: the runner and the master, nothing else (the rest are run's defaults).
EMBEDDED_FLINK = ["--runner=FlinkRunner", "--flink_master=[local]", "--parallelism=2"]
SLOW = {"poll_interval_seconds": 0.5, "stable_polls": 3, "window_seconds": 4}


def test_land_on_embedded_flink_takes_runs_defaults_and_its_console_is_quiet(tmp_path):
    landing = tmp_path / "landing"
    for name in ("x.txt", "y.txt"):
        write_text(landing / name, f"the bytes of {name}\n", mtime=1_600_000_000)
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {"uri": str(landing / "*.txt"), "landing": SLOW}})
    # streaming (continuous matching: Beam warns that it is stateful), stopped after a few windows
    result = run_cli(["land", "--config", config, "--stop_after", "30", *EMBEDDED_FLINK], timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert_quiet_console(result)
    assert "landed      " in result.stdout and "[land] window " in result.stdout, result.stdout
    (log,) = glob.glob(os.path.join(root, "logs", "land-*", "beam.log"))
    assert f"log         {log}" in result.stdout.splitlines()
    text = open(log, encoding="utf-8").read()
    assert "flink-1.19-job-server" in text and "Matching Continuously is stateful" in text
