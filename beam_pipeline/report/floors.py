"""Warnings about keep-rate floors a slice cannot meet (``policy.floors``, docs/policy.md "Floors").

``select`` counts them as data (:mod:`beam_pipeline.transforms.select_floors`): ``floor_short:<slice>``
documents short of ``floor_target:<slice>``, ``floor_tokens_short:<slice>`` tokens short of the
``floor_wanted:<slice>`` tokens the mixture asks, ``floor_empty:<slice>`` for a mixture domain without
documents. The run report and the console print the same lines.
"""

from __future__ import annotations

SELECT = "select"


def floor_warnings(counts_by_stage: dict[str, dict]) -> list[str]:
    """Warning lines from ``{stage: counts}`` (the counts of a ledger or of metrics.json)."""
    other = (counts_by_stage.get(SELECT) or {}).get("other") or {}
    out = []
    for name, value in sorted(other.items()):
        kind, _, piece = name.partition(":")
        if kind == "floor_short":
            target = other.get(f"floor_target:{piece}", 0)
            out.append(
                f"floor: slice {piece} cannot meet its floor of {target:,} documents: {value:,} documents short "
                f"(not enough documents that policy.floors may rescue)"
            )
        elif kind == "floor_tokens_short":
            wanted = other.get(f"floor_wanted:{piece}", 0)
            out.append(
                f"floor: slice {piece} holds about {wanted - value:,} tokens, {value:,} short of the {wanted:,} its "
                f"mixture weight asks of target_tokens; select keeps all of it (floor capped at 1)"
            )
        elif kind == "floor_empty":
            out.append(f"floor: slice {piece} has a mixture weight but no documents at all")
    return out


def run_floor_warnings(stages: list[dict]) -> list[str]:
    """:func:`floor_warnings` over the stage entries of metrics.json or a manifest (``name``, ``counts``)."""
    return floor_warnings({s["name"]: s.get("counts") or {} for s in stages if isinstance(s, dict) and "name" in s})


def entries_of(ref) -> list[dict]:
    """The stage entries of a run: its metrics' (counts as data), else its manifest's."""
    return (ref.metrics or {}).get("stages") or (ref.manifest or {}).get("stages", [])
