"""The landing job on embedded Flink: streaming (continuous matching) and ``--once`` (batch).

The FlinkRunner starts the cached Beam 2.62 / Flink 1.19 job server jar
(``scripts/flink_cluster.sh jar`` made it; nothing is downloaded here), which
runs the job in an embedded Flink (``--flink_master=[local]``) with the SDK
workers in this process (``LOOPBACK``)::

    python -m beam_pipeline land --config corpus.yaml --runner=FlinkRunner --flink_master=[local] \\
        --flink_version=1.19 --flink_job_server_jar=<jar> --environment_type=LOOPBACK [--once]

Every test is marked ``flink_embedded`` (``pytest -m flink_embedded`` runs
them alone) and skips, saying why, when Java or the jar is missing. Builds
from the snapshots run on the local runner: a build on Flink is
tests/test_flink.py's subject, and the landing is this file's.
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import time

import pytest

from arrivals_helpers import kill_group, landed_but_not_logged, landing_config, local_objects, pseudo_text, \
    segments, start_land, two_roots, wait_for, write_text
from beam_pipeline.cli import commands as cli
from beam_pipeline.storage.bronze import parse_stamp
from beam_pipeline.storage.arrivals_log import identity, read_log
from beam_pipeline.options import job_server_scratch
from conftest import IN_PROCESS, dataset_id_from_output

JAR = os.environ.get("BEAM_PIPELINE_FLINK_JAR") or os.path.join(
    os.environ.get("FLINK_CACHE") or os.path.expanduser("~/.cache/beam_pipeline/flink"),
    "beam-flink-1.19-job-server-2.62.0", "beam-runners-flink-1.19-job-server-2.62.0.jar")

pytestmark = [
    pytest.mark.flink_embedded,
    pytest.mark.skipif(shutil.which("java") is None, reason="embedded Flink needs Java (a JRE 11 or 17) on PATH"),
    pytest.mark.skipif(not os.path.exists(JAR), reason=f"no Flink job server jar at {JAR}: make it once "
                       "with `scripts/flink_cluster.sh jar` (downloads; needs the registries)"),
]

FLINK = ["--runner=FlinkRunner", "--flink_master=[local]", "--flink_version=1.19", f"--flink_job_server_jar={JAR}",
         "--environment_type=LOOPBACK", "--parallelism=2"]
#: Polls and windows for a runner that starts in ~20 s and commits a window ~1-3 s after it closes.
SLOW = {"poll_interval_seconds": 0.5, "stable_polls": 3, "window_seconds": 4}


def log_of(root: str) -> list[dict]:
    return list(read_log(root).entries)


def log_text(path) -> str:
    return "\n".join(line for line in open(path, errors="replace").read().splitlines()
                     if not line.startswith("WARNING"))[-4000:]


def test_streaming_on_flink_lands_slow_writes_once_whole_and_two_names_as_one_object(tmp_path, capsys):
    landing = tmp_path / "landing"
    write_text(landing / "a.txt", "a text delivered under two names\n")
    write_text(landing / "again" / "a.txt", "a text delivered under two names\n")
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {"uri": str(landing / "**.txt"), "landing": SLOW}})
    process = start_land(["--config", config, "--stop_after", "75", *FLINK], str(tmp_path / "land.log"))
    try:
        wait_for(lambda: len(log_of(root)) == 2, 120, interval=0.2, what="the first window to commit on Flink")
        slow = [landing / f"slow-{i}.txt" for i in range(2)]
        for i in range(60):  # 12 s of appends (three windows), never 0.5 s without a change
            for path in slow:
                with open(path, "a") as f:
                    f.write(f"piece {i} of {path.name}: " + "words " * 30 + "\n")
            time.sleep(0.2)
        assert process.wait(timeout=240) == 0, log_text(tmp_path / "land.log")
    finally:
        kill_group(process)
    output = log_text(tmp_path / "land.log")
    assert "waiting to become stable (slow-" in output
    entries = log_of(root)
    final = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in slow}
    assert sorted((e["path"], e["sha256"]) for e in entries if "slow" in e["path"]) == sorted(final.items())
    objects = local_objects(root)
    assert len(entries) == 4 and len(objects) == 3
    assert sorted(objects.values()) == sorted({e["sha256"] for e in entries})

    # the landed files, frozen and built (locally), give the dataset of the same files read as globs
    time.sleep(max(0.0, parse_stamp(entries[-1]["window_end"]) - time.time()) + 0.05)
    assert cli.main(["snapshot", "--config", config, "--from-bronze", "--until", str(len(entries))]) == 0
    out = capsys.readouterr().out
    snapshot_id = next(line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("snapshot "))
    assert cli.main(["run", "--config", config, "--snapshot_id", snapshot_id, *IN_PROCESS]) == 0
    from_bronze = dataset_id_from_output(capsys.readouterr().out)
    assert cli.main(["run", "--config", config, "--output_root", str(tmp_path / "globs"), *IN_PROCESS]) == 0
    assert dataset_id_from_output(capsys.readouterr().out) == from_bronze


def test_once_on_flink_is_a_batch_job_with_the_same_objects_and_log(tmp_path):
    landing = tmp_path / "landing"
    for name in ("x.txt", "y.txt"):
        write_text(landing / name, "the same bytes\n", mtime=1_600_000_000)
    write_text(landing / "z.txt", "other bytes\n", mtime=1_600_000_000)
    flink_root, local_root = str(tmp_path / "flink"), str(tmp_path / "local")
    spec = {"docs": {"uri": str(landing / "*.txt"), "landing": SLOW}}
    on_flink = landing_config(tmp_path / "flink.yaml", flink_root, spec)
    locally = landing_config(tmp_path / "local.yaml", local_root, spec)
    assert cli.main(["land", "--config", on_flink, "--once", *FLINK]) == 0
    assert cli.main(["land", "--config", locally, "--once"]) == 0
    assert local_objects(flink_root) == local_objects(local_root) and len(local_objects(flink_root)) == 2
    assert sorted(identity(e) for e in log_of(flink_root)) == sorted(identity(e) for e in log_of(local_root))


@pytest.mark.slow
def test_kill_9_of_a_flink_landing_job_mid_window_and_restart_lose_and_repeat_nothing(tmp_path):
    landing, killed_root, killed, reference_root, reference = two_roots(tmp_path, {**SLOW, "window_seconds": 10})
    scratch = {"TMPDIR": str(tmp_path / "tmp")}  # where the job servers' scratch directories go (java.io.tmpdir)
    os.makedirs(scratch["TMPDIR"])
    process = start_land(["--config", killed, "--stop_after", "300", *FLINK], str(tmp_path / "killed-1.log"), scratch)
    try:
        wait_for(lambda: len(log_of(killed_root)) == 3, 180, interval=0.2, what="the early files' window on Flink")
        before_kill = segments(killed_root)
        for i in range(8):
            (landing / f"late-{i}.txt").write_bytes(pseudo_text(f"late {i}", 1 << 20))
        # a window commits when it closes: its copies wait for it
        wait_for(lambda: len(landed_but_not_logged(killed_root)) >= 4, 120, interval=0.05,
                 what="copies of an open window")
    finally:
        kill_group(process)  # the Python driver, its SDK workers and the job server's JVM (embedded Flink)
    logged_at_kill = {identity(e) for e in log_of(killed_root)}
    assert len(logged_at_kill) < 11
    killed_at = time.time()
    # the killed job server's Flink files (its mini cluster's, its RPC jar's) outlive it; the next driver removes them
    left = glob.glob(os.path.join(job_server_scratch.root(scratch["TMPDIR"]), "*", "minicluster_*"))
    assert len(left) == 1, left

    restart = start_land(["--config", killed, "--stop_after", "45", *FLINK], str(tmp_path / "killed-2.log"), scratch)
    assert restart.wait(timeout=300) == 0, log_text(tmp_path / "killed-2.log")
    assert os.listdir(job_server_scratch.root(scratch["TMPDIR"])) == []  # the killed one's swept, its own removed
    assert "the scratch directory of an embedded Flink job server" in open(tmp_path / "killed-2.log").read()
    uninterrupted = start_land(["--config", reference, "--stop_after", "45", *FLINK], str(tmp_path / "reference.log"))
    assert uninterrupted.wait(timeout=300) == 0, log_text(tmp_path / "reference.log")

    arrivals = sorted(identity(e) for e in log_of(killed_root))
    assert local_objects(killed_root) == local_objects(reference_root)
    assert arrivals == sorted(identity(e) for e in log_of(reference_root))
    assert len(arrivals) == len(set(arrivals)) == 11 and read_log(killed_root).repeated == 0
    for path, data in before_kill.items():
        assert open(path, "rb").read() == data
    for e in log_of(killed_root):
        if identity(e) not in logged_at_kill:
            assert parse_stamp(e["window_end"]) > killed_at
