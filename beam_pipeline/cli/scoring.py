"""Commands of the scoring cascade (wired into ``python -m beam_pipeline``).

* ``select``               re-apply a changed policy to the scorer layers of the
                           last ``run`` of the same config: no scorer runs
                           (``beam_pipeline.scoring.cascade``);
* ``train-quality``        train a fastText classifier (quality, or the
                           toxicity/NSFW slot) from positive and negative JSONL;
* ``contamination-report`` check a new eval set against a finished dataset's
                           retained n-gram index.
"""

from __future__ import annotations

import json
import sys

COMMANDS = ("select", "train-quality", "contamination-report")


def add_commands(commands) -> None:
    from beam_pipeline.options import CorpusOptions, add_driver_arguments

    select = commands.add_parser(
        "select",
        help="re-apply a changed policy to existing scores (no scorer runs)",
        description="Apply the config's policy to the scorer layers of the last `run` of the same config "
        "(same except policy, tokenize, report), then write gold, tokenize and publish. Fails "
        "instead of running ingest, dedup or any scorer.",
    )
    CorpusOptions._add_argparse_args(select)
    add_driver_arguments(select)

    train = commands.add_parser(
        "train-quality",
        help="train a fastText classifier (quality or toxicity) from JSONL examples",
        description="Deterministic (hash split, one thread, fixed seed): the same inputs give the same model "
        "bytes. Writes the model and <model>.metrics.json (held-out accuracy, precision, recall, "
        "F1, ROC AUC).",
    )
    train.add_argument("--positive", required=True, help="JSONL of positive examples (a 'text' field per line)")
    train.add_argument("--negative", required=True, help="JSONL of negative examples")
    train.add_argument("--out", required=True, help="model file to write (.bin)")
    train.add_argument("--field", default="text", help="JSON field holding the text (default: text)")
    train.add_argument("--dim", type=int, default=16, help="embedding size (default 16: small model)")
    train.add_argument("--epoch", type=int, default=15)
    train.add_argument("--lr", type=float, default=0.5)
    train.add_argument("--word-ngrams", type=int, default=2)
    train.add_argument("--min-count", type=int, default=2)
    train.add_argument("--bucket", type=int, default=50_000, help="hashed n-gram buckets")
    train.add_argument("--holdout", type=float, default=0.2, help="share of examples held out for metrics")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--no-quantize", action="store_true", help="keep the full-precision model")
    train.add_argument(
        "--cutoff",
        type=int,
        default=0,
        help="when quantizing, keep only the N most important words and n-grams (0: all)",
    )

    report = commands.add_parser(
        "contamination-report",
        help="check a new eval set against a dataset's retained n-gram index",
        description="Needs a dataset built with decontamination.index: true.",
    )
    report.add_argument("--dataset", required=True, help="<root>/datasets/<dataset_id> (or its manifest.json)")
    report.add_argument("--evalset", required=True, help=".jsonl (objects with a text field) or .txt file")
    report.add_argument("--field", default="text", help="JSON field holding the item text")
    report.add_argument("--name", help="name of the eval set in the report (default: file name)")
    report.add_argument("--min-overlap", type=int, default=1, help="shared n-grams that make an item contaminated")
    report.add_argument("--json", help="also write the full report (every item) to this JSON file")


def main(args, beam_args: list[str], run) -> int:
    """Dispatch a scoring command; ``run`` is the CLI's build-and-summarize function."""
    if args.command == "select":
        return _select(args, beam_args, run)
    if beam_args:
        print(f"error: {args.command}: unrecognized arguments: {' '.join(beam_args)}", file=sys.stderr)
        return 2
    if args.command == "train-quality":
        return _train(args)
    return _contamination(args)


def _select(args, beam_args, run) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.config.corpus import ConfigError, load_config
    from beam_pipeline.options import LocalRunnerDefaults
    from beam_pipeline.scoring.cascade import RESELECT_STAGES, ReselectError, read_pointer

    if not args.config:
        raise ConfigError("--config is required: the corpus YAML file whose policy to re-apply")
    config = load_config(args.config)
    if args.output_root:
        config = config.model_copy(update={"output_root": args.output_root})
    try:
        pointer = read_pointer(config)
        if args.snapshot_id and args.snapshot_id != pointer["snapshot_id"]:
            raise ReselectError(
                f"--snapshot_id {args.snapshot_id}: the scored build used snapshot "
                f"{pointer['snapshot_id']}; re-selection reuses its scores"
            )
        options = PipelineOptions(LocalRunnerDefaults.apply(beam_args))

        def prepare(build):
            build.scored_layers = pointer["layers"]
            build.allowed_stages = RESELECT_STAGES

        return run(
            config,
            options,
            pointer["snapshot_id"],
            prepare=prepare,
            driver={
                "max_attempts": args.max_stage_attempts,
                "progress_interval": args.progress_interval,
                "lease_wait": args.wait_for_lease,
            },
        )
    except ReselectError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _train(args) -> int:
    from beam_pipeline.filters.quality_model import TrainParams, metrics_path, read_examples, train

    params = TrainParams(
        dim=args.dim,
        epoch=args.epoch,
        lr=args.lr,
        word_ngrams=args.word_ngrams,
        min_count=args.min_count,
        bucket=args.bucket,
        holdout=args.holdout,
        seed=args.seed,
        quantize=not args.no_quantize,
        cutoff=args.cutoff,
    )
    try:
        positive = read_examples(args.positive, args.field)
        negative = read_examples(args.negative, args.field)
        metrics = train(positive, negative, args.out, params)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    held = metrics["heldout"]
    print(f"model       {args.out} ({metrics['model_bytes']} bytes, sha256 {metrics['model_sha256'][:16]})")
    print(f"examples    {json.dumps(metrics['examples'], sort_keys=True)}")
    print(f"held out    {json.dumps(held, sort_keys=True)}")
    print(f"metrics     {metrics_path(args.out)}")
    return 0


def _contamination(args) -> int:
    from beam_pipeline.dataset import contamination

    try:
        result = contamination.report(
            args.dataset, args.evalset, field=args.field, name=args.name, min_overlap=args.min_overlap
        )
    except (contamination.ContaminationError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(contamination.summary(result))
    if args.json:
        contamination.write_json(result, args.json)
        print(f"report      {args.json}")
    return 0
