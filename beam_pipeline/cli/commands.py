"""Command line: ``python -m beam_pipeline <command> ...``.

Commands:

* ``run``       build the corpus a config describes (snapshot, every stage,
                the dataset), resuming from complete layers;
* ``snapshot``  fingerprint the inputs of a config and print the snapshot id
                (``--from-bronze --until``: freeze the bronze layer's arrivals);
* ``land``, ``bronze``: the landing job and the bronze layer's log and
                garbage collection (``beam_pipeline/arrivals``, docs/operations.md);
* ``inspect``   summarize a dataset from its manifest;
* ``dead-letter`` list the records the stages could not process, with their origin;
* ``report``    write a run's HTML report (``runs/<run_id>/report.html``), or
                compare two runs or datasets (``--compare A B``);
* ``select``, ``train-quality``, ``contamination-report``: re-selection
  without recomputing scores, classifier training, decontamination of new
  eval sets (``beam_pipeline/cli/scoring.py``, ``docs/policy.md``);
* ``verify``, ``export-megatron``, ``lineage``, ``trace``, ``takedown``,
  ``diff``: the training-side contract over published datasets
  (``docs/format.md``), dispatched by ``DATASET_COMMANDS``.

Arguments a command does not know are Beam pipeline options
(``--runner=DataflowRunner --project=...``); with no ``--runner`` the build
runs locally on every core, with no network. An option neither knows is
refused before anything runs; user errors are one line and an exit code
(``beam_pipeline/cli/usage.py``, docs/config.md "Exit codes"); Ctrl-C is one line
and 130 (``beam_pipeline/cli/interrupt.py``).
"""

from __future__ import annotations

import argparse
import sys
import time

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline import errors
from beam_pipeline.build.corpus_build import CorpusBuild
from beam_pipeline.build.stage_failure import StageFailed
from beam_pipeline.cli import arrivals as arrivals_commands
from beam_pipeline.cli import fast_exit, full_disk, usage
from beam_pipeline.cli import scoring as scoring_commands
from beam_pipeline.cli.console import VERBOSE as _VERBOSE
from beam_pipeline.cli.interrupt import QuietInterrupt
from beam_pipeline.config.corpus import ConfigError, CorpusConfig
from beam_pipeline.options import CorpusOptions, LocalRunnerDefaults, RunnerError, add_driver_arguments
from beam_pipeline.records.accounting import AccountingError
from beam_pipeline.sources.snapshot import InputChangedError, SnapshotError, snapshot_path, take_snapshot
from beam_pipeline.storage import object_store
from beam_pipeline.storage.manifest import NotADataset, load_manifest, summarize

EXAMPLES = """\
examples:
  python -m beam_pipeline run --config sample/corpus.yaml
  python -m beam_pipeline run --config corpus.yaml --output_root s3://bucket/corpus \\
      --runner=FlinkRunner --flink_master=localhost:8081
  python -m beam_pipeline snapshot --config corpus.yaml
  python -m beam_pipeline inspect out/demo/datasets/<dataset_id>
  python -m beam_pipeline report out/demo/runs/<run_id>
  python -m beam_pipeline report --compare out/a/datasets/<id> out/b/datasets/<id>

Any other --option is passed to Apache Beam (see `--help` of apache_beam's
PipelineOptions); an option neither knows is refused. Without --runner the
local DirectRunner uses every core. Errors are one line with an exit code
(docs/config.md, "Exit codes"); --verbose shows tracebacks instead. A build's
console has its stage lines, progress and the warnings about the data; Beam's
own log lines go to runs/<run_id>/beam.log, and with --verbose to stderr too
(docs/operations.md, "The console").
"""


