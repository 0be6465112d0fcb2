"""One build per output root at a time (issue 43, item 3; beam_pipeline/build/lease.py).

The lease itself on a local root: taken atomically, refused with the holder's host, pid and start time,
renewed by its heartbeat, released, waited for, and taken over when stale (its process gone, or not
renewed for its timeout), by one of two contenders only. Then the CLI: a held root is refused before the
snapshot with one line and exit 75; a crashed build's lease does not stop the next one; and two
concurrent builds of the sample on one root give one refusal, the normal dataset id and no orphan file.
The S3 lease (conditional create) is tested in tests/test_s3.py."""
from __future__ import annotations

import glob
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from beam_pipeline.build.lease import LEASE, Holder, Lease, LeaseHeld
from conftest import IN_PROCESS, REPO, SAMPLE_CONFIG, dataset_id_from_output, run_cli, tiny_corpus

TEXTS = [f"Document number {i} of the lease corpus. " + "A lazy dog sleeps under the quick brown fox. " * (10 + i % 4)
         for i in range(16)]


def write_lease(root, host: str, pid: int, renewed: float, timeout: float = 120.0) -> None:
    os.makedirs(root, exist_ok=True)
    holder = Holder("someone-else", host, pid, "2026-01-02T03:04:05Z", renewed, timeout)
    with open(os.path.join(root, LEASE), "wb") as f:
        f.write(holder.encode())
    os.utime(os.path.join(root, LEASE), (renewed, renewed))  # written when it was last renewed


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# --- the lease ------------------------------------------------------------------------------------------

def test_the_first_build_holds_the_root_and_a_second_is_refused_naming_the_holder(tmp_path):
    root = str(tmp_path / "out")
    with Lease(root) as first:
        assert os.path.exists(os.path.join(root, LEASE))
        with pytest.raises(LeaseHeld) as refused:
            Lease(root).acquire()
        message = str(refused.value)
        assert f"host {socket.gethostname()}, pid {os.getpid()}, started {first.holder.started}" in message
        assert "--wait_for_lease" in message and refused.value.exit_code == 75
    assert os.listdir(root) == []  # released: nothing left in the root


def test_the_heartbeat_renews_the_lease(tmp_path):
    root = str(tmp_path / "out")
    with Lease(root, renew_every=0.1):
        before = json.load(open(os.path.join(root, LEASE)))["renewed"]
        time.sleep(0.5)
        after = json.load(open(os.path.join(root, LEASE)))
        assert after["renewed"] > before and after["pid"] == os.getpid()


def test_a_build_told_to_wait_gets_the_lease_once_it_is_released(tmp_path):
    root = str(tmp_path / "out")
    first = Lease(root)
    first.acquire()
    threading.Timer(1.0, first.release).start()
    started = time.monotonic()
    with Lease(root, wait=30) as second:
        assert 0.8 < time.monotonic() - started < 20
        assert json.load(open(os.path.join(root, LEASE)))["token"] == second.holder.token


def test_a_lease_whose_process_is_gone_is_taken_over_at_once(tmp_path):
    root = str(tmp_path / "out")
    write_lease(root, socket.gethostname(), dead_pid(), time.time())
    lines = []
    with Lease(root, log=lines.append) as lease:
        assert json.load(open(os.path.join(root, LEASE)))["token"] == lease.holder.token
    assert len(lines) == 1 and "took over the stale lease" in lines[0] and "is gone" in lines[0]


def test_a_lease_of_another_host_is_stale_only_after_its_timeout(tmp_path):
    root = str(tmp_path / "out")
    write_lease(root, "elsewhere", 4242, time.time() - 10, timeout=60)
    with pytest.raises(LeaseHeld, match="host elsewhere, pid 4242, started 2026-01-02T03:04:05Z"):
        Lease(root).acquire()
    write_lease(root, "elsewhere", 4242, time.time() - 61, timeout=60)
    lines = []
    with Lease(root, log=lines.append):
        pass
    assert "not renewed for" in lines[0]


