"""The embedded Flink job server's scratch directory (beam_pipeline.options.job_server_scratch): its driver's
while the driver lives, removed when it exits, and removed by the next driver when it was killed.

Real processes and real ``kill -9``: the lock that tells a live driver from a dead one is the kernel's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from beam_pipeline.options import job_server_scratch

#: A driver: claims its directory, writes what a TaskManager would, says where, then waits to be told.
DRIVER = textwrap.dedent("""
    import os, sys
    from beam_pipeline.options import job_server_scratch
    directory = job_server_scratch.claim(sys.argv[1])
    os.makedirs(os.path.join(directory, "tm_localhost:1-abc", "blobStorage"))
    open(os.path.join(directory, "tm_localhost:1-abc", "blobStorage", "blob"), "wb").write(b"x" * 4096)
    print(directory, flush=True)
    sys.stdin.readline()  # exits when its stdin closes
""")


def start_driver(base) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-c", DRIVER, str(base)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def test_a_live_drivers_directory_stays_and_a_killed_ones_goes(tmp_path):
    live, live_dir = start_driver(tmp_path)
    killed, killed_dir = start_driver(tmp_path)
    try:
        assert os.path.dirname(live_dir) == os.path.dirname(killed_dir) == job_server_scratch.root(str(tmp_path))
        assert live_dir != killed_dir
        assert job_server_scratch.sweep(job_server_scratch.root(str(tmp_path))) == []
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        assert os.path.isdir(os.path.join(killed_dir, "tm_localhost:1-abc"))  # a kill -9 leaves it
        assert job_server_scratch.sweep(job_server_scratch.root(str(tmp_path))) == [killed_dir]
        assert not os.path.exists(killed_dir) and os.path.isdir(live_dir)
    finally:
        live.stdin.close()
        live.wait(timeout=30)
    assert not os.path.exists(live_dir)  # removed at its exit
    assert os.listdir(job_server_scratch.root(str(tmp_path))) == []


def test_the_next_claim_sweeps_and_a_process_keeps_one_directory(tmp_path):
    killed, killed_dir = start_driver(tmp_path)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    second, second_dir = start_driver(tmp_path)  # its claim() sweeps first
    try:
        assert not os.path.exists(killed_dir)
        assert os.listdir(job_server_scratch.root(str(tmp_path))) == [os.path.basename(second_dir)]
    finally:
        second.stdin.close()
        second.wait(timeout=30)
    base = tmp_path / "in-process"
    assert job_server_scratch.claim(str(base)) == job_server_scratch.claim(str(base))


def test_a_directory_being_claimed_or_not_a_directory_is_left_alone(tmp_path):
    parent = job_server_scratch.root(str(tmp_path))
    os.makedirs(os.path.join(parent, job_server_scratch.CLAIMING_PREFIX + "x"))
    open(os.path.join(parent, "stray-file"), "w").close()
    os.makedirs(os.path.join(parent, "half-removed"))  # no lock file: a removal cut short
    assert job_server_scratch.sweep(parent) == [os.path.join(parent, "half-removed")]
    assert sorted(os.listdir(parent)) == [job_server_scratch.CLAIMING_PREFIX + "x", "stray-file"]
