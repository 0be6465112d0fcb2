"""The ``land`` and ``bronze`` commands, and the bronze flags of ``snapshot`` (wired into the CLI).

* ``land --config C [--once] [--stop_after S]``: the landing job
  (:mod:`~beam_pipeline.arrivals.landing`); Beam options choose the runner;
* ``bronze gc --keep N|ids [--apply]``: :mod:`~beam_pipeline.arrivals.gc`;
* ``bronze log``: the arrivals log's summary, with positions;
* ``snapshot --from-bronze --until T|N``: :func:`beam_pipeline.sources.snapshot.take_bronze_snapshot`.
"""

from __future__ import annotations

import sys

COMMANDS = ("land", "bronze")

EXAMPLES = """\
examples:
  python -m beam_pipeline land --config corpus.yaml                  # streaming, until stopped
  python -m beam_pipeline land --config corpus.yaml --once           # what is complete now, then exit
  python -m beam_pipeline land --config corpus.yaml --runner=FlinkRunner --flink_master=host:8081 \\
      --flink_version=1.19 --environment_type=LOOPBACK --checkpointing_interval=60000
  python -m beam_pipeline snapshot --config corpus.yaml --from-bronze --until 2024-06-01T00:00:00Z
  python -m beam_pipeline bronze log --config corpus.yaml
  python -m beam_pipeline bronze gc --config corpus.yaml --keep 3            # dry run
  python -m beam_pipeline bronze gc --config corpus.yaml --keep 3 --apply
(docs/operations.md, "Landing arrivals")
"""


def add_commands(commands) -> None:
    import argparse

    land = commands.add_parser(
        "land",
        help="land arriving files into the bronze layer (a Beam streaming job, or --once)",
        description="Watch the landing glob of every source with a `landing:` section, copy each complete "
        "file once into <root>/bronze/<source>/ under the sha256 of its bytes, and commit the "
        "arrivals log per window. Other --options are Beam options (the runner).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _root_args(land)
    land.add_argument(
        "--once",
        action="store_true",
        help="a batch job: land the files that are complete now (stable_polls listings, "
        "poll_interval_seconds apart, or their markers), then exit",
    )
    land.add_argument(
        "--stop_after",
        type=_seconds,
        default=None,
        help="streaming: stop polling after this many seconds, commit and exit (default: never)",
    )

    bronze = commands.add_parser(
        "bronze",
        help="the bronze layer: its arrivals log, garbage collection",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = bronze.add_subparsers(dest="bronze_command", metavar="action", required=True)
    gc = actions.add_parser("gc", help="list (and with --apply delete) objects no kept snapshot references")
    _root_args(gc)
    gc.add_argument(
        "--keep",
        required=True,
        help="bronze snapshots to keep: a count N (the N with the latest cut-offs) or snapshot ids (comma-separated)",
    )
    gc.add_argument("--apply", action="store_true", help="delete (default: a dry run that changes nothing)")
    gc.add_argument(
        "--min_age_seconds",
        type=_seconds,
        default=86400.0,
        help="objects in no arrival (a killed landing job's copies) are deleted only when older "
        "(default 86400: a running job commits its window long before)",
    )
    gc.add_argument("--quiet", action="store_true", help="do not list the objects one by one")
    log = actions.add_parser("log", help="summarize the arrivals log: windows, objects, bytes, positions")
    _root_args(log)


def add_snapshot_args(snapshot) -> None:
    """``snapshot --from-bronze --until T|N`` (``snapshot`` without them fingerprints the globs)."""
    snapshot.add_argument(
        "--from-bronze",
        dest="from_bronze",
        action="store_true",
        help="freeze the bronze layer's arrivals (sources with `landing:`) instead of the globs",
    )
    snapshot.add_argument(
        "--until",
        default=None,
        help="with --from-bronze: an ISO-8601 time (arrivals whose window ended by then) or "
        "an arrivals-log position N (the first N arrivals in log order)",
    )
    snapshot.add_argument(
        "--since",
        default=None,
        help="with --from-bronze: leave out the arrivals before this time or position (a "
        "sliding corpus; default: from the first arrival)",
    )


def _root_args(parser) -> None:
    parser.add_argument("--config", default=None, help="the corpus YAML file (its sources' `landing:` sections)")
    parser.add_argument("--output_root", default=None, help="overrides output_root of the config")


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError(text)
    return value


def main(args, beam_args: list[str]) -> int:
    """Run ``land`` or ``bronze <action>``; exit code."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.config.corpus import ConfigError
    from beam_pipeline.options import LocalRunnerDefaults
    from beam_pipeline.sources.snapshot import SnapshotError
    from beam_pipeline.storage.arrivals_log import ArrivalsLogError

    if args.command == "land":  # the runner defaults of `run` (embedded Flink: the assembled job server ...)
        beam_args = LocalRunnerDefaults.named(beam_args)
    options = PipelineOptions(beam_args)
    FileSystems.set_options(options)
    try:
        if args.command == "land":
            return _land(args, options)
        root = _root(args)
        if args.bronze_command == "gc":
            return _gc(args, root)
        return _log(root)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (SnapshotError, ArrivalsLogError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _config(args):
    from beam_pipeline.build.launcher import load_any_config
    from beam_pipeline.config.corpus import ConfigError

    if not args.config:
        raise ConfigError("--config is required: the corpus YAML file (see docs/config.md)")
    return load_any_config(args.config, args.output_root)


def _root(args) -> str:
    if args.config:
        return _config(args).output_root
    if args.output_root:
        return args.output_root
    from beam_pipeline.config.corpus import ConfigError

    raise ConfigError("name the bronze layer's root: --config corpus.yaml or --output_root <root>")


#: Where a landing run's log goes, under the output root: ``logs/land-<UTC start>-<pid>/beam.log``.
LAND_LOGS = "logs"


def _land(args, options) -> int:
    """The landing job, with the console of a build (beam_pipeline/cli/console.py): its own lines on the
    console; Beam's, the job server's (Java, Maven) and gRPC's in ``<root>/logs/land-*/beam.log`` (and,
    with --verbose, on stderr too)."""
    import os
    import time

    from beam_pipeline.arrivals.landing import land_sources, result_lines
    from beam_pipeline.cli.console import VERBOSE, Console
    from beam_pipeline.storage.layers import join

    config = _config(args)
    with Console(verbose=VERBOSE[0]) as console:
        console.open_log(
            join(config.output_root, LAND_LOGS, f"land-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}")
        )
        result = land_sources(config, options, once=args.once, stop_after=args.stop_after, log=console.line)
    print()
    for line in result_lines(result):
        print(line)
    if console.run_log.path:
        print(f"log         {console.run_log.path}")
    return 0


def _gc(args, root: str) -> int:
    from beam_pipeline.arrivals.gc import apply_gc, plan_gc, plan_lines

    plan = plan_gc(root, args.keep, min_age_seconds=args.min_age_seconds)
    if args.apply:
        apply_gc(plan)
    for line in plan_lines(plan, applied=args.apply, verbose=not args.quiet):
        print(line)
    return 0


def _log(root: str) -> int:
    from beam_pipeline.storage.arrivals_log import read_log, summary_lines

    log = read_log(root)
    print(
        f"arrivals log {root}/bronze/_arrivals: {len(log)} arrivals in {log.segments} segments"
        + (f" ({log.repeated} repeated entries ignored)" if log.repeated else "")
    )
    for line in summary_lines(log.entries, positions=True):
        print(line)
    print(
        "`snapshot --from-bronze --until N` takes the first N arrivals; `--until <time>` those whose window "
        "ended by then"
    )
    return 0
