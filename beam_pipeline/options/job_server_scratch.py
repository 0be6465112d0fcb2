"""The scratch directory of the Flink job server a build starts: its own, and removed even after a kill -9.

Embedded Flink (``--flink_master=[local]``) runs its TaskManager inside the job server's JVM, and Flink keeps
its working files under ``java.io.tmpdir`` (the default of ``io.tmp.dirs``): the mini cluster's working
directories (``minicluster_*``), the RPC system's unpacked jar (22 MB), the blocking results of the shuffles
(``flink-netty-shuffle-*``, tens of GB for a large build) and sorted spills. The JVM removes them when it
stops, but not when it is killed (``kill -9``, the kernel's OOM killer): before this module every killed
build left them in ``/tmp`` of the machine that ran it (3,640 such Flink and Beam entries on the development
machine after a week of test suites and benches).

So the driver gives the job server it starts a directory of its own (:func:`claim`), under the system's
temporary directory (``TMPDIR``, else ``/tmp``: point it at a large local disk for large embedded builds):
``<tmp>/beam_pipeline-flink/<name>``, passed as ``-Djava.io.tmpdir``. The driver holds an exclusive ``flock``
on a file in it for as long as it lives and removes the directory when it exits; the next driver to claim
one first removes every directory whose lock no process holds (:func:`sweep`): the kernel releases a lock
when its process dies, however it dies, so such a directory belongs to a job server whose driver is gone.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import shutil
import tempfile

from beam_pipeline.storage.paths import tree_bytes

#: The folder, under the system's temporary directory, that holds the job servers' scratch directories.
ROOT_NAME = "beam_pipeline-flink"
#: The file in a scratch directory whose ``flock`` its driver holds.
LOCK_NAME = ".owner.lock"
#: A directory being claimed (not yet locked) carries this prefix; :func:`sweep` leaves such names alone.
CLAIMING_PREFIX = ".claiming-"

#: This process's claims: the parent folder -> (its scratch directory, the lock's file descriptor).
_claims: dict[str, tuple[str, int]] = {}


def root(base: str | None = None) -> str:
    """The folder of every job server's scratch directory under ``base`` (the system's temporary directory)."""
    return os.path.join(base or tempfile.gettempdir(), ROOT_NAME)


def claim(base: str | None = None) -> str:
    """This process's scratch directory for the job servers it starts (one per process, made on the first
    call), after :func:`sweep` removed those of drivers that died. It is removed when this process exits."""
    parent = root(base)
    if parent in _claims:
        return _claims[parent][0]
    os.makedirs(parent, exist_ok=True)
    sweep(parent)
    staging = tempfile.mkdtemp(prefix=CLAIMING_PREFIX, dir=parent)
    fd = os.open(os.path.join(staging, LOCK_NAME), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
    directory = os.path.join(parent, f"driver-{os.getpid()}-{os.path.basename(staging)[len(CLAIMING_PREFIX) :]}")
    os.rename(staging, directory)  # the lock is held before the name becomes one that sweep() looks at
    _claims[parent] = (directory, fd)
    atexit.register(_release, parent, os.getpid())
    return directory


def _release(parent: str, owner: int) -> None:
    """At exit: remove this process's directory (not in a forked child, which inherited the hook)."""
    if os.getpid() != owner or parent not in _claims:
        return
    directory, fd = _claims.pop(parent)
    shutil.rmtree(directory, ignore_errors=True)
    os.close(fd)


def sweep(parent: str) -> list[str]:
    """Remove the scratch directories in ``parent`` whose lock no process holds (their driver died);
    -> the directories removed. A directory still being claimed, or whose driver lives, is left alone."""
    removed: list[str] = []
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        if name.startswith(CLAIMING_PREFIX) or not os.path.isdir(path):
            continue
        try:
            fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # a removal that was interrupted, or that another sweep is making
            fd = None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its driver is alive
            continue
        finally:
            if fd is not None:
                os.close(fd)
        megabytes = tree_bytes(path) / 2**20
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
        logging.getLogger(__name__).warning(
            "removed %s (%.0f MiB): the scratch directory of an embedded Flink job server whose driver "
            "ended without removing it (killed)",
            path,
            megabytes,
        )
    return removed
