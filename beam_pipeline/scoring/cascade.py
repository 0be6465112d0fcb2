"""The scoring cascade inside a build: stage order, gates, layer keys, re-selection.

``cascade.stages`` in the config is the order (validated, and the dedup
stages placed, in :mod:`beam_pipeline.config.scorers`). :func:`add_cascade`
adds its members in that order: each run of scorers between dedup stages is
one fused pass over the text (:func:`add_scorers`), each dedup stage a stage
of its own over the documents its gate keeps
(:mod:`beam_pipeline.transforms.gate`). :func:`add_scorers` adds a run of scorer
stages to the build's job as one fused pass over the text
(:class:`~beam_pipeline.transforms.score.ScoreCascade`), each stage with its
own layer (:meth:`beam_pipeline.build.build_graph.BuildGraph.stage_group`), so a scorer
layer is reused, resumed and accounted for like every other layer.
The layer key of stage *k* covers what decides its rows:

    (stage code version,
     scorer config with content digests of its models / lists / eval sets,
     the gate: built-in policy fields + the rules evaluated before stage k,
     input layer keys: documents, exact and near (when before k), stages 0..k-1)

so changing a threshold that gates stage *k* re-runs stage *k* and later
under ``run`` (they would see other documents), while a rule that only reads
the last stage's scores re-runs nothing but ``select``.

Re-selection (``python -m beam_pipeline select``) applies a changed policy to
the scorer layers of the last ``run`` of the same corpus config (everything
but ``policy``, ``tokenize`` and ``report`` equal): each ``run`` records its
scorer layer keys in ``<root>/scores/<scoring digest>.json``; ``select``
reads them back instead of computing keys, and refuses to run any stage
other than select, ngram_index and tokenize. Documents a stage never saw
(its gate under the old policy stopped them) have no scores: if the new
policy lets them through, they are dropped as ``not_scored:<stage>``, never
judged on invented scores. Tightening a threshold therefore gives exactly
the dataset a fresh ``run`` would give; loosening one tells you, by that
reason's count, how many documents need a ``run`` to be scored.
"""

from __future__ import annotations

import functools

from beam_pipeline.config.scorers import DEDUP_STAGES
from beam_pipeline.policy.rules import ROW_OF_STAGE, Plan
from beam_pipeline.records.accounting import DEAD_LETTER
from beam_pipeline.records.hashing import digest_json
from beam_pipeline.storage import schemas
from beam_pipeline.storage.layers import Layer, join, part_name, read_bytes, write_json_atomic
from beam_pipeline.transforms.gate import Gate
from beam_pipeline.transforms.layer_io import PartitionInputs
from beam_pipeline.transforms.score import ANNOTATIONS, DOCUMENT_COLUMNS, SCORERS, ScoreCascade, histograms
from beam_pipeline.transforms.stage_plan import StagePlan

#: Layers with one row per document: a document without its row there was lost upstream.
ANNOTATE_EVERY_DOCUMENT = ("exact", "near")

#: Stages a re-selection may run; anything else means the config changed beyond the policy.
RESELECT_STAGES = ("select", "ngram_index", "tokenize")


class ReselectError(RuntimeError):
    """``select`` cannot reuse existing scores for this config."""


def plan_of(config) -> Plan:
    return Plan(
        cascade=tuple(config.cascade.stages),
        rules=list(config.policy.rules),
        overrides=list(config.policy.overrides),
        domains={s.name: s.domain for s in config.sources},
    )


def builtin_policy(config) -> dict:
    """The policy fields evaluated by :func:`beam_pipeline.policy.decision.decide` (and text stripping)."""
    return config.policy.model_dump(mode="json", exclude={"rules", "overrides", "redact", "floors"})


