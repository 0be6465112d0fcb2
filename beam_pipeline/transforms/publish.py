"""The last steps of a build's job: publish the dataset, write its lineage, the run's metrics and report.

Once every layer of the build is committed (every stage's ``Committed``
element, gathered into one list in stage order), a chain of steps::

    ledgers ─ WriteManifest: shards moved to datasets/<dataset_id>/shards/, manifest.json written last
            ─ WriteLineage (transforms/lineage.py): one part per layer partition, marker written last
            ─ WriteRunMetrics: runs/<run_id>[/rerun-N]/metrics.json (counts from the ledgers, commit times)
            ─ WriteReport: runs/<run_id>[/rerun-N]/report.html (a failure is logged, never fails the build)
            ─ RemoveTemporaries: half-written files of failed (retried) attempts of these steps

Each step reads what it needs from the element before it; only the metrics
step takes the ledgers again, as its one side input. Every route from the end
of the job back to its start is work for a Flink batch job's optimizer, which
walks each route once (docs/flink.md, "Routes through the plan").

Everything here runs inside the job, so a launch that does not wait for the
job (a Dataflow Flex Template) publishes exactly what ``run`` publishes.
Each step is idempotent: a retried bundle rewrites the same bytes (shards
already moved stay where they are).
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import digest_json
from beam_pipeline.storage.layers import join, move, write_json_atomic
from beam_pipeline.storage.manifest import (
    MANIFEST,
    MANIFEST_FORMAT,
    dataset_path,
    portable_config,
    portable_tokenizer,
    shard_leaf,
)

_LOGGER = logging.getLogger(__name__)


class PublishDataset(beam.PTransform):
    """pbegin -> PCollection of the run's metrics (one element): the dataset published, its lineage,
    the run's metrics and report written.

    ``stages``: the build's ``LayerRef`` of every stage in order (tokenize last).
    ``attempts``: earlier runs of the build's job (this build) in which a stage was computed.
    """

    def __init__(
        self,
        config,
        snapshot_id: str,
        tokenizer,
        run_id: str,
        stages: list,
        attempts: dict[str, int],
        partitions: int,
        run_dir: str | None = None,
    ):
        super().__init__()
        self._run_dir = run_dir or join(config.output_root, "runs", run_id)  # beam_pipeline/storage/runs.py
        self._config = config
        self._snapshot_id = snapshot_id
        self._tokenizer = tokenizer
        self._run_id = run_id
        self._stages = list(stages)
        self._attempts = dict(attempts)
        self._partitions = partitions
        self._started = time.time()  # run metrics only: when the job was built

    def expand(self, pbegin):
        from beam_pipeline.transforms.lineage import WriteLineage

        committed = (
            tuple(ref.committed for ref in self._stages)
            | "AllCommitted" >> beam.Flatten()
            | "Ledgers" >> beam.combiners.ToList()
            | "InStageOrder" >> beam.Map(in_stage_order, [ref.stage for ref in self._stages])
        )
        manifest = committed | "WriteManifest" >> beam.Map(publish, self._config, self._snapshot_id, self._tokenizer)
        lineage = manifest | "WriteLineage" >> WriteLineage(self._config.output_root, self._partitions)
        metrics = lineage | "WriteRunMetrics" >> beam.ParDo(
            RunMetricsFn(self._config, self._run_id, self._snapshot_id, self._attempts, self._started, self._run_dir),
            beam.pvalue.AsSingleton(committed),
        )
        return (
            metrics
            | "WriteReport" >> WriteReport(self._run_dir)
            | "RemoveTemporaries" >> beam.Map(_remove_temporaries, self._config.output_root, self._run_dir)
        )


def in_stage_order(committed: list, stages: list[str]) -> list:
    """Every stage's :class:`Committed` (one list, in any order) -> the same in the build's stage order."""
    by_stage = {c.stage: c for c in committed}
    if sorted(by_stage) != sorted(stages) or len(committed) != len(stages):
        raise ValueError(f"publish expected one commit of each of {stages}, got {[c.stage for c in committed]}")
    return [by_stage[stage] for stage in stages]


def publish(committed: list, config, snapshot_id: str, tokenizer) -> dict:
    """Every stage's :class:`Committed`, tokenize last -> the shards moved into
    ``datasets/<dataset_id>/shards/`` and the manifest written last; returns the manifest."""
    from beam_pipeline.dedup.cluster_alarms import check_before_publishing
    from beam_pipeline.storage.layers import Layer

    check_before_publishing(config, {c.stage: c.ledger for c in committed})  # near_dedup.alarms.action: fail
    tokenized = committed[-1]
    dataset_id, shards = tokenized.ledger["dataset_id"], tokenized.ledger["shards"]
    root = config.output_root
    target = dataset_path(root, dataset_id)
    staged = Layer(root, tokenized.stage, tokenized.key).output_path("shards")
    for shard in shards:
        for field in ("tokens_file", "index_file"):
            src, dst = join(staged, shard[field]), join(target, "shards", shard[field])
            if not FileSystems.exists(dst):
                move(src, dst)
    manifest = {
        "format": MANIFEST_FORMAT,
        "dataset_id": dataset_id,
        "name": config.name,
        "snapshot_id": snapshot_id,
        "config_digest": config.digest(),
        "config": portable_config(config),  # no path of this machine (manifest.py)
        "seed": config.seed,
        "seq_len": config.tokenize.seq_len,
        "tokenizer": portable_tokenizer(config, tokenizer),
        "stages": [
            {
                "name": c.stage,
                "version": c.ledger["version"],
                "layer_key": c.key,
                "config_digest": digest_json(c.ledger["config"]),
                "counts": c.ledger["counts"],
            }
            for c in committed
        ],
        "shards": [
            {
                **s,
                "tokens_file": f"shards/{s['tokens_file']}",
                "index_file": f"shards/{s['index_file']}",
                "leaf": shard_leaf(s),
            }
            for s in shards
        ],
        "merkle": {
            "hash": "sha256",
            "leaf": "sha256(canonical_json({name, tokens_sha256, index_sha256}))",
            "order": "shard name",
            "root": dataset_id,
        },
    }
    write_json_atomic(join(target, MANIFEST), manifest)
    return manifest


class RunMetricsFn(beam.DoFn):
    """The lineage marker (written after the manifest) + every stage's Committed -> runs/<run_id>/metrics.json."""

    def __init__(
        self,
        config,
        run_id: str,
        snapshot_id: str,
        attempts: dict[str, int],
        started: float,
        run_dir: str | None = None,
    ):
        self._config = config
        self._run_dir = run_dir or join(config.output_root, "runs", run_id)
        self._run_id = run_id
        self._snapshot_id = snapshot_id
        self._attempts = attempts
        self._started = started

    def process(self, marker: dict, committed: list) -> Iterator[dict]:
        path = join(self._run_dir, "metrics.json")
        metrics = run_metrics(
            self._run_id,
            self._snapshot_id,
            self._config.digest(),
            marker["dataset_id"],
            committed,
            self._attempts,
            self._started,
            time.time(),
        )
        write_json_atomic(path, metrics)
        yield metrics


