"""The sample on a Flink session cluster of two TaskManagers gives the local runner's dataset (``make test``).

``scripts/flink_cluster.sh start`` runs a Flink 1.19 JobManager and two
TaskManagers of one slot each, three JVMs on localhost (REST on
:data:`REST_PORT`, its own folder ``~/.cache/beam_pipeline/flink/cluster-<port>``
for the configuration, logs and pid files), from the apache-flink /
apache-flink-libraries wheels; the Beam Flink 1.19 job server comes from
``make flink``. With ``--parallelism=2`` every shuffle's records cross Flink's
network between the two JVMs. Beam's runner is in the cluster's ``lib/``, so each
TaskManager keeps its SDK workers from one task to the next (docs/flink.md, "SDK workers
kept between tasks"): the test checks it. The build is submitted as docs/flink.md writes
it, with the SDK worker environment an on-prem cluster uses::

    python -m beam_pipeline run --config sample/corpus.yaml --runner=FlinkRunner \\
        --flink_master=localhost:<port> --parallelism=2 \\
        --environment_type=PROCESS --environment_config='{"command": "<venv>/bin/beam-pipeline-worker"}'

(each TaskManager starts its own SDK workers with the package's boot,
``beam_pipeline/options/sdk_worker.py``; LOOPBACK and one shared worker pool
both fail with two TaskManagers: docs/flink.md). It must publish the local
runner's dataset, every layer byte for byte.

A second test kills -9 one TaskManager while near dedup runs: Flink's restart
strategy (``restart-strategy: fixed-delay`` in the cluster's configuration)
restarts the job once a TaskManager is back (a supervisor would restart it;
here the test does), and the build still publishes the same dataset with no
partial layer and no temporary file. The module starts the cluster and stops
it; nothing it started may outlive it (and :func:`conftest.pytest_sessionfinish`
fails the suite if any JVM or SDK worker does).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.options import sdk_worker
from conftest import REPO, SAMPLE_CONFIG, dataset_id_from_output, layer_digests, marked_processes
from tests.helpers.resume import copy_layers_before

pytestmark = pytest.mark.slow

SCRIPT = os.path.join(REPO, "scripts", "flink_cluster.sh")
#: The test cluster's own ports, not Flink's defaults (8081, 6123): a cluster of your own can run beside it.
REST_PORT = int(os.environ.get("BEAM_PIPELINE_TEST_FLINK_REST_PORT", "18081"))
CLUSTER_ENV = {**os.environ, "FLINK_REST_PORT": str(REST_PORT), "FLINK_RPC_PORT": str(REST_PORT - 1958),
               "FLINK_TASKMANAGERS": "2", "FLINK_SLOTS": "1"}
#: The cluster's io.tmp.dirs (the script's default): the JVMs' working files, a killed TaskManager's too.
CLUSTER_TMP = os.environ.get("FLINK_TMP_DIR") or os.path.join(
    os.environ.get("FLINK_CACHE") or os.path.expanduser("~/.cache/beam_pipeline/flink"), f"cluster-{REST_PORT}", "tmp")


def script(*args: str, timeout: float = 600) -> str:
    done = subprocess.run([SCRIPT, *args], env=CLUSTER_ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"flink_cluster.sh {' '.join(args)}: {done.stderr[-3000:]}"
    return done.stdout


def rest(path: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://localhost:{REST_PORT}{path}", timeout=5) as response:
            return json.load(response)
    except OSError:
        return None


def flink_args(jar: str) -> list[str]:
    return ["--runner=FlinkRunner", f"--flink_master=localhost:{REST_PORT}", "--flink_version=1.19",
            f"--flink_job_server_jar={jar}", "--environment_type=PROCESS",
            f"--environment_config={sdk_worker.environment_config()}", "--parallelism=2", "--progress_interval=60"]


def workers_of(pids: list[str]) -> dict[int, str]:
    """SDK workers (and their boot) still running whose parent is one of ``pids`` or init."""
    left = {}
    for pid, command in marked_processes(("sdk_worker_main", sdk_worker.COMMAND)).items():
        try:
            parent = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if parent in pids or parent == "1":
            left[pid] = command
    return left


@pytest.fixture(scope="module")
def cluster():
    """A JobManager and two TaskManagers (separate JVMs), started here and stopped after the module."""
    started = time.monotonic()
    script("start", timeout=1800)
    print(f"cluster up in {time.monotonic() - started:.0f}s", file=sys.__stderr__)
    overview = rest("/overview")
    assert overview and overview["taskmanagers"] == 2 and overview["slots-total"] == 2, overview
    jar = script("jar").strip()
    jvms = script("pids").split()
    assert len(jvms) == 3, jvms
    assert len(glob.glob(os.path.join(CLUSTER_TMP, "tm_*"))) == 2  # the TaskManagers work in the cluster's folder
    try:
        yield {"jar": jar, "jvms": jvms}
    finally:
        jvms = sorted(set(jvms) | set(script("pids").split()))
        script("stop", timeout=300)
        assert not script("pids").split(), "a JVM of the cluster outlived `flink_cluster.sh stop`"
        assert not os.path.exists(CLUSTER_TMP), "the cluster's working files outlived `flink_cluster.sh stop`"
        deadline = time.monotonic() + 30
        while workers_of(jvms) and time.monotonic() < deadline:
            time.sleep(1)
        assert not workers_of(jvms), f"SDK workers outlived their TaskManagers: {workers_of(jvms)}"


def job_taskmanagers(jid: str) -> set[str]:
    """The TaskManagers that ran a subtask of the job."""
    found = set()
    for vertex in rest(f"/jobs/{jid}")["vertices"]:
        for tm in (rest(f"/jobs/{jid}/vertices/{vertex['id']}/taskmanagers") or {}).get("taskmanagers", []):
            found.add(tm["taskmanager-id"])
    return found


def committed_layers_are_whole(root: str) -> None:
    """Every committed layer holds exactly the parts its ledger lists, with their digests; nothing
    under the output root is a temporary (``.tmp-``) file."""
    import hashlib

    for ledger_path in glob.glob(os.path.join(root, "layers", "*", "*", "_LEDGER.json")):
        ledger = json.load(open(ledger_path))
        for output, spec in ledger["outputs"].items():
            folder = (os.path.join(root, "dead_letter", ledger["stage"], ledger["key"]) if output == "dead_letter"
                      else os.path.join(os.path.dirname(ledger_path), output))
            on_disk = {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
                       for p in glob.glob(os.path.join(folder, "part-*.parquet"))}
            assert on_disk == {p["name"]: p["sha256"] for p in spec["parts"]}, (ledger_path, output)
    temporaries = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.startswith(".tmp-")]
    assert not temporaries, temporaries


def sdk_worker_starts() -> dict[str, int]:
    """SDK workers started so far, per TaskManager log (each logs "Python sdk harness starting" once)."""
    return {os.path.basename(path): open(path, errors="replace").read().count("Python sdk harness starting")
            for path in glob.glob(os.path.join(script("logs").strip(), "flink-*-taskexecutor-*.log"))}


@pytest.mark.timeout(3600)
def test_sample_on_two_taskmanagers_is_the_local_runners_dataset_byte_for_byte(cluster, built, tmp_path, capsys):
    before = rest("/overview")
    workers_before = sdk_worker_starts()
    root = str(tmp_path / "out")
    started = time.monotonic()
    code = cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *flink_args(cluster["jar"])])
    captured = capsys.readouterr()
    print(f"the sample on 2 TaskManagers: {time.monotonic() - started:.0f}s", file=sys.__stderr__)
    assert code == 0, captured.err[-5000:]
    assert dataset_id_from_output(captured.out) == built["manifest"]["dataset_id"]
    assert layer_digests(root) == layer_digests(built["root"])  # every layer, byte for byte
    (metrics,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    counts = {s["name"]: s["counts"] for s in json.load(open(metrics))["stages"]}
    assert counts == {name: s["counts"] for name, s in built["stages"].items()}
    committed_layers_are_whole(root)

    after = rest("/overview")
    # the build is one Beam job (DESIGN.md; the snapshot's fingerprinting runs in the driver)
    assert after["jobs-finished"] - before["jobs-finished"] == 1, (before, after)
    assert after["jobs-failed"] == before["jobs-failed"]
    job = max(rest("/jobs/overview")["jobs"], key=lambda j: j["start-time"])
    assert job["state"] == "FINISHED", job
    assert len(job_taskmanagers(job["jid"])) == 2, "the job did not run on both TaskManagers"
    # each TaskManager kept its SDK workers from task to task (Beam in the cluster's lib/ and
    # --environment_cache_millis: docs/flink.md); without, each started 29-30 for the sample's tasks
    started = {log: n - workers_before.get(log, 0) for log, n in sdk_worker_starts().items()}
    print(f"SDK workers started per TaskManager: {started}", file=sys.__stderr__)
    assert len(started) == 2 and all(1 <= n <= 2 for n in started.values()), started


def running_vertex(name_part: str) -> tuple[str, str] | None:
    """(job id, vertex name) of a running vertex of a running job whose name has ``name_part``."""
    for job in (rest("/jobs/overview") or {}).get("jobs", []):
        if job["state"] != "RUNNING":
            continue
        for vertex in (rest(f"/jobs/{job['jid']}") or {}).get("vertices", []):
            if vertex["status"] == "RUNNING" and name_part in vertex["name"]:
                return job["jid"], vertex["name"]
    return None


def wait_for(predicate, timeout: float, what: str, process: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        assert process is None or process.poll() is None, f"the build ended (exit {process.returncode}) before {what}"
        time.sleep(0.5)
    raise AssertionError(f"no {what} in {timeout:.0f}s")


@pytest.mark.timeout(3600)
def test_a_taskmanager_killed_during_near_dedup_costs_a_restart_not_the_dataset(cluster, built, tmp_path):
    """kill -9 of a TaskManager JVM while near dedup runs; a new TaskManager starts (what a supervisor,
    systemd or Kubernetes, does); Flink's restart strategy runs the job again, and the build publishes
    the local runner's dataset. Were the restarts used up, the build would fail with one line and the
    same command would finish (reusing every committed layer): that path is taken too if it happens.

    The output root starts with the reference's layers of the stages before near dedup (what an earlier
    run would have committed), so the cluster runs near dedup and what follows: the stages the kill is
    about, at about half the cost of the whole build (the test above builds it all on the cluster)."""
    root = str(tmp_path / "out")
    copy_layers_before("near_dedup", built["root"], root, list(built["stages"]))
    command = [sys.executable, "-m", "beam_pipeline", "run", "--config", SAMPLE_CONFIG, "--output_root", root,
               *flink_args(cluster["jar"])]
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        jid, vertex = wait_for(lambda: running_vertex("NearDedup"), 1800, "running near dedup vertex", process)
        victims = script("taskmanager-pids").split()
        assert len(victims) == 2, victims
        os.kill(int(victims[0]), signal.SIGKILL)
        print(f"killed TaskManager {victims[0]} during {vertex[:120]}", file=sys.__stderr__)
        script("add-taskmanager")
        code = process.wait(timeout=2400)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = open(log_path, errors="replace").read()
    failovers = (rest(f"/jobs/{jid}/exceptions") or {}).get("exceptionHistory", {}).get("entries", [])
    assert failovers, "the kill did not reach the job"
    print(f"the job {'recovered' if code == 0 else 'failed'} after {len(failovers)} failovers", file=sys.__stderr__)
    if code != 0:  # the restarts did not carry it: one clear line, then the same command finishes
        errors = [line for line in output.splitlines() if line.startswith(("error", "stage", "the build"))]
        assert len(errors) == 1 and "Traceback" not in output, output[-3000:]
        committed_layers_are_whole(root)
        rerun = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=2400)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        output = rerun.stdout
    else:
        assert (rest(f"/jobs/{jid}") or {}).get("state") == "FINISHED"
    assert dataset_id_from_output(output) == built["manifest"]["dataset_id"]
    assert layer_digests(root) == layer_digests(built["root"])
    committed_layers_are_whole(root)
