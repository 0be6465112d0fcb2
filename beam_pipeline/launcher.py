"""Launching builds where they run: the Flex Template driver job, one job server per Flink build.

**Flex Template launcher**: submit the build driver as a one-worker job, and return.

A build is one Beam job per stage, each waited for by the driver before the
next starts (``docs/decisions.md``). A Flex Template launch, on the other
hand, must submit one job and exit without waiting for it. So the launcher
submits the *driver itself* as a job: ``Create([build]) | ParDo(RunBuild)``
on one worker, whose single element runs :class:`~beam_pipeline.build.CorpusBuild`
exactly as ``python -m beam_pipeline run`` does, submitting each stage's
Dataflow job from the worker and waiting for it there. Layers, ledgers,
accounting and resume are unchanged; a failed stage fails the driver job
with the stage's error; re-launching the template resumes at the first
incomplete layer. ``templates/launcher.py`` is the ``FLEX_TEMPLATE_PYTHON_PY_FILE``.

Arguments are those of ``python -m beam_pipeline run`` (``--config``,
``--output_root``, ``--snapshot_id``, ``--progress_interval``) plus
``--driver_machine_type`` and Beam's options, which the launcher splits:

* the driver job gets all of them, then one worker of ``--driver_machine_type``
  and no autoscaling;
* the stage jobs get them without ``--job_name`` and ``--template_location``
  (the Flex launcher's: they name and stage the *driver* job; a stage job
  given ``--template_location`` would only write a job file) and with a label
  ``corpus-driver=<driver job name>`` so ops can list a build's jobs.

Local check (no cloud)::

    python -m beam_pipeline.launcher --config sample/corpus.yaml --output_root out/launch \\
        --runner=DirectRunner

**One job server per build** (:func:`one_job_server`): given
``--runner=FlinkRunner`` without ``--job_endpoint``, Beam starts a Flink job
server (a JVM, ~350 MB) for every pipeline it runs and stops them only when
the driver exits; a build runs one pipeline per stage. The CLI therefore
starts the job server once (from ``--flink_job_server_jar`` or Beam's default
jar) and points every stage at it with ``--job_endpoint``.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (FlinkRunnerOptions, PipelineOptions, PortableOptions,
                                                  StandardOptions)

from beam_pipeline.config import ConfigError, CorpusConfig, load_config
from beam_pipeline.layers import read_bytes
from beam_pipeline.options import CorpusOptions, LaunchOptions, LocalRunnerDefaults

_LOGGER = logging.getLogger("beam_pipeline.launcher")

#: Beam options that describe the driver job only; the stage jobs never inherit them.
DRIVER_ONLY = ("--job_name", "--template_location", "--dataflow_job_file")
#: Worker settings the launcher sets for the driver job (the stage jobs keep the caller's).
DRIVER_WORKERS = ("--num_workers", "--max_num_workers", "--autoscaling_algorithm", "--machine_type",
                  "--worker_machine_type")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(our options, Beam's arguments); --driver_machine_type is ours and is removed."""
    parser = argparse.ArgumentParser(prog="beam_pipeline.launcher", description=__doc__.split("\n\n")[0])
    CorpusOptions._add_argparse_args(parser)
    LaunchOptions._add_argparse_args(parser)
    args, beam_args = parser.parse_known_args(argv)
    if not args.config:
        raise ConfigError("--config is required: the corpus YAML file to build (see docs/config.md)")
    return args, beam_args


def without(args: list[str], names: tuple[str, ...]) -> list[str]:
    """``args`` without the flags in ``names`` (``--name=value`` and ``--name value`` forms)."""
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in names:
            if "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("--"):
                skip = True
            continue
        out.append(arg)
    return out


def flag_value(args: list[str], name: str) -> str | None:
    """The last value given for ``--name`` in ``args``."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def stage_args(beam_args: list[str]) -> list[str]:
    """Beam arguments of the stage jobs the driver submits."""
    args = without(beam_args, DRIVER_ONLY)
    driver_job = flag_value(beam_args, "--job_name")
    if driver_job:
        args.append(f"--labels=corpus-driver={driver_job}")
    return LocalRunnerDefaults.apply(args)


def driver_args(beam_args: list[str], driver_machine_type: str) -> list[str]:
    """Beam arguments of the driver job: the caller's, on one worker of ``driver_machine_type``."""
    args = without(beam_args, DRIVER_WORKERS)
    if _runner_name(args) in ("DataflowRunner", "TestDataflowRunner"):
        args += ["--num_workers=1", "--max_num_workers=1", "--autoscaling_algorithm=NONE",
                 f"--machine_type={driver_machine_type}"]
    return LocalRunnerDefaults.apply(args)


def load_any_config(path: str, output_root: str | None) -> CorpusConfig:
    """Load a config from a local path or any Beam filesystem (gs://, s3://).

    A config read from an object store must use absolute URIs: relative paths
    resolve against the config's folder, which only a local file has.
    """
    if os.path.exists(path) or "://" not in path:
        config = load_config(path)
    else:
        with tempfile.TemporaryDirectory(prefix="corpus-config-") as folder:
            local = os.path.join(folder, os.path.basename(path) or "corpus.yaml")
            try:
                data = read_bytes(path)
            except Exception as err:  # noqa: BLE001 - any filesystem's "not found"
                raise ConfigError(f"config file not readable: {path}: {err}") from None
            with open(local, "wb") as f:
                f.write(data)
            config = load_config(local)
            if folder in config.model_dump_json():
                raise ConfigError(f"{path}: a config read from an object store must use absolute URIs "
                                  f"(sources, tokenizer, output_root, model and eval-set paths); "
                                  f"relative paths only work in a local config file")
    if output_root:
        config = config.model_copy(update={"output_root": output_root})
    return config


