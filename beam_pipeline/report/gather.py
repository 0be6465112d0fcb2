"""Gathering a run report's numbers from what the run wrote.

Every number comes from the run's files, never from a second implementation
of a stage:

* stage counts, drops by reason and source: ``runs/<run_id>/metrics.json``
  (or the manifest's ``stages`` when the run folder is gone);
* versions, tokens per domain bucket, shards: the dataset ``manifest.json``;
* histograms, language mix, duplicate clusters, samples: the layers the
  stages' ledgers list, read column by column, one partition at a time, so
  the driver's memory stays at one partition whatever the corpus size.

The gatherer is data-driven: it walks every output of every stage ledger and
looks at the columns it finds. A numeric column that is not provenance gets a
histogram with the policy thresholds whose names match it (``n_chars`` ->
``min_chars`` / ``max_chars``); a string column named ``language`` / ``lang``
gets the language mix; ``duplicate_count`` / ``cluster_size`` / ``cluster_id``
columns give duplicate clusters; a ``reason`` column gives dropped-document
samples. A new stage with new annotations shows up without a change here.

The sections are gathered by their own modules: the stage counts and the flow
(:mod:`~beam_pipeline.report.stage_counts`), the mixture and token budget
(:mod:`~beam_pipeline.report.mixture`), the cascade funnel
(:mod:`~beam_pipeline.report.funnel`), annotation histograms, flags and the
language mix (:mod:`~beam_pipeline.report.annotation_scores`), duplicate
clusters (:mod:`~beam_pipeline.report.duplicate_clusters`) and dropped
documents (:mod:`~beam_pipeline.report.drop_samples`), each reading the
layers through :mod:`~beam_pipeline.report.run_layers`.

The result is a plain JSON-able dict (see :func:`gather`), rendered by
:mod:`beam_pipeline.report.html` and compared by :mod:`beam_pipeline.report.compare`.
"""

from __future__ import annotations

import json
from typing import Any

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.dedup.cluster_alarms import build_messages as cluster_messages
from beam_pipeline.dedup.cluster_alarms import representative_report as representative_check
from beam_pipeline.report.annotation_scores import applied_policy, flags, histograms, language_mix
from beam_pipeline.report.drop_samples import drop_samples
from beam_pipeline.report.duplicate_clusters import clusters, top_clusters
from beam_pipeline.report.floors import entries_of, run_floor_warnings
from beam_pipeline.report.funnel import final_tokens_by_source, funnel
from beam_pipeline.report.locate import RunRef
from beam_pipeline.report.mixture import mixture, token_budget
from beam_pipeline.report.null_scores import report_warnings
from beam_pipeline.report.run_layers import Layout, stage_ledgers
from beam_pipeline.report.stage_counts import drops_by_source, stage_entries, stage_flow
from beam_pipeline.storage.layers import join, read_bytes


