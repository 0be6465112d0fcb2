"""Options of a corpus build: which corpus (``--config`` and what may override it), and how the driver runs.

:class:`CorpusOptions` is a ``PipelineOptions`` subclass: the three values that
decide what one build job computes, and the Flex Template's parameters
(``templates/metadata.json``). :func:`add_driver_arguments` adds what only the
process that submits and waits for the job reads (``--max_stage_attempts``,
``--progress_interval``): plain command-line flags, never pipeline options, so
no worker receives an option it does not know.
"""

from __future__ import annotations

import logging
import os

from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.options import job_server_scratch, sdk_worker
from beam_pipeline.options.validation import Matching

#: A path or URI (absolute: a template launch has no working directory of the caller's).
PATH_OR_URI = r"^([a-z][a-z0-9+.-]*://|/)[^\s]+$"


class CorpusOptions(PipelineOptions):
    """Which corpus to build, from which snapshot, into which root."""

    #: the CLI and the template launcher refuse to run without these (metadata.json: isOptional false)
    REQUIRED = ("config",)

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--config",
            default=None,
            help="Path or URI of the corpus YAML file (sources, stage parameters, policy, tokenizer, "
            "shard layout, seed, output root). See docs/config.md. A template launch needs an "
            "absolute URI (gs://, s3://) or a path inside the image.",
        )
        parser.add_argument(
            "--output_root",
            default=None,
            type=Matching(PATH_OR_URI, str, "absolute path or URI", relative=True),
            help="Where snapshots, layers, datasets and runs are written (local path, s3://, gs://, "
            "hdfs://). Overrides output_root in the config.",
        )
        parser.add_argument(
            "--snapshot_id",
            default=None,
            type=Matching(r"^[0-9a-f]{24}$", str, "snapshot id"),
            help="Build from this existing snapshot (as printed by the snapshot command). An input "
            "that changed since then stops the run. Without it, a snapshot is taken first.",
        )


def add_driver_arguments(parser) -> None:
    """The flags of the process that submits the build's job and waits for it (``run``, ``select``)."""
    parser.add_argument(
        "--max_stage_attempts",
        default=3,
        type=Matching(r"^[1-9][0-9]?$", int, "number of attempts (1-99)"),
        help="Runs of the build's job before the build fails when a stage's records do not balance (the "
        "runner lost or repeated records; a layer is committed only once they balance, and a rerun "
        "reuses every layer committed before). 1 fails at the first imbalance.",
    )
    parser.add_argument(
        "--progress_interval",
        default=30.0,
        type=Matching(r"^[0-9]+(\.[0-9]+)?$", float, "number of seconds"),
        help="Seconds between progress lines while the job runs ('[stage] N of T records so far (P%%), rate, "
        "elapsed, ETA'; on a terminal a bar redrawn every second instead); 0 turns them off. Progress "
        "never changes what a build writes (docs/operations.md, 'The console').",
    )
    parser.add_argument(
        "--wait_for_lease",
        default=0.0,
        type=Matching(r"^[0-9]+(\.[0-9]+)?$", float, "number of seconds"),
        help="Seconds to wait for another build on the same output root to finish (its lease, "
        "<root>/_BUILD_LEASE.json, to be released) before giving up; 0 (default) refuses at once, exit 75 "
        "(docs/operations.md, 'One build per output root').",
    )


#: Where ``scripts/flink_cluster.sh jar`` (``make flink``) assembles the Flink job server: Beam's Flink
#: 1.19 runner of Beam 2.62.0 from Maven Central (the newest that resolves here; it runs jobs of the
#: 2.77 SDK: docs/flink.md). The script's FLINK_CACHE, JOB_SERVER_FLINK and JOB_SERVER_BEAM.
FLINK_VERSION = "1.19"
FLINK_JOB_SERVER_BEAM = "2.62.0"


