"""The build through Beam's portability framework: PortableRunner, a job service, EXTERNAL workers.

This is the path every portable runner takes (Flink, Spark, a Beam job
server): the driver submits each stage's pipeline as a proto to a job
service over gRPC, and SDK workers started by a worker pool (the
``--environment_type=EXTERNAL`` sidecar of docs/flink.md) run the Python
code. Here the job service is Beam's local one
(``local_job_service_main``, which executes with the FnApiRunner) and the
worker pool is ``worker_pool_main``, both subprocesses on free ports.

The corpus is a small subset of the sample (every stage, every reader), so
the test costs about as much as a small local build; the full sample runs
through a real Flink cluster in tests/test_flink.py (``make test-flink``).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from beam_pipeline.cli import commands as cli
from conftest import IN_PROCESS, REPO, dataset_id_from_output

SAMPLE = os.path.join(REPO, "sample")
SMALL = {"legal": ("debian-copyright", "*.txt", 6, "text"),
         "docs": ("python-docs-mirror", "*.jsonl.gz", 1, "jsonl"),
         "wiki": ("wikipedia", "*.parquet", 1, "parquet")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f}s")
            time.sleep(0.2)


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def small_corpus(base) -> str:
    """A subset of the sample with all three readers; returns the config path."""
    lines = []
    for rank, (name, (folder, pattern, count, fmt)) in enumerate(SMALL.items(), 1):
        (base / "data" / name).mkdir(parents=True)
        for path in sorted(glob.glob(os.path.join(SAMPLE, "data", folder, pattern)))[:count]:
            shutil.copy(path, base / "data" / name / os.path.basename(path))
        lines.append(f'  - {{name: {name}, uri: "data/{name}/{pattern}", format: {fmt}, rank: {rank}, '
                     f'license: x, domain: {name}}}')
    config = base / "corpus.yaml"
    sources = "\n".join(lines)
    config.write_text(f"""
name: small-portable
output_root: out
sources:
{sources}
tokenize: {{tokenizer: {os.path.join(SAMPLE, 'tokenizer', 'tokenizer.json')}, seq_len: 1024, shard_tokens: 65536}}
layout: {{min_partitions: 2}}
""")
    return str(config)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_portable_runner_with_external_workers_gives_the_same_dataset(tmp_path, capsys):
    config = small_corpus(tmp_path)
    assert cli.main(["run", "--config", config, "--output_root", str(tmp_path / "local"), *IN_PROCESS]) == 0
    reference = dataset_id_from_output(capsys.readouterr().out)

    job_port, pool_port = free_port(), free_port()
    # The pool starts each SDK worker as `python -c ...`: this interpreter must be the `python` on PATH.
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = []
    try:
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
             f"--port={job_port}", f"--staging_dir={tmp_path / 'staging'}"],
            env=env, stdout=open(logs / "job_service.log", "wb"), stderr=subprocess.STDOUT))
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={pool_port}"],
            env=env, stdout=open(logs / "worker_pool.log", "wb"), stderr=subprocess.STDOUT))
        wait_for_port(job_port, processes[0], "the job service")
        wait_for_port(pool_port, processes[1], "the worker pool")

        started = time.monotonic()
        code = cli.main(["run", "--config", config, "--output_root", str(tmp_path / "portable"),
                         "--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
                         "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}",
                         "--progress_interval=5"])
        captured = capsys.readouterr()
        print(f"portable build: {time.monotonic() - started:.1f}s", file=sys.__stderr__)
        assert code == 0, captured.err[-3000:] + (logs / "job_service.log").read_text()[-3000:]
    finally:
        stop(processes)

    assert dataset_id_from_output(captured.out) == reference
    # The accounting saw the same records (the job service's metrics reached the driver).
    assert stage_counts(tmp_path / "portable") == stage_counts(tmp_path / "local")
    assert stage_counts(tmp_path / "portable")["ingest"]["in"] > 0
    # The SDK code ran in the pool's workers, not in this process.
    assert "Starting worker" in (logs / "worker_pool.log").read_text()


def stage_counts(root) -> dict:
    (metrics,) = glob.glob(str(root / "runs" / "*" / "metrics.json"))
    return {s["name"]: s["counts"] for s in json.load(open(metrics))["stages"]}