def select_config(config) -> dict:
    """What select's layer key depends on besides its input layer keys: the policy (with the cascade
    order, which fixes the order of rules and the ``not_scored`` checks)."""
    policy = config.policy.model_dump(mode="json")
    if policy.get("floors") is None:  # no floors: the key of a policy written before floors existed
        policy.pop("floors", None)
    return {**policy, "cascade": list(config.cascade.stages)}


def scoring_digest(config) -> str:
    """Digest of everything that decides the scorer layers except the policy (see module doc).

    Over the config's :meth:`~beam_pipeline.config.corpus.CorpusConfig.portable_dump` (paths inside the
    config's folder relative to it): the same config and inputs copied to another folder find the
    same scores, as they get the same snapshot id."""
    dumped = {k: v for k, v in config.portable_dump().items() if k not in ("policy", "tokenize")}
    dumped.get("decontamination", {}).pop("index", None)
    return digest_json(dumped)[:24]


def pointer_path(config) -> str:
    return join(config.output_root, "scores", f"{scoring_digest(config)}.json")


def read_pointer(config) -> dict:
    import json

    from apache_beam.io.filesystems import FileSystems

    path = pointer_path(config)
    if not FileSystems.exists(path):
        raise ReselectError(
            f"no scored build of this corpus config under {config.output_root} (looked for {path}); "
            f"re-selection reuses the scores of an earlier `run` with the same config apart from policy, "
            f"tokenize and report: run `python -m beam_pipeline run --config ...` first"
        )
    return json.loads(read_bytes(path))


def segments(stages: list[str]) -> list[tuple[str, ...]]:
    """The cascade cut into what the job runs as one pass each: runs of scorers, and each dedup stage alone."""
    cut: list[tuple[str, ...]] = []
    for stage in stages:
        if stage in DEDUP_STAGES or not cut or cut[-1][0] in DEDUP_STAGES:
            cut.append((stage,))
        else:
            cut[-1] = (*cut[-1], stage)
    return cut


def required_rows(config) -> tuple[str, ...]:
    """Dedup layers that hold a row for every document: all of them when the cascade does not gate."""
    return () if config.cascade.gate else ANNOTATE_EVERY_DOCUMENT


def add_cascade(graph, config, ingested, snapshot_id: str, add_dedup, pinned: dict | None = None):
    """Every cascade member, in ``cascade.stages`` order, added to the build's job (or its layer reused).

    Runs of scorers are one fused pass each (:func:`add_scorers`); a dedup stage between them is added by
    ``add_dedup(stage, gate, gate_layers, gate_config)`` (:mod:`beam_pipeline.build.corpus_build`), which reads only the
    documents its gate keeps (:mod:`beam_pipeline.transforms.gate`). ``pinned``: re-selection's layer keys
    of an earlier ``run`` (nothing is computed). Returns (scorer refs, exact ref or None, near ref or None).
    """
    stages = list(config.cascade.stages)
    plan = plan_of(config)
    scored: list = []
    dedup: dict = {}
    for segment in segments(stages):
        if segment[0] not in DEDUP_STAGES:
            scored += add_scorers(
                graph, config, segment, ingested, dedup.get("exact"), dedup.get("near"), scored, pinned
            )
            continue
        stage = segment[0]
        row = ROW_OF_STAGE[stage]
        if pinned is not None and stage in pinned:
            dedup[row] = _reuse_dedup(graph, stage, pinned[stage])
            continue
        index = stages.index(stage)
        gate = Gate(config.policy, plan, index) if config.cascade.gate else None
        # near dedup's representative order reads a score of a layer before it (its quality term)
        quality = config.near_dedup.representative.quality if stage == "near_dedup" else None
        context = {ref.stage: ref for ref in scored if quality and ref.stage == quality.split(".")[0]}
        if gate is None:
            dedup[row] = add_dedup(stage, None, context, None)
            continue
        needed = plan.layers_read(index)
        gate_layers = {ref.stage: ref for ref in scored if ref.stage in needed} | context
        if "exact" in dedup:
            gate_layers["exact"] = dedup["exact"]
        dedup[row] = add_dedup(stage, gate, gate_layers, _gate_config(config, plan, index))
    if scored or dedup:
        write_json_atomic(
            pointer_path(config),
            {
                "snapshot_id": snapshot_id,
                "cascade": stages,
                "layers": {ref.stage: ref.key for ref in (*scored, *dedup.values())},
            },
        )
    return scored, dedup.get("exact"), dedup.get("near")


