"""The stage counts of a run's report, and what each stage removed from the flow of records.

The counts come from ``runs/<run_id>/metrics.json`` (or the manifest's
``stages`` when the run folder is gone): :func:`stage_entries` reads them,
:func:`stage_flow` reads them as a flow (a stage drops records, or scores them
behind the cascade's gates: docs/report.md, "Records in the flow"), and
:func:`drops_by_source` / :func:`drop_reasons` list what was dropped. Used by
:func:`beam_pipeline.report.gather.gather` and the comparison
(:mod:`beam_pipeline.report.compare`).
"""

from __future__ import annotations

from beam_pipeline.report.locate import RunRef


def stage_entries(ref: RunRef) -> list[dict]:
    """Stage entries in run order: name, version, layer key, counts, reused, seconds."""
    by_name = {s["name"]: s for s in ref.manifest.get("stages", [])}
    entries = ref.metrics["stages"] if ref.metrics else ref.manifest.get("stages", [])
    timing = (ref.metrics or {}).get("timing_seconds", {})
    stages = []
    for entry in entries:
        counts = entry["counts"]
        stages.append(
            {
                "name": entry["name"],
                "version": entry.get("version"),
                "layer_key": entry["layer_key"],
                "config_digest": by_name.get(entry["name"], {}).get("config_digest"),
                "reused": entry.get("reused"),
                "seconds": timing.get(entry["name"]),
                "in": counts["in"],
                "passed": counts["passed"],
                "filtered": dict(counts.get("filtered", {})),
                "dead_letter": counts.get("dead_letter", 0),
                "by_source": {
                    s: {
                        "in": c["in"],
                        "passed": c["passed"],
                        "filtered": dict(c.get("filtered", {})),
                        "dead_letter": c.get("dead_letter", 0),
                    }
                    for s, c in counts.get("by_source", {}).items()
                },
            }
        )
    return stages


def stage_flow(stages: list[dict], members: frozenset[str] = frozenset()) -> list[str]:
    """What each stage removed from the flow of records, from the counts alone; the warnings.

    A stage's records go on to the next stage, whose ``in`` says what it kept:

    * this stage's ``passed``: the stage *drops* what it filtered and
      dead-lettered (ingest's verbatim repeats, select's decisions); the last
      stage passes its ``passed`` to the dataset;
    * this stage's ``in`` (less its dead letters): a *scoring* stage of the
      cascade (docs/filters.md). Its ``filtered`` are the documents the policy
      rules over earlier stages gate, which it did not score; they stay in the
      flow until select drops them, so they are not drops (and they count again
      at every later scorer: adding them up counts one document many times).

    Sets on every stage ``kind`` ("drops" or "scores"), ``dropped`` ({reason:
    n}, dead letters as ``dead_letter``), ``dropped_total``, ``gated`` ({reason:
    n} not scored), ``scored`` (None for a stage that drops) and ``after``
    (records in the flow after it), and the same per source in ``by_source``.
    Counts that fit neither reading are reported, and taken as drops. A stage
    that filtered nothing fits both: it scores when it is one of ``members``
    (the cascade's stages, scorers and dedup), else it drops (nothing).
    """
    warnings = []
    for i, stage in enumerate(stages):
        following = stages[i + 1] if i + 1 < len(stages) else None
        next_in = following["in"] if following else stage["passed"]
        filtered = sum(stage["filtered"].values())
        if stage["in"] != stage["passed"] + filtered + stage["dead_letter"]:
            warnings.append(
                f"stage {stage['name']}: {stage['in']:,} in != {stage['passed']:,} passed + {filtered:,} "
                f"filtered + {stage['dead_letter']:,} dead letters"
            )
        removed = stage["in"] - next_in
        if removed == stage["dead_letter"] and (filtered or stage["name"] in members):
            kind = "scores"
        elif removed == filtered + stage["dead_letter"]:
            kind = "drops"
        else:
            kind = "drops"
            warnings.append(
                f"stage {stage['name']}: {stage['in']:,} in, {stage['passed']:,} passed, {filtered:,} "
                f"filtered, {stage['dead_letter']:,} dead letters, but the next stage reads {next_in:,}"
            )
        stage["kind"] = kind
        for where, counts, after in [(stage["name"], stage, next_in)] + [
            (
                f"{stage['name']} ({source})",
                c,
                (following["by_source"].get(source, {}).get("in", 0) if following else c["passed"]),
            )
            for source, c in stage["by_source"].items()
        ]:
            counts.update(_removed(counts, kind))
            counts["after"] = after
            if counts is not stage and counts["in"] - counts["dropped_total"] != after:
                warnings.append(
                    f"stage {where}: {counts['in']:,} in - {counts['dropped_total']:,} dropped "
                    f"!= {after:,} read by the next stage"
                )
    return warnings


def _removed(counts: dict, kind: str) -> dict:
    dead = counts.get("dead_letter", 0)
    if kind == "drops":
        dropped = {r: n for r, n in sorted(counts["filtered"].items()) if n}
        gated, scored = {}, None
    else:
        dropped, scored = {}, counts["passed"]
        gated = {r: n for r, n in sorted(counts["filtered"].items()) if n}
    if dead:
        dropped["dead_letter"] = dead
    return {"dropped": dropped, "dropped_total": sum(dropped.values()), "gated": gated, "scored": scored}


def drops_by_source(stages: list[dict]) -> dict[str, dict[str, int]]:
    """{source: {"<stage>:<reason>": records}}: what each stage removed from the flow (:func:`stage_flow`)."""
    out: dict[str, dict[str, int]] = {}
    for stage in stages:
        for source, counts in stage["by_source"].items():
            mine = out.setdefault(source, {})
            for reason, n in counts["dropped"].items():
                mine[f"{stage['name']}:{reason}"] = mine.get(f"{stage['name']}:{reason}", 0) + n
    return dict(sorted(out.items()))


def drop_reasons(stages: list[dict]) -> list[str]:
    """Every ``<stage>:<reason>`` that removed something from the flow, in stage order."""
    return [f"{stage['name']}:{r}" for stage in stages for r in stage["dropped"]]