def flink_job_server_jar() -> str:
    """The job server jar ``make flink`` assembles (it may not exist yet)."""
    cache = os.environ.get("FLINK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "beam_pipeline", "flink")
    name = f"beam-runners-flink-{FLINK_VERSION}-job-server-{FLINK_JOB_SERVER_BEAM}"
    return os.path.join(cache, f"beam-flink-{FLINK_VERSION}-job-server-{FLINK_JOB_SERVER_BEAM}", f"{name}.jar")


#: Above this much estimated text (``snapshot.estimated_text_bytes``) the local runner's shuffles do not fit
#: in 20 GiB: a build with no --runner goes to embedded Flink. Measured on 2 cores and 24 GiB: the local
#: runner's peak grows 7.16 MiB per MB of text and reaches 20 GiB at 2,678 MB of text, which the estimate
#: of a zstd corpus puts at 2,009 MB (bench/README.md, "The local runner's ceiling"; docs/operations.md).
LOCAL_RUNNER_CEILING_BYTES = 2_000_000_000
#: The job server's thread stack: Flink's batch optimizer walks the build's 196-deep chain of transforms
#: recursively and overflowed the default 1 MiB stack intermittently (bench/README.md, embedded Flink).
JOB_SERVER_THREAD_STACK = "-Xss16m"
#: How long a Flink TaskManager keeps a job's idle SDK workers for its next task (Beam's default, 0, starts
#: new ones for every task: 29-30 per TaskManager for the sample; docs/flink.md, "SDK workers kept
#: between tasks"). An idle worker is stopped this long after its last task, the job's last one too.
ENVIRONMENT_CACHE_MILLIS = 60_000


class RunnerError(ValueError):
    """The runner options cannot work as given (a missing job server jar, say)."""


def flag_value(args: list[str], name: str) -> str | None:
    """The flag's value (the last one given), or None."""
    values = _values(args, name)
    return values[-1] if values else None


def _values(args: list[str], name: str) -> list[str]:
    """Every value of a flag given more than once (Beam appends them: ``--job_server_jvm_properties``)."""
    values = []
    for i, arg in enumerate(args):
        if arg == f"--{name}" and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(f"--{name}="):
            values.append(arg.split("=", 1)[1])
    return values


class LocalRunnerDefaults:
    """Beam arguments added to what the user gave, so that each runner works as the docs write it.

    * No ``--runner``: the local DirectRunner (its FnApiRunner needs no network;
      the Prism runner would first try to download a binary), ``multi_processing``
      with one worker per core. Not ``multi_threading``: with Beam 2.77 we saw its
      GroupByKey lose elements on the sample (docs/decisions.md). Above
      :data:`LOCAL_RUNNER_CEILING_BYTES` of text (``input_bytes``), embedded Flink instead.
    * ``--runner=FlinkRunner``: Flink 1.19 and the job server ``make flink``
      assembled (Beam's defaults, Flink 2.2 and a jar Maven Central does not serve
      here, fail in seconds); on embedded Flink (``--flink_master=[local]``, the
      default) the SDK workers run in this process (LOOPBACK) and the parallelism
      is the number of cores; the job server this process starts gets a 16 MiB
      thread stack (:data:`JOB_SERVER_THREAD_STACK`) and a scratch directory of its
      own as ``java.io.tmpdir``, removed even when the build is killed
      (:mod:`beam_pipeline.options.job_server_scratch`). On a cluster (``--flink_master=host:port``)
      each TaskManager starts its SDK workers with this environment's boot
      (``--environment_type=PROCESS``, :mod:`beam_pipeline.options.sdk_worker`). Either way a
      TaskManager keeps a job's SDK workers between its tasks (:data:`ENVIRONMENT_CACHE_MILLIS`).
    """

    @staticmethod
    def apply(beam_args: list[str], input_bytes: int | None = None) -> list[str]:
        runner = flag_value(beam_args, "runner")
        if runner is None and input_bytes is not None and input_bytes > LOCAL_RUNNER_CEILING_BYTES:
            logging.getLogger(__name__).warning(
                "%.1f GB of text is above the local runner's ceiling (%.1f GB, docs/operations.md): building on "
                "embedded Flink (--runner=FlinkRunner --flink_master=[local]); pass --runner=DirectRunner to "
                "insist",
                input_bytes / 1e9,
                LOCAL_RUNNER_CEILING_BYTES / 1e9,
            )
            beam_args, runner = ["--runner=FlinkRunner", "--flink_master=[local]", *beam_args], "FlinkRunner"
        if runner is None:
            extra = ["--runner=DirectRunner"]
            if not any(a.startswith("--direct_running_mode") for a in beam_args):
                extra.append("--direct_running_mode=multi_processing")
            if not any(a.startswith("--direct_num_workers") for a in beam_args):
                extra.append(f"--direct_num_workers={os.cpu_count() or 1}")
            if "--direct_running_mode=multi_threading" in beam_args:
                logging.getLogger(__name__).warning(
                    "--direct_running_mode=multi_threading lost records in GroupByKey in our tests "
                    "(docs/decisions.md); prefer multi_processing or in_memory"
                )
            return extra + beam_args
        return LocalRunnerDefaults.named(beam_args)

    @staticmethod
    def named(beam_args: list[str]) -> list[str]:
        """The defaults of the runner ``--runner`` names (FlinkRunner: :func:`flink_defaults`); without
        ``--runner``, nothing (Beam's default). What ``land`` takes: the same runner defaults as ``run``,
        its local runner being Beam's (streaming)."""
        runner = flag_value(beam_args, "runner")
        if runner is not None and runner.rsplit(".", 1)[-1] == "FlinkRunner":
            return beam_args + flink_defaults(beam_args)
        return beam_args


def flink_defaults(beam_args: list[str]) -> list[str]:
    """What a FlinkRunner build needs and the user did not give (see :class:`LocalRunnerDefaults`)."""
    extra = []
    if flag_value(beam_args, "flink_version") is None:
        extra.append(f"--flink_version={FLINK_VERSION}")
    if flag_value(beam_args, "job_endpoint") is None and flag_value(beam_args, "flink_job_server_jar") is None:
        jar = flink_job_server_jar()
        if not os.path.exists(jar):
            raise RunnerError(
                f"the Flink job server is not assembled ({jar} is missing): run `make flink` once "
                f"(Maven resolves it from Maven Central), or pass --flink_job_server_jar or "
                f"--job_endpoint (docs/flink.md)"
            )
        extra.append(f"--flink_job_server_jar={jar}")
    if flag_value(beam_args, "job_endpoint") is None:  # the job server this process starts
        properties = _values(beam_args, "job_server_jvm_properties") + _values(beam_args, "job_server_jvm_property")
        if not properties:
            extra.append(f"--job_server_jvm_properties={JOB_SERVER_THREAD_STACK}")
        if not any(p.startswith("-Djava.io.tmpdir=") for p in properties):
            extra.append(f"--job_server_jvm_properties=-Djava.io.tmpdir={job_server_scratch.claim()}")
    if flag_value(beam_args, "environment_cache_millis") is None:
        extra.append(f"--environment_cache_millis={ENVIRONMENT_CACHE_MILLIS}")
    master = flag_value(beam_args, "flink_master")
    if master in (None, "[local]", "[auto]"):
        if master is None:
            extra.append("--flink_master=[local]")
        if flag_value(beam_args, "environment_type") is None:
            extra.append("--environment_type=LOOPBACK")
        if flag_value(beam_args, "parallelism") is None:
            extra.append(f"--parallelism={os.cpu_count() or 1}")
    elif flag_value(beam_args, "environment_type") is None and os.path.exists(sdk_worker.command_path()):
        # a cluster: each TaskManager starts its own SDK workers with this environment's boot
        # (Beam's default, DOCKER, needs a Docker daemon on every TaskManager; docs/flink.md)
        extra += ["--environment_type=PROCESS", f"--environment_config={sdk_worker.environment_config()}"]
    return extra


def local_paths_for_remote_workers(config, beam_args: list[str]) -> tuple[list[str], bool]:
    """(the config's local paths that remote workers would need, whether that is certain to fail).

    Workers on Dataflow or on a Flink cluster (``--flink_master`` not ``[local]``) read the
    inputs, the side files (tokenizer, models, lists, eval sets) and the output root themselves: a
    local path of the submitting machine works there only if every worker mounts it at the same
    path (NFS), and never on Dataflow. Locally (DirectRunner, embedded Flink) nothing is reported.
    """
    runner = (flag_value(beam_args, "runner") or "DirectRunner").rsplit(".", 1)[-1]
    master = flag_value(beam_args, "flink_master")
    if runner in ("DirectRunner", "SwitchingDirectRunner", "PrismRunner") or (
        runner == "FlinkRunner" and master in (None, "[local]", "[auto]")
    ):
        return [], False
    from beam_pipeline.filters.language import BUILTIN_LID

    paths = [("output_root", config.output_root), ("tokenize.tokenizer", config.tokenize.tokenizer)]
    paths += [(f"sources.{s.name}.uri", s.uri) for s in config.sources]
    paths += [
        ("language.model", config.language.model),
        ("quality.model", config.quality.model),
        ("safety.toxicity_model", config.safety.toxicity_model),
    ]
    paths += [("blocklist", p) for p in config.blocklist.domain_files + config.blocklist.url_substring_files]
    paths += [("safety.badword_files", p) for p in config.safety.badword_files.values()]
    paths += [(f"decontamination.evalsets.{e.name}", e.path) for e in config.decontamination.evalsets]
    local = [f"{name}: {path}" for name, path in paths if path and path != BUILTIN_LID and "://" not in path]
    return local, runner in ("DataflowRunner", "TestDataflowRunner")
