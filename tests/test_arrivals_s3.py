"""The bronze landing layer on S3: landing prefix, bronze objects, arrivals log and snapshots all on ``s3://``.

The S3-protocol server of tests/test_s3.py (``moto_server`` on 127.0.0.1,
its fixtures imported from there) holds everything; the landing job reaches
it only through Beam's S3 filesystem and the usual ``--s3_*`` options. On
S3 an object appears whole when its upload completes, so a file "written
slowly in pieces" is an object uploaded again and again as it grows: the
job must land it once, after the uploads stop. The job that is killed runs
as a process (``tests/arrivals_helpers.py``, with the same shared boto3
session as ``fast_boto3``).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time

import pytest

from arrivals_helpers import kill_group, landing_config, pseudo_text, start_land, wait_for
from beam_pipeline.cli import commands as cli
from beam_pipeline.storage.bronze import parse_stamp
from beam_pipeline.storage.arrivals_log import identity, read_log
from conftest import IN_PROCESS, dataset_id_from_output
from test_s3 import fast_boto3, moto_endpoint, s3_args, s3_client  # noqa: F401 - fixtures reused as they are

BUCKET = "arrivals"
FAST = {"poll_interval_seconds": 0.5, "stable_polls": 3, "window_seconds": 2}


@pytest.fixture(scope="module")
def s3(moto_endpoint):
    client = s3_client(moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def prefix(request) -> str:
    return request.node.name[:60]


def put(client, key: str, body: bytes) -> None:
    client.put_object(Bucket=BUCKET, Key=key, Body=body)


def objects(client, prefix: str) -> dict[str, str]:
    """Keys under ``prefix`` -> sha256 of their bytes."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return {k: hashlib.sha256(client.get_object(Bucket=BUCKET, Key=k)["Body"].read()).hexdigest() for k in keys}


def bronze_objects(client, prefix: str) -> dict[str, str]:
    return {k[len(f"{prefix}/out/bronze/"):]: v for k, v in objects(client, f"{prefix}/out/bronze/").items()
            if "/_arrivals/" not in k and "/_tmp/" not in k}


def log_of(root: str) -> list[dict]:
    return list(read_log(root).entries)


def config_for(tmp_path, prefix: str, landing: dict = FAST, name: str = "c.yaml", root: str = "out") -> tuple[str, str]:
    root = f"s3://{BUCKET}/{prefix}/{root}"
    return landing_config(tmp_path / name, root, {"docs": {"uri": f"s3://{BUCKET}/{prefix}/landing/*.txt",
                                                           "landing": landing}}), root


def snapshot_of(config: str, capsys, endpoint: str, *cut: str) -> str:
    assert cli.main(["snapshot", "--config", config, "--from-bronze", *cut, *s3_args(endpoint)]) == 0
    out = capsys.readouterr().out
    return next(line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("snapshot "))


def test_on_s3_two_names_are_one_object_and_a_changed_file_a_new_one(s3, moto_endpoint, prefix, tmp_path, capsys):
    put(s3, f"{prefix}/landing/a.txt", b"delivered twice\n")
    put(s3, f"{prefix}/landing/a-retry.txt", b"delivered twice\n")
    put(s3, f"{prefix}/landing/b.txt", b"first version\n")
    config, root = config_for(tmp_path, prefix)
    assert cli.main(["land", "--config", config, "--once", *s3_args(moto_endpoint)]) == 0
    first = bronze_objects(s3, prefix)
    assert len(first) == 2 and len(log_of(root)) == 3
    assert len({e["object"] for e in log_of(root) if "a" in e["path"].rsplit("/", 1)[-1]}) == 1
    time.sleep(1.1)  # S3 keeps modification times in whole seconds
    put(s3, f"{prefix}/landing/b.txt", b"second version, corrected\n")
    capsys.readouterr()
    assert cli.main(["land", "--config", config, "--once", *s3_args(moto_endpoint)]) == 0
    assert f"s3://{BUCKET}/{prefix}/landing/b.txt changed after it landed" in capsys.readouterr().out
    after = bronze_objects(s3, prefix)
    assert set(first) < set(after) and len(after) == 3
    assert not objects(s3, f"{prefix}/out/bronze/_tmp/")


