"""A full output root (issue 43): the build ends within seconds of the first failed write with one
``error:`` line naming the filesystem and the free space needed (exit 4, docs/config.md "Exit codes"),
the committed layers are kept, and the rerun with space resumes to the same dataset id.

The output root is on a real tmpfs of 300 kB (``mount -t tmpfs``: writes fail with ``ENOSPC`` as on a
full disk); CI runs as root, so it can mount one (``.ci/run`` sets ``BEAM_PIPELINE_REQUIRE_TMPFS=1``:
there the test fails instead of skipping). The build runs on the default local runner (SDK worker
processes, the runner the console's log handler once hung with: the job service relays the workers'
log records through it, and a write of ``beam.log`` that raised ended that stream)."""
from __future__ import annotations

import errno
import glob
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import IN_PROCESS, REPO, dataset_id_from_output, run_cli, tiny_corpus

TEXTS = [f"Document number {i} of the full disk corpus. " + "The quick brown fox jumps over the lazy dog. " * (12 + i % 5)
         for i in range(60)]
#: Big enough for the ingest layer (~90 kB), too small for the whole build (~1.5 MB).
SMALL = "300k"


def _mount(path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``path``; None, or why it cannot be done."""
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount -t tmpfs failed: {done.stderr.strip()}"


@pytest.fixture
def small_fs(tmp_path):
    """A 300 kB tmpfs at ``tmp_path/fs``, unmounted at the end."""
    path = tmp_path / "fs"
    why = _mount(path, SMALL)
    if why is not None:
        if os.environ.get("BEAM_PIPELINE_REQUIRE_TMPFS"):
            pytest.fail(f"BEAM_PIPELINE_REQUIRE_TMPFS is set, but {why}")
        pytest.skip(why)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _free(path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def test_a_full_output_root_ends_the_build_in_one_line_and_the_rerun_resumes(tmp_path, small_fs):
    config = tiny_corpus(tmp_path, "full", TEXTS)
    reference = run_cli(["run", "--config", config, "--output_root", str(tmp_path / "reference"), *IN_PROCESS])
    assert reference.returncode == 0, reference.stderr[-3000:]
    expected = dataset_id_from_output(reference.stdout)

    root = small_fs / "out"
    process = subprocess.Popen([sys.executable, "-m", "beam_pipeline", "run", "--config", config,
                                "--output_root", str(root), "--direct_num_workers=2"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs: dict = {}
    reader = threading.Thread(target=lambda: outputs.update(zip(("stdout", "stderr"), process.communicate())))
    reader.start()
    full_at, started = None, time.monotonic()
    while process.poll() is None:  # the first time the filesystem has no room left ~ the first failed write
        if full_at is None and _free(small_fs) < 8192:
            full_at = time.monotonic()
        if time.monotonic() - (full_at or started) > 300:  # hung (the build used to sit idle for minutes)
            from beam_pipeline.cli.interrupt import kill_descendants

            kill_descendants(process.pid)
            process.kill()
            break
        time.sleep(0.05)
    ended_at = time.monotonic()
    reader.join()
    stdout, stderr = outputs["stdout"], outputs["stderr"]
    assert full_at is not None, stdout + stderr
    assert process.returncode == 4, stdout + stderr[-3000:]
    assert ended_at - full_at < 30, (ended_at - full_at, stdout)

    # one line, naming the filesystem and the space needed; no traceback anywhere
    assert "Traceback" not in stdout + stderr and "Errno 28" not in stdout + stderr
    (line,) = stderr.splitlines()
    assert line.startswith(f"error: the output root's filesystem is full: {small_fs} (tmpfs, "), line
    assert " free); stage " in line and "Free at least " in line and "run the same command again" in line, line

    # the layers the line says are kept are committed
    kept = line.split("committed before it (", 1)[1].split(")", 1)[0].split(", ") if "committed before" in line else []
    assert "ingest" in kept, line
    for stage in kept:
        assert glob.glob(str(root / "layers" / stage / "*" / "_LEDGER.json")), stage

    # with room, the same command resumes from them and gives the dataset of a build that never failed
    assert subprocess.run(["mount", "-o", "remount,size=20m", str(small_fs)]).returncode == 0
    rerun = run_cli(["run", "--config", config, "--output_root", str(root), *IN_PROCESS])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    for stage in kept:
        assert f"[{stage}] layer " in rerun.stdout and "is complete: reused" in rerun.stdout
    assert dataset_id_from_output(rerun.stdout) == expected


def test_the_run_log_never_raises_on_a_full_disk(tmp_path, small_fs):
    """The handler writing ``beam.log`` is called from the job service's threads: a write that fails must
    not raise into them. What cannot be written is counted; the first error is kept."""
    from beam_pipeline.cli.console import RunLogHandler

    handler = RunLogHandler()
    logger = logging.getLogger("test_full_disk.filler")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        handler.open(str(small_fs / "run"))
        line = "x" * 4000
        for _ in range(200):  # 800 kB into 300 kB
            logger.warning(line)  # never raises
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert isinstance(handler.write_error, OSError) and handler.write_error.errno == errno.ENOSPC
    assert handler.lost > 0


def test_a_log_write_that_fails_does_not_raise_even_before_the_folder_is_known():
    from beam_pipeline.cli.console import RunLogHandler

    class Full(io.StringIO):
        def write(self, _text):
            raise OSError(errno.ENOSPC, "No space left on device")

    handler = RunLogHandler()
    handler._file = Full()
    record = logging.LogRecord("apache_beam.x", logging.INFO, __file__, 1, "a line", None, None)
    handler.emit(record)
    handler.emit(record)
    assert handler.write_error.errno == errno.ENOSPC and handler.lost == 2


def test_the_error_names_the_filesystem_and_the_space_a_build_needs(tmp_path, small_fs):
    from beam_pipeline.cli import full_disk

    mount, kind, free, size = full_disk.filesystem_of(str(small_fs / "out" / "not" / "yet"))
    assert (mount, kind) == (str(small_fs), "tmpfs") and 0 < size <= 400_000 and free <= size
    line = full_disk.message(str(small_fs / "out"), "select", ["ingest"], 5_000_000)
    assert line.startswith(f"the output root's filesystem is full: {small_fs} (tmpfs, ")
    assert "stage select could not write its layer" in line and "Free at least 17.0 MB there" in line
    assert full_disk.is_full_disk("RuntimeError: OSError: [Errno 28] No space left on device [while running 'X']")
    assert not full_disk.is_full_disk(json.dumps({"error": "other"}))