def _gate_config(config, plan: Plan, index: int) -> dict:
    """What decides which documents cascade stage ``index`` sees (part of its layer key)."""
    return {"builtins": builtin_policy(config), "rules": plan.gate_spec(index)}


def add_scorers(graph, config, segment, ingested, exact, near, earlier: list, pinned: dict | None = None) -> list:
    """Add the scorer stages of ``segment`` (a run of the cascade) as one fused pass; returns their LayerRefs.

    ``earlier``: the refs of the scorers of earlier segments (their rows feed the gates and
    the scorers' context). ``pinned``: re-selection's scorer layer keys of an earlier ``run``
    (every one must be complete; nothing is scored).
    """
    stages = list(config.cascade.stages)
    scorers = [SCORERS[stage](config, cascade_before=tuple(stages[: stages.index(stage)])) for stage in segment]
    if pinned is not None:
        return [_reuse(graph, scorer, pinned) for scorer in scorers]
    plan = plan_of(config)
    gates = {
        scorer.stage: Gate(config.policy, plan, stages.index(scorer.stage)) if config.cascade.gate else None
        for scorer in scorers
    }
    makes = [
        functools.partial(
            _stage_plan,
            config,
            scorer,
            stages.index(scorer.stage),
            plan,
            gates[scorer.stage],
            ingested,
            exact,
            near,
            earlier,
        )
        for scorer in scorers
    ]

    def expand(pbegin, pending, reused):
        layers = {}
        if near is not None:
            layers["near"] = (near.part_paths("annotations"), None)
        if exact is not None and config.cascade.gate:
            layers["exact"] = (exact.part_paths("annotations"), None)
        for ref in (*earlier, *reused):
            layers[ref.stage] = (ref.part_paths(ANNOTATIONS), None)
        inputs = PartitionInputs.of(
            ingested.part_paths("documents"), DOCUMENT_COLUMNS, layers, required=required_rows(config)
        )
        by_stage = {scorer.stage: scorer for scorer in scorers}
        computed = [
            (by_stage[plan_.stage], gates[plan_.stage], layer.output_path(ANNOTATIONS)) for plan_, layer in pending
        ]
        after = [ref.committed for ref in (ingested, exact, near, *earlier, *reused) if ref is not None]
        return pbegin | "ScoreCascade" >> ScoreCascade(computed, inputs, after)

    label = "Score" + "".join(stage.title() for stage in segment) if earlier else "Score"  # unique in the job
    return graph.stage_group(makes, label, expand)


def _stage_plan(config, scorer, index: int, plan: Plan, gate, ingested, exact, near, earlier: list, previous: list):
    """The StagePlan of cascade stage ``index`` (its layer key's inputs and config: see the module doc)."""
    inputs = {"documents": ingested}
    if near is not None:
        inputs["near"] = near
    if gate is not None and exact is not None:
        inputs["exact"] = exact
    needed = plan.layers_read(index) if gate is not None else {}
    for name, columns in scorer.context_columns().items():
        needed.setdefault(name, set()).update(columns)
    by_stage = {ref.stage: ref for ref in (*earlier, *previous)}
    for name, columns in needed.items():
        if name in by_stage and (gate is not None or columns):
            inputs[name] = by_stage[name]
    stage_config = {
        "scorer": scorer.key_config(),
        "gate": {"builtins": builtin_policy(config), "rules": plan.gate_spec(index)} if gate else None,
        "text": {k: v for k, v in builtin_policy(config).items() if k.startswith("strip_")}
        if near is not None
        else None,
    }
    return StagePlan(
        scorer.stage,
        scorer.version,
        stage_config,
        inputs,
        outputs={ANNOTATIONS: scorer.schema, DEAD_LETTER: schemas.DEAD_LETTER},
        rows_match={ANNOTATIONS: "passed"},
        finalize=functools.partial(_scorer_ledger, schema=scorer.schema, index=index, gated=gate is not None),
    )


