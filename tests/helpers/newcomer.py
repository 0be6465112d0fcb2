"""Helpers of tests/test_newcomer.py: the docs' runnable command blocks, a demo output to run them on,
a folder nobody may write, a CLI run interrupted the way a terminal's Ctrl-C does it."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The comment that marks a command block the tests run as written (on a copy of the demo's output).
RUNS_MARKER = "<!-- tests/test_newcomer.py runs this block"

#: Documentation whose marked blocks are run: the README and the docs' quick starts.
DOC_FILES = ("README.md", "docs/report.md", "docs/filters.md")

_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def command_blocks(path: str) -> list[dict]:
    """Every fenced block of a Markdown file: {"lang", "text", "line", "marked"} (marked: preceded by
    :data:`RUNS_MARKER` on the line before)."""
    text = open(path, encoding="utf-8").read()
    blocks = []
    for match in _BLOCK.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        blocks.append({"lang": match.group(1), "text": match.group(2), "line": text[:match.start()].count("\n") + 1,
                       "marked": before.startswith(RUNS_MARKER)})
    return blocks


def demo_workdir(built_root: str, workdir: str) -> str:
    """A folder laid out like a checkout after ``make demo``: ``out/demo`` (a hard-linked copy of the built
    sample: files are replaced by renames, never rewritten, so the original is untouched), ``.venv`` and
    ``sample`` (links to this checkout's)."""
    os.makedirs(os.path.join(workdir, "out"), exist_ok=True)
    shutil.copytree(built_root, os.path.join(workdir, "out", "demo"), copy_function=os.link)
    venv = os.path.dirname(os.path.dirname(sys.executable))  # the interpreter running the tests: <venv>/bin/python
    os.symlink(venv, os.path.join(workdir, ".venv"))
    os.symlink(os.path.join(REPO, "sample"), os.path.join(workdir, "sample"))
    return workdir


@contextlib.contextmanager
def unwritable_folder(path: str):
    """A folder that this process cannot write into, root or not: mode 0555, and the immutable attribute
    (``chattr +i``) when running as root (root ignores modes)."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o555)
    immutable = os.geteuid() == 0
    if immutable:
        subprocess.run(["chattr", "+i", path], check=True)
    try:
        probe = os.path.join(path, "probe")
        try:
            open(probe, "w").close()
        except OSError:
            pass
        else:
            os.remove(probe)
            raise AssertionError(f"{path} is still writable: the test cannot make a read-only folder here")
        yield path
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", path], check=True)
        os.chmod(path, 0o755)


def interrupt_cli(args: list[str], cwd: str, after_line: str, delay: float,
                  timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m beam_pipeline args`` in a new process group and, ``delay`` seconds after it printed a
    line containing ``after_line``, send SIGINT to the whole group: what a terminal does on Ctrl-C."""
    process = subprocess.Popen([sys.executable, "-m", "beam_pipeline", *args], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    for line in process.stdout:
        seen.append(line)
        if after_line in line:
            break
    else:
        process.wait(timeout=timeout)
        raise AssertionError(f"the command ended before printing {after_line!r}:\n{''.join(seen)}")
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=timeout)  # returns only once every process holding the pipes is gone
    return subprocess.CompletedProcess(process.args, process.returncode, "".join(seen) + out, err)


def error_lines(stderr: str) -> list[str]:
    """stderr without Beam's own log lines (``WARNING:...``, which Beam prints while building the job)."""
    return [line for line in stderr.splitlines() if line.strip() and not re.match(r"^(WARNING|INFO):", line)]