class RunBuild(beam.DoFn):
    """The build driver as a DoFn: one element, one whole build (stage jobs submitted from here)."""

    def __init__(self, config: CorpusConfig, snapshot_id: str | None, stage_beam_args: list[str]):
        super().__init__()
        self.config = config
        self.snapshot_id = snapshot_id
        self.stage_beam_args = stage_beam_args

    def process(self, _):
        from beam_pipeline.build import CorpusBuild

        log = logging.getLogger("beam_pipeline.driver")
        options = PipelineOptions(self.stage_beam_args)
        result = CorpusBuild(self.config, options, snapshot_id=self.snapshot_id,
                             log=lambda message: log.info("%s", message)).run()
        log.info("dataset_id %s published at %s", result.dataset_id, result.dataset_path)
        yield {"run_id": result.run_id, "snapshot_id": result.snapshot_id, "dataset_id": result.dataset_id,
               "dataset_path": result.dataset_path, "metrics_path": result.metrics_path}


def driver_pipeline(argv: list[str], runner=None) -> tuple[beam.Pipeline, list[str]]:
    """The driver job's pipeline (not run) and the stage jobs' Beam arguments."""
    args, beam_args = parse(argv)
    options = PipelineOptions(driver_args(beam_args, args.driver_machine_type))
    FileSystems.set_options(options)
    config = load_any_config(args.config, args.output_root)
    stages = stage_args(beam_args)
    pipeline = beam.Pipeline(runner=runner, options=options)
    _ = (pipeline
         | "Build" >> beam.Create([config.name])
         | "RunBuild" >> beam.ParDo(RunBuild(config, args.snapshot_id, stages)))
    return pipeline, stages


def launch(argv: list[str], runner=None):
    """Submit the driver job and return its result without waiting for it."""
    pipeline, _ = driver_pipeline(argv, runner)
    result = pipeline.run()  # never wait_until_finish: a Flex Template launch must return
    try:
        job = f" {result.job_id()}"
    except Exception:  # noqa: BLE001 - no job id (template file written, local runner, dry run)
        job = ""
    _LOGGER.warning("submitted the build driver job%s (state %s); it runs each stage as its own job",
                    job, getattr(result, "state", "?"))
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO)
    try:
        launch(sys.argv[1:] if argv is None else argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


@contextlib.contextmanager
def one_job_server(options: PipelineOptions):
    """For ``FlinkRunner`` without ``--job_endpoint``: one job server for every stage of a build.

    Starts the job server JVM the FlinkRunner would start (same jar, same
    arguments: ``--flink_job_server_jar`` or Beam's default jar), sets
    ``--job_endpoint`` on ``options`` (shared by all views of them) while the
    build runs, and stops the JVM afterwards. Other runners: no-op.
    """
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    portable = options.view_as(PortableOptions)
    flink = options.view_as(FlinkRunnerOptions)
    if (name or "").rsplit(".", 1)[-1] != "FlinkRunner" or portable.job_endpoint or flink.flink_submit_uber_jar:
        yield options
        return
    import socket
    import subprocess
    import time

    from apache_beam.options.pipeline_options import JobServerOptions
    from apache_beam.runners.portability.flink_runner import FlinkJarJobServer, FlinkRunner

    flink.flink_master = FlinkRunner.add_http_scheme(flink.flink_master)  # as FlinkRunner does
    server_options = options.view_as(JobServerOptions)
    with tempfile.TemporaryDirectory(prefix="beam-job-server-") as folder:
        own_artifacts = server_options.artifacts_dir is None
        if own_artifacts:
            server_options.artifacts_dir = os.path.join(folder, "artifacts")
        try:
            command, endpoint = FlinkJarJobServer(options).subprocess_cmd_and_endpoint()
        finally:
            if own_artifacts:
                server_options.artifacts_dir = None
        log_path = os.path.join(folder, "job_server.log")
        with open(log_path, "wb") as log:
            process = subprocess.Popen([str(arg) for arg in command], stdout=log, stderr=subprocess.STDOUT)
        try:
            port = int(endpoint.rsplit(":", 1)[1])
            deadline = time.monotonic() + 300
            while True:
                try:
                    socket.create_connection(("localhost", port), timeout=1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        tail = open(log_path, errors="replace").read()[-2000:]
                        raise RuntimeError(f"the Flink job server did not start ({' '.join(command)}):\n{tail}")
                    time.sleep(0.5)
            _LOGGER.info("Flink job server for this build at %s", endpoint)
            portable.job_endpoint = endpoint
            yield options
        finally:
            portable.job_endpoint = None
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _runner_name(args: list[str]) -> str | None:
    runner = flag_value(args, "--runner")
    return runner.rsplit(".", 1)[-1] if runner else None


if __name__ == "__main__":
    sys.exit(main())