def gather(ref: RunRef, *, report_config: dict | None = None, detail: bool = True) -> dict:
    """All the numbers of one run's report.

    ``report_config`` overrides the config's ``report`` section (target tokens,
    mixture). ``detail=False`` reads only the metrics and the manifest (what
    ``--compare`` needs), not the layers.
    """
    manifest = ref.manifest
    config = manifest.get("config", {})
    settings = {
        "target_tokens": None,
        "mixture": {},
        "max_epochs": 4.0,
        "samples_per_reason": 20,
        **(config.get("report") or {}),
        **(report_config or {}),
    }
    stages = stage_entries(ref)
    cascade = config.get("cascade") or {}
    flow_warnings = stage_flow(stages, members=frozenset(cascade.get("stages", [])))
    data: dict[str, Any] = {
        "name": manifest.get("name"),
        "run": _run_info(ref, stages),
        "stages": stages,
        "settings": settings,
        "warnings": flow_warnings,
        "notes": [],
    }
    data["drops_by_source"] = drops_by_source(stages)
    data["sources"] = sorted({s for stage in stages for s in stage["by_source"]})
    data["read_by_source"] = (
        {s: stages[0]["by_source"].get(s, {}).get("in", 0) for s in data["sources"]} if stages else {}
    )
    run = data["run"]
    if stages and run["records_in"] - run["records_dropped"] != run["documents"]:
        data["warnings"].append(
            f"the counts do not add up: {run['records_in']:,} records read - {run['records_dropped']:,} dropped "
            f"= {run['records_in'] - run['records_dropped']:,}, but the dataset holds {run['documents']:,} documents"
        )
    data["mixture"] = mixture(manifest, settings)
    data["budget"] = token_budget(data["mixture"], settings)
    data["shards"] = [
        {
            "name": s["name"],
            "domain": s["domain"],
            "tokens": s["tokens"],
            "documents": s["documents"],
            "sequences": s["sequences"],
            "bytes": s["tokens_bytes"] + s["index_bytes"],
        }
        for s in manifest["shards"]
    ]
    data["shard_tokens_target"] = config.get("tokenize", {}).get("shard_tokens")
    data["policy"] = {}
    for warning in data["budget"]["warnings"]:
        data["warnings"].append(warning)
    data["warnings"].extend(run_floor_warnings(entries_of(ref)))  # policy.floors a slice cannot meet
    if ref.metrics is None:
        data["notes"].append(
            "no run metrics found (runs/<run_id>/metrics.json): stage counts are the manifest's, timings are unknown"
        )
    if not detail:
        return data

    ledgers = stage_ledgers(ref, stages)
    for stage in stages:
        if stage["name"] not in ledgers:
            data["warnings"].append(
                f"layer {stage['name']}/{stage['layer_key']} is missing (deleted?): "
                f"its histograms and samples are not shown"
            )
    data["warnings"].extend(report_warnings(config, ledgers))  # rules whose scores are null for a source
    cluster_lines, cluster_alarms = cluster_messages(config, ledgers)  # near-dup clusters above max_cluster_size
    data["warnings"].extend(cluster_alarms + cluster_lines)
    data["representative_check"] = representative_check(config, ledgers)  # the seed's check, near_dedup.md
    data["policy"] = applied_policy(ledgers)
    layout = Layout(ref.root, ledgers)
    seed = int(manifest.get("seed") or 0)
    tokens_by_source = final_tokens_by_source(ref)
    data["tokens_by_source"] = tokens_by_source
    data["funnel"] = funnel(stages, layout, tokens_by_source, manifest)
    data["histograms"] = histograms(layout, data["policy"])
    data["language"] = language_mix(layout)
    data["clusters"] = clusters(layout)
    data["flags"] = flags(layout)
    samples, dead = drop_samples(layout, seed, int(settings["samples_per_reason"]))
    data["samples"] = samples
    data["dead_letters"] = dead
    data["top_clusters"] = top_clusters(layout, data["clusters"])
    return data


# --- the run: ids, totals, snapshot -----------------------------------------


def _run_info(ref: RunRef, stages: list[dict]) -> dict:
    manifest = ref.manifest
    return {
        "run_id": ref.run_id,
        "root": ref.root,
        "run_dir": ref.run_dir,
        "report_path": ref.report_path,
        "dataset_id": manifest["dataset_id"],
        "snapshot_id": manifest["snapshot_id"],
        "config_digest": manifest["config_digest"],
        "seed": manifest.get("seed"),
        "seq_len": manifest.get("seq_len"),
        "tokenizer": manifest.get("tokenizer", {}),
        "timing_seconds": (ref.metrics or {}).get("timing_seconds"),
        "manifest_path": ref.manifest_path,
        "snapshot": _snapshot_summary(ref),
        "documents": sum(s["documents"] for s in manifest["shards"]),
        "tokens": sum(s["tokens"] for s in manifest["shards"]),
        "sequences": sum(s["sequences"] for s in manifest["shards"]),
        "shards": len(manifest["shards"]),
        "records_in": stages[0]["in"] if stages else 0,
        "records_dropped": sum(s["dropped_total"] for s in stages),
    }


def _snapshot_summary(ref: RunRef) -> dict | None:
    path = join(ref.root, "snapshots", f"{ref.manifest['snapshot_id']}.json")
    if not FileSystems.exists(path):
        return None
    snapshot = json.loads(read_bytes(path))
    return {
        "total_bytes": snapshot.get("total_bytes"),
        "sources": {
            name: {"files": len(s.get("files", [])), "bytes": sum(f.get("size", 0) for f in s.get("files", []))}
            for name, s in sorted(snapshot.get("sources", {}).items())
        },
    }
