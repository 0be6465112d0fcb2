"""Processes of a build skip the interpreter's last garbage collection (beam_pipeline/cli/fast_exit.py)."""

from __future__ import annotations

import subprocess
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.cli import fast_exit

# An object in a reference cycle whose finalizer prints: Python's last collection at exit finalizes it.
_CYCLE_AT_EXIT = """
import sys
class Cycle:
    def __init__(self):
        self.me = self
    def __del__(self):
        sys.stdout.write("finalized\\n")
        sys.stdout.flush()
{install}
Cycle()
"""


def _exit_output(install: str) -> str:
    """What a process prints at exit that makes a finalizable cycle after ``install``."""
    done = subprocess.run(
        [sys.executable, "-c", _CYCLE_AT_EXIT.format(install=install)], capture_output=True, text=True, check=True
    )
    return done.stdout


def test_an_installed_process_skips_the_last_collection_and_others_keep_it():
    assert _exit_output("") == "finalized\n"  # Python's usual exit: the cycle is collected
    assert _exit_output("import beam_pipeline.cli.fast_exit as f; f.install()") == ""
    # importing the package (not in an SDK worker) keeps Python's usual exit
    assert _exit_output("import beam_pipeline.cli.commands") == "finalized\n"


def test_a_cli_command_installs_it():
    command = "import beam_pipeline.cli.commands as c; c.main(['inspect', '/no/such/dataset'])"
    assert "finalized" not in _exit_output(command)


def test_sdk_worker_processes_of_the_local_runner_install_it():
    def _worker_state(_element) -> tuple[bool, bool]:  # nested: pickled by value, no test module on workers
        return fast_exit.is_sdk_worker(), fast_exit.installed()

    options = PipelineOptions(
        ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    )
    with beam.Pipeline(options=options) as pipeline:
        states = pipeline | beam.Create([0, 1, 2, 3]) | beam.Map(_worker_state)
        assert_that(states, equal_to([(True, True)] * 4))
    assert not fast_exit.is_sdk_worker()  # this test's own process is not a worker
