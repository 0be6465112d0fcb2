"""Command line: ``python -m beam_pipeline <command> ...``.

Commands:

* ``run``       build the corpus a config describes (snapshot, every stage,
                the dataset), resuming from complete layers;
* ``snapshot``  fingerprint the inputs of a config and print the snapshot id;
* ``inspect``   summarize a dataset from its manifest.

Arguments a command does not know are Beam pipeline options
(``--runner=DataflowRunner --project=...``); with no ``--runner`` the build
runs locally on every core, with no network.
"""
from __future__ import annotations

import argparse
import sys
import time

from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.accounting import AccountingError
from beam_pipeline.build import CorpusBuild, StageFailed
from beam_pipeline.config import ConfigError, CorpusConfig, load_config
from beam_pipeline.manifest import load_manifest, summarize
from beam_pipeline.options import CorpusOptions, LocalRunnerDefaults
from beam_pipeline.snapshot import InputChangedError, SnapshotError, snapshot_path, take_snapshot

EXAMPLES = """\
examples:
  python -m beam_pipeline run --config sample/corpus.yaml
  python -m beam_pipeline run --config corpus.yaml --output_root s3://bucket/corpus \\
      --runner=FlinkRunner --flink_master=localhost:8081
  python -m beam_pipeline snapshot --config corpus.yaml
  python -m beam_pipeline inspect out/demo/datasets/<dataset_id>

Any other --option is passed to Apache Beam (see `--help` of apache_beam's
PipelineOptions); without --runner the local DirectRunner uses every core.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline",
        description="Turn raw text into deterministic, provenance-tracked LLM pretraining token shards.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)

    run = commands.add_parser("run", help="build the corpus a config describes",
                              description="Snapshot the inputs (unless --snapshot_id), run every stage "
                                          "(reusing complete layers) and publish the dataset.",
                              epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    CorpusOptions._add_argparse_args(run)

    snapshot = commands.add_parser("snapshot", help="fingerprint a config's inputs; print the snapshot id")
    CorpusOptions._add_argparse_args(snapshot)

    inspect = commands.add_parser("inspect", help="summarize a dataset manifest")
    inspect.add_argument("dataset", help="manifest.json, a dataset folder, or <root>/datasets/<dataset_id>")
    return parser


def main(argv: list[str] | None = None) -> int:
    args, beam_args = _parser().parse_known_args(argv)
    try:
        if args.command == "inspect":
            return _inspect(args)
        config = _load(args)
        options = PipelineOptions(LocalRunnerDefaults.apply(beam_args))
        if args.command == "snapshot":
            return _snapshot(config, options)
        return _run(config, options, args.snapshot_id)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (SnapshotError, InputChangedError, AccountingError, StageFailed) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _load(args) -> CorpusConfig:
    if not args.config:
        raise ConfigError("--config is required: the corpus YAML file to build (see docs/config.md)")
    config = load_config(args.config)
    if args.output_root:
        config = config.model_copy(update={"output_root": args.output_root})
    return config


def _snapshot(config: CorpusConfig, options: PipelineOptions) -> int:
    snapshot_id, manifest = take_snapshot(config, options)
    files = sum(len(s["files"]) for s in manifest["sources"].values())
    print(f"snapshot {snapshot_id}: {files} files, {manifest['total_bytes']} bytes")
    print(f"written to {snapshot_path(config.output_root, snapshot_id)}")
    return 0


def _run(config: CorpusConfig, options: PipelineOptions, snapshot_id: str | None) -> int:
    started = time.monotonic()
    result = CorpusBuild(config, options, snapshot_id=snapshot_id, log=_log(started)).run()
    print()
    print(f"{'stage':<12} {'in':>8} {'out':>8} {'dropped':>8} {'dead':>6}  layer")
    for stage in result.stages:
        c = stage.counts
        print(f"{stage.stage:<12} {c['in']:>8} {c['passed']:>8} {sum(c['filtered'].values()):>8} "
              f"{c['dead_letter']:>6}  {stage.layer.key}{' (reused)' if stage.reused else ''}")
    shards = result.manifest["shards"]
    print()
    print(f"tokens      {sum(s['tokens'] for s in shards)} in {sum(s['sequences'] for s in shards)} sequences "
          f"of {result.manifest['seq_len']}")
    print(f"shards      {len(shards)}")
    print(f"snapshot    {result.snapshot_id}")
    print(f"dataset_id  {result.dataset_id}")
    print(f"dataset     {result.dataset_path}")
    print(f"metrics     {result.metrics_path}")
    return 0


def _log(started: float):
    def log(message: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {message}", flush=True)
    return log


def _inspect(args) -> int:
    print(summarize(load_manifest(args.dataset)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
