"""Two dataset versions side by side: versions, counts, drops, mixture.

``python -m beam_pipeline report --compare A B`` answers "was it the data?":
equal dataset ids mean equal token data; otherwise the stage versions, layer
keys and config fields that differ, and the counts they moved. Only the runs'
metrics and manifests are read (no layers), so any two versions compare in
seconds.
"""

from __future__ import annotations

import json
from typing import Any

from beam_pipeline.report.gather import gather
from beam_pipeline.report.locate import RunRef
from beam_pipeline.report.stage_counts import drop_reasons

#: Config fields that say where or how a run is shown, not what data it makes.
NOT_DATA = ("output_root", "report")
ABSENT = "(absent)"


def compare(a_ref: RunRef, b_ref: RunRef) -> dict:
    a, b = gather(a_ref, detail=False), gather(b_ref, detail=False)
    return compare_data(a, b, a_ref.manifest.get("config", {}), b_ref.manifest.get("config", {}))


def compare_data(a: dict, b: dict, a_config: dict, b_config: dict) -> dict:
    """The comparison of two gathered runs (``gather(..., detail=False)``)."""
    versions = [
        {"what": what, "a": a["run"][key], "b": b["run"][key]}
        for what, key in (
            ("dataset id", "dataset_id"),
            ("snapshot id", "snapshot_id"),
            ("config digest", "config_digest"),
        )
    ]
    versions.append(
        {"what": "tokenizer sha256", "a": a["run"]["tokenizer"].get("sha256"), "b": b["run"]["tokenizer"].get("sha256")}
    )
    a_stages = {s["name"]: s for s in a["stages"]}
    b_stages = {s["name"]: s for s in b["stages"]}
    names = _merge_order([s["name"] for s in a["stages"]], [s["name"] for s in b["stages"]])
    for name in names:
        sa, sb = a_stages.get(name, {}), b_stages.get(name, {})
        versions.append({"what": f"{name} version", "a": sa.get("version"), "b": sb.get("version")})
        versions.append({"what": f"{name} layer key", "a": sa.get("layer_key"), "b": sb.get("layer_key")})

    counts = []
    for name in names:
        sa, sb = a_stages.get(name), b_stages.get(name)
        for field in ("in", "passed", "dropped", "dead_letter"):
            counts.append(
                {
                    "stage": name,
                    "field": field,
                    "what": f"{name} · {field}",
                    "a": _count(sa, field),
                    "b": _count(sb, field),
                }
            )

    a_drops, b_drops = _drop_totals(a["stages"]), _drop_totals(b["stages"])
    drops = [
        {"reason": r, "a": a_drops.get(r, 0), "b": b_drops.get(r, 0)}
        for r in _union(drop_reasons(a["stages"]), drop_reasons(b["stages"]))
    ]

    a_mix, b_mix = a["mixture"]["buckets"], b["mixture"]["buckets"]
    mixture = [
        {
            "bucket": k,
            "a_tokens": a_mix.get(k, {}).get("tokens", 0),
            "b_tokens": b_mix.get(k, {}).get("tokens", 0),
            "a_share": a_mix.get(k, {}).get("share", 0.0),
            "b_share": b_mix.get(k, {}).get("share", 0.0),
        }
        for k in _union(list(a_mix), list(b_mix))
    ]

    flat_a, flat_b = _flatten_config(a_config), _flatten_config(b_config)
    config_changes = [
        {"field": k, "a": _shown(flat_a, k), "b": _shown(flat_b, k)}
        for k in sorted(set(flat_a) | set(flat_b))
        if _shown(flat_a, k) != _shown(flat_b, k)
    ]
    headline = [
        ("documents", f"{a['run']['documents']:,} → {b['run']['documents']:,}"),
        ("tokens", f"{a['run']['tokens']:,} → {b['run']['tokens']:,}"),
        ("shards", f"{a['run']['shards']:,} → {b['run']['shards']:,}"),
    ]
    return {
        "a": {"label": f"{a['name']} {a['run']['run_id'][:8]}", **_ids(a)},
        "b": {"label": f"{b['name']} {b['run']['run_id'][:8]}", **_ids(b)},
        "same_data": a["run"]["dataset_id"] == b["run"]["dataset_id"],
        "versions": versions,
        "config_changes": config_changes,
        "counts": counts,
        "drops": drops,
        "mixture": mixture,
        "headline": headline,
    }


