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
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import time
from typing import Callable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from beam_pipeline.build import stage_seconds
from beam_pipeline.build.code_version import stage_version
from beam_pipeline.build.progress import BuildProgress, is_local_direct
from beam_pipeline.config.corpus import CorpusConfig
from beam_pipeline.options.shared_views import SharedViewOptions
from beam_pipeline.records.accounting import COUNTS, DEAD_LETTER, LOST_IN_JOIN, RECORDS_LOST
from beam_pipeline.records.hashing import digest_json
from beam_pipeline.scoring import cascade
from beam_pipeline.scoring.cascade import ReselectError
from beam_pipeline.sources.snapshot import (
    check_sources_match,
    check_unchanged,
    estimated_text_bytes,
    load_snapshot,
    take_snapshot,
)
from beam_pipeline.storage import schemas
from beam_pipeline.storage.layers import Layer, join, layer_key, read_bytes
from beam_pipeline.storage.manifest import MANIFEST, dataset_path
from beam_pipeline.transforms import exact_dedup, ingest, publish, select, tokenize_shard
from beam_pipeline.transforms.gate import DocumentPartitions
from beam_pipeline.transforms.layer_io import (
    TASK_RECORDS,
    WRITTEN,
    CommitLayer,
    Committed,
    LayerSpec,
    PartitionInputs,
    WriteLayerOutput,
    WrittenPartitions,
    dead_letter_order,
)
from beam_pipeline.transforms.stage_plan import LayerRef, StagePlan
from beam_pipeline.transforms.task_ledger import TaskLedger, clear_uncommitted, discard_task_records, reuse_summary

_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|RecordsLost): ")


class StageFailed(RuntimeError):
    """The build's job failed; the message names the stage and the root cause where known.

    ``layers``: the layers of the failed stage(s) (their dead letters are kept for inspection)."""

    layers: list = []
    stage: str | None = None  # the stage (or ``a+b`` of a fused pass) whose step failed, if known


def failed_stage_name(failure: BaseException) -> str | None:
    """The stage a failure names (:attr:`StageFailed.stage`), if any."""
    return getattr(failure, "stage", None)


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


# --- the graph ------------------------------------------------------------------------------------


def with_code_version(plan: StagePlan) -> StagePlan:
    """The plan with its version followed by the digest of the stage's code and libraries
    (:mod:`beam_pipeline.build.code_version`): editing a stage's code gives its layer a new key."""
    return dataclasses.replace(plan, version=stage_version(plan.stage, plan.version))


def title(stage: str) -> str:
    """A stage's label in the job graph: ``exact_dedup`` -> ``ExactDedup``."""
    return "".join(part.title() for part in stage.split("_"))


