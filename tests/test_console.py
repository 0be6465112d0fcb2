"""The console of a build (issue 23): stage lines, progress and the warnings about the user's data on the
console; Apache Beam's own log lines (the runner's, and the SDK workers' the local job service relays) in
``runs/<run_id>/beam.log``, and on the console only with ``--verbose``; no option the workers cannot parse
is passed to them.

The CLI runs in subprocesses on the default local runner (multi-processing SDK workers: the runner whose
workers' log lines the console used to carry), as a user runs it."""
from __future__ import annotations

import glob
import logging
import os
import pty
import re
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.build.progress import options_for_workers
from conftest import IN_PROCESS, REPO, run_cli, tiny_corpus

TEXTS = [f"Document number {i} of the console corpus. " + "The quick brown fox jumps over the lazy dog. " * (12 + i % 5)
         for i in range(400)]
#: The local default runner, with two workers (the CLI's default is one per core).
DEFAULT_RUNNER = ["--direct_num_workers=2"]
#: A line the console shows every --progress_interval seconds when stdout is not a terminal.
PROGRESS = re.compile(r"^ *(?P<t>[\d.]+)s \[(?P<stage>\w+)\] [\d,]+( of [\d,]+)? records so far( \(\d+%\))?, "
                      r"[\d,.]+ records/s, [\dhms]+ elapsed(, ETA [\dhms]+)?$")
BEAM_CHATTER = ("WARNING:apache_beam", "Worker: severity", "Discarding unparseable args",
                "No semi_persistent_directory")


def _corpus_with_a_dead_letter(tmp_path) -> str:
    # 25 copies (10,000 documents): stages run across several progress rounds however fast the machine is
    texts = [f"Copy {copy} of the console corpus. {text}" for copy in range(25) for text in TEXTS]
    config = tiny_corpus(tmp_path, "console", texts, extra_yaml="accounting: {max_dead_letter_fraction: 0.5}\n")
    with open(tmp_path / "data" / "docs.jsonl", "a") as f:
        f.write('{"id": "10000", "text": "a record with a missing comma" "x": 1}\n')
    return config


def _run_log(tmp_path) -> str:
    return _run_log_of(tmp_path / "out")


def test_default_console_has_stages_progress_and_dead_letters_and_no_beam_chatter(tmp_path):
    config = _corpus_with_a_dead_letter(tmp_path)
    result = run_cli(["run", "--config", config, "--progress_interval", "0.5", *DEFAULT_RUNNER])
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    for chatter in BEAM_CHATTER:
        assert chatter not in console, f"{chatter!r} on the console:\n{console[-3000:]}"
    assert not [line for line in console.splitlines() if line.startswith("WARNING:")], console[-3000:]

    # Beam's log lines are in the run folder's log, which the summary names
    log = _run_log(tmp_path)
    assert f"log         {log}" in result.stdout.splitlines()
    text = open(log, encoding="utf-8").read()
    assert " apache_beam.runners.portability.local_job_service: Worker: " in text  # the workers' relayed lines
    assert "No semi_persistent_directory found" in text
    assert "Discarding unparseable args" not in text  # fixed at the source: such options are not sent

    # the stage lines, and the data's warnings
    assert "[ingest] committed after " in result.stdout and "[tokenize] committed after " in result.stdout
    (dead,) = [line for line in result.stdout.splitlines() if "[ingest] WARNING:" in line]
    assert "1 records could not be processed and were dead-lettered under " in dead
    assert f"python -m beam_pipeline dead-letter {tmp_path / 'out'} --stage ingest" in dead
    assert glob.glob(str(tmp_path / "out" / "dead_letter" / "ingest" / "*" / "*.parquet"))

    # progress: plain lines (stdout is a pipe), no terminal bar, at the interval
    assert "\r" not in result.stdout
    progress = [m for m in map(PROGRESS.match, result.stdout.splitlines()) if m]
    assert progress, result.stdout
    times = sorted({float(m.group("t")) for m in progress})
    assert all(b - a >= 0.5 - 0.15 for a, b in zip(times, times[1:])), times  # one round per interval


def test_verbose_puts_beams_log_lines_on_the_console_too(tmp_path):
    config = tiny_corpus(tmp_path, "console", TEXTS[:40])
    result = run_cli(["run", "--config", config, "--verbose", "--progress_interval", "0", *DEFAULT_RUNNER])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "apache_beam.runners.portability.local_job_service:Worker: " in result.stderr
    assert "INFO:apache_beam." in result.stderr
    assert "No semi_persistent_directory found" in open(_run_log(tmp_path), encoding="utf-8").read()
    assert "records so far" not in result.stdout  # --progress_interval 0: no progress


