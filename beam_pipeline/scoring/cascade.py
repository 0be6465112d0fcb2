"""The scoring cascade inside a build: stage order, gates, layer keys, re-selection.

``cascade.stages`` in the config is the order (validated in
:mod:`beam_pipeline.scoring.config`). :func:`run_scorers` runs each stage as
its own Beam job through :meth:`beam_pipeline.build.CorpusBuild._stage`, so a
scorer layer is reused, resumed and accounted for like every other layer.
The layer key of stage *k* covers what decides its rows:

    (stage code version,
     scorer config with content digests of its models / lists / eval sets,
     the gate: built-in policy fields + the rules evaluated before stage k,
     input layer keys: documents, exact, near, stages 0..k-1)

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

from beam_pipeline.hashing import digest_json
from beam_pipeline.layers import Layer, join, part_name, read_bytes, write_json_atomic
from beam_pipeline.policy_rules import Plan
from beam_pipeline.transforms.layer_io import PartitionInputs
from beam_pipeline.transforms.score import (ANNOTATIONS, DOCUMENT_COLUMNS, SCORERS, Gate, ScoreDocuments,
                                            histograms)

#: Layers with one row per document: a document without its row there was lost upstream.
ANNOTATE_EVERY_DOCUMENT = ("exact", "near")

#: Stages a re-selection may run; anything else means the config changed beyond the policy.
RESELECT_STAGES = ("select", "ngram_index", "tokenize")


class ReselectError(RuntimeError):
    """``select`` cannot reuse existing scores for this config."""


def plan_of(config) -> Plan:
    return Plan(cascade=tuple(config.cascade.stages), rules=list(config.policy.rules),
                overrides=list(config.policy.overrides), domains={s.name: s.domain for s in config.sources})


def builtin_policy(config) -> dict:
    """The policy fields evaluated by :func:`beam_pipeline.policy.decide` (and text stripping)."""
    return config.policy.model_dump(mode="json", exclude={"rules", "overrides", "redact"})


def select_config(config) -> dict:
    """What select's layer key depends on besides its input layer keys: the policy (with the cascade
    order, which fixes the order of rules and the ``not_scored`` checks)."""
    return {**config.policy.model_dump(mode="json"), "cascade": list(config.cascade.stages)}


def scoring_digest(config) -> str:
    """Digest of everything that decides the scorer layers except the policy (see module doc)."""
    dumped = config.model_dump(mode="json", exclude={"output_root", "policy", "report", "tokenize"})
    dumped.get("decontamination", {}).pop("index", None)
    return digest_json(dumped)[:24]


def pointer_path(config) -> str:
    return join(config.output_root, "scores", f"{scoring_digest(config)}.json")


def read_pointer(config) -> dict:
    from apache_beam.io.filesystems import FileSystems
    import json

    path = pointer_path(config)
    if not FileSystems.exists(path):
        raise ReselectError(
            f"no scored build of this corpus config under {config.output_root} (looked for {path}); "
            f"re-selection reuses the scores of an earlier `run` with the same config apart from policy, "
            f"tokenize and report: run `python -m beam_pipeline run --config ...` first")
    return json.loads(read_bytes(path))


def run_scorers(build, ingested, exact, near, partitions: int) -> list:
    """Run (or reuse) every cascade stage in order; returns their StageOutcomes."""
    config = build.config
    stages = list(config.cascade.stages)
    if not stages:
        return []
    pinned = getattr(build, "scored_layers", None)
    plan = plan_of(config)
    outcomes = []
    for index, stage in enumerate(stages):
        scorer = SCORERS[stage](config, cascade_before=tuple(stages[:index]))
        if pinned is not None:
            outcomes.append(_reuse(build, scorer, pinned))
            continue
        outcomes.append(_run_stage(build, scorer, index, plan, ingested, exact, near, outcomes, partitions))
    if pinned is None:
        write_json_atomic(pointer_path(config), {
            "snapshot_id": ingested.ledger["inputs"]["snapshot"], "cascade": stages,
            "layers": {o.stage: o.layer.key for o in outcomes}})
    return outcomes


def _run_stage(build, scorer, index, plan, ingested, exact, near, previous, partitions):
    config = build.config
    gate = Gate(config.policy, plan, index) if config.cascade.gate else None
    inputs = {"documents": ingested.layer.key}
    reads = {}  # input name -> (layer, output, columns or None for all)
    if near is not None:
        inputs["near"] = near.layer.key
        reads["near"] = (near.layer, "annotations", None)
    if gate is not None and exact is not None:
        inputs["exact"] = exact.layer.key
        reads["exact"] = (exact.layer, "annotations", None)
    needed = plan.layers_read(index) if gate is not None else {}
    for name, columns in scorer.context_columns().items():
        needed.setdefault(name, set()).update(columns)
    by_stage = {o.stage: o for o in previous}
    for name, columns in needed.items():
        if name in by_stage and (gate is not None or columns):
            inputs[name] = by_stage[name].layer.key
            reads[name] = (by_stage[name].layer, ANNOTATIONS, ["doc_id", *sorted(columns)])
    stage_config = {"scorer": scorer.key_config(),
                    "gate": {"builtins": builtin_policy(config), "rules": plan.gate_spec(index)} if gate else None,
                    "text": {k: v for k, v in builtin_policy(config).items() if k.startswith("strip_")}
                    if near is not None else None}

    def build_stage(p, layer):
        inputs = PartitionInputs.of(ingested.layer.part_paths("documents"), DOCUMENT_COLUMNS, {
            name: (source_layer.part_paths(output), columns)
            for name, (source_layer, output, columns) in reads.items()}, required=ANNOTATE_EVERY_DOCUMENT)
        return p | "Score" >> ScoreDocuments(scorer, gate, inputs, layer.output_path(ANNOTATIONS))

    def finalize(layer):
        paths = [join(layer.output_path(ANNOTATIONS), part_name(i, partitions)) for i in range(partitions)]
        return {"histograms": histograms(paths, scorer.schema), "cascade_position": index,
                "gated": gate is not None}

    return build._stage(scorer.stage, scorer.version, stage_config, inputs,
                        outputs={ANNOTATIONS: scorer.schema}, partitions=partitions,
                        build=build_stage, finalize=finalize, rows_match={ANNOTATIONS: "passed"})


def _reuse(build, scorer, pinned: dict):
    """A scorer layer recorded by an earlier run, for re-selection (never runs anything)."""
    from beam_pipeline.build import StageOutcome

    key = pinned.get(scorer.stage)
    if key is None:
        raise ReselectError(f"the scored build has no {scorer.stage} layer (its cascade was "
                            f"{', '.join(pinned)}); use `run`")
    layer = Layer(build.root, scorer.stage, key)
    if not layer.is_complete():
        raise ReselectError(f"the {scorer.stage} layer {key} of the scored build is missing or incomplete; use `run`")
    ledger = layer.ledger()
    if ledger["config"].get("scorer") != scorer.key_config():
        raise ReselectError(f"the {scorer.stage} settings (model, lists or parameters) changed since the scored "
                            f"build; re-selection only changes the policy: use `run`")
    build.log(f"[{scorer.stage}] layer {key} from the scored build: reused")
    return StageOutcome(scorer.stage, layer, ledger["version"], digest_json(ledger["config"]), True,
                        ledger["counts"], 0.0, ledger)


def score_inputs(outcomes: list, config) -> dict[str, tuple[list[str], list[str]]]:
    """Every scorer layer select joins: its partitions, and doc_id + the columns the policy reads."""
    needed = plan_of(config).layers_read()
    return {o.stage: (o.layer.part_paths(ANNOTATIONS), ["doc_id", *sorted(needed.get(o.stage, ()))])
            for o in outcomes}


def guard_reselect(stage: str, _pipeline) -> None:
    """``before_run`` hook of a re-selection: only select, ngram_index and tokenize may run."""
    if stage not in RESELECT_STAGES:
        raise ReselectError(
            f"re-selection would have to run {stage}: its layer for this config does not exist, so the config "
            f"changed in more than the policy (or the layers were deleted); use `run`")


def run_index(build, selected, partitions: int):
    """The ngram_index stage over the gold text (``decontamination.index``), or None."""
    from beam_pipeline.transforms import ngram_index

    config = build.config.decontamination
    if not config.index:
        return None
    from beam_pipeline.filters.decontamination import INDEX_FORMAT

    def build_stage(p, layer):
        return p | "IndexGold" >> ngram_index.IndexGold(selected.layer.part_paths("gold"), config.ngram,
                                                          layer.output_path(ngram_index.INDEX))

    def finalize(layer):
        return ngram_index.collect_index(layer.output_path(ngram_index.INDEX), len(selected.layer.part_paths("gold")),
                                         config.ngram)

    return build._stage(ngram_index.STAGE, ngram_index.VERSION, {"ngram": config.ngram, "hash": INDEX_FORMAT},
                        {"gold": selected.layer.key}, outputs={}, partitions=partitions,
                        build=build_stage, finalize=finalize)