def test_two_builds_that_find_a_stale_lease_do_not_both_take_it(tmp_path):
    root = str(tmp_path / "out")
    write_lease(root, socket.gethostname(), dead_pid(), time.time())
    outcomes, barrier = [], threading.Barrier(4)

    def contend():
        lease = Lease(root, log=lambda line: None)
        barrier.wait()
        try:
            lease.acquire()
            outcomes.append(lease)
        except LeaseHeld:
            outcomes.append(None)

    threads = [threading.Thread(target=contend) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [lease for lease in outcomes if lease is not None]
    assert len(outcomes) == 4 and len(winners) == 1
    winners[0].release()
    assert not os.path.exists(os.path.join(root, LEASE))


# --- the command line -----------------------------------------------------------------------------------

def test_a_build_on_a_held_root_is_refused_before_the_snapshot_with_one_line(tmp_path):
    config = tiny_corpus(tmp_path, "lease", TEXTS)
    root = tmp_path / "out"
    write_lease(str(root), "elsewhere", 4242, time.time())
    result = run_cli(["run", "--config", config, "--output_root", str(root), *IN_PROCESS])
    assert result.returncode == 75, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: another build is running on the output root"), lines
    assert "host elsewhere, pid 4242, started 2026-01-02T03:04:05Z" in lines[0]
    assert "fingerprinting" not in result.stdout
    assert sorted(os.listdir(root)) == [LEASE]  # no snapshot, no layer, no run folder


def test_a_crashed_builds_lease_does_not_stop_the_next_build(tmp_path):
    config = tiny_corpus(tmp_path, "lease", TEXTS)
    clean = run_cli(["run", "--config", config, "--output_root", str(tmp_path / "clean"), *IN_PROCESS])
    assert clean.returncode == 0, clean.stderr
    root = tmp_path / "out"
    write_lease(str(root), socket.gethostname(), dead_pid(), time.time())
    result = run_cli(["run", "--config", config, "--output_root", str(root), *IN_PROCESS])
    assert result.returncode == 0, result.stderr
    assert "[lease] took over the stale lease of an earlier build" in result.stdout
    assert dataset_id_from_output(result.stdout) == dataset_id_from_output(clean.stdout)
    assert not os.path.exists(root / LEASE)


def relative_files(root: str) -> set[str]:
    found = set()
    for folder, _, files in os.walk(root):
        found.update(os.path.relpath(os.path.join(folder, name), root) for name in files)
    return found


def by_stage(root: str) -> set[str]:
    """The files under ``root`` with each layer key and the run id replaced by a placeholder: the checkout is
    shared and edited while the suite runs, and an edit of a stage's code between two builds changes its key
    (code_version), never the files a layer holds or the dataset id. One key per stage (checked)."""
    keys = {}
    for path in glob.glob(os.path.join(root, "layers", "*", "*")):
        stage = os.path.basename(os.path.dirname(path))
        assert stage not in keys, f"two layers of {stage}: {keys[stage]} and {os.path.basename(path)}"
        keys[stage] = os.path.basename(path)
    layer = re.compile(r"^(layers|dead_letter)/([^/]+)/[0-9a-f]{24}/")
    run = re.compile(r"^runs/[0-9a-f]{16}/")
    return {run.sub("runs/RUN/", layer.sub(r"\1/\2/KEY/", path)) for path in relative_files(root)}


def test_two_concurrent_builds_of_the_sample_one_refuses_no_orphans_the_normal_dataset_id(built, tmp_path):
    root = str(tmp_path / "out")
    command = [sys.executable, "-m", "beam_pipeline", "run", "--config", SAMPLE_CONFIG, "--output_root", root,
               *IN_PROCESS]
    first = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(root, LEASE)):
            assert first.poll() is None and time.monotonic() < deadline, "the first build never took the lease"
            time.sleep(0.05)
        second = run_cli(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *IN_PROCESS])
        out, err = first.communicate(timeout=1800)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err[-3000:]
    assert second.returncode == 75, second.stderr[-3000:]
    (line,) = second.stderr.strip().splitlines()
    assert f"pid {first.pid}, started " in line and socket.gethostname() in line
    assert dataset_id_from_output(out) == built["manifest"]["dataset_id"]  # the normal build's
    # the same files as the normal build: no orphan shard or partition, no second run folder, no lease left
    assert by_stage(root) == by_stage(built["root"])
    assert not glob.glob(os.path.join(root, "**", ".tmp-*"), recursive=True)
