"""Ctrl-C during a build: one line, exit code 130, no worker tracebacks.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the
driver and every SDK worker process the local runner started (and the Flink
job server). Each worker would die with its own ``KeyboardInterrupt``
traceback, the driver's runner threads would report the dead workers, and
Beam would log errors about the broken job: a screen of noise for a build
that resumes cleanly anyway.

:class:`QuietInterrupt` (around a command in ``cli.main``) makes the driver
ignore SIGINT while the command runs: processes started meanwhile inherit the
ignored signal (it survives ``fork`` and ``exec``; Python keeps it ignored),
so workers never see Ctrl-C. A small sentinel process, which does handle
SIGINT, is in the same process group and tells the driver through a pipe. On
Ctrl-C the driver's watcher thread silences logging, kills the driver's
descendant processes (SIGKILL: no tracebacks; nothing uncommitted is kept,
layers are committed ledger-last), prints one line and ends the process with
exit code 130 (the main thread may be waiting forever on the killed workers).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

#: The sentinel: writes ``r`` once its handler is in place, ``!`` on SIGINT; exits when the driver closes
#: its stdin (or dies).
_SENTINEL = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, lambda *a: (os.write(1, b'!'), os._exit(0)))\n"
    "os.write(1, b'r')\n"
    "sys.stdin.buffer.read()\n"
)


class QuietInterrupt:
    """Context manager: Ctrl-C inside it kills the command's processes, prints ``message()`` and exits."""

    def __init__(self, message: Callable[[], str] = lambda: "interrupted", exit_code: int = 130):
        self.message = message
        self.exit_code = exit_code
        self._sentinel: subprocess.Popen | None = None
        self._watcher: threading.Thread | None = None
        self._previous = None

    def __enter__(self):
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            return self  # not a terminal's command (a test calling main() in a thread, a caller's own handler)
        self._sentinel = subprocess.Popen(
            [sys.executable, "-S", "-c", _SENTINEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        # wait until the sentinel handles SIGINT: a Ctrl-C before that would end it without telling the
        # driver, which ignores SIGINT from the next line on (seen on a loaded machine: the build ran on)
        if self._sentinel.stdout.read(1) != b"r":
            self._sentinel.wait()
            self._sentinel.stdout.close()
            self._sentinel = None
            raise KeyboardInterrupt  # interrupted before the command started
        self._previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._watcher = threading.Thread(target=self._watch, name="ctrl-c", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc) -> bool:
        if self._sentinel is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._sentinel.stdin.close()  # the sentinel exits; the watcher reads EOF
            self._sentinel.wait()
            self._watcher.join(timeout=5)
            self._sentinel.stdout.close()
        return False

    def _watch(self) -> None:
        if self._sentinel.stdout.read(1) != b"!":
            return  # the command ended
        logging.disable(logging.CRITICAL)  # the job's errors about its killed workers
        threading.excepthook = lambda args: None  # runner threads reporting a dead worker
        # a runner thread may be starting a worker while this runs: kill until a scan finds none twice,
        # else a worker started after the kill outlives the driver and reports its lost channel later
        quiet = 0
        for _ in range(50):
            quiet = 0 if kill_descendants() else quiet + 1
            if quiet == 2:
                break
            time.sleep(0.02)
        try:
            line = self.message()
        except Exception:  # noqa: BLE001 - the line must come out
            line = "interrupted"
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os.write(2, (line + "\n").encode("utf-8", "replace"))
        os._exit(self.exit_code)


def kill_descendants(pid: int | None = None) -> list[int]:
    """SIGKILL every live process below ``pid`` (default: this one), deepest first; their pids (Linux /proc).

    Processes that ended and wait to be reaped (zombies) are neither killed nor returned, so an empty
    list means nothing below ``pid`` still runs."""
    pid = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if fields[0] in ("Z", "X"):
            continue  # ended, not yet reaped: nothing to kill, and counting it would keep the watcher busy
        children.setdefault(int(fields[1]), []).append(int(entry))
    order, stack = [], list(children.get(pid, []))
    while stack:
        child = stack.pop()
        order.append(child)
        stack.extend(children.get(child, []))
    for child in reversed(order):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
    return order