class BuildGraph:
    """The one job of a build, stage by stage: each layer reused (complete) or computed and committed."""

    def __init__(
        self,
        pipeline: beam.Pipeline,
        root: str,
        partitions: int,
        max_dead_letter_fraction: float,
        log: Callable[[str], None] = print,
        allowed: tuple[str, ...] | None = None,
    ):
        self.pipeline = pipeline
        self.root = root
        self.partitions = partitions
        self.max_dead_letter_fraction = max_dead_letter_fraction
        self.log = log
        self.inputs_of: dict[str, list[str]] = {}  # stage -> the stages of this job it reads (progress totals)
        self.allowed = allowed  # stages that may be computed (re-selection); None: any
        self.refs: list[LayerRef] = []
        self.groups: dict[str, list[str]] = {}  # label of a pass that computes several layers -> their stages

    @property
    def computed(self) -> list[str]:
        return [ref.stage for ref in self.refs if not ref.reused]

    def layer_of(self, plan: StagePlan) -> Layer:
        # The partition count is part of the key: a layer of another layout is never reused.
        key = layer_key(
            plan.stage,
            plan.version,
            plan.config,
            [f"{k}={v}" for k, v in plan.input_keys().items()] + [f"partitions={self.partitions}"],
        )
        return Layer(self.root, plan.stage, key)

    def reused(self, plan: StagePlan, layer: Layer) -> LayerRef | None:
        """The layer's ref if it is complete (an element naming it in the graph), else None."""
        if not layer.is_complete():
            return None
        ledger = layer.ledger()
        committed = self.pipeline | f"{title(plan.stage)}Reused" >> beam.Create(
            [Committed(plan.stage, layer.key, ledger, True)]
        )
        ref = LayerRef(plan.stage, layer, plan.version, plan.config, self.partitions, committed, True)
        self.refs.append(ref)
        return ref

    def stage(self, plan: StagePlan, expand: Callable) -> LayerRef:
        """Reuse the stage's layer if complete, else add its transforms and its commit to the graph.

        ``expand(pbegin, layer)`` adds the stage's transforms and returns what
        they produce: ``{output: PCollection[row] | WrittenPartitions,
        "dead_letter": PCollection[row] (optional), "counts": PCollection or tuple
        of PCollections of counts, "written": what else the stage's tasks write
        (optional, waited for)}``. Rows of an output are written by
        :class:`WriteLayerOutput`; the commit waits for all of it.
        """
        plan = with_code_version(plan)
        layer = self.layer_of(plan)
        ref = self.reused(plan, layer)
        if ref is not None:
            return ref
        self._check_allowed(plan.stage)
        committed = self.pipeline | title(plan.stage) >> StageTransform(self._spec(plan, layer), expand)
        ref = LayerRef(plan.stage, layer, plan.version, plan.config, self.partitions, committed, False)
        self.refs.append(ref)
        return ref

    def stage_group(self, plans: list[StagePlan], label: str, expand: Callable) -> list[LayerRef]:
        """Several layers made by one pass over the data (the fused scorers), each committed on its own.

        ``plans`` are resolved in order; a plan's inputs may name the refs of the
        plans before it through :func:`~StagePlan` factories: each element of
        ``plans`` may be a callable ``(refs so far) -> StagePlan``. The first
        layer that is not complete, and every one after it, are computed by
        ``expand(pbegin, [(plan, layer), ...] to compute, refs of the complete ones)``,
        which returns ``{stage: produced}`` (see :meth:`stage`).
        """
        refs: list[LayerRef] = []
        pending: list[tuple[StagePlan, Layer]] = []
        for make in plans:
            plan = with_code_version(make(refs) if callable(make) else make)
            layer = self.layer_of(plan)
            ref = None if pending else self.reused(plan, layer)
            if ref is None:
                self._check_allowed(plan.stage)
                # a placeholder until the group's pass exists: later plans only need its key
                ref = LayerRef(plan.stage, layer, plan.version, plan.config, self.partitions, None, False)
                pending.append((plan, layer))
            refs.append(ref)
        if not pending:
            return refs
        self.groups[label] = [plan.stage for plan, _ in pending]
        produced = self.pipeline | label >> _GroupPass(expand, pending, [r for r in refs if r.reused])
        for plan, layer in pending:
            ref = next(r for r in refs if r.stage == plan.stage)
            ref.committed = self.pipeline | f"{title(plan.stage)}Commit" >> _CommitProduced(
                self._spec(plan, layer), produced[plan.stage]
            )
            self.refs.append(ref)
        return refs

    def _spec(self, plan: StagePlan, layer: Layer) -> LayerSpec:
        self.inputs_of[plan.stage] = [v.stage for v in plan.inputs.values() if isinstance(v, LayerRef)]  # progress
        return LayerSpec(
            layer=layer,
            version=plan.version,
            config=plan.config,
            inputs=plan.input_keys(),
            outputs=dict(plan.outputs),
            partitions=self.partitions,
            rows_match=dict(plan.rows_match),
            max_dead_letter_fraction=self.max_dead_letter_fraction,
            finalize=plan.finalize,
        )

    def _check_allowed(self, stage: str) -> None:
        if self.allowed is not None and stage not in self.allowed:
            raise ReselectError(
                f"re-selection would have to run {stage}: its layer for this config does not exist, so the config "
                f"changed in more than the policy (or the layers were deleted); use `run`"
            )


class StageTransform(beam.PTransform):
    """pbegin -> PCollection[Committed]: a stage's transforms, the writers of its outputs, its commit."""

    def __init__(self, spec: LayerSpec, expand: Callable):
        super().__init__()
        self._spec = spec
        self._expand = expand

    def expand(self, pbegin):
        return commit_produced(self._spec, self._expand(pbegin, self._spec.layer))


class _GroupPass(beam.PTransform):
    """pbegin -> {stage: produced} of several layers made by one pass (:meth:`BuildGraph.stage_group`)."""

    def __init__(self, expand: Callable, pending: list, reused: list):
        super().__init__()
        self._expand = expand
        self._pending = pending
        self._reused = reused

    def expand(self, pbegin):
        return self._expand(pbegin, self._pending, self._reused)


class _CommitProduced(beam.PTransform):
    """pbegin -> PCollection[Committed]: a stage's produced rows and partitions written, its dead letters
    written, all committed. ``produced``: see :meth:`BuildGraph.stage` (collections made elsewhere in
    the job: this composite only adds the writers and the commit)."""

    def __init__(self, spec: LayerSpec, produced: dict):
        super().__init__()
        self._spec = spec
        self._produced = produced

    def expand(self, pbegin):
        return commit_produced(self._spec, self._produced)


