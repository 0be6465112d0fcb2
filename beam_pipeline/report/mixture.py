"""The report's mixture and token budget: tokens per domain bucket, and the epochs a target implies.

Tokens per domain bucket come from the dataset manifest's shards, next to
the target mixture of the config's ``report.mixture``; :func:`token_budget`
says how many epochs over each bucket's unique tokens ``report.target_tokens``
needs, with a warning past ``report.max_epochs`` (4, after Muennighoff et al.
2023, arXiv:2305.16264). Used by :func:`beam_pipeline.report.gather.gather`
(and ``docs/report.md``, "Mixture and token budget").
"""

from __future__ import annotations

import math
from typing import Any

MUENNIGHOFF = (
    "Muennighoff et al. 2023, \"Scaling Data-Constrained Language Models\" (NeurIPS 2023, "
    "arXiv:2305.16264): up to about 4 epochs of repeated data are almost as good as unique "
    "data; beyond that the value of added compute decays quickly."
)


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
    out: dict[str, Any] = {
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
