"""The sample on embedded Flink gives the reference dataset, with the command the docs give.

``--runner=FlinkRunner --flink_master=[local]`` runs the build's one job on a
Flink mini cluster inside the Beam job server (a JVM the FlinkRunner starts):
Flink's managed memory and its sorting and spilling to local disk, on one
machine. The defaults that make that command work as written (Flink 1.19, the
job server ``make flink`` assembled from Maven Central, SDK workers in the
build's process) are :class:`beam_pipeline.options.LocalRunnerDefaults`'. ``make test``
assembles the job server first; here it must exist (no skip: CI runs this).

The job must also get past Flink's batch optimizer, which walks every route
through the plan (docs/flink.md, "Routes through the plan"): at 129ca5e the
build's plan had 1.3e9 routes and this test hung for 30 minutes before any
task ran; ``tests/test_plan_routes.py`` keeps that number bounded. The
timeout is 5x this build's time on 2 cores (~3 min, quiet machine).

The build runs with a bundle budget of 50 kB (``--bundle_output_mb=0.05``) instead of
64 MB, so that every reading step (snapshot files, layer partitions, near dedup's signing)
ends its bundles early and Flink's batch runner brings the deferred rest back in later
bundles (beam_pipeline/transforms/bundle_budget.py): the same dataset, byte for byte. With
64 MB nothing of the sample's 5 MB is ever deferred; the cluster builds of tests/test_flink.py
run with it.
"""
from __future__ import annotations

import glob
import os

import pytest

from beam_pipeline.options import flink_job_server_jar
from conftest import SAMPLE_CONFIG, dataset_id_from_output, layer_digests, run_cli
from tests.helpers.console import assert_quiet_console

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_the_sample_on_embedded_flink_in_small_bundles_is_the_reference_dataset_with_a_quiet_console(
    built, tmp_path
):
    """Also the console check of a build on embedded Flink (tests/test_console_flink.py has the landing
    job's): one build of the sample serves both, as a user runs it, in a subprocess."""
    assert os.path.exists(flink_job_server_jar()), "run `make flink` (make test does) to assemble the job server"
    root = str(tmp_path / "out")
    result = run_cli(["run", "--config", SAMPLE_CONFIG, "--output_root", root,
                      "--runner=FlinkRunner", "--flink_master=[local]", "--progress_interval=0",
                      "--bundle_output_mb=0.05"], timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert_quiet_console(result)  # worker hang-ups and the job server's output go to the run log
    assert dataset_id_from_output(result.stdout) == built["manifest"]["dataset_id"]
    assert layer_digests(root) == layer_digests(built["root"])  # every layer, byte for byte
    (log,) = glob.glob(os.path.join(root, "runs", "*", "beam.log"))
    assert "flink-1.19-job-server" in open(log, encoding="utf-8").read()
