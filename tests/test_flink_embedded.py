"""The sample on embedded Flink gives the reference dataset, with the command the docs give.

``--runner=FlinkRunner --flink_master=[local]`` runs the build's one job on a
Flink mini cluster inside the Beam job server (a JVM the FlinkRunner starts):
Flink's managed memory and its sorting and spilling to local disk, on one
machine. The defaults that make that command work as written (Flink 1.19, the
job server ``make flink`` assembled from Maven Central, SDK workers in this
process) are :class:`beam_pipeline.options.LocalRunnerDefaults`'. ``make test``
assembles the job server first; here it must exist.

Known problem (docs/flink.md, "Known problem: the batch job's start"): since dedup
joined the cascade, Flink's batch optimizer can spend more than 30 minutes on this
job's plan before the job starts (a Java stack shows its range-partition pass walking
the plan). It passed in two full suite runs and hung in the next two, so it runs only
with ``make test-flink-embedded`` (BEAM_PIPELINE_FLINK_EMBEDDED=1) until that is fixed;
``make test`` reports it as skipped, with this reason.
"""
from __future__ import annotations

import os

import pytest

from beam_pipeline import cli
from beam_pipeline.options import flink_job_server_jar
from conftest import SAMPLE_CONFIG, dataset_id_from_output, layer_digests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("BEAM_PIPELINE_FLINK_EMBEDDED") != "1",
        reason="known problem: Flink's batch optimizer can take over 30 min on the build's plan before the job "
        "starts (docs/flink.md); run it with `make test-flink-embedded`",
    ),
]


@pytest.mark.timeout(1800)
def test_the_sample_on_embedded_flink_is_the_reference_dataset(built, tmp_path, capsys):
    assert os.path.exists(flink_job_server_jar()), "run `make flink` (make test does) to assemble the job server"
    root = str(tmp_path / "out")
    code = cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root,
                     "--runner=FlinkRunner", "--flink_master=[local]", "--progress_interval=0"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert dataset_id_from_output(out) == built["manifest"]["dataset_id"]
    assert layer_digests(root) == layer_digests(built["root"])  # every layer, byte for byte
