"""Compare two dataset manifests: "was it the code, the config, or the data?".

``python -m beam_pipeline diff A B`` reports, from the two manifests only:

* identity: dataset ids, snapshots, config digests, tokenizers, and whether
  B is a takedown of A;
* stages whose code version or layer key differ (or that only one build ran);
* config key paths whose values differ (lists of named items, such as
  ``sources``, are keyed by name: ``sources[wikipedia].rank``);
* per stage and per source, every count that differs (``in``, ``passed``,
  ``filtered:<reason>``, ``dead_letter``);
* shards added, removed, and changed (same name, different leaf).

Exit status as diff(1): 0 when the manifests describe the same dataset and
build, 1 when they differ, 2 when one cannot be read. A config path that only
says where a file is (:data:`LOCATIONS`: sources, lists, models, eval sets,
the tokenizer, ``output_root``) is shown but is no difference: what the file
holds is compared by its digest (snapshot id, tokenizer sha256, layer keys).
Manifests name paths inside the config's folder relative to it
(``manifest.portable_config``), so two checkouts give the same paths anyway.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_MISSING = "<absent>"

#: Config key paths (as :func:`flatten` writes them) that name where a file is. Their content is compared
#: elsewhere: sources by the snapshot id, the tokenizer by its sha256, lists, models and eval sets by the
#: stages' layer keys (which hold their content digests). ``output_root`` is where the build writes.
LOCATIONS = re.compile(
    r"^(output_root|sources\[[^]]+\]\.(uri|landing\.uri)|tokenize\.tokenizer|(language|quality)\.model"
    r"|safety\.toxicity_model|safety\.badword_files\.[^.]+|blocklist\.(domain_files|url_substring_files)"
    r"|decontamination\.evalsets\[[^]]+\]\.path)$"
)


def is_location(path: str) -> bool:
    """Whether a config key path names a file's location (not what the build does)."""
    return bool(LOCATIONS.match(path))


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf key paths of nested dicts/lists: ``a.b``, ``items[0].x``, ``sources[name].field``.

    Lists of scalars are single values; lists of dicts that all have a distinct
    ``name`` are keyed by it, other lists by index.
    """
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: {}}
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return {prefix: value}  # a list of scalars is one value (stop words, file lists)
    if isinstance(value, list):
        named = all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value) and value
        if named and len({v["name"] for v in value}) == len(value):
            out = {}
            for item in value:
                out.update(flatten({k: v for k, v in item.items() if k != "name"}, f"{prefix}[{item['name']}]"))
            return out
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def changed_paths(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(path, value in a, value in b) for every leaf that differs."""
    fa, fb = flatten(a), flatten(b)
    return [
        (k, fa.get(k, _MISSING), fb.get(k, _MISSING))
        for k in sorted(set(fa) | set(fb))
        if fa.get(k, _MISSING) != fb.get(k, _MISSING)
    ]


def count_rows(counts: dict) -> dict[str, int]:
    """Flat metrics of one stage's counts: ``total/in``, ``<source>/filtered:<reason>``, ..."""
    rows = {}
    for label, c in [("total", counts)] + sorted(counts.get("by_source", {}).items()):
        rows[f"{label}/in"] = c["in"]
        rows[f"{label}/passed"] = c["passed"]
        rows[f"{label}/dead_letter"] = c["dead_letter"]
        for reason, n in sorted(c.get("filtered", {}).items()):
            rows[f"{label}/filtered:{reason}"] = n
    return rows


