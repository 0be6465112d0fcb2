"""A full output root: one line naming the filesystem and the space a rerun needs, exit code 4.

When the filesystem of the output root fills during a build, every writer of
the job fails with ``OSError: [Errno 28] No space left on device`` (ENOSPC):
the job fails (the run log's handler never raises, so nothing hangs:
``beam_pipeline/cli/console.py``) and the CLI reports it as one ``error:`` line
(:func:`message`) with the exit code of an output root that cannot be
written (``errors.EXIT_NOT_WRITABLE``, docs/config.md "Exit codes"). The
layers committed before it are kept (a layer is committed ledger-last, so a
half-written one is never reused); the rerun with space resumes from them and
gives the same dataset id.

The space needed is an estimate, from the inputs' size: a build writes about
:data:`BYTES_PER_INPUT_BYTE` bytes per byte of (estimated) input text, plus
:data:`FIXED_BYTES` (the run's report and metrics), measured on the sample;
what the output root already holds counts towards it.
"""

from __future__ import annotations

import errno
import os

from beam_pipeline.build.progress import human_bytes
from beam_pipeline.storage.paths import tree_bytes

#: Bytes a whole build writes per byte of estimated input text (the sample, every stage: 5.5 MB of text
#: -> 13.6 MB of layers, dataset and run files, rounded up).
BYTES_PER_INPUT_BYTE = 3.0
#: Bytes of a run's files that do not grow with the input (report.html with its figures, metrics, log).
FIXED_BYTES = 2_000_000

_MARKERS = ("[Errno 28]", "No space left on device")


def is_full_disk(failure: BaseException | str) -> bool:
    """Whether a failure (an exception, or a runner's error text) is a write that found no space."""
    if isinstance(failure, OSError) and failure.errno == errno.ENOSPC:
        return True
    text = failure if isinstance(failure, str) else str(failure)
    return any(marker in text for marker in _MARKERS)


def filesystem_of(path: str) -> tuple[str, str, int, int] | None:
    """(mount point, filesystem type, free bytes, size in bytes) of a local path's filesystem (its nearest
    existing ancestor); None for a URI or when it cannot be told."""
    if "://" in path:
        return None
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    mount = os.path.realpath(path)
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    kind = "?"
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) > 2 and fields[1].replace("\\040", " ") == mount:
                    kind = fields[2]  # the last one listed is the one mounted on top
    except OSError:
        pass
    return mount, kind, stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize


def needed_bytes(input_bytes: int | None, root: str) -> int | None:
    """The free space a rerun needs on the root's filesystem (an estimate; None: input size unknown)."""
    if not input_bytes:
        return None
    total = int(input_bytes * BYTES_PER_INPUT_BYTE) + FIXED_BYTES
    return max(total - tree_bytes(root), FIXED_BYTES)


def message(root: str, stage: str | None, committed: list[str], input_bytes: int | None, path: str = "") -> str:
    """The one line of a full output root: the filesystem, the free space a rerun needs, what is kept."""
    found = filesystem_of(root)
    if found is None:
        place = f"the storage of the output root {root} is full"
    else:
        mount, kind, free_now, size = found
        place = (
            f"the output root's filesystem is full: {mount} ({kind}, {human_bytes(size)}, {human_bytes(free_now)} free)"
        )
    failed = f"stage {stage} could not write its layer" if stage else "the build could not write"
    if path:
        failed += f" ({path})"
    needed = needed_bytes(input_bytes, root)
    free = (
        f"free at least {human_bytes(needed)} there (the whole build needs about {human_bytes(needed + tree_bytes(root))})"
        if needed is not None
        else "free space there"
    )
    kept = (
        f"the {len(committed)} layers committed before it ({', '.join(committed)}) are kept, and the rerun "
        f"resumes from them"
        if committed
        else "no layer was committed yet"
    )
    return f"{place}; {failed}. {free[0].upper()}{free[1:]} and run the same command again: {kept}"


def error(build, failure: BaseException):
    """The :class:`~beam_pipeline.errors.UserError` (exit 4) of a build (``CorpusBuild`` or None) that
    failed on a full disk."""
    from beam_pipeline.build.stage_failure import failed_stage_name
    from beam_pipeline.errors import EXIT_NOT_WRITABLE, UserError

    root = getattr(build, "root", None) or getattr(failure, "filename", None) or "."
    committed = []
    for stage, layer in getattr(build, "layers", None) or []:
        try:
            if layer.is_complete():
                committed.append(stage)
        except Exception:  # noqa: BLE001 - the line must come out
            pass
    path = "" if build is not None else str(getattr(failure, "filename", "") or "")
    return UserError(
        message(root, failed_stage_name(failure), committed, getattr(build, "input_bytes", None), path),
        EXIT_NOT_WRITABLE,
    )
