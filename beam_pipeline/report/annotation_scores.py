"""The report's annotation scores and language mix, from the columns the layers hold.

The gatherer is data-driven: a numeric column of a ``documents`` /
``*annotations`` output that is not provenance gets a histogram
(:func:`histograms`) with the policy thresholds whose names match it
(:func:`thresholds_for`: ``n_chars`` -> ``min_chars`` / ``max_chars``, and
comparisons in ``drop_if`` rules, from the policy the run applied:
:func:`applied_policy`); a boolean column gives the share of documents it flags
(:func:`flags`); a string column named ``language`` / ``lang`` gives the
language mix (:func:`language_mix`). Used by
:func:`beam_pipeline.report.gather.gather` (and ``docs/report.md``,
"Annotation scores", "Language mix").
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.report.run_layers import Layout

#: Columns that describe where a record came from, not a property worth a histogram.
PROVENANCE_COLUMNS = frozenset(
    {"source_rank", "position", "byte_offset", "token_start", "token_count", "record_id", "file"}
)
#: Aliases the policy rule language uses for layers (beam_pipeline.policy.rules): alias -> stage.
LAYER_ALIASES = {"document": "ingest", "exact": "exact_dedup", "near": "near_dedup"}
_COMPARISON = re.compile(r"\b([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\s*(<=|>=|<|>)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
LANGUAGE_COLUMNS = ("language", "lang", "language_id", "lid_language")
HISTOGRAM_BINS = 40
LANGUAGES_SHOWN = 15


def applied_policy(ledgers: dict[str, dict]) -> dict[str, Any]:
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


def histograms(layout: Layout, policy: dict[str, Any]) -> list[dict]:
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


def flags(layout: Layout) -> list[dict]:
    """Share of documents with each boolean annotation column true (``is_duplicate``, ``blocked``, ...),
    among those with a value in it."""
    out = []
    for output in layout.annotations():
        columns = [f.name for f in output.schema if pa.types.is_boolean(f.type)]
        if not columns:
            continue
        true: Counter = Counter()
        valid: Counter = Counter()
        for table in output.tables(columns):
            for c in columns:
                col = table[c].drop_null()
                valid[c] += len(col)
                true[c] += pc.sum(col.cast(pa.int64())).as_py() or 0
        # a column no document has a value in (a definition this build did not compute) is left out
        out += [{"layer": output.label, "column": c, "true": true[c], "of": valid[c]} for c in columns if valid[c]]
    return out


def language_mix(layout: Layout) -> dict | None:
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
