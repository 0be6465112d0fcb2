"""Processes of a build end without the interpreter's last garbage collection.

When a Python process ends, its finalization runs a full garbage collection
over every object still alive. With Beam, pyarrow, fastText, matplotlib and
numba loaded that walk costs 0.3-0.7 s per process, and the local runner stops
its SDK workers one after another, waiting for each process to exit: the
sample build spent ~1.5 s between its last bundle and the end of the job on
nothing else (docs/decisions.md, "The sample's build time: where the fixed costs go").

:func:`install` registers :func:`gc.freeze` to run at exit: every object alive
then moves to the permanent generation, which the final collection skips.
Objects are still released as usual when modules are torn down; what is
skipped is only finalizers of objects in reference cycles, which Python never
promised to run at exit ("It is not guaranteed that __del__() methods are
called for objects that still exist when the interpreter exits", the data
model reference). Every file this package writes is closed by its own step,
and the SDK harness closes its channels before returning.

It is installed by the CLI (the driver) and, at this package's import, in
Beam's SDK worker processes (their main module is the harness's
``sdk_worker_main``, on every runner); a program that only imports the
package keeps Python's usual exit.
"""

from __future__ import annotations

import atexit
import gc
import sys

#: The main module of a Beam Python SDK worker process (DirectRunner, Flink, Dataflow).
SDK_WORKER_MAIN = "apache_beam.runners.worker.sdk_worker_main"

_installed: list[bool] = []


def install() -> None:
    """Skip the final collection when this process exits (once per process)."""
    if not _installed:
        atexit.register(gc.freeze)
        _installed.append(True)


def installed() -> bool:
    """Whether :func:`install` ran in this process."""
    return bool(_installed)


def is_sdk_worker() -> bool:
    """Whether this process is a Beam SDK worker (``python -m apache_beam.runners.worker.sdk_worker_main``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == SDK_WORKER_MAIN


def install_in_sdk_workers() -> None:
    """:func:`install` when this process is an SDK worker; nothing otherwise."""
    if is_sdk_worker():
        install()