def run_metrics(
    run_id: str,
    snapshot_id: str,
    config_digest: str,
    dataset_id: str,
    committed: list,
    attempts: dict[str, int],
    started: float,
    finished: float,
) -> dict:
    """The run's metrics: every stage's counts (from its ledger), whether it was reused, and timings.

    A stage's seconds are the time from the commit of the latest layer it reads
    (or the start of the job) to its own commit: in one job stages overlap, so
    this is the time the stage was the last thing the build waited for.
    Timings describe this run, never the data: they reach no layer or dataset.
    """
    stages, timing, previous = [], {}, started
    for c in committed:
        earlier = attempts.get(c.stage, 0)  # computed by an earlier run of this build's job, which failed later
        stages.append(
            {
                "name": c.stage,
                "layer_key": c.key,
                "version": c.ledger["version"],
                "reused": c.reused and not earlier,
                "attempts": earlier + (0 if c.reused else 1),
                "counts": c.ledger["counts"],
            }
        )
        if not c.reused and c.committed_at is not None:
            timing[c.stage] = round(max(0.0, c.committed_at - previous), 3)
            previous = max(previous, c.committed_at)
        else:
            timing[c.stage] = 0.0
    return {
        "run_id": run_id,
        "snapshot_id": snapshot_id,
        "dataset_id": dataset_id,
        "config_digest": config_digest,
        "stages": stages,
        "timing_seconds": {"total": round(finished - started, 3), **timing},
    }


def _remove_temporaries(metrics: dict, root: str, run_dir: str) -> dict:
    """Delete the half-written files that failed (retried) attempts of the steps above left in the
    dataset and run folders; every writer there is done by now."""
    from beam_pipeline.storage.layers import TEMPORARY_PREFIX, remove_matching

    dataset = dataset_path(root, metrics["dataset_id"])
    remove_matching(
        *(
            join(folder, TEMPORARY_PREFIX + "*")
            for folder in (dataset, join(dataset, "shards"), join(dataset, "lineage"), run_dir)
        )
    )
    return metrics