def summary_text(cmp: dict) -> str:
    """The comparison as plain text for the terminal."""
    lines = [
        f"A  {cmp['a']['label']}  dataset {cmp['a']['dataset_id']}",
        f"B  {cmp['b']['label']}  dataset {cmp['b']['dataset_id']}",
        "same data (dataset ids equal)" if cmp["same_data"] else "different data",
        "",
    ]
    changed = [v for v in cmp["versions"] if v["a"] != v["b"] and v["what"] != "dataset id"]
    for v in changed:
        lines.append(f"changed  {v['what']:<28} {v['a']} -> {v['b']}")
    for c in cmp["config_changes"]:
        lines.append(f"config   {c['field']:<28} {c['a']} -> {c['b']}")
    lines += ["", f"{'count':<30} {'A':>12} {'B':>12} {'B-A':>10}"]
    for r in cmp["counts"] + [{"what": f"dropped {d['reason']}", **d} for d in cmp["drops"]]:
        a, b = r["a"], r["b"]
        delta = "" if a is None or b is None else f"{b - a:+,}"
        lines.append(f"{r['what']:<30} {_fmt(a):>12} {_fmt(b):>12} {delta:>10}")
    lines += ["", f"{'bucket':<16} {'A tokens':>12} {'B tokens':>12} {'A share':>8} {'B share':>8}"]
    for m in cmp["mixture"]:
        lines.append(
            f"{m['bucket']:<16} {m['a_tokens']:>12,} {m['b_tokens']:>12,} {m['a_share']:>8.1%} {m['b_share']:>8.1%}"
        )
    return "\n".join(lines)


def _ids(data: dict) -> dict:
    return {"run_id": data["run"]["run_id"], "dataset_id": data["run"]["dataset_id"], "name": data["name"]}


def _count(stage: dict | None, field: str) -> int | None:
    if stage is None:
        return None
    if field == "dropped":
        return stage["dropped_total"]  # what the stage removed from the flow (gather.stage_flow)
    return stage[field]


def _drop_totals(stages: list[dict]) -> dict[str, int]:
    """{"<stage>:<reason>": records removed from the flow} (a scoring stage's gated documents are not drops)."""
    return {f"{s['name']}:{reason}": n for s in stages for reason, n in s["dropped"].items()}


def _merge_order(a: list[str], b: list[str]) -> list[str]:
    """B's stage order, with A's extra stages placed after their predecessor in A."""
    merged = list(b)
    for i, name in enumerate(a):
        if name not in merged:
            before = next((a[j] for j in range(i - 1, -1, -1) if a[j] in merged), None)
            merged.insert(merged.index(before) + 1 if before else 0, name)
    return merged


def _union(a: list, b: list) -> list:
    return list(dict.fromkeys([*a, *b]))


def _flatten_config(config: dict) -> dict[str, Any]:
    """Config as ``{"policy.min_chars": 1, "sources[wikipedia].rank": 2, ...}`` without what is not data."""
    out: dict[str, Any] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
            for v in value:
                walk({k: x for k, x in v.items() if k != "name"}, f"{prefix}[{v['name']}]")
            if not value:
                out[prefix] = []
        else:
            out[prefix] = value

    walk({k: v for k, v in config.items() if k not in NOT_DATA}, "")
    return out


def _shown(flat: dict, key: str) -> str:
    return json.dumps(flat[key], sort_keys=True) if key in flat else ABSENT


def _fmt(value) -> str:
    return "-" if value is None else f"{value:,}"
