"""The sample on a real Flink session cluster gives the reference dataset (``make test-flink``).

``scripts/flink_cluster.sh start`` runs a JobManager and a TaskManager of
Flink 1.19 on localhost:8081 (from the apache-flink / apache-flink-libraries
wheels, unpacked in ~/.cache/beam_pipeline/flink) and assembles the Beam
Flink 1.19 job server from Maven Central. The build is submitted as a user
would (docs/flink.md)::

    python -m beam_pipeline run --config sample/corpus.yaml --runner=FlinkRunner \\
        --flink_master=localhost:8081 --flink_version=1.19 \\
        --flink_job_server_jar=<jar> --environment_type=LOOPBACK

and must publish the same dataset, with the same per-stage counts, as the
in-process reference build. It needs Java and the package registries and
takes tens of minutes, so it runs only with BEAM_PIPELINE_FLINK=1, which
``make test-flink`` sets (it also starts and stops the cluster).
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from beam_pipeline import cli
from conftest import REPO, SAMPLE_CONFIG, dataset_id_from_output

pytestmark = pytest.mark.skipif(os.environ.get("BEAM_PIPELINE_FLINK") != "1",
                                reason="needs a Flink cluster and Java: run `make test-flink`")

SCRIPT = os.path.join(REPO, "scripts", "flink_cluster.sh")
REST_PORT = int(os.environ.get("FLINK_REST_PORT", "8081"))


def overview() -> dict | None:
    try:
        with urllib.request.urlopen(f"http://localhost:{REST_PORT}/overview", timeout=5) as response:
            return json.load(response)
    except OSError:
        return None


def job_server_jvms(jar: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if "java" in line and jar in line]


@pytest.fixture(scope="module")
def flink():
    """The session cluster (started here unless it already runs) and the job server jar."""
    started_here = overview() is None
    if started_here:
        subprocess.run([SCRIPT, "start"], check=True, timeout=1800)
    jar = subprocess.run([SCRIPT, "jar"], check=True, capture_output=True, text=True, timeout=1800).stdout.strip()
    assert os.path.exists(jar)
    try:
        yield {"jar": jar}
    finally:
        if started_here:
            subprocess.run([SCRIPT, "stop"], timeout=300)


@pytest.mark.timeout(5400)
def test_sample_on_a_flink_session_cluster_gives_the_reference_dataset(flink, built, tmp_path, capsys):
    before = overview()
    assert before and before["taskmanagers"] >= 1 and before["flink-version"].startswith("1.19")
    root = str(tmp_path / "out")
    started = time.monotonic()
    code = cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root,
                     "--runner=FlinkRunner", f"--flink_master=localhost:{REST_PORT}", "--flink_version=1.19",
                     f"--flink_job_server_jar={flink['jar']}", "--environment_type=LOOPBACK",
                     "--parallelism=2", "--progress_interval=60"])
    captured = capsys.readouterr()
    seconds = time.monotonic() - started
    print(f"Flink build of the sample: {seconds:.0f}s", file=sys.__stderr__)
    assert code == 0, captured.err[-5000:]
    assert dataset_id_from_output(captured.out) == built["manifest"]["dataset_id"]

    (metrics,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    counts = {s["name"]: s["counts"] for s in json.load(open(metrics))["stages"]}
    assert counts == {name: s["counts"] for name, s in built["stages"].items()}

    after = overview()
    # the build is one Beam job (DESIGN.md; the snapshot's fingerprinting runs in the driver)
    assert after["jobs-finished"] - before["jobs-finished"] == 1, (before, after)
    assert after["jobs-failed"] == before["jobs-failed"]
    assert not job_server_jvms(flink["jar"]), "a Flink job server outlived the build"