class WriteReport(beam.PTransform):
    """The run's metrics -> the same metrics, once runs/<run_id>/report.html is written (or a failing
    step is logged: never fatal, the dataset is published by then).

    The numbers are gathered once; the plots (one task each, ``report.plot_names``) are spread over
    the workers by a reshuffle and drawn in parallel; the page is written last, from the same functions
    as ``python -m beam_pipeline report``, so both give the same bytes.

    Every element is ``(metrics, the step's result or None after a failure)``: the metrics and the numbers
    travel with each task rather than as a side input, so the steps form a chain with no second route back
    to the metrics. A Flink batch job's plan is traversed once per route from each sink (its optimizer's
    range-partition pass does not remember visited nodes), so every extra route near the end of the job
    multiplies that work for the whole graph (docs/flink.md, "Routes through the plan").
    """

    def __init__(self, run_dir: str):
        super().__init__()
        self._metrics_path = join(run_dir, "metrics.json")

    def expand(self, metrics):
        path = self._metrics_path
        return (
            metrics
            | "WithMetrics" >> beam.Map(lambda metrics: (metrics, metrics))
            | "GatherNumbers" >> beam.ParDo(_ReportStepFn(path, _gather_numbers))
            | "PlotTasks" >> beam.FlatMapTuple(_plot_tasks)
            | "SpreadPlots" >> beam.Reshuffle()
            | "DrawPlot" >> beam.ParDo(_ReportStepFn(path, _draw_plot))
            | "AllPlots" >> beam.combiners.ToList()
            | "PlotsOfTheRun" >> beam.Map(_plots_of_the_run)
            | "WritePage" >> beam.ParDo(_ReportStepFn(path, _write_page))
            | "Metrics" >> beam.MapTuple(lambda metrics, _page: metrics)
        )


def _gather_numbers(metrics_path: str, _metrics: dict) -> tuple:
    from beam_pipeline.report import report_numbers

    return report_numbers(metrics_path)


def _plot_tasks(metrics: dict, gathered: tuple | None) -> list[tuple]:
    """(metrics, (the run, its numbers)) -> (metrics, (plot name, the run, its numbers, carries them on))
    per plot; the first task alone carries the run and its numbers on to the page."""
    from beam_pipeline.report.plot_names import plot_names  # not matplotlib: the drawing workers import it

    if gathered is None:  # logged by that step
        return [(metrics, None)]
    return [(metrics, (name, *gathered, index == 0)) for index, name in enumerate(plot_names(gathered[1]))]


def _draw_plot(_metrics_path: str, task: tuple) -> tuple:
    """A plot task -> (plot name, the drawn plot, the run and its numbers, or None, None).

    Only one drawn plot carries the numbers (~220 kB at 1 GB of text): ``AllPlots`` gathers every plot into
    one record, and a copy per plot made that record over 11 MB, more than a Flink combiner's sort buffer
    takes ("Cannot write record to fresh sort buffer. Record too large").
    """
    from beam_pipeline.report import plots

    name, ref, data, carries_numbers = task
    drawn = plots.draw(name, data)
    return (name, drawn, ref, data) if carries_numbers else (name, drawn, None, None)


def _plots_of_the_run(tasks: list[tuple]) -> tuple[dict, list]:
    """Every plot task's (metrics, drawn plot or None) -> (metrics, the drawn plots)."""
    return tasks[0][0], [drawn for _metrics, drawn in tasks]


def _write_page(_metrics_path: str, drawn: list) -> str | None:
    from beam_pipeline.report import write_report_page
    from beam_pipeline.report.plot_names import by_section, plot_names

    if any(plot is None for plot in drawn):  # the numbers could not be gathered or a plot failed: logged
        return None
    _, _, ref, data = next(plot for plot in drawn if plot[3] is not None)
    figures = {name: plot for name, plot, _, _ in drawn}
    if set(figures) != set(plot_names(data)):
        return None
    return write_report_page(ref, data, by_section(figures, data))


class _ReportStepFn(beam.DoFn):
    """One step of :class:`WriteReport`: ``(metrics, input)`` -> ``(metrics, its result)``; after a failure
    (logged with the command that retries it, here or in an earlier step) ``(metrics, None)``."""

    def __init__(self, metrics_path: str, step):
        self._metrics_path = metrics_path
        self._step = step

    def process(self, element: tuple) -> Iterator[tuple]:
        metrics, given = element
        if given is None:
            yield metrics, None
            return
        try:
            yield metrics, self._step(self._metrics_path, given)
        except Exception as err:  # noqa: BLE001 - the dataset is published; a report bug must not hide that
            _LOGGER.warning(
                "the run report could not be written: %s: %s; retry with: python -m beam_pipeline report %s",
                type(err).__name__,
                err,
                self._metrics_path,
            )
            yield metrics, None