def test_on_s3_an_object_uploaded_again_and_again_lands_once_whole(s3, moto_endpoint, prefix, tmp_path):
    config, root = config_for(tmp_path, prefix)
    key = f"{prefix}/landing/growing.txt"
    put(s3, key, b"")
    final = []

    def grow():
        body = b""
        for i in range(20):  # a new, longer object every 0.15 s for 3 s
            body += f"piece {i}: ".encode() + b"words " * 20 + b"\n"
            put(s3_client(moto_endpoint), key, body)
            time.sleep(0.15)
        final.append(body)

    writer = threading.Thread(target=grow)
    writer.start()
    try:
        assert cli.main(["land", "--config", config, "--stop_after", "12", *s3_args(moto_endpoint)]) == 0
    finally:
        writer.join()
    entries = log_of(root)
    assert [(e["path"], e["sha256"]) for e in entries] == [
        (f"s3://{BUCKET}/{key}", hashlib.sha256(final[0]).hexdigest())]
    assert list(bronze_objects(s3, prefix).values()) == [hashlib.sha256(final[0]).hexdigest()]


@pytest.mark.slow
def test_on_s3_kill_9_mid_window_and_restart_give_the_log_of_an_uninterrupted_run(s3, moto_endpoint, prefix,
                                                                                    tmp_path):
    for i in range(3):
        put(s3, f"{prefix}/landing/early-{i}.txt", f"early file {i}\n".encode())
    killed, killed_root = config_for(tmp_path, prefix, {**FAST, "window_seconds": 4}, "killed.yaml", "killed")
    reference, reference_root = config_for(tmp_path, prefix, {**FAST, "window_seconds": 4}, "reference.yaml",
                                           "reference")
    env = {"ARRIVALS_FAST_BOTO3": "1"}
    args = s3_args(moto_endpoint)
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions
    FileSystems.set_options(PipelineOptions(args))  # this test reads the log while the job runs
    process = start_land(["--config", killed, "--stop_after", "240", *args], str(tmp_path / "killed-1.log"), env)
    try:
        wait_for(lambda: len(log_of(killed_root)) == 3, 120, interval=0.2, what="the early files' window on S3")
        for i in range(8):
            put(s3, f"{prefix}/landing/late-{i}.txt", pseudo_text(f"late {i}", 2 << 20))

        def landed_but_not_logged():
            logged = {e["object"] for e in log_of(killed_root)}
            return [k for k in objects(s3, f"{prefix}/killed/bronze/docs/")
                    if k[len(f"{prefix}/killed/bronze/"):] not in logged]
        wait_for(landed_but_not_logged, 120, interval=0.05, what="copies of a window not committed yet")
    finally:
        kill_group(process)
    logged_at_kill = {identity(e) for e in log_of(killed_root)}
    assert len(logged_at_kill) < 11
    killed_at = time.time()
    restart = start_land(["--config", killed, "--stop_after", "15", *args], str(tmp_path / "killed-2.log"), env)
    assert restart.wait(timeout=300) == 0, open(tmp_path / "killed-2.log").read()[-3000:]
    uninterrupted = start_land(["--config", reference, "--stop_after", "15", *args], str(tmp_path / "reference.log"),
                               env)
    assert uninterrupted.wait(timeout=300) == 0, open(tmp_path / "reference.log").read()[-3000:]

    def bronze(name):
        return {k[len(f"{prefix}/{name}/bronze/"):]: v for k, v in objects(s3, f"{prefix}/{name}/bronze/").items()
                if "/_arrivals/" not in k}
    assert bronze("killed") == bronze("reference") and len(bronze("killed")) == 11  # no _tmp copy left either
    arrivals = sorted(identity(e) for e in log_of(killed_root))
    assert arrivals == sorted(identity(e) for e in log_of(reference_root)) and len(set(arrivals)) == 11
    for e in log_of(killed_root):
        if identity(e) not in logged_at_kill:
            assert parse_stamp(e["window_end"]) > killed_at


