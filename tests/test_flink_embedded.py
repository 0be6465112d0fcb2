"""The sample on embedded Flink gives the reference dataset, with the command the docs give.

``--runner=FlinkRunner --flink_master=[local]`` runs the build's one job on a
Flink mini cluster inside the Beam job server (a JVM the FlinkRunner starts):
Flink's managed memory and its sorting and spilling to local disk, on one
machine. The defaults that make that command work as written (Flink 1.19, the
job server ``make flink`` assembled from Maven Central, SDK workers in this
process) are :class:`beam_pipeline.options.LocalRunnerDefaults`'. ``make test``
assembles the job server first; here it must exist (no skip: CI runs this).

The job must also get past Flink's batch optimizer, which walks every route
through the plan (docs/flink.md, "Routes through the plan"): at 129ca5e the
build's plan had 1.3e9 routes and this test hung for 30 minutes before any
task ran; ``tests/test_plan_routes.py`` keeps that number bounded. The
timeout is 5x this build's time on 2 cores (~3 min, quiet machine).
"""
from __future__ import annotations

import os

import pytest

from beam_pipeline import cli
from beam_pipeline.options import flink_job_server_jar
from conftest import SAMPLE_CONFIG, dataset_id_from_output, layer_digests

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_the_sample_on_embedded_flink_is_the_reference_dataset(built, tmp_path, capsys):
    assert os.path.exists(flink_job_server_jar()), "run `make flink` (make test does) to assemble the job server"
    root = str(tmp_path / "out")
    code = cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root,
                     "--runner=FlinkRunner", "--flink_master=[local]", "--progress_interval=0"])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, out[-3000:]
    assert "Traceback" not in captured.err, captured.err[-3000:]  # worker hang-ups go to the run log
    assert dataset_id_from_output(out) == built["manifest"]["dataset_id"]
    assert layer_digests(root) == layer_digests(built["root"])  # every layer, byte for byte
