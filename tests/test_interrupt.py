"""kill_descendants: what the Ctrl-C watcher kills (the end-to-end Ctrl-C test is in test_newcomer.py)."""
from __future__ import annotations

import subprocess
import sys
import time

from beam_pipeline.cli.interrupt import kill_descendants

# A process with one child that ended and was never reaped (a zombie) and one live child with a live
# child of its own; it prints "<zombie pid> <live child pid>" once all three are in place.
_TREE = r"""
import os, subprocess, sys, time

def state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1].split()[0]

def children(pid):
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(") ", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except OSError:
            pass
    return found

ended = subprocess.Popen([sys.executable, "-S", "-c", "pass"])
live = subprocess.Popen(["sh", "-c", "sleep 120 & wait"])
while state(ended.pid) != "Z" or not children(live.pid):
    time.sleep(0.01)
print(ended.pid, live.pid, flush=True)
time.sleep(120)
"""


def test_live_descendants_are_killed_and_an_ended_unreaped_child_is_not_counted():
    tree = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    try:
        zombie, live = map(int, tree.stdout.readline().split())
        killed = kill_descendants(tree.pid)
        assert live in killed and len(killed) == 2  # the shell and its sleep
        assert zombie not in killed
        deadline = time.monotonic() + 10
        while kill_descendants(tree.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        # nothing runs below the tree any more; its unreaped children do not count (the watcher stops
        # after two empty scans instead of scanning for its whole second)
        assert kill_descendants(tree.pid) == []
        assert tree.poll() is None  # the process itself is not a descendant of itself
    finally:
        tree.kill()
        tree.wait()