def _scorer_ledger(layer: Layer, partitions: int, *, schema, index: int, gated: bool) -> dict:
    """The scorer layer's ledger extras: per-column histograms, its place in the cascade."""
    paths = [join(layer.output_path(ANNOTATIONS), part_name(i, partitions)) for i in range(partitions)]
    return {"histograms": histograms(paths, schema), "cascade_position": index, "gated": gated}


def _reuse(graph, scorer, pinned: dict):
    """A scorer layer recorded by an earlier run, for re-selection (never runs anything)."""
    key = pinned.get(scorer.stage)
    if key is None:
        raise ReselectError(
            f"the scored build has no {scorer.stage} layer (its cascade was {', '.join(pinned)}); use `run`"
        )
    layer = Layer(graph.root, scorer.stage, key)
    if not layer.is_complete():
        raise ReselectError(f"the {scorer.stage} layer {key} of the scored build is missing or incomplete; use `run`")
    ledger = layer.ledger()
    if ledger["config"].get("scorer") != scorer.key_config():
        raise ReselectError(
            f"the {scorer.stage} settings (model, lists or parameters) changed since the scored "
            f"build; re-selection only changes the policy: use `run`"
        )
    plan = StagePlan(scorer.stage, ledger["version"], ledger["config"], {}, outputs={})
    ref = graph.reused(plan, layer)
    graph.log(f"[{scorer.stage}] layer {key} from the scored build: reused")
    return ref


def _reuse_dedup(graph, stage: str, key: str):
    """A gated dedup layer recorded by an earlier run, for re-selection: documents its gate stopped then and
    the new policy keeps are dropped as ``not_scored:<stage>`` (never judged as unique unseen)."""
    layer = Layer(graph.root, stage, key)
    if not layer.is_complete():
        raise ReselectError(f"the {stage} layer {key} of the scored build is missing or incomplete; use `run`")
    ledger = layer.ledger()
    plan = StagePlan(stage, ledger["version"], ledger["config"], {}, outputs={})
    ref = graph.reused(plan, layer)
    graph.log(f"[{stage}] layer {key} from the scored build: reused")
    return ref


def score_inputs(refs: list, config) -> dict[str, tuple[list[str], list[str]]]:
    """Every scorer layer select joins: its partitions, and doc_id + the columns the policy reads."""
    needed = plan_of(config).layers_read()
    return {ref.stage: (ref.part_paths(ANNOTATIONS), ["doc_id", *sorted(needed.get(ref.stage, ()))]) for ref in refs}


def add_index(graph, config, selected):
    """The ngram_index stage over the gold text (``decontamination.index``), or None."""
    from beam_pipeline.filters.decontamination import INDEX_FORMAT
    from beam_pipeline.transforms import ngram_index

    decontamination = config.decontamination
    if not decontamination.index:
        return None

    def expand(p, layer):
        return p | "IndexGold" >> ngram_index.IndexGold(
            selected.part_paths("gold"),
            decontamination.ngram,
            layer.output_path(ngram_index.INDEX),
            after=[selected.committed],
        )

    return graph.stage(
        StagePlan(
            ngram_index.STAGE,
            ngram_index.VERSION,
            {"ngram": decontamination.ngram, "hash": INDEX_FORMAT},
            {"gold": selected},
            outputs={},
            finalize=functools.partial(ngram_index.collect_index, n=decontamination.ngram),
        ),
        expand,
    )