def test_a_terminal_gets_a_progress_bar_redrawn_in_place(tmp_path):
    # 25 times the console corpus: its stages each run for seconds, so the bar (redrawn every 0.5 s here)
    # is caught mid-stage however fast the machine is (400 documents built in 6.5 s, a stage per poll)
    texts = [f"Copy {copy} of the console corpus. {text}" for copy in range(25) for text in TEXTS]
    config = tiny_corpus(tmp_path, "console", texts)
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "beam_pipeline", "run", "--config", config,
                                "--progress_interval", "0.5", *DEFAULT_RUNNER],
                               cwd=REPO, stdout=follower, stderr=subprocess.PIPE, text=True)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=600) == 0, process.stderr.read()[-3000:]
    text = output.decode()
    # a stage whose total is known draws [####....] done/total; ingest (no total yet) its records so far
    bars = re.findall(r"\r(\[\w+\] (\[[#.]{24}\] [\d,]+/[\d,]+|[\d,]+ records) [\d,.]+/s [\dhms]+( ETA [\dhms]+)?)",
                      text)
    assert bars, text[-3000:]
    assert "records so far" not in text  # a terminal gets the bar, not the lines
    assert "dataset_id  " in text and "WARNING:apache_beam" not in text


def test_the_workers_get_no_option_they_would_discard(caplog):
    options = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=multi_processing"])
    caplog.set_level(logging.WARNING)
    PipelineOptions.from_dictionary(options.get_all_options()).get_all_options()
    assert "Discarding unparseable args" in caplog.text  # what Beam sends a worker by default
    caplog.clear()
    sent = options_for_workers(options)
    worker = PipelineOptions.from_dictionary(sent).get_all_options()
    assert "Discarding unparseable args" not in caplog.text
    assert worker["pipeline_type_check"] is True and worker["direct_runner_use_stacked_bundle"] is True
    assert {key: value for key, value in options.get_all_options().items() if key not in sent} == \
        {"pipeline_type_check": True, "direct_runner_use_stacked_bundle": True}
    turned_off = PipelineOptions(["--no_pipeline_type_check"])
    assert options_for_workers(turned_off)["pipeline_type_check"] is False  # a changed value is kept


