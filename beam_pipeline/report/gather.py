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

The result is a plain JSON-able dict (see :func:`gather`), rendered by
:mod:`beam_pipeline.report.html` and compared by :mod:`beam_pipeline.report.compare`.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import re
from collections import Counter, defaultdict
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.dedup.cluster_alarms import build_messages as cluster_messages
from beam_pipeline.dedup.cluster_alarms import representative_report as representative_check
from beam_pipeline.records.hashing import bucket_of, stable_hash64
from beam_pipeline.report.floors import entries_of, run_floor_warnings
from beam_pipeline.report.locate import RunRef
from beam_pipeline.report.null_scores import report_warnings
from beam_pipeline.storage.layers import Layer, join, read_bytes, read_parquet

#: Columns that describe where a record came from, not a property worth a histogram.
PROVENANCE_COLUMNS = frozenset(
    {"source_rank", "position", "byte_offset", "token_start", "token_count", "record_id", "file"}
)
#: Outputs that hold one row per dropped record but no ``reason`` column: output -> reason.
DROP_RECORD_OUTPUTS = {"repeats": "repeated_record"}
#: Outputs whose columns describe documents, one row per document: ``documents`` and every ``*annotations``.
#: (Others -- gold text, decisions, signatures, indexes -- are not scores.)
ANNOTATION_OUTPUTS = ("documents",)
ANNOTATION_SUFFIX = "annotations"
#: Aliases the policy rule language uses for layers (beam_pipeline.policy.rules): alias -> stage.
LAYER_ALIASES = {"document": "ingest", "exact": "exact_dedup", "near": "near_dedup"}
_COMPARISON = re.compile(r"\b([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\s*(<=|>=|<|>)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
LANGUAGE_COLUMNS = ("language", "lang", "language_id", "lid_language")
CLUSTER_SIZE_COLUMNS = ("cluster_size", "duplicate_count")
CLUSTER_KEY_COLUMNS = ("cluster_id", "content_hash")
TEXT_OUTPUT = "documents"

SAMPLE_TEXT_CHARS = 600
CLUSTER_TEXT_CHARS = 700
TOP_CLUSTERS = 5
CLUSTER_MEMBERS_SHOWN = 6
HISTOGRAM_BINS = 40
LANGUAGES_SHOWN = 15
MUENNIGHOFF = (
    "Muennighoff et al. 2023, \"Scaling Data-Constrained Language Models\" (NeurIPS 2023, "
    "arXiv:2305.16264): up to about 4 epochs of repeated data are almost as good as unique "
    "data; beyond that the value of added compute decays quickly."
)


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
    stages = _stages(ref)
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

    ledgers = _ledgers(ref, stages)
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
    data["policy"] = _policy(ledgers)
    layout = _Layout(ref.root, ledgers)
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


# --- metrics ----------------------------------------------------------------


def _stages(ref: RunRef) -> list[dict]:
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


# --- manifest: mixture, budget ---------------------------------------------


def mixture(manifest: dict, settings: dict) -> dict:
    """Tokens per domain bucket (manifest shards) next to the target mixture (config ``report.mixture``)."""
    buckets: dict[str, dict] = {}
    for shard in manifest["shards"]:
        b = buckets.setdefault(shard["domain"], {"tokens": 0, "documents": 0, "shards": 0})
        b["tokens"] += shard["tokens"]
        b["documents"] += shard["documents"]
        b["shards"] += 1
    weights = {k: float(v) for k, v in (settings.get("mixture") or {}).items()}
    for name in weights:
        buckets.setdefault(name, {"tokens": 0, "documents": 0, "shards": 0})
    total = sum(b["tokens"] for b in buckets.values())
    weight_sum = sum(w for w in weights.values() if w > 0)
    for name, b in buckets.items():
        b["share"] = b["tokens"] / total if total else 0.0
        b["target_share"] = (max(weights.get(name, 0.0), 0.0) / weight_sum) if weight_sum else None
    return {"buckets": dict(sorted(buckets.items())), "total_tokens": total, "has_target": bool(weight_sum)}


def token_budget(mix: dict, settings: dict) -> dict:
    """Epochs over each bucket's unique tokens that ``report.target_tokens`` implies.

    A bucket's share of the target is its ``report.mixture`` weight, or its
    natural share of the dataset without a mixture. Past ``report.max_epochs``
    (4, after Muennighoff et al. 2023) the bucket gets a warning.
    """
    target = settings.get("target_tokens")
    max_epochs = float(settings.get("max_epochs") or 4.0)
    out = {
        "target_tokens": target,
        "max_epochs": max_epochs,
        "rows": [],
        "warnings": [],
        "mixture_from": "report.mixture" if mix["has_target"] else "natural (token share of the dataset)",
        "reference": MUENNIGHOFF,
    }
    for name, b in mix["buckets"].items():
        share = b["target_share"] if mix["has_target"] else b["share"]
        row = {"bucket": name, "unique_tokens": b["tokens"], "share": share, "wanted_tokens": None, "epochs": None}
        if target:
            row["wanted_tokens"] = target * share
            row["epochs"] = (row["wanted_tokens"] / b["tokens"]) if b["tokens"] else (math.inf if share else 0.0)
            if row["epochs"] > max_epochs:
                if b["tokens"]:
                    out["warnings"].append(
                        f"token budget: bucket {name} must be repeated {row['epochs']:.1f} times to give "
                        f"{row['wanted_tokens']:,.0f} of report.target_tokens={target:,}; more than "
                        f"{max_epochs:g} epochs of repeated data add little (Muennighoff et al. 2023)"
                    )
                else:
                    out["warnings"].append(f"token budget: bucket {name} has a mixture weight but no tokens")
        out["rows"].append(row)
    for name in sorted(set(settings.get("mixture") or {}) - {r["bucket"] for r in out["rows"]}):
        out["warnings"].append(f"report.mixture names bucket {name}, which the dataset does not have")
    return out


# --- layers -----------------------------------------------------------------


def _ledgers(ref: RunRef, stages: list[dict]) -> dict[str, dict]:
    ledgers = {}
    for stage in stages:
        layer = Layer(ref.root, stage["name"], stage["layer_key"])
        if layer.is_complete():
            ledgers[stage["name"]] = layer.ledger()
    return ledgers


def _policy(ledgers: dict[str, dict]) -> dict[str, Any]:
    """The policy the run applied: the config of the stage that wrote ``decisions``, flattened.

    ``drop_if`` rule expressions (:mod:`beam_pipeline.policy.rules`) become
    entries ``rule:<reason>`` -> [comparisons of a column with a number].
    """
    for ledger in ledgers.values():
        if "decisions" in ledger.get("outputs", {}):
            config = ledger.get("config") or {}
            flat = _flatten(config)
            for reason, expression in _rules(config):
                for layer, column, op, value in _COMPARISON.findall(expression):
                    flat.setdefault(f"rule:{reason}", []).append(
                        {"layer": layer, "column": column, "op": op, "value": float(value)}
                    )
            return flat
    return {}


def _rules(value: Any) -> Iterable[tuple[str, str]]:
    """(reason, drop_if expression) of every rule anywhere in a policy config (overrides too)."""
    if isinstance(value, dict):
        if isinstance(value.get("drop_if"), str):
            yield str(value.get("reason", "rule")), value["drop_if"]
        for v in value.values():
            yield from _rules(v)
    elif isinstance(value, list):
        for v in value:
            yield from _rules(v)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


class _Output:
    """One output of one stage layer: its partition paths and Arrow schema."""

    def __init__(self, stage: str, name: str, paths: list[str], rows: int):
        self.stage, self.name, self.paths, self.rows = stage, name, paths, rows
        self._schema = None

    @property
    def label(self) -> str:
        return f"{self.stage}/{self.name}"

    @property
    def schema(self) -> pa.Schema:
        if self._schema is None:
            with FileSystems.open(self.paths[0]) as f:
                self._schema = pq.ParquetFile(f).schema_arrow
        return self._schema

    def has(self, *columns: str) -> bool:
        return all(c in self.schema.names for c in columns)

    def tables(self, columns: list[str]) -> Iterable[pa.Table]:
        for path in self.paths:
            yield read_table(path, columns)


class _Layout:
    """Every output of every committed layer of a run, and the dead letters."""

    def __init__(self, root: str, ledgers: dict[str, dict]):
        self.outputs: list[_Output] = []
        self.dead_letters: list[_Output] = []
        for stage, ledger in ledgers.items():
            layer = Layer(root, stage, ledger["key"])
            for name, spec in ledger.get("outputs", {}).items():
                parts = [p["name"] for p in spec.get("parts", [])]
                if not parts:
                    continue
                if name == "dead_letter":
                    base = layer.dead_letter_path
                    self.dead_letters.append(_Output(stage, name, [join(base, p) for p in parts], spec.get("rows", 0)))
                else:
                    base = layer.output_path(name)
                    self.outputs.append(_Output(stage, name, [join(base, p) for p in parts], spec.get("rows", 0)))

    def documents(self) -> _Output | None:
        for out in self.outputs:
            if out.name == TEXT_OUTPUT and out.has("doc_id", "text"):
                return out
        return None

    def annotations(self) -> list[_Output]:
        return [o for o in self.outputs if o.name in ANNOTATION_OUTPUTS or o.name.endswith(ANNOTATION_SUFFIX)]


def read_table(path: str, columns: list[str] | None = None) -> pa.Table:
    with FileSystems.open(path) as f:
        return read_parquet(f, columns)


def final_tokens_by_source(ref: RunRef) -> dict[str, dict]:
    """Tokens (with one EOS each) and documents per source, from the shard index files."""
    out: dict[str, dict] = {}
    for shard in ref.manifest["shards"]:
        table = read_table(join(ref.dataset_dir, shard["index_file"]), ["source", "token_count"])
        grouped = table.group_by("source").aggregate([("token_count", "sum"), ("token_count", "count")])
        for row in grouped.to_pylist():
            mine = out.setdefault(row["source"], {"tokens": 0, "documents": 0})
            mine["tokens"] += row["token_count_sum"] + row["token_count_count"]
            mine["documents"] += row["token_count_count"]
    return dict(sorted(out.items()))


# --- funnel -----------------------------------------------------------------


def _dropped_chars(layout: _Layout) -> dict[tuple[str, str, str], dict]:
    """{(stage, reason, source): {"documents", "chars"}} for every per-record drop the layers hold."""
    docs = layout.documents()
    out: dict[tuple[str, str, str], dict] = defaultdict(lambda: {"documents": 0, "chars": 0})
    if docs is None or not docs.has("n_chars", "source"):
        return out
    for output in layout.outputs:
        if output.has("reason"):
            reason_of = None
            columns = ["doc_id", "reason"] + (["kept"] if output.has("kept") else [])
        elif output.name in DROP_RECORD_OUTPUTS and output.has("doc_id"):
            reason_of = DROP_RECORD_OUTPUTS[output.name]
            columns = ["doc_id"]
        else:
            continue
        for table in _joined(output, columns, docs, ["doc_id", "source", "n_chars"]):
            if reason_of is None:
                table = table.filter(pc.is_valid(table["reason"]))
                if "kept" in table.column_names:
                    table = table.filter(pc.invert(table["kept"]))
            else:
                table = table.append_column("reason", pa.array([reason_of] * table.num_rows, pa.string()))
            if not table.num_rows:
                continue
            grouped = table.group_by(["reason", "source"]).aggregate([("n_chars", "sum"), ("doc_id", "count")])
            for row in grouped.to_pylist():
                slot = out[(output.stage, row["reason"], row["source"])]
                slot["documents"] += row["doc_id_count"]
                slot["chars"] += row["n_chars_sum"] or 0
    return out


def _joined(left: _Output, left_columns: list[str], right: _Output, right_columns: list[str]) -> Iterable[pa.Table]:
    """``left`` rows joined with ``right`` on doc_id, partition by partition when both share the layout."""
    if len(left.paths) == len(right.paths):
        for lp, rp in zip(left.paths, right.paths):
            yield read_table(lp, left_columns).join(read_table(rp, right_columns), "doc_id", join_type="left outer")
    else:  # different partition counts: hold the narrow right side once
        whole = pa.concat_tables(right.tables(right_columns))
        for table in left.tables(left_columns):
            yield table.join(whole, "doc_id", join_type="left outer")


def funnel(stages: list[dict], layout: _Layout, tokens_by_source: dict, manifest: dict) -> dict:
    """Documents (exact, from the counts) and tokens in the flow after each stage (:func:`stage_flow`).

    A step's documents are the records still in the flow: only stages that
    drop records lower them; a scoring stage adds ``scored`` (the documents
    the cascade let it score). Tokens are exact for the dataset (shard
    indexes). Documents dropped before tokenization were never tokenized: their
    tokens are estimated from their characters (documents layer) times their
    source's tokens per character among kept documents (all sources pooled
    for a source with none kept), plus one EOS each; records without a
    per-document record (dead letters) are estimated at the mean tokens per
    kept document of the source. Estimates are flagged.
    """
    dropped = _dropped_chars(layout)
    kept_chars = _kept_chars(layout)
    total_tokens = sum(s["tokens"] for s in manifest["shards"])
    ratio = {}
    pooled_chars = sum(kept_chars.values())
    pooled_tokens = sum(v["tokens"] - v["documents"] for v in tokens_by_source.values())
    pooled = pooled_tokens / pooled_chars if pooled_chars else None
    for source, v in tokens_by_source.items():
        chars = kept_chars.get(source, 0)
        ratio[source] = (v["tokens"] - v["documents"]) / chars if chars else pooled
    per_doc = {s: v["tokens"] / v["documents"] for s, v in tokens_by_source.items() if v["documents"]}
    pooled_per_doc = total_tokens / sum(s["documents"] for s in manifest["shards"]) if manifest["shards"] else 0

    def estimate(stage: dict) -> float:
        tokens = 0.0
        for source, counts in stage["by_source"].items():
            r = ratio.get(source, pooled) or 0.0
            for reason, n in counts["dropped"].items():
                known = dropped.get((stage["name"], reason, source))
                if known and known["documents"]:
                    tokens += known["chars"] * r + known["documents"]
                    n -= known["documents"]
                tokens += max(n, 0) * per_doc.get(source, pooled_per_doc)
        return tokens

    steps = []
    if stages:
        steps.append(
            {"label": "records read", "stage": stages[0]["name"], "documents": stages[0]["in"], "scored": None}
        )
    for stage in stages:
        steps.append(
            {
                "label": f"after {stage['name']}",
                "stage": stage["name"],
                "documents": stage["after"],
                "scored": stage["scored"],
            }
        )
    # tokens: walk back from the dataset, adding what each stage dropped
    tokens_after = float(total_tokens)
    estimated_after = False
    for i in range(len(stages) - 1, -1, -1):
        steps[i + 1]["tokens"] = tokens_after
        steps[i + 1]["estimated"] = estimated_after
        dropped_here = estimate(stages[i])
        if dropped_here:
            estimated_after = True
        tokens_after += dropped_here
    if steps:
        steps[0]["tokens"] = tokens_after
        steps[0]["estimated"] = estimated_after
    return {
        "steps": steps,
        "tokens_per_char": ratio,
        "dropped": [{"stage": k[0], "reason": k[1], "source": k[2], **v} for k, v in sorted(dropped.items())],
    }


def _kept_chars(layout: _Layout) -> dict[str, int]:
    """Characters of kept documents per source (documents joined with the decisions)."""
    docs = layout.documents()
    decisions = next((o for o in layout.outputs if o.has("doc_id", "kept")), None)
    out: dict[str, int] = defaultdict(int)
    if docs is None or decisions is None or not docs.has("n_chars"):
        return out
    for table in _joined(decisions, ["doc_id", "kept"], docs, ["doc_id", "source", "n_chars"]):
        table = table.filter(table["kept"])
        for row in table.group_by("source").aggregate([("n_chars", "sum")]).to_pylist():
            out[row["source"]] += row["n_chars_sum"] or 0
    return out


# --- histograms -------------------------------------------------------------


def thresholds_for(column: str, policy: dict[str, Any], stage: str | None = None) -> list[dict]:
    """Policy values that bound ``column``: ``min_<x>``, ``max_<x>``, ``<x>_min``, ``<x>_threshold``, ...

    ``x`` is the column name, without an ``n_`` / ``num_`` prefix or a
    ``_score`` / ``_count`` / ``_ratio`` suffix (``n_chars`` -> ``min_chars``).
    Rule expressions count too: ``quality.score < 0.3`` bounds column
    ``score`` of stage ``quality`` from below (drops what is under it).
    """
    found = []
    for key, comparisons in sorted(policy.items()):
        if not key.startswith("rule:"):
            continue
        for c in comparisons:
            layer = LAYER_ALIASES.get(c["layer"], c["layer"])
            if c["column"] == column and (stage is None or layer == stage):
                value = int(c["value"]) if c["value"] == int(c["value"]) else c["value"]
                found.append(
                    {
                        "name": f"{key[5:]}: {c['layer']}.{c['column']} {c['op']}",
                        "value": value,
                        "kind": "min" if c["op"] in ("<", "<=") else "max",
                    }
                )
    bases = {column}
    for prefix in ("n_", "num_"):
        if column.startswith(prefix):
            bases.add(column[len(prefix) :])
    for suffix in ("_score", "_count", "_ratio", "_fraction", "_prob"):
        if column.endswith(suffix):
            bases.add(column[: -len(suffix)])
    for key, value in sorted(policy.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        leaf = key.rsplit(".", 1)[-1]
        for base in bases:
            if leaf in (f"min_{base}", f"{base}_min", f"{base}_threshold", f"min_{base}_threshold"):
                found.append({"name": key, "value": value, "kind": "min"})
            elif leaf in (f"max_{base}", f"{base}_max", f"max_{base}_threshold"):
                found.append({"name": key, "value": value, "kind": "max"})
    return found


def _numeric(field: pa.Field) -> bool:
    return (
        pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
    ) and field.name not in PROVENANCE_COLUMNS


def histograms(layout: _Layout, policy: dict[str, Any]) -> list[dict]:
    """One histogram per numeric annotation column, with matching policy thresholds.

    Two passes over the column (range, then counts), one partition at a time.
    Columns spanning more than three decades of non-negative values get
    logarithmic bins (zeros are counted apart).
    """
    out = []
    for output in layout.annotations():
        columns = [f.name for f in output.schema if _numeric(f)]
        if not columns:
            continue
        stats = {c: {"n": 0, "nulls": 0, "min": math.inf, "max": -math.inf, "sum": 0.0, "zeros": 0} for c in columns}
        for table in output.tables(columns):
            for c in columns:
                col = table[c]
                s = stats[c]
                s["nulls"] += col.null_count
                valid = col.drop_null()
                if not len(valid):
                    continue
                values = valid.to_numpy().astype(np.float64)
                finite = values[np.isfinite(values)]
                s["n"] += len(finite)
                if len(finite):
                    s["min"] = min(s["min"], float(finite.min()))
                    s["max"] = max(s["max"], float(finite.max()))
                    s["sum"] += float(finite.sum())
        edges = {}
        for c in columns:
            s = stats[c]
            if not s["n"]:
                continue
            thresholds = thresholds_for(c, policy, output.stage)
            lo, hi = s["min"], s["max"]
            integer = pa.types.is_integer(output.schema.field(c).type)
            log = (lo >= 1 or (integer and lo >= 0)) and hi / max(lo, 1.0) > 1000
            if log:
                e = np.logspace(math.log10(max(lo, 1.0)), math.log10(hi), HISTOGRAM_BINS + 1)
                e[0], e[-1] = max(lo, 1.0), hi  # exact ends: no value lost to rounding
            elif integer and hi - lo + 1 <= HISTOGRAM_BINS:
                e = np.arange(lo - 0.5, hi + 1.5)
            else:
                e = np.linspace(lo, hi if hi > lo else lo + 1, HISTOGRAM_BINS + 1)
            edges[c] = (e, log, thresholds)
        counts = {c: np.zeros(len(e) - 1, dtype=np.int64) for c, (e, _, _) in edges.items()}
        for table in output.tables(list(edges)):
            for c, (e, log, _) in edges.items():
                values = table[c].drop_null().to_numpy().astype(np.float64)
                values = values[np.isfinite(values)]
                if log:
                    stats[c]["zeros"] += int((values < e[0]).sum())
                    values = values[values >= e[0]]
                counts[c] += np.histogram(np.clip(values, e[0], e[-1]), bins=e)[0]
        for c, (e, log, thresholds) in edges.items():
            s = stats[c]
            out.append(
                {
                    "layer": output.label,
                    "stage": output.stage,
                    "column": c,
                    "edges": e.tolist(),
                    "counts": counts[c].tolist(),
                    "log": log,
                    "thresholds": thresholds,
                    "n": s["n"],
                    "nulls": s["nulls"],
                    "zeros": s["zeros"],
                    "min": s["min"],
                    "max": s["max"],
                    "mean": s["sum"] / s["n"],
                    "rows": output.rows,
                    "integer": pa.types.is_integer(output.schema.field(c).type),
                }
            )
    return out


# --- language ---------------------------------------------------------------


def language_mix(layout: _Layout) -> dict | None:
    """Documents per language from the first annotation output with a language column; None if none has."""
    for output in layout.annotations():
        column = next(
            (
                c
                for c in LANGUAGE_COLUMNS
                if c in output.schema.names and pa.types.is_string(output.schema.field(c).type)
            ),
            None,
        )
        if column is None:
            continue
        counts: Counter = Counter()
        for table in output.tables([column]):
            for row in table[column].value_counts().to_pylist():
                counts[row["values"] if row["values"] is not None else "(none)"] += row["counts"]
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = dict(ordered[:LANGUAGES_SHOWN])
        rest = sum(n for _, n in ordered[LANGUAGES_SHOWN:])
        if rest:
            shown[f"other ({len(ordered) - LANGUAGES_SHOWN})"] = rest
        return {
            "layer": output.label,
            "column": column,
            "documents": shown,
            "total": sum(counts.values()),
            "languages": len(counts),
        }
    return None


# --- duplicate clusters -----------------------------------------------------


def clusters(layout: _Layout) -> list[dict]:
    """Cluster-size distributions: {size: clusters} per annotation output with cluster columns.

    With a ``cluster_id`` the distinct ids are counted (by their
    ``cluster_size`` when there is one, which may include members of earlier
    versions; documents without an id are clusters of one). With only a size
    column (``duplicate_count``), a cluster of size k has k member rows, so
    clusters(k) = rows(k) / k.
    """
    out = []
    for output in layout.annotations():
        size_column = next((c for c in CLUSTER_SIZE_COLUMNS if c in output.schema.names), None)
        key_column = next((c for c in CLUSTER_KEY_COLUMNS if c in output.schema.names), None)
        if size_column is None and key_column != "cluster_id":
            continue
        sizes: Counter = Counter()
        if key_column == "cluster_id":
            size_of: dict[str, int] = {}
            members: Counter = Counter()
            columns = ["cluster_id"] + ([size_column] if size_column else [])
            for table in output.tables(columns):
                alone = table.filter(pc.is_null(table["cluster_id"])).num_rows
                sizes[1] += alone
                grouped = table.filter(pc.is_valid(table["cluster_id"]))
                for row in grouped.to_pylist():
                    members[row["cluster_id"]] += 1
                    if size_column:
                        size_of[row["cluster_id"]] = max(size_of.get(row["cluster_id"], 0), row[size_column] or 0)
            for cluster, n in members.items():
                sizes[max(n, size_of.get(cluster, 0))] += 1
        else:
            rows_by_size: Counter = Counter()
            for table in output.tables([size_column]):
                for row in table[size_column].drop_null().value_counts().to_pylist():
                    rows_by_size[int(row["values"])] += row["counts"]
            sizes.update({k: n // k for k, n in rows_by_size.items() if k > 0})
        sizes = {k: n for k, n in sorted(sizes.items()) if n}
        multi = {k: n for k, n in sizes.items() if k > 1}
        out.append(
            {
                "layer": output.label,
                "stage": output.stage,
                "size_column": size_column,
                "key_column": key_column,
                "sizes": sizes,
                "clusters": sum(multi.values()),
                "members": sum(k * n for k, n in multi.items()),
                "redundant": sum((k - 1) * n for k, n in multi.items()),
                "largest": max(sizes) if sizes else 0,
            }
        )
    return out


def flags(layout: _Layout) -> list[dict]:
    """Share of documents with each boolean annotation column true (``is_duplicate``, ``blocked``, ...),
    among those with a value in it."""
    out = []
    for output in layout.annotations():
        columns = [f.name for f in output.schema if pa.types.is_boolean(f.type)]
        if not columns:
            continue
        true, valid = Counter(), Counter()
        for table in output.tables(columns):
            for c in columns:
                col = table[c].drop_null()
                valid[c] += len(col)
                true[c] += pc.sum(col.cast(pa.int64())).as_py() or 0
        # a column no document has a value in (a definition this build did not compute) is left out
        out += [{"layer": output.label, "column": c, "true": true[c], "of": valid[c]} for c in columns if valid[c]]
    return out


def top_clusters(layout: _Layout, found: list[dict]) -> list[dict]:
    """The largest clusters of each kind, members side by side (representative first)."""
    docs = layout.documents()
    out = []
    for info in found:
        output = next(o for o in layout.outputs if o.label == info["layer"])
        key, size = info["key_column"], info["size_column"]
        if key is None:
            continue
        heap: list[tuple[int, str]] = []  # min-heap of (size, -key order) keeping the largest
        seen: set[str] = set()
        columns = [key] + ([size] if size else [])
        distinct: dict[str, int] = {}
        if key == "cluster_id" and docs is not None and docs.has("content_hash"):
            chosen, distinct = _near_only_clusters(output, docs, size)
        elif size:
            for table in output.tables(columns):
                table = table.filter(pc.greater(table[size], 1))
                for k, n in zip(table[key].to_pylist(), table[size].to_pylist()):
                    if k in seen:
                        continue
                    item = (n, _Desc(k))
                    if len(heap) < TOP_CLUSTERS:
                        heapq.heappush(heap, item)
                        seen.add(k)
                    elif item > heap[0]:
                        seen.discard(heapq.heapreplace(heap, item)[1].value)
                        seen.add(k)
            chosen = {d.value: n for n, d in heap}
        else:
            ids: Counter = Counter()
            for table in output.tables([key]):
                for row in table[key].drop_null().value_counts().to_pylist():
                    ids[row["values"]] += row["counts"]
            chosen = dict(
                sorted(((k, n) for k, n in ids.items() if n > 1), key=lambda kv: (-kv[1], kv[0]))[:TOP_CLUSTERS]
            )
        if not chosen:
            continue
        wanted = pa.array(sorted(chosen), pa.string())
        extra = [c for c in ("representative", "is_duplicate") if c in output.schema.names]
        members: dict[str, list[dict]] = defaultdict(list)
        for table in output.tables(["doc_id", key] + extra):
            table = table.filter(pc.is_in(table[key], value_set=wanted))
            for row in table.to_pylist():
                members[row[key]].append(row)
        doc_ids = set()
        clusters_out = []
        for k in list(chosen) if distinct else sorted(chosen, key=lambda k: (-chosen[k], k)):
            rows = members[k]
            rep = next((r.get("representative") for r in rows if r.get("representative")), None)
            rows.sort(key=lambda r: (r["doc_id"] != rep, r["doc_id"]))
            shown = rows[:CLUSTER_MEMBERS_SHOWN]
            doc_ids.update(r["doc_id"] for r in shown)
            clusters_out.append(
                {
                    "key": k,
                    "size": chosen[k],
                    "representative": rep,
                    "members": shown,
                    "distinct_texts": distinct.get(k),
                }
            )
        texts = lookup_documents(docs, doc_ids, CLUSTER_TEXT_CHARS) if docs else {}
        for c in clusters_out:
            c["members"] = [
                {
                    "doc_id": m["doc_id"],
                    "representative": m["doc_id"] == c["representative"],
                    **texts.get(m["doc_id"], {}),
                }
                for m in c["members"]
            ]
        out.append({"layer": info["layer"], "stage": info["stage"], "key_column": key, "clusters": clusters_out})
    return out


def _near_only_clusters(output: _Output, docs: _Output, size: str | None) -> tuple[dict[str, int], dict[str, int]]:
    """The largest clusters, those whose members are not all exact copies first ({id: size}, {id: texts}).

    Exact copies are already shown by exact dedup; what a person must judge
    are clusters of *different* texts. Distinct texts are counted up to 2 per
    cluster from the documents' ``content_hash`` (joined partition by partition).
    """
    sizes: dict[str, int] = {}
    first_hash: dict[str, str] = {}
    differs: set[str] = set()
    columns = ["doc_id", "cluster_id"] + ([size] if size else [])
    for table in _joined(output, columns, docs, ["doc_id", "content_hash"]):
        table = table.filter(pc.is_valid(table["cluster_id"]))
        for row in table.to_pylist():
            k = row["cluster_id"]
            sizes[k] = max(sizes.get(k, 0) + (0 if size else 1), (row.get(size) or 0) if size else 0)
            h = first_hash.setdefault(k, row["content_hash"])
            if h != row["content_hash"]:
                differs.add(k)
    ranked = sorted((k for k in sizes if sizes[k] > 1), key=lambda k: (k not in differs, -sizes[k], k))
    chosen = {k: sizes[k] for k in ranked[:TOP_CLUSTERS]}
    return chosen, {k: 2 if k in differs else 1 for k in chosen}


@functools.total_ordering
class _Desc:
    """Reverses string order inside a heap tuple, so ties keep the smallest key."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __lt__(self, other: "_Desc") -> bool:
        return self.value > other.value

    def __eq__(self, other) -> bool:
        return isinstance(other, _Desc) and self.value == other.value


# --- samples ----------------------------------------------------------------


def sample_key(seed: int, *parts: str | int) -> int:
    """The deterministic sampling order: the lowest ``stable_hash64(seed, doc_id, ...)`` first."""
    return stable_hash64(seed, *parts)


def drop_samples(layout: _Layout, seed: int, k: int) -> tuple[dict, dict]:
    """Up to ``k`` dropped documents per ``<stage>:<reason>``, and per stage of dead letters.

    Each is the ``k`` lowest ``stable_hash64(seed, doc_id)`` (a repeat adds its
    file and position, since one document can repeat many times): a fixed,
    unbiased sample that the next run of the same data shows again.
    """
    heaps: dict[str, list] = defaultdict(list)
    totals: Counter = Counter()
    for output in layout.outputs:
        if output.has("doc_id", "reason"):
            columns = ["doc_id", "reason"] + [c for c in ("source", "kept") if output.has(c)]
            for table in output.tables(columns):
                table = table.filter(pc.is_valid(table["reason"]))
                if "kept" in table.column_names:
                    table = table.filter(pc.invert(table["kept"]))
                for row in table.to_pylist():
                    name = f"{output.stage}:{row['reason']}"
                    totals[name] += 1
                    _offer(
                        heaps[name],
                        k,
                        (sample_key(seed, row["doc_id"]), row["doc_id"]),
                        {"doc_id": row["doc_id"], "source": row.get("source")},
                    )
        elif output.name in DROP_RECORD_OUTPUTS and output.has("doc_id"):
            name = f"{output.stage}:{DROP_RECORD_OUTPUTS[output.name]}"
            columns = ["doc_id"] + [c for c in ("source", "file", "position", "url") if output.has(c)]
            for table in output.tables(columns):
                for row in table.to_pylist():
                    totals[name] += 1
                    where = f"{row.get('file') or ''}:{row.get('position')}"
                    _offer(
                        heaps[name],
                        k,
                        (sample_key(seed, row["doc_id"], where), row["doc_id"], where),
                        {
                            "doc_id": row["doc_id"],
                            "source": row.get("source"),
                            "repeat_at": where,
                            "repeat_url": row.get("url"),
                        },
                    )
    docs = layout.documents()
    wanted = {item[-1]["doc_id"] for heap in heaps.values() for item in heap}
    texts = lookup_documents(docs, wanted, SAMPLE_TEXT_CHARS) if docs else {}
    samples = {}
    for name in sorted(heaps):
        rows = _ascending(heaps[name])
        rows = [
            {**row, **{f: v for f, v in texts.get(row["doc_id"], {}).items() if f != "source" or not row.get("source")}}
            for row in rows
        ]
        samples[name] = {"total": totals[name], "shown": len(rows), "rows": rows}

    dead: dict[str, dict] = {}
    for output in layout.dead_letters:
        heap: list = []
        total = 0
        for table in output.tables(None):
            for row in table.to_pylist():
                total += 1
                where = f"{row.get('file') or ''}:{row.get('position')}"
                _offer(
                    heap,
                    k,
                    (sample_key(seed, row.get("doc_id") or "", where, row.get("error") or ""), where),
                    {
                        "source": row.get("source"),
                        "file": row.get("file"),
                        "position": row.get("position"),
                        "byte_offset": row.get("byte_offset"),
                        "doc_id": row.get("doc_id"),
                        "error": (row.get("error") or "")[:500],
                        "raw_prefix": (row.get("raw_prefix") or b"").decode("utf-8", errors="replace"),
                    },
                )
        if total:
            dead[output.stage] = {"total": total, "shown": len(heap), "rows": _ascending(heap)}
    return samples, dead


def _offer(heap: list, k: int, order: tuple, row: dict) -> None:
    """Keep the rows of the ``k`` smallest ``order`` values (a max-heap through :class:`_Rev`)."""
    if k <= 0:
        return
    item = (_Rev(order), row)
    if len(heap) < k:
        heapq.heappush(heap, item)
    elif order < heap[0][0].order:
        heapq.heapreplace(heap, item)


def _ascending(heap: list) -> list[dict]:
    return [row for _, row in sorted(heap, key=lambda item: item[0].order)]


@functools.total_ordering
class _Rev:
    """Reverses the order of a sampling key, so ``heap[0]`` is the largest key kept."""

    __slots__ = ("order",)

    def __init__(self, order: tuple):
        self.order = order

    def __lt__(self, other: "_Rev") -> bool:
        return self.order > other.order

    def __eq__(self, other) -> bool:
        return isinstance(other, _Rev) and self.order == other.order


def lookup_documents(docs: _Output, doc_ids: set[str], max_chars: int) -> dict[str, dict]:
    """Source, URL, size and (truncated) text of some documents, reading only the partitions that hold them."""
    if not doc_ids:
        return {}
    n = len(docs.paths)
    by_part: dict[int, list[str]] = defaultdict(list)
    for d in doc_ids:
        by_part[bucket_of(d, n)].append(d)
    columns = [c for c in ("doc_id", "source", "url", "n_chars", "text", "file", "position") if docs.has(c)]
    found: dict[str, dict] = {}
    for index, ids in sorted(by_part.items()):
        table = read_table(docs.paths[index], columns)
        table = table.filter(pc.is_in(table["doc_id"], value_set=pa.array(sorted(ids), pa.string())))
        for row in table.to_pylist():
            text = row.pop("text") or ""
            row["text"] = text[:max_chars]
            row["truncated"] = len(text) > max_chars
            found[row["doc_id"]] = row
    missing = doc_ids - set(found)
    if missing:  # partitioned some other way: scan
        for table in docs.tables(columns):
            table = table.filter(pc.is_in(table["doc_id"], value_set=pa.array(sorted(missing), pa.string())))
            for row in table.to_pylist():
                text = row.pop("text") or ""
                found[row["doc_id"]] = {**row, "text": text[:max_chars], "truncated": len(text) > max_chars}
    return found