def commit_produced(spec: LayerSpec, produced: dict):
    """Write what a stage produced (rows through :class:`WriteLayerOutput`; partitions its tasks wrote
    as they are) and commit the layer: PCollection[Committed]."""
    if TASK_RECORDS in produced:  # one collection: each partition's sidecars, counts and dead letters
        return {TASK_RECORDS: produced[TASK_RECORDS]} | "Commit" >> CommitLayer(spec)
    sidecars = {}
    for name, schema in spec.outputs.items():
        value = produced.get(name)
        if value is None:
            if name == DEAD_LETTER:
                continue
            raise ValueError(f"stage {spec.layer.stage} produced no {name!r} output")
        if isinstance(value, WrittenPartitions):
            sidecars[name] = value.sidecars
        else:
            sidecars[name] = value | f"Write_{name}" >> WriteLayerOutput(
                spec.output_directory(name),
                schema,
                spec.output_partitions(name),
                # dead letters: one partition outside the layer's folder, computed again with the stage
                **(
                    _DEAD_LETTER_LAYOUT
                    if name == DEAD_LETTER
                    else {"ledger": TaskLedger(spec.layer.path, spec.partitions, name)}
                ),
            )
    waits = {COUNTS: _flattened(produced[COUNTS], "AllCounts")}
    if WRITTEN in produced:
        waits[WRITTEN] = _flattened(produced[WRITTEN], "AllWritten")
    outputs = {name: schema for name, schema in spec.outputs.items() if name in sidecars}
    return {**sidecars, **waits} | "Commit" >> CommitLayer(dataclasses.replace(spec, outputs=outputs))


def _flattened(collections, label: str):
    if isinstance(collections, (tuple, list)):
        return tuple(collections) | label >> beam.Flatten()
    return collections


_DEAD_LETTER_LAYOUT = {"sort_key": dead_letter_order, "partition_key": lambda row: row["file"] or ""}


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
                if not _retryable(str(err)) or attempt == attempts_allowed:
                    raise
                for ref in graph.refs:
                    if not ref.layer.is_complete():
                        discard_task_records(ref.layer)  # what a task counted may not be what it wrote
                self.log(
                    f"[{_stage_named(str(err)) or 'build'}] WARNING: attempt {attempt} of {attempts_allowed}: "
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
        from beam_pipeline.transforms import near_dedup

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
                estimated_documents=near_dedup.estimated_documents(self.input_bytes),
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


def root_cause(err: BaseException) -> str:
    """The innermost ``SomeError: message`` line of a (runner-wrapped) exception, in the user's terms
    (:func:`user_terms`)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    causes = [line for line in lines if _ERROR_LINE.match(line)]
    return user_terms(causes[-1] if causes else (lines[-1] if lines else type(err).__name__))[:4000]


_BEAM_STEP = re.compile(r"\s*\[while running '[^']*'\]")
_ERROR_PREFIX = re.compile(
    r"^(?P<module>[a-z_][\w]*(?:\.[a-z_][\w]*)*\.)?(?P<name>\w*(?:Error|Exception|RecordsLost)): "
)


def user_terms(cause: str) -> str:
    """A runner's error line without what only Beam knows: no ``[while running '<step path>']``, no
    wrapping exception (``RuntimeError: OSError: ...`` -> ``OSError: ...``), no class path of the
    project's own errors (their messages are written for the user: the stage, the file, what to do),
    other classes by their name only."""
    cause = _BEAM_STEP.sub("", cause).strip()
    while True:
        match = _ERROR_PREFIX.match(cause)
        if match is None:
            return cause
        rest = cause[match.end() :]
        if _ERROR_PREFIX.match(rest) or (match.group("module") or "").startswith("beam_pipeline."):
            cause = rest
            continue
        return f"{match.group('name')}: {rest}"


def stage_labels(graph: BuildGraph) -> dict[str, str]:
    """Top-level label of a step in the job -> its stage (or stages, joined by "+")."""
    labels = {title(ref.stage): ref.stage for ref in graph.refs}
    labels.update({f"{title(ref.stage)}Commit": ref.stage for ref in graph.refs})
    labels.update({label: "+".join(stages) for label, stages in graph.groups.items()})
    labels["Publish"] = "publish"
    return labels


def failed_stage(message: str, graph: BuildGraph) -> str | None:
    """The stage whose step failed, from the runner's "while running '<step>'" (None if unknown)."""
    labels = stage_labels(graph)
    for step in re.findall(r"while running '([^']+)'", message):
        stage = labels.get(step.split("/", 1)[0])
        if stage:
            return stage
    return _stage_named(message)


def _retryable(message: str) -> bool:
    """A failure the data cannot cause: the runner lost or repeated records (accounting.RecordsLost)."""
    return RECORDS_LOST in message or LOST_IN_JOIN in message


def _stage_named(message: str) -> str | None:
    match = re.search(r"\bstage (\w+)", message)
    return match.group(1) if match else None
