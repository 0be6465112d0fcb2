"""Assembling and running a corpus build: one Beam job, layers committed inside it.

A build is one pipeline graph (DESIGN.md, principles 9 and 10)::

    snapshot (driver) -> ingest -> the cascade, in ``cascade.stages`` order -> select
                      -> ngram_index (optional) -> tokenize -> publish -> lineage -> run metrics and report

    the cascade (default, the seed's order): scorers language, heuristics, blocklist (one fused pass)
                      -> exact_dedup -> near_dedup -> scorers quality ... decontamination (one fused pass)

Before the job is built, the driver computes every layer key from (stage
version, the stage's slice of the config, input layer keys, partition count):
keys depend on the config and the snapshot, never on data. A layer that is
complete (its ledger exists) is *reused*: the graph holds one element naming
it instead of the stage's transforms. Every other stage is added to the graph;
its outputs are written as partitions, its counts are computed as data, and a
commit step (:class:`~beam_pipeline.transforms.layer_io.CommitLayer`) checks
them and writes the ledger last. Later stages read a layer only once its
commit step has run (its ``Committed`` element is their side input), so a
stage reads a layer of this job exactly as it reads one of an earlier run.

A killed job therefore resumes at the first uncommitted layer, and a job whose
counts did not balance (a runner lost or repeated records; the commit step
refuses, the job fails) runs again with the layers committed so far reused, up
to ``--max_stage_attempts`` times. ``docs/decisions.md`` ("One Beam job per
build") has the reasons and the costs.

The graph itself (reuse or compute, write, commit) is
:class:`~beam_pipeline.build.build_graph.BuildGraph`; a failed job's message
(the stage, the root cause) is made in :mod:`beam_pipeline.build.stage_failure`.
This module holds the build: the snapshot, the stages in order, the runs of
the job, and what the build did.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from typing import Callable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from beam_pipeline.build import stage_seconds
from beam_pipeline.build.build_graph import BuildGraph
from beam_pipeline.build.progress import BuildProgress, is_local_direct
from beam_pipeline.build.stage_failure import (
    StageFailed,
    failed_stage,
    retryable,
    root_cause,
    stage_labels,
    stage_named,
)
from beam_pipeline.config.corpus import CorpusConfig
from beam_pipeline.options.shared_views import SharedViewOptions
from beam_pipeline.records.accounting import DEAD_LETTER
from beam_pipeline.records.hashing import digest_json
from beam_pipeline.scoring import cascade
from beam_pipeline.sources.snapshot import (
    check_sources_match,
    check_unchanged,
    estimated_text_bytes,
    load_snapshot,
    take_snapshot,
)
from beam_pipeline.storage import schemas
from beam_pipeline.storage.layers import Layer, join, read_bytes
from beam_pipeline.storage.manifest import MANIFEST, dataset_path
from beam_pipeline.transforms import exact_dedup, ingest, publish, select, tokenize_shard
from beam_pipeline.transforms.gate import DocumentPartitions
from beam_pipeline.transforms.layer_io import PartitionInputs
from beam_pipeline.transforms.stage_plan import LayerRef, StagePlan
from beam_pipeline.transforms.task_ledger import clear_uncommitted, discard_task_records, reuse_summary


@dataclasses.dataclass
class StageOutcome:
    """What a build did with one stage (read from its ledger once the job is done)."""

    stage: str
    layer: Layer
    version: str
    config_digest: str
    reused: bool
    counts: dict
    ledger: dict
    attempts: int = 0  # runs of the build's job in which this stage was computed (0: reused)


@dataclasses.dataclass
class BuildResult:
    run_id: str
    snapshot_id: str
    dataset_id: str
    dataset_path: str
    metrics_path: str
    report_path: str | None
    stages: list[StageOutcome]
    manifest: dict


# --- the build --------------------------------------------------------------------------------------


class CorpusBuild:
    """Builds one config against one snapshot in one Beam job, resuming from committed layers."""

    def __init__(
        self,
        config: CorpusConfig,
        pipeline_options: PipelineOptions,
        *,
        snapshot_id: str | None = None,
        log: Callable[[str], None] = print,
        before_run: Callable[[beam.Pipeline], None] | None = None,
        max_attempts: int = 3,
        progress_interval: float = 30.0,
        lease_wait: float = 0.0,
    ):
        self.config = config
        self.options = SharedViewOptions.of(pipeline_options)  # graph construction asks for views ~2,800 times
        self.max_attempts = max_attempts  # runs of the job when a stage's records do not balance
        self.progress_interval = progress_interval
        self.lease_wait = lease_wait  # seconds to wait for another build's lease on the root (0: refuse)
        FileSystems.set_options(pipeline_options)  # the driver's own s3:// / gs:// calls (docs/s3.md)
        self.snapshot_id = snapshot_id
        self.log = log
        self.before_run = before_run  # sees the job's pipeline before it runs (tests, tooling)
        self.root = config.output_root
        self.scored_layers: dict | None = None  # re-selection: the scorer layers of an earlier run
        self.allowed_stages: tuple[str, ...] | None = None  # re-selection: the stages that may run
        self.run_dir: str | None = None  # where this invocation's metrics and report go (set by _prepare)
        self.layers: list[tuple[str, Layer]] = []  # (stage, layer) of the job being run, once it is built
        self.progress_bar = None  # a terminal's progress bar (beam_pipeline/cli/console.py); None: plain lines
        self.on_run_dir: Callable[[str], None] | None = None  # told this invocation's runs/<run_id> folder
        self.input_bytes: int | None = None  # estimated text of the snapshot (a full disk's message)

    def run(self) -> BuildResult:
        """Build: run the job, wait for it, run it again while a stage's records do not balance.

        The output root's lease is held throughout (one build per root: beam_pipeline/build/lease.py)."""
        from beam_pipeline.build.lease import Lease

        with Lease(self.root, self.options, wait=self.lease_wait, log=self.log):
            return self._run_attempts()

    def _run_attempts(self) -> BuildResult:
        started = time.monotonic()
        prepared = self._prepare()
        attempts_allowed = self.max_attempts
        attempts: dict[str, int] = {}
        for attempt in range(1, attempts_allowed + 1):
            progress = BuildProgress(self.options, self.log, self.progress_interval, bar=self.progress_bar)
            graph = self.assemble(*prepared, dict(attempts), runner=progress.runner())
            self.layers = [(ref.stage, ref.layer) for ref in graph.refs]  # what an interrupted build reports
            for stage in graph.computed:
                attempts[stage] = attempts.get(stage, 0) + 1
            try:
                self._run_job(graph, progress)
                break
            except StageFailed as err:
                if not retryable(str(err)) or attempt == attempts_allowed:
                    raise
                for ref in graph.refs:
                    if not ref.layer.is_complete():
                        discard_task_records(ref.layer)  # what a task counted may not be what it wrote
                self.log(
                    f"[{stage_named(str(err)) or 'build'}] WARNING: attempt {attempt} of {attempts_allowed}: "
                    f"{err}. Nothing uncommitted is kept; the job runs again and reuses the layers "
                    f"committed so far."
                )
        return self._result(prepared[4], prepared[0], attempts, time.monotonic() - started)

    def submit(self, runner=None):
        """Build the job and submit it without waiting (a Flex Template launch); return its result."""
        graph = self.assemble(*self._prepare(), runner=runner)
        self._log_plan(graph)
        if self.before_run:
            self.before_run(graph.pipeline)
        return graph.pipeline.run()

    # --- steps ----------------------------------------------------------------------------

    def _prepare(self) -> tuple:
        """(snapshot_id, snapshot manifest, partitions, tokenizer, run_id): what the graph is built from."""
        snapshot_id, manifest = self._snapshot()
        self.input_bytes = estimated_text_bytes(manifest)
        partitions = partition_count(
            self.input_bytes, self.config.layout.target_partition_bytes, self.config.layout.min_partitions
        )
        tokenizer = tokenize_shard.inspect_tokenizer(self.config.tokenize)
        run_id = digest_json({"snapshot": snapshot_id, "config": self.config.digest()})[:16]
        from beam_pipeline.storage.runs import run_folder

        self.run_dir = run_folder(
            self.root, run_id
        )  # runs/<run_id>, or runs/<run_id>/rerun-N (beam_pipeline/storage/runs.py)
        if self.on_run_dir is not None:  # the console's log file goes there (beam_pipeline/cli/console.py)
            self.on_run_dir(self.run_dir)
        return snapshot_id, manifest, partitions, tokenizer, run_id

    def _snapshot(self) -> tuple[str, dict]:
        if self.snapshot_id:
            manifest = load_snapshot(self.root, self.snapshot_id)
            check_sources_match(self.config, manifest)
            snapshot_id = self.snapshot_id
            self.log(f"[snapshot] using pinned snapshot {snapshot_id}")
        else:
            self.log("[snapshot] fingerprinting inputs ...")
            snapshot_id, manifest = take_snapshot(self.config, self.options, log=self.log)
            files = sum(len(s["files"]) for s in manifest["sources"].values())
            self.log(f"[snapshot] {snapshot_id}: {files} files, {manifest['total_bytes']} bytes")
        check_unchanged(manifest)
        return snapshot_id, manifest

    def assemble(
        self,
        snapshot_id: str,
        manifest: dict,
        partitions: int,
        tokenizer,
        run_id: str,
        earlier_attempts: dict[str, int] | None = None,
        runner=None,
    ) -> BuildGraph:
        """The build's job, not run: every stage reused or computed (and every layer it computes cleared).

        ``earlier_attempts``: runs of the job before this one in which a stage was computed (the run
        metrics count this one too)."""
        config = self.config
        graph = BuildGraph(
            beam.Pipeline(runner=runner, options=self.options),
            self.root,
            partitions,
            config.accounting.max_dead_letter_fraction,
            self.log,
            self.allowed_stages,
        )

        ingested = graph.stage(
            StagePlan(
                ingest.STAGE,
                ingest.VERSION,
                ingest.stage_config(config),
                {"snapshot": snapshot_id},
                outputs={
                    ingest.DOCUMENTS: schemas.DOCUMENT,
                    ingest.REPEATS: schemas.REPEAT,
                    DEAD_LETTER: schemas.DEAD_LETTER,
                },
                rows_match={ingest.DOCUMENTS: "passed"},
            ),
            lambda p, layer: p | "Ingest" >> ingest.IngestSnapshot(config, manifest, layer.path, partitions),
        )

        # The cascade: scorers and dedup stages in ``cascade.stages`` order, each seeing what its gate keeps.
        order = list(config.cascade.stages)
        scored, exact, near = cascade.add_cascade(
            graph,
            config,
            ingested,
            snapshot_id,
            functools.partial(self._add_dedup, graph, ingested),
            self.scored_layers,
        )

        inputs_of_select = {"documents": ingested}
        annotations = {}
        if exact is not None:
            inputs_of_select["exact"] = exact
            annotations["exact"] = (exact.part_paths(exact_dedup.ANNOTATIONS), None)
        if near is not None:
            inputs_of_select["near"] = near
            annotations["near"] = (near.part_paths("annotations"), None)
        inputs_of_select.update({ref.stage: ref for ref in scored})
        annotations.update(cascade.score_inputs(scored, config))

        def build_select(p, layer):
            inputs = PartitionInputs.of(
                ingested.part_paths(ingest.DOCUMENTS), None, annotations, required=cascade.required_rows(config)
            )
            return p | "Select" >> select.ApplyPolicy(
                config.policy,
                cascade.plan_of(config),
                inputs,
                {output: layer.output_path(output) for output in (select.GOLD, select.DECISIONS)},
                after=[ref.committed for ref in inputs_of_select.values()],
            )

        selected = graph.stage(
            StagePlan(
                select.STAGE,
                select.VERSION,
                cascade.select_config(config),
                inputs_of_select,
                outputs={select.GOLD: schemas.GOLD, select.DECISIONS: schemas.DECISION},
                rows_match={select.GOLD: "passed", select.DECISIONS: "in"},
            ),
            build_select,
        )

        indexed = cascade.add_index(graph, config, selected)  # decontamination.index: n-grams of the gold text

        tokenize_config = {
            **config.tokenize.model_dump(mode="json", exclude={"tokenizer", "batch_size", "sort_memory_bytes"}),
            "tokenizer_sha256": tokenizer.sha256,
            "seed": config.seed,
        }
        tokenized = graph.stage(
            StagePlan(
                tokenize_shard.STAGE,
                tokenize_shard.VERSION,
                tokenize_config,
                {"gold": selected},
                outputs={},
                finalize=tokenize_shard.collect_shards,
            ),
            lambda p, layer: (
                p
                | "TokenizePackShard"
                >> tokenize_shard.TokenizePackShard(
                    config.tokenize,
                    tokenizer,
                    config.seed,
                    layer.output_path(tokenize_shard.SHARDS),
                    tuple(selected.part_paths(select.GOLD)),
                    after=[selected.committed],
                )
            ),
        )

        members = sorted((ref for ref in (exact, near, *scored) if ref is not None), key=lambda r: order.index(r.stage))
        stages = [ref for ref in (ingested, *members, selected, indexed, tokenized) if ref is not None]
        for ref in stages:
            if not ref.reused:  # what a killed or failed run of this layer left behind, but its finished tasks
                finished = clear_uncommitted(ref.layer)
                if finished:
                    self.log(
                        f"[{ref.stage}] {', '.join(reuse_summary(finished, partitions))} finished by an "
                        f"earlier, interrupted run: reused"
                    )
        _ = graph.pipeline | "Publish" >> publish.PublishDataset(
            config, snapshot_id, tokenizer, run_id, stages, earlier_attempts or {}, partitions, run_dir=self.run_dir
        )
        return graph

    def _add_dedup(self, graph: BuildGraph, ingested, stage: str, gate, gate_layers: dict, gate_config) -> LayerRef:
        """The exact or near dedup stage over the documents its cascade gate keeps (all without a gate).

        ``gate_layers``: the layers the gate reads (``{row name: LayerRef}``); they and the gate's
        rules are part of the layer key, so a changed rule before dedup recomputes it."""
        config = self.config
        documents = DocumentPartitions(
            ingested.part_paths(ingest.DOCUMENTS),
            gate,
            {name: ref.part_paths("annotations") for name, ref in gate_layers.items()},
        )
        after = [ingested.committed, *(ref.committed for ref in gate_layers.values())]
        gated = {"gate": gate_config} if gate is not None else {}
        gate_inputs = {f"gate.{name}": ref for name, ref in gate_layers.items()}
        if stage == exact_dedup.STAGE:
            earlier = [exact_dedup.resolve_against(self.root, entry) for entry in config.exact_dedup.against]
            return graph.stage(
                StagePlan(
                    exact_dedup.STAGE,
                    exact_dedup.VERSION,
                    {**exact_dedup.stage_config(config.exact_dedup), **gated},
                    {
                        "documents": ingested,
                        **gate_inputs,
                        **{f"against.{i}": layer.key for i, layer in enumerate(earlier)},
                    },
                    outputs={exact_dedup.ANNOTATIONS: schemas.EXACT_DEDUP},
                    rows_match={exact_dedup.ANNOTATIONS: "passed"},
                ),
                lambda p, layer: (
                    p
                    | "ExactDedup"
                    >> exact_dedup.AnnotateExactDuplicates(
                        documents, after=after, previous=tuple(earlier), normalize=config.exact_dedup.normalize
                    )
                ),
            )
        from beam_pipeline.transforms import near_dedup, near_dedup_groups

        previous = [
            near_dedup.resolve_against(self.root, entry, config.near_dedup) for entry in config.near_dedup.against
        ]
        return graph.stage(
            StagePlan(
                near_dedup.STAGE,
                near_dedup.VERSION,
                {**near_dedup.stage_config(config.near_dedup), **gated},
                {
                    "documents": ingested,
                    **gate_inputs,
                    **{f"against.{i}": prev.key for i, prev in enumerate(previous)},
                },
                outputs={**near_dedup.OUTPUTS, DEAD_LETTER: schemas.DEAD_LETTER},
                rows_match={near_dedup.ANNOTATIONS: "passed"},
                finalize=near_dedup.summarize_layer,
            ),
            lambda p, layer: near_dedup.build_stage(
                p,
                config.near_dedup,
                documents,
                previous,
                layer.path,
                after=after,
                estimated_documents=near_dedup_groups.estimated_documents(self.input_bytes),
            ),
        )

    def _run_job(self, graph: BuildGraph, progress: BuildProgress) -> None:
        """Run the build's job and wait for it."""
        pipeline = graph.pipeline
        self._log_plan(graph)
        progress.expect([(ref.stage, ref.layer) for ref in graph.refs if not ref.reused], graph.inputs_of)
        if self.before_run:
            self.before_run(pipeline)
        cpu_before = stage_seconds.process_cpu_seconds()
        try:
            with progress:
                result = pipeline.run()
                progress.watch(result)
                state = result.wait_until_finish()
        except Exception as err:  # noqa: BLE001 - runners wrap worker errors in many types
            stage = failed_stage(str(err), graph)
            failure = StageFailed(
                f"stage {stage} failed: {root_cause(err)}" if stage else f"the build's job failed: {root_cause(err)}"
            )
            failure.layers = [ref.layer for ref in graph.refs if ref.stage in (stage or "").split("+")]
            failure.stage = stage
            raise failure from err
        if state != PipelineState.DONE:
            raise StageFailed(f"the build's job ended in state {state}")
        self.execution_seconds = stage_seconds.stage_seconds(result, stage_labels(graph))
        local = is_local_direct(self.options)  # the workers are this process or its children
        self.job_cpu_seconds = stage_seconds.process_cpu_seconds() - cpu_before if local else None

    def _log_plan(self, graph: BuildGraph) -> None:
        for ref in graph.refs:
            self.log(
                f"[{ref.stage}] "
                + (f"layer {ref.key} is complete: reused" if ref.reused else f"runs in this job -> {ref.layer.path}")
            )

    def _result(self, run_id: str, snapshot_id: str, attempts: dict[str, int], seconds: float) -> BuildResult:
        run_dir = self.run_dir or join(self.root, "runs", run_id)
        metrics_path = join(run_dir, "metrics.json")
        stage_seconds.record(  # docs/format.md, "Run metrics"
            metrics_path, getattr(self, "execution_seconds", {}), getattr(self, "job_cpu_seconds", None)
        )
        metrics = json.loads(read_bytes(metrics_path))
        manifest = json.loads(read_bytes(join(dataset_path(self.root, metrics["dataset_id"]), MANIFEST)))
        stages = []
        for entry in metrics["stages"]:
            layer = Layer(self.root, entry["name"], entry["layer_key"])
            ledger = layer.ledger()
            stages.append(
                StageOutcome(
                    entry["name"],
                    layer,
                    ledger["version"],
                    digest_json(ledger["config"]),
                    entry["reused"],
                    ledger["counts"],
                    ledger,
                    attempts.get(entry["name"], 0),
                )
            )
        report = join(run_dir, "report.html")
        return BuildResult(
            run_id=run_id,
            snapshot_id=snapshot_id,
            dataset_id=metrics["dataset_id"],
            dataset_path=dataset_path(self.root, metrics["dataset_id"]),
            metrics_path=metrics_path,
            report_path=report if FileSystems.exists(report) else None,
            stages=stages,
            manifest=manifest,
        )


def partition_count(input_bytes: int, target_partition_bytes: int, min_partitions: int) -> int:
    """Layer partitions for a snapshot: fixed by the data and the config, never by the runner.

    A layer writer holds one partition's rows in memory to sort them, so the
    partition count grows with the input: that is what keeps a worker's memory
    flat as the corpus grows (bench/results/scale-*.md). The count is a
    multiple of ``min_partitions`` (one partition per ``target_partition_bytes``,
    rounded up): a per-partition stage then gives each of ``min_partitions``
    workers (or of a divisor of it) the same number of partitions, where 5
    partitions on 2 workers would leave one idle for a fifth of the stage.
    """
    per_target = math.ceil(input_bytes / target_partition_bytes)
    return max(1, math.ceil(per_target / min_partitions)) * min_partitions