def _parser() -> argparse.ArgumentParser:
    parser = usage.OneLineArgumentParser(
        prog="python -m beam_pipeline",
        description="Turn raw text into deterministic, provenance-tracked LLM pretraining token shards.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)

    run = commands.add_parser(
        "run",
        help="build the corpus a config describes",
        description="Snapshot the inputs (unless --snapshot_id), run every stage "
        "(reusing complete layers) and publish the dataset.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    CorpusOptions._add_argparse_args(run)
    add_driver_arguments(run)

    snapshot = commands.add_parser("snapshot", help="fingerprint a config's inputs; print the snapshot id")
    CorpusOptions._add_argparse_args(snapshot)
    arrivals_commands.add_snapshot_args(snapshot)

    inspect = commands.add_parser("inspect", help="summarize a dataset manifest")
    inspect.add_argument("dataset", help="manifest.json, a dataset folder, or <root>/datasets/<dataset_id>")

    report = commands.add_parser(
        "report",
        help="write a run's HTML report, or compare two runs",
        description="Write <root>/runs/<run_id>/report.html from the run's metrics, "
        "layers and manifest (see docs/report.md).",
    )
    report.add_argument(
        "target",
        nargs="?",
        help="runs/<run_id>, its metrics.json, a dataset folder or manifest.json, or an output root (its latest run)",
    )
    report.add_argument("--compare", nargs=2, metavar=("A", "B"), help="put two runs or datasets side by side")
    report.add_argument("--output", help="where to write the page (default: in the run folder)")
    report.add_argument("--target_tokens", type=int, help="override report.target_tokens of the config")
    report.add_argument("--mixture", help="override report.mixture, e.g. docs=0.5,encyclopedic=0.3,legal=0.2")
    dead = commands.add_parser(
        "dead-letter",
        help="list the records a build could not process, with their origin",
        description="Every stage's dead letters under <root>/dead_letter/<stage>/<layer>/: "
        "source file, line or byte offset, error.",
    )
    dead.add_argument("output_root", help="the build's output root")
    dead.add_argument("--stage", help="only this stage's dead letters")
    dead.add_argument("--limit", type=int, default=20, help="records shown per layer (0: all; default 20)")
    _add_dataset_commands(commands)
    scoring_commands.add_commands(commands)
    arrivals_commands.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (``beam_pipeline.cli.usage``: 0 done, 1 failed, 2 usage or config,
    3 not found, 4 output root not writable, 130 interrupted). ``--verbose`` anywhere: tracebacks
    instead of one-line errors. The process then exits without a last garbage collection
    (``beam_pipeline.cli.fast_exit``)."""
    fast_exit.install()
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    argv = [arg for arg in argv if arg != "--verbose"]
    _CURRENT_BUILD.clear()
    _VERBOSE[:] = [verbose]
    try:
        parser = _parser()
        args, beam_args = parser.parse_known_args(argv)
        usage.check_options(
            beam_args, args.command, _command_parser(parser, args), beam_options=args.command in BEAM_OPTION_COMMANDS
        )
        if args.command in BEAM_OPTION_COMMANDS:
            usage.check_runner(beam_args)
        usage.check_config_path(getattr(args, "config", None))
        # Before any job starts a thread or a worker: they inherit a Ctrl-C that only this process sees
        with QuietInterrupt(_on_interrupt, errors.EXIT_INTERRUPTED):
            return _dispatch(args, beam_args)
    except errors.UserError as err:
        if verbose:
            raise
        return usage.report(err)
    except OSError as err:  # a path of the user's that cannot be read or written (anything else: a bug)
        if full_disk.is_full_disk(err) and not verbose:
            return usage.report(full_disk.error(_CURRENT_BUILD[-1] if _CURRENT_BUILD else None, err))
        error = usage.os_error(err)
        if verbose or error is None:
            raise
        return usage.report(error)
    except KeyboardInterrupt:
        if verbose:
            raise
        print(_interrupted_line(""), file=sys.stderr)
        return errors.EXIT_INTERRUPTED


def _on_interrupt() -> str:
    """Ctrl-C (the workers are killed): release the root's lease, then the line to print."""
    from beam_pipeline.build.lease import release_all

    release_all()  # the next build need not wait for the lease to go stale
    return _interrupted_line(_committed_so_far())


def _interrupted_line(committed: str) -> str:
    return f"interrupted; {committed}rerun the same command to resume"


#: The build being run (for the Ctrl-C line: what it had committed).
_CURRENT_BUILD: list = []

#: Commands whose leftover arguments are Apache Beam pipeline options (``bronze`` and ``report``: the
#: filesystem options, ``--s3_*`` and GCP's).
BEAM_OPTION_COMMANDS = ("run", "snapshot", "select", "land", "bronze", "report")


def _command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser | None:
    """The sub-parser of ``args.command`` (``bronze gc``: the innermost one)."""
    found = parser
    for name in (args.command, getattr(args, "bronze_command", None)):
        subparsers = [a for a in found._actions if isinstance(a, argparse._SubParsersAction)]
        if not name or not subparsers or name not in subparsers[0].choices:
            break
        found = subparsers[0].choices[name]
    return found


def _dispatch(args, beam_args: list[str]) -> int:
    try:
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "dead-letter":
            from beam_pipeline.cli.dead_letters import cli_dead_letter

            return cli_dead_letter(args)
        if args.command in DATASET_COMMANDS:
            return _dataset_command(args, beam_args)
        if args.command == "report":
            FileSystems.set_options(PipelineOptions(beam_args))  # s3:// / gs:// runs: --s3_* / GCP options
            return _report(args)
        if args.command in scoring_commands.COMMANDS:
            if args.command == "select":
                FileSystems.set_options(PipelineOptions(beam_args))  # an s3:// root is checked with --s3_*
                _check_output_root(args)
            return scoring_commands.main(args, beam_args, run=_run)
        if args.command in arrivals_commands.COMMANDS:
            return arrivals_commands.main(args, beam_args)
        FileSystems.set_options(PipelineOptions(beam_args))  # driver-side s3:// and gs:// calls: --s3_* / GCP options
        config = _load(args)
        object_store.check_writable(config.output_root)
        options = PipelineOptions(LocalRunnerDefaults.apply(beam_args, _input_bytes(config, beam_args)))
        FileSystems.set_options(options)
        _check_storage(config, beam_args)
        if args.command == "snapshot":
            return _snapshot(config, options, args)
        return _run(config, options, args.snapshot_id, driver=_driver_settings(args))
    except (ConfigError, RunnerError) as err:
        print(f"error: {err}", file=sys.stderr)
        return errors.EXIT_USAGE
    except StageFailed as err:
        if full_disk.is_full_disk(err):  # exit 4, with the filesystem and the space needed
            return usage.report(full_disk.error(_CURRENT_BUILD[-1] if _CURRENT_BUILD else None, err))
        print(f"error: {err}", file=sys.stderr)
        from beam_pipeline.cli.dead_letters import stop_message

        for line in stop_message(err):
            print(line, file=sys.stderr)
        return errors.EXIT_FAILED
    except (SnapshotError, InputChangedError, AccountingError) as err:
        print(f"error: {err}", file=sys.stderr)
        return errors.EXIT_NOT_FOUND if _nothing_matched(err) else errors.EXIT_FAILED


def _nothing_matched(err: Exception) -> bool:
    """A source glob that matches no file (exit 3: what the config points at is not there). Told by the
    message of ``snapshot.match_sources`` / ``build_manifest``: a class of its own in snapshot.py would
    change the ingest stage's code digest, and so the key of every layer of every corpus."""
    return isinstance(err, SnapshotError) and str(err).endswith(" matched no files")


def _check_output_root(args) -> None:
    """``select``: the output root (given, or the config's) must be writable before anything runs."""
    if args.output_root:
        object_store.check_writable(args.output_root)
    elif args.config:
        try:
            object_store.check_writable(_load(args).output_root)
        except ConfigError:
            pass  # reported by the command itself


def _check_storage(config: CorpusConfig, beam_args: list[str]) -> None:
    """Refuse (Dataflow) or warn about (a Flink cluster) local paths that remote workers would need."""
    from beam_pipeline.options.corpus_options import local_paths_for_remote_workers

    local, fatal = local_paths_for_remote_workers(config, beam_args)
    if not local:
        return
    message = (
        "these paths are on this machine, but the runner's workers run elsewhere and read and write them "
        "themselves: " + "; ".join(local) + ". Put them on storage every worker reaches (gs://, s3://, "
        "hdfs://, or one shared mount at the same path on every worker; docs/operations.md)"
    )
    if fatal:
        raise ConfigError(message)
    print(f"warning: {message}", file=sys.stderr)


def _input_bytes(config: CorpusConfig, beam_args: list[str]) -> int | None:
    """The text a build without --runner would read (estimated from the files its globs match now)."""
    if any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        return None
    from beam_pipeline.build.corpus_build import estimated_text_bytes
    from beam_pipeline.sources.snapshot import match_sources

    return estimated_text_bytes({"sources": {"all": {"files": match_sources(config)}}})


def _load(args) -> CorpusConfig:
    if not args.config:
        raise ConfigError("--config is required: the corpus YAML file to build (see docs/config.md)")
    from beam_pipeline.build.launcher import load_any_config

    return load_any_config(args.config, args.output_root)  # a local file, or gs:// / s3:// (absolute URIs)


def _snapshot(config: CorpusConfig, options: PipelineOptions, args=None) -> int:
    if args is not None and (args.from_bronze or args.until is not None or args.since is not None):
        return _bronze_snapshot(config, options, args)
    snapshot_id, manifest = take_snapshot(config, options)
    files = sum(len(s["files"]) for s in manifest["sources"].values())
    print(f"snapshot {snapshot_id}: {files} files, {manifest['total_bytes']} bytes")
    print(f"written to {snapshot_path(config.output_root, snapshot_id)}")
    return 0


def _bronze_snapshot(config: CorpusConfig, options: PipelineOptions, args) -> int:
    """``snapshot --from-bronze --until T|N`` (beam_pipeline/arrivals, docs/operations.md)."""
    if not (args.from_bronze and args.until is not None):
        raise ConfigError("--from-bronze and --until go together: --until <ISO-8601 time or log position>")
    from beam_pipeline.sources.snapshot import take_bronze_snapshot

    snapshot_id, manifest = take_bronze_snapshot(config, options, args.until, args.since)
    files = sum(len(s["files"]) for s in manifest["sources"].values())
    bronze = manifest["bronze"]
    print(
        f"snapshot {snapshot_id}: {files} files, {manifest['total_bytes']} bytes; arrivals {bronze['since'] + 1}.."
        f"{bronze['until']} of the log (the last in the window ending {bronze['until_window_end']})"
    )
    print(f"written to {snapshot_path(config.output_root, snapshot_id)}")
    print(f"build it with: python -m beam_pipeline run --config ... --snapshot_id {snapshot_id}")
    return 0


def _driver_settings(args) -> dict:
    """What the waiting driver reads (never pipeline options: no worker needs them)."""
    return {
        "max_attempts": args.max_stage_attempts,
        "progress_interval": args.progress_interval,
        "lease_wait": args.wait_for_lease,
    }


def _run(
    config: CorpusConfig, options: PipelineOptions, snapshot_id: str | None, prepare=None, driver: dict | None = None
) -> int:
    """Build, with the console of beam_pipeline/cli/console.py: stage lines, progress and the warnings about
    the data on the console; Beam's log lines in runs/<run_id>/beam.log (and, with --verbose, on stderr)."""
    from beam_pipeline.cli.console import Console

    with Console(verbose=_VERBOSE[0]) as console:
        return _run_build(config, options, snapshot_id, prepare, driver, console)


def _run_build(
    config: CorpusConfig, options: PipelineOptions, snapshot_id: str | None, prepare, driver: dict | None, console
) -> int:
    started = time.monotonic()
    build = CorpusBuild(config, options, snapshot_id=snapshot_id, log=_log(started, console), **(driver or {}))
    build.progress_bar = console.bar
    build.on_run_dir = console.open_log
    if prepare is not None:  # e.g. re-selection pins the scorer layers (scoring/commands.py)
        prepare(build)
    _CURRENT_BUILD[:] = [build]
    from beam_pipeline.cli.dead_letters import quiet_dead_letter_stops

    if not _VERBOSE[0]:
        quiet_dead_letter_stops()  # the runner's tracebacks of a dead-letter stop: reported below in one line
    result = build.run()
    print()
    width = max(len("stage"), *(len(stage.stage) for stage in result.stages))
    print(f"{'stage':<{width}} {'in':>8} {'out':>8} {'dropped':>8} {'dead':>6}  layer")
    for stage in result.stages:
        c = stage.counts
        print(
            f"{stage.stage:<{width}} {c['in']:>8} {c['passed']:>8} {sum(c['filtered'].values()):>8} "
            f"{c['dead_letter']:>6}  {stage.layer.key}{' (reused)' if stage.reused else ''}"
        )
    shards = result.manifest["shards"]
    print()
    print(
        f"tokens      {sum(s['tokens'] for s in shards)} in {sum(s['sequences'] for s in shards)} sequences "
        f"of {result.manifest['seq_len']}"
    )
    print(f"shards      {len(shards)}")
    print(f"snapshot    {result.snapshot_id}")
    print(f"dataset_id  {result.dataset_id}")
    print(f"dataset     {result.dataset_path}")
    print(f"metrics     {result.metrics_path}")
    if console.run_log.path:
        print(f"log         {console.run_log.path}")
    from beam_pipeline.dedup.cluster_alarms import build_messages
    from beam_pipeline.report.null_scores import warnings_from_ledgers

    ledgers = {s.stage: s.ledger for s in result.stages}
    clusters, alarms = build_messages(config, ledgers)
    for line in clusters:
        print(f"clusters    {line}")
    from beam_pipeline.report.floors import floor_warnings

    floors = floor_warnings({name: (ledger or {}).get("counts") or {} for name, ledger in ledgers.items()})
    for warning in [*alarms, *(w.message for w in warnings_from_ledgers(config, ledgers)), *floors]:
        print(f"warning     {warning}")
    from beam_pipeline.dataset.takedown import superseded_warning

    superseded = superseded_warning(result.dataset_path)
    if superseded:
        print(f"warning     {superseded}")
    if result.report_path:  # written by the job's last step
        print(f"report      {result.report_path}")
    else:
        print(
            f"warning: the run report could not be written (the job's log says why); "
            f"retry with: python -m beam_pipeline report {result.metrics_path}",
            file=sys.stderr,
        )
    return 0


def _committed_so_far() -> str:
    """ "N of M layers of this build are committed (stages); " for the Ctrl-C line."""
    if not _CURRENT_BUILD:
        return ""  # not a build (land: every landed file is committed as it lands)
    layers = getattr(_CURRENT_BUILD[-1], "layers", None)
    if not layers:
        return "nothing of this build was committed yet; "
    try:
        done = [stage for stage, layer in layers if layer.is_complete()]
    except Exception:  # noqa: BLE001 - the line must come out even if the store does not answer
        return ""
    return (
        f"{len(done)} of {len(layers)} layers of this build are committed"
        + (f" ({', '.join(done)})" if done else "")
        + "; "
    )


def _log(started: float, console=None):
    def log(message: str) -> None:
        text = f"{time.monotonic() - started:7.1f}s {message}"
        if console is None:
            print(text, flush=True)
        else:
            console.line(text)

    return log


def _inspect(args) -> int:
    try:
        manifest = load_manifest(args.dataset)
    except NotADataset as err:
        print(f"error: {err}", file=sys.stderr)
        return errors.EXIT_NOT_FOUND
    print(summarize(manifest))
    return 0


def _report(args) -> int:
    from beam_pipeline.report import ReportError, write_compare, write_report

    try:
        if args.compare:
            path, summary = write_compare(*args.compare, output=args.output)
            print(summary)
        elif args.target:
            overrides = {}
            if args.target_tokens:
                overrides["target_tokens"] = args.target_tokens
            if args.mixture:
                overrides["mixture"] = _mixture(args.mixture)
            path = write_report(args.target, output=args.output, report_config=overrides)
            if overrides and not args.output:
                what = ", ".join(
                    f"--{name} {value}"
                    for name, value in (("target_tokens", args.target_tokens), ("mixture", args.mixture))
                    if value
                )
                print(f"report      {path}")
                print(f"what-if     {what}: a report of its own; the run's report.html next to it is unchanged")
                return 0
        else:
            raise ReportError("name a run or dataset (report RUN_OR_DATASET), or two (report --compare A B)")
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"report      {path}")
    return 0


def _mixture(text: str) -> dict[str, float]:
    """``docs=0.5,legal=0.2`` -> {"docs": 0.5, "legal": 0.2}."""
    from beam_pipeline.report import ReportError

    weights = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, weight = item.partition("=")
        try:
            weights[name.strip()] = float(weight)
        except ValueError:
            raise ReportError(f"--mixture: expected bucket=weight[,bucket=weight...], got {item!r}") from None
    return weights


#: Commands over published datasets: name -> "module:function(args) -> exit code".
DATASET_COMMANDS = {
    "verify": "beam_pipeline.dataset.verify:cli_verify",
    "export-megatron": "beam_pipeline.dataset.megatron:cli_export_megatron",
    "lineage": "beam_pipeline.dataset.lineage:cli_lineage",
    "trace": "beam_pipeline.dataset.lineage:cli_trace",
    "takedown": "beam_pipeline.dataset.takedown:cli_takedown",
    "diff": "beam_pipeline.dataset.diff:cli_diff",
}


def _add_dataset_commands(commands) -> None:
    dataset_help = "a dataset folder <root>/datasets/<dataset_id> (or its manifest.json)"
    verify = commands.add_parser("verify", help="recompute every digest, leaf and the Merkle root; exit 1 on mismatch")
    verify.add_argument("dataset", help=dataset_help)
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--skip-lineage", action="store_true", help="do not check the lineage table")

    export = commands.add_parser("export-megatron", help="write a Megatron-LM indexed dataset (.bin/.idx)")
    export.add_argument("dataset", help=dataset_help)
    export.add_argument("out_prefix", help="output path without .bin/.idx (Megatron's --data-path)")
    export.add_argument("--domain", action="append", help="only this domain bucket (repeatable)")
    export.add_argument(
        "--order",
        choices=("shuffled", "shards"),
        default="shuffled",
        help="shuffled (default): the dataset's one shuffle across shards and domains; shards: shard after shard",
    )

    lineage = commands.add_parser("lineage", help="(re)write a dataset's lineage table from its layers")
    lineage.add_argument("dataset", help=dataset_help)
    lineage.add_argument("--force", action="store_true", help="rewrite even if lineage/_LINEAGE.json exists")

    trace = commands.add_parser("trace", help="token T of shard S -> its document, decisions and raw record")
    trace.add_argument("--dataset", required=True, help=dataset_help)
    trace.add_argument("--shard", required=True, help="shard name, e.g. docs-00003-of-00011")
    trace.add_argument("--offset", required=True, type=int, help="token offset in the shard's .bin")
    trace.add_argument("--max-chars", type=int, default=1200, help="characters of the record text to print")

    takedown = commands.add_parser("takedown", help="publish a version without some documents")
    takedown.add_argument("--dataset", required=True, help=dataset_help)
    what = takedown.add_mutually_exclusive_group(required=True)
    what.add_argument("--doc-ids", help="file of doc_ids, one per line")
    what.add_argument("--urls", help="file of URLs, one per line (documents and their repeats)")
    what.add_argument("--url-pattern", help="regular expression searched in every URL")
    takedown.add_argument("--reason", default="takedown request", help="recorded with each tombstone")
    takedown.add_argument(
        "--exact-only",
        action="store_true",
        help="do not also remove exact duplicates (same content_hash) of matched documents",
    )

    diff = commands.add_parser("diff", help="compare two datasets: stages, config, counts, shards")
    diff.add_argument("a", help=dataset_help)
    diff.add_argument("b", help=dataset_help)
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")


def _dataset_command(args, extra: list[str]) -> int:
    usage.check_options(extra, args.command, None, beam_options=False)  # main() checked them already
    import importlib

    module, _, function = DATASET_COMMANDS[args.command].partition(":")
    try:
        return getattr(importlib.import_module(module), function)(args)
    except NotADataset as err:
        print(f"error: {err}", file=sys.stderr)
        return errors.EXIT_NOT_FOUND


if __name__ == "__main__":
    sys.exit(main())