def test_the_demo_console_has_progress_and_no_beam_warnings(tmp_path):
    """``make demo``'s command (the sample, the default local runner), with progress every second rather
    than every 30 s so that lines appear however fast the machine builds the sample (it takes ~25 s: at 5 s
    a round could fall between stages every time)."""
    from tests.test_newcomer import SAMPLE_DATASET_ID

    result = run_cli(["run", "--config", "sample/corpus.yaml", "--output_root", str(tmp_path / "demo"),
                      "--progress_interval", "1"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"dataset_id  {SAMPLE_DATASET_ID}" in result.stdout.splitlines()
    assert result.stderr == "", result.stderr[-3000:]
    assert not [line for line in result.stdout.splitlines() if "WARNING" in line], result.stdout
    assert [line for line in result.stdout.splitlines() if PROGRESS.match(line)], result.stdout
    assert "Worker: " in open(_run_log_of(tmp_path / "demo"), encoding="utf-8").read()


def _run_log_of(root) -> str:
    (path,) = glob.glob(str(root / "runs" / "*" / "beam.log"))
    return path


def test_a_worker_thread_the_runner_hangs_up_goes_to_the_run_log_not_the_console(tmp_path):
    """On Flink, each SDK worker's threads end with a cancelled gRPC stream ("Multiplexer hanging up")
    when the runner releases the worker at the end of a task: seven tracebacks on the sample's console.
    They go to the run log; any other thread's exception still reaches the hook that was there."""
    import io
    import threading

    import grpc

    from beam_pipeline.cli.console import Console

    class Cancelled(grpc.RpcError):  # the shape of grpc's own _MultiThreadedRendezvous (a private class)
        def code(self):
            return grpc.StatusCode.CANCELLED

        def details(self):
            return "Multiplexer hanging up"

    def raising(exc):
        def run():
            raise exc
        return run

    seen = []
    saved = threading.excepthook
    def recorder(args):
        seen.append((args.thread.name, type(args.exc_value).__name__))

    threading.excepthook = recorder
    try:
        with Console(stream=io.StringIO(), tty=False) as console:
            console.open_log(str(tmp_path))
            for name, exc in (("read_grpc_client_inputs", Cancelled()), ("other", ValueError("a real bug"))):
                thread = threading.Thread(target=raising(exc), name=name)
                thread.start()
                thread.join()
        assert threading.excepthook is recorder  # restored on the way out
    finally:
        threading.excepthook = saved
    assert seen == [("other", "ValueError")]
    log = (tmp_path / "beam.log").read_text()
    assert "SDK worker thread read_grpc_client_inputs ended: the runner closed its stream (Multiplexer hanging up)" in log


# --- a failure inside the job (issue 43): one error block, the worker tracebacks in beam.log ---------------

def _dead_letter_stop_corpus(tmp_path) -> str:
    config = tiny_corpus(tmp_path, "console", TEXTS[:60], extra_yaml="accounting: {max_dead_letter_fraction: 0.05}\n")
    with open(tmp_path / "data" / "docs.jsonl", "a") as f:
        for i in range(10):
            f.write('{"id": "bad-%d", "text": "a record with a missing comma" "x": 1}\n' % i)
    return config


def _no_beam_in(console: str) -> None:
    for text in ("Traceback", "[while running", "apache_beam", "beam_pipeline.records.accounting.", "beam_pipeline.sources.snapshot.",
                 "File \"", "Error processing instruction"):
        assert text not in console, f"{text!r} on the console:\n{console[-3000:]}"


@pytest.mark.parametrize("runner", [DEFAULT_RUNNER, IN_PROCESS], ids=["worker processes", "in process"])
def test_a_dead_letter_stop_is_one_error_block_and_the_tracebacks_go_to_the_run_log(tmp_path, runner):
    config = _dead_letter_stop_corpus(tmp_path)
    result = run_cli(["run", "--config", config, "--progress_interval", "0", *runner])
    assert result.returncode == 1, result.stderr[-3000:]
    _no_beam_in(result.stdout + result.stderr)
    lines = result.stderr.splitlines()
    # the cause (stage, what to do), where the dead letters are, the first three (file, record, error)
    assert len(lines) == 5, result.stderr
    assert lines[0].startswith("error: stage ingest failed: stage ingest: 10 of 70 records (14.29%) went to the "
                               "dead letter, above accounting.max_dead_letter_fraction=5.00%"), lines[0]
    assert "raise accounting.max_dead_letter_fraction in the config" in lines[0]
    assert lines[1].startswith("dead letters: 10 records of ingest in ")
    assert all(line.startswith(f"  [docs] {tmp_path / 'data' / 'docs.jsonl'}, record ") for line in lines[2:])
    log = open(_run_log(tmp_path), encoding="utf-8").read()
    assert "Traceback" in log and "went to the dead letter" in log  # the worker's traceback, for a bug report


def test_a_dead_letter_stop_with_verbose_shows_the_tracebacks(tmp_path):
    config = _dead_letter_stop_corpus(tmp_path)
    result = run_cli(["run", "--config", config, "--progress_interval", "0", "--verbose", *IN_PROCESS])
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "AccountingError" in result.stderr


def test_an_input_changed_within_the_job_is_one_line_naming_the_file(tmp_path):
    config = tiny_corpus(tmp_path, "console", TEXTS[:60])
    snapshot = run_cli(["snapshot", "--config", config])
    assert snapshot.returncode == 0, snapshot.stderr[-3000:]
    snapshot_id = snapshot.stdout.split()[1].rstrip(":")
    victim = tmp_path / "data" / "docs.jsonl"
    data = victim.read_bytes()
    victim.write_bytes(data.replace(b"Document number 5 ", b"Document number 6 ", 1))  # same size, other bytes
    result = run_cli(["run", "--config", config, "--snapshot_id", snapshot_id, "--progress_interval", "0",
                      *DEFAULT_RUNNER])
    assert result.returncode == 1, result.stderr[-3000:]
    _no_beam_in(result.stdout + result.stderr)
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: stage ingest failed: input changed since its snapshot: {victim} has checksum ")
    assert line.endswith("take a new snapshot to build from the new data"), line
    assert "Traceback" in open(_run_log(tmp_path), encoding="utf-8").read()