@pytest.mark.timeout(900)
def test_on_s3_snapshot_until_a_build_from_it_and_gc(s3, moto_endpoint, prefix, tmp_path, capsys):
    config, root = config_for(tmp_path, prefix, {**FAST, "window_seconds": 1})
    batches = [["a", "b"], ["c", "d"], ["e"]]
    for number, batch in enumerate(batches):
        for name in batch:
            put(s3, f"{prefix}/landing/{name}.txt", f"{name}: the text of a document in batch {number}\n".encode())
        assert cli.main(["land", "--config", config, "--once", *s3_args(moto_endpoint)]) == 0
        end = parse_stamp(log_of(root)[-1]["window_end"])
        time.sleep(max(0.0, end - time.time()) + 0.05)
    capsys.readouterr()
    first = snapshot_of(config, capsys, moto_endpoint, "--until", "2")
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/out/snapshots/{first}.json")["Body"].read())
    assert sorted(o.rsplit("/", 1)[-1] for f in manifest["sources"]["docs"]["files"] for o in f["origins"]) == \
        ["a.txt", "b.txt"]
    window_end = log_of(root)[1]["window_end"]
    assert snapshot_of(config, capsys, moto_endpoint, "--until", window_end) == first
    second = snapshot_of(config, capsys, moto_endpoint, "--since", "2", "--until", "4")

    # a build from the bronze snapshot, against the same files read as globs
    everything = snapshot_of(config, capsys, moto_endpoint, "--until", "5")
    assert cli.main(["run", "--config", config, "--snapshot_id", everything, *IN_PROCESS,
                     *s3_args(moto_endpoint)]) == 0
    from_bronze = dataset_id_from_output(capsys.readouterr().out)
    assert cli.main(["run", "--config", config, "--output_root", f"s3://{BUCKET}/{prefix}/globs", *IN_PROCESS,
                     *s3_args(moto_endpoint)]) == 0
    assert dataset_id_from_output(capsys.readouterr().out) == from_bronze

    # gc: keeping the sliding snapshot [2, 4) lets a and b go, and e too (the snapshot that offered it was
    # not kept); an orphan copy goes once it is older than --min_age_seconds
    put(s3, f"{prefix}/out/bronze/docs/ff/{'f' * 64}.txt", b"an orphan copy of a killed job\n")
    by_name = {e["path"].rsplit("/", 1)[-1]: f"{prefix}/out/bronze/{e['object']}" for e in log_of(root)}
    before = objects(s3, f"{prefix}/")
    assert cli.main(["bronze", "gc", "--config", config, "--keep", second, "--min_age_seconds", "0",
                     *s3_args(moto_endpoint)]) == 0
    assert objects(s3, f"{prefix}/") == before
    capsys.readouterr()
    assert cli.main(["bronze", "gc", "--config", config, "--keep", f"{second},{everything}", "--min_age_seconds",
                     "0", "--apply", *s3_args(moto_endpoint)]) == 0
    assert "deleted            1 objects" in capsys.readouterr().out  # everything is kept: only the orphan goes
    assert cli.main(["bronze", "gc", "--config", config, "--keep", second, "--min_age_seconds", "0", "--apply",
                     *s3_args(moto_endpoint)]) == 0
    gone = set(before) - set(objects(s3, f"{prefix}/"))
    assert gone == {by_name["a.txt"], by_name["b.txt"], by_name["e.txt"], f"{prefix}/out/bronze/docs/ff/{'f' * 64}.txt"}
    assert {by_name["c.txt"], by_name["d.txt"]} <= set(objects(s3, f"{prefix}/"))
