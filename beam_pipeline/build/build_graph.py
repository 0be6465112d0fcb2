"""The job graph of a build: each stage's layer reused (complete) or computed, written and committed.

:class:`BuildGraph` is what :class:`~beam_pipeline.build.corpus_build.CorpusBuild`
assembles the build's one Beam job with, and what the scoring cascade
(:mod:`beam_pipeline.scoring.cascade`) adds its stages to. Before a stage is
added, its layer key is computed from (stage version and code digest, the
stage's slice of the config, input layer keys, partition count): a layer that
is complete (its ledger exists) is *reused*: the graph holds one element
naming it instead of the stage's transforms. Every other stage's transforms
are added with the writers of its outputs and its commit step
(:class:`~beam_pipeline.transforms.layer_io.CommitLayer`), which checks the
counts and writes the ledger last (DESIGN.md, principles 9 and 10;
``docs/decisions.md``, "One Beam job per build"). :class:`StageTransform` is
also how tests and benchmarks run one stage alone, exactly as the build does.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import apache_beam as beam

from beam_pipeline.build.code_version import stage_version
from beam_pipeline.records.accounting import COUNTS, DEAD_LETTER
from beam_pipeline.scoring.cascade import ReselectError
from beam_pipeline.storage.layers import Layer, layer_key
from beam_pipeline.transforms.layer_io import (
    TASK_RECORDS,
    WRITTEN,
    CommitLayer,
    Committed,
    LayerSpec,
    WriteLayerOutput,
    WrittenPartitions,
    dead_letter_order,
)
from beam_pipeline.transforms.stage_plan import LayerRef, StagePlan
from beam_pipeline.transforms.task_ledger import TaskLedger


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