def diff_manifests(a: dict, b: dict) -> dict:
    """Structured differences between two manifests (see the module doc)."""
    stages_a = {s["name"]: s for s in a["stages"]}
    stages_b = {s["name"]: s for s in b["stages"]}
    order = [s["name"] for s in a["stages"]] + [s["name"] for s in b["stages"] if s["name"] not in stages_a]
    stage_changes, count_changes = [], []
    for name in order:
        sa, sb = stages_a.get(name), stages_b.get(name)
        if sa is None or sb is None:
            stage_changes.append({"stage": name, "only_in": "A" if sb is None else "B"})
            continue
        if (sa["version"], sa["layer_key"], sa["config_digest"]) != (
            sb["version"],
            sb["layer_key"],
            sb["config_digest"],
        ):
            stage_changes.append(
                {
                    "stage": name,
                    "version": [sa["version"], sb["version"]],
                    "layer_key": [sa["layer_key"], sb["layer_key"]],
                    "config_changed": sa["config_digest"] != sb["config_digest"],
                }
            )
        ca, cb = count_rows(sa["counts"]), count_rows(sb["counts"])
        for key in sorted(set(ca) | set(cb), key=lambda k: (not k.startswith("total/"), k)):
            if ca.get(key, 0) != cb.get(key, 0):
                source, metric = key.split("/", 1)
                count_changes.append(
                    {"stage": name, "source": source, "metric": metric, "a": ca.get(key, 0), "b": cb.get(key, 0)}
                )
    shards_a = {s["name"]: s for s in a["shards"]}
    shards_b = {s["name"]: s for s in b["shards"]}
    shards = {
        "added": sorted(set(shards_b) - set(shards_a)),
        "removed": sorted(set(shards_a) - set(shards_b)),
        "changed": sorted(n for n in set(shards_a) & set(shards_b) if shards_a[n]["leaf"] != shards_b[n]["leaf"]),
        "unchanged": len([n for n in set(shards_a) & set(shards_b) if shards_a[n]["leaf"] == shards_b[n]["leaf"]]),
    }
    identity = {
        field: [a.get(field), b.get(field)] for field in ("dataset_id", "snapshot_id", "config_digest", "seq_len")
    }
    identity["tokenizer_sha256"] = [a["tokenizer"]["sha256"], b["tokenizer"]["sha256"]]
    totals = {
        field: [sum(s[field] for s in a["shards"]), sum(s[field] for s in b["shards"])]
        for field in ("documents", "tokens", "sequences")
    }
    lineage = (
        "B is a takedown of A"
        if b.get("previous_dataset_id") == a["dataset_id"]
        else "A is a takedown of B"
        if a.get("previous_dataset_id") == b["dataset_id"]
        else None
    )
    return {
        "identity": identity,
        "totals": totals,
        "relation": lineage,
        "stages": stage_changes,
        "config": [{"path": p, "a": va, "b": vb} for p, va, vb in changed_paths(a["config"], b["config"])],
        "counts": count_changes,
        "shards": shards,
        "tombstones": {"a": len(a.get("tombstones", [])), "b": len(b.get("tombstones", []))},
    }


def is_same(d: dict) -> bool:
    """True when the diff shows the same data built the same way (locations of files aside)."""
    same_ids = all(x == y for x, y in d["identity"].values())
    return same_ids and not d["stages"] and not d["counts"] and all(is_location(c["path"]) for c in d["config"])


def format_diff(d: dict) -> str:
    """Human-readable report for ``python -m beam_pipeline diff``."""
    lines = ["identity"]
    for field, (x, y) in d["identity"].items():
        lines.append(f"  {field:<17} {'same' if x == y else 'DIFFERS'}  A={x}" + ("" if x == y else f"  B={y}"))
    if d["relation"]:
        lines.append(f"  {d['relation']} (tombstones A={d['tombstones']['a']}, B={d['tombstones']['b']})")
    lines.append(
        "  totals            "
        + ", ".join(f"{k} {x} -> {y}" if x != y else f"{k} {x}" for k, (x, y) in d["totals"].items())
    )
    lines += ["", f"stage versions ({len(d['stages'])} differ)"]
    for s in d["stages"]:
        if "only_in" in s:
            lines.append(f"  {s['stage']:<13} only in {s['only_in']}")
        else:
            va, vb = s["version"]
            lines.append(
                f"  {s['stage']:<13} version {va}"
                + (f" -> {vb}" if va != vb else " (same)")
                + f", layer {s['layer_key'][0]} -> {s['layer_key'][1]}"
                + (", config changed" if s["config_changed"] else "")
            )
    lines += ["", f"config ({len(d['config'])} key paths differ)"]
    for c in d["config"]:
        note = (
            "  (a location: not in config_digest)"
            if c["path"] == "output_root"
            else "  (a location: the file's content is compared by digest)"
            if is_location(c["path"])
            else ""
        )
        lines.append(f"  {c['path']}: {json.dumps(c['a'])} -> {json.dumps(c['b'])}{note}")
    lines += ["", f"counts ({len(d['counts'])} differ)"]
    for c in d["counts"]:
        lines.append(
            f"  {c['stage']:<13} {c['source']:<20} {c['metric']:<28} {c['a']:>8} -> {c['b']:<8} ({c['b'] - c['a']:+d})"
        )
    sh = d["shards"]
    lines += [
        "",
        f"shards: {len(sh['added'])} added, {len(sh['removed'])} removed, {len(sh['changed'])} changed, "
        f"{sh['unchanged']} unchanged",
    ]
    for kind in ("added", "removed", "changed"):
        if sh[kind]:
            lines.append(f"  {kind:<8} {', '.join(sh[kind])}")
    return "\n".join(lines)


def cli_diff(args) -> int:
    """``python -m beam_pipeline diff A B [--json]``: 0 same, 1 different, 2 unreadable."""
    from beam_pipeline.storage.manifest import load_manifest

    try:
        a, b = load_manifest(args.a), load_manifest(args.b)
    except (OSError, ValueError, KeyError) as err:
        print(f"error: cannot read a manifest: {err}", file=sys.stderr)
        return 2
    d = diff_manifests(a, b)
    print(json.dumps(d, indent=1) if args.json else format_diff(d))
    return 0 if is_same(d) else 1
