"""Alarms on near-duplicate cluster sizes: transitivity, the failure that hides.

Connected components over candidate pairs chain: A ~ B and B ~ C put A and C
in one cluster even when A and C share little. A few such chains through
templated pages (navigation, licences, generated listings) can merge
thousands of different documents into one cluster, and collapsing it would
delete all but one of them. The near-dedup stage therefore does not collapse
a cluster above ``near_dedup.max_cluster_size``: it writes it to
``large_clusters`` and checks every member against the representative, and
keeps the members that fail (the *rejected chain members*,
counter ``large_cluster_rejected``). That protects the data, but silently.

This module makes it loud. From the near-dedup ledger (the stage's counts
and its largest clusters of any size, :func:`largest_clusters` over the
layer's ``largest_clusters`` output, written when the layer is committed) it
finds the clusters above ``near_dedup.alarms.max_size``
members or above ``near_dedup.alarms.max_share`` of the stage's documents
(:func:`cluster_alarms`). The console prints them at the end of a build, the
run report lists them with its warnings, and with ``action: fail`` the build
publishes no dataset (the layers stay committed: raising the limits, or
``action: warn``, and rerunning publishes without recomputing anything).
Alarms see clusters of any size: the stage keeps its
:data:`LEDGER_CLUSTERS` largest clusters, large or not, through a bounded
combine of the runner (``transforms/near_dedup.py``, ``LARGEST_CLUSTERS``), so
a 90-member cluster holding 10% of a small corpus alarms on ``max_share``
although it is below ``max_cluster_size`` (and collapsed as usual). Before
issue 44 they saw only the clusters above ``max_cluster_size``.

The size distribution of all clusters is counted by the stage as
``cluster_size_<low>_<high>`` (powers of two: 2, 3-4, 5-8, ...), so the run
report's stage counts show it.
"""

from __future__ import annotations

import dataclasses

from beam_pipeline.storage.layers import read_partition_rows

#: Largest clusters kept in the near-dedup ledger, whatever the alarm settings (they must not shape the layer).
LEDGER_CLUSTERS = 20
#: The counter of large-cluster members the pairwise check found not similar to their representative.
REJECTED = "large_cluster_rejected"


class ClusterAlarmStop(RuntimeError):
    """``near_dedup.alarms.action: fail`` and an alarm: no dataset is published."""


def size_bucket(size: int) -> str:
    """The histogram counter of a cluster of ``size`` members: 2 -> ``cluster_size_2``, 3-4 ->
    ``cluster_size_3_4``, 5-8 -> ``cluster_size_5_8``, ..."""
    if size <= 2:
        return "cluster_size_2"
    high = 1 << (size - 1).bit_length()
    return f"cluster_size_{high // 2 + 1}_{high}"


def largest_clusters(large_cluster_paths: list[str], limit: int = LEDGER_CLUSTERS) -> list[dict]:
    """The ``limit`` largest rows of a cluster output (``largest_clusters``, or ``large_clusters`` of a layer
    written before it), largest first (ties by cluster id)."""
    rows = []
    for path in large_cluster_paths:
        rows.extend(read_partition_rows(path))
    rows.sort(key=lambda r: (-r["size"], r["cluster_id"]))
    return [
        {
            "cluster_id": r["cluster_id"],
            "representative": r["doc_id"],
            "size": r["size"],
            "sampled_members": list(r["sampled_members"]),
        }
        for r in rows[:limit]
    ]


@dataclasses.dataclass(frozen=True)
class ClusterAlarm:
    kind: str  # "size" or "share"
    clusters: list[dict]  # the clusters above the limit, largest first (as in the ledger)
    count: int  # how many clusters are above it (the ledger keeps the largest only)
    limit: str  # the limit, as the config names it
    documents: int  # documents that entered the stage
    examples: int

    @property
    def message(self) -> str:
        shown = "; ".join(
            f"{c['size']:,} documents ({c['size'] / max(self.documents, 1):.1%}), representative "
            f"{c['representative']}, e.g. {', '.join(c['sampled_members'][:3])}"
            for c in self.clusters[: self.examples]
        )
        count = f"{self.count}+" if self.count == LEDGER_CLUSTERS else str(self.count)  # the ledger keeps 20
        return (
            f"near-dup cluster alarm: {count} cluster(s) above {self.limit}: {shown} "
            f"(largest_clusters output of the near_dedup layer; docs/near_dedup.md, \"Large clusters\")"
        )


def cluster_alarms(alarms, ledger: dict) -> list[ClusterAlarm]:
    """The alarms ``alarms`` (``near_dedup.alarms``) raises on a near-dedup layer's ``ledger``."""
    clusters = ledger.get("largest_clusters") or []
    documents = ledger["counts"]["in"]
    found = []
    if alarms.max_size is not None:
        above = [c for c in clusters if c["size"] > alarms.max_size]
        if above:
            found.append(
                ClusterAlarm(
                    "size",
                    above,
                    len(above),
                    f"near_dedup.alarms.max_size={alarms.max_size}",
                    documents,
                    alarms.examples,
                )
            )
    if alarms.max_share is not None and documents:
        above = [c for c in clusters if c["size"] / documents > alarms.max_share]
        if above:
            found.append(
                ClusterAlarm(
                    "share",
                    above,
                    len(above),
                    f"near_dedup.alarms.max_share={alarms.max_share:g} of {documents:,} documents",
                    documents,
                    alarms.examples,
                )
            )
    return found


def large_cluster_line(ledger: dict) -> str | None:
    """``3 clusters above max_cluster_size (largest 512 documents); 45 chain members kept ...``, or None."""
    other = ledger["counts"].get("other", {})
    large = other.get("large_clusters", 0)
    if not large:
        return None
    clusters = ledger.get("largest_clusters") or []
    largest = f" (largest {clusters[0]['size']:,} documents)" if clusters else ""
    return (
        f"{large:,} near-dup clusters above near_dedup.max_cluster_size{largest}, not collapsed: each member "
        f"checked against the representative; {other.get(REJECTED, 0):,} chain members were not similar to "
        f"it and were kept"
    )


#: The counter of clusters whose representative is more than 20% shorter than the cluster's median length
#: (``transforms/near_dedup_clusters.py``, ``SHORT_REPRESENTATIVE``).
SHORT_REPRESENTATIVE = "representative_short"


def representative_check(ledger: dict) -> dict | None:
    """The seed's check of the representative order, from a near-dedup ledger: {clusters, short, share}
    (clusters whose representative is more than 20% shorter than the cluster's median length), or None
    when the layer has no clusters."""
    other = ledger["counts"].get("other", {})
    clusters = other.get("clusters", 0) + other.get("large_clusters", 0)
    if not clusters:
        return None
    short = other.get(SHORT_REPRESENTATIVE, 0)
    return {"clusters": clusters, "short": short, "share": short / clusters}


def representative_line(check: dict) -> str:
    return (
        f"{check['short']:,} of {check['clusters']:,} near-dup clusters ({check['share']:.1%}) have a "
        f"representative more than 20% shorter than the cluster's median length"
    )


def representative_alarm(alarms, ledger: dict) -> str | None:
    """The warning when the share of clusters with a short representative is above
    ``near_dedup.alarms.max_short_representative_share``."""
    check = representative_check(ledger)
    limit = alarms.max_short_representative_share
    if check is None or limit is None or check["share"] <= limit:
        return None
    return (
        f"{representative_line(check)}: above near_dedup.alarms.max_short_representative_share={limit:g} "
        f"(the representative order: source rank, quality, date, doc_id; docs/near_dedup.md, "
        f'"Clusters and representatives")'
    )


def _near_dedup(config):
    """The ``near_dedup`` section of a config: a :class:`~beam_pipeline.config.corpus.CorpusConfig` or the dict a
    manifest holds (defaults filled in)."""
    if isinstance(config, dict):
        from beam_pipeline.dedup.config import NearDedupConfig

        return NearDedupConfig.model_validate(config.get("near_dedup") or {})
    return config.near_dedup


def build_messages(config, ledgers: dict[str, dict]) -> tuple[list[str], list[str]]:
    """(information lines, alarm messages) of a build from its config and ledgers (stage -> ledger)."""
    ledger = ledgers.get("near_dedup")
    near = _near_dedup(config) if config else None
    if ledger is None or near is None or not near.enabled:
        return [], []
    line = large_cluster_line(ledger)
    alarms = [alarm.message for alarm in cluster_alarms(near.alarms, ledger)]
    short = representative_alarm(near.alarms, ledger)
    return ([line] if line else []), alarms + ([short] if short else [])


def representative_report(config, ledgers: dict[str, dict]) -> dict | None:
    """The run report's representative check: :func:`representative_check` with the warning limit."""
    ledger = ledgers.get("near_dedup")
    near = _near_dedup(config) if config else None
    if ledger is None or near is None or not near.enabled:
        return None
    check = representative_check(ledger)
    return None if check is None else {**check, "limit": near.alarms.max_short_representative_share}


def check_before_publishing(config, ledgers: dict[str, dict]) -> None:
    """Raise :class:`ClusterAlarmStop` when ``near_dedup.alarms.action`` is ``fail`` and an alarm fires."""
    near = _near_dedup(config)
    ledger = ledgers.get("near_dedup")
    if not near.enabled or near.alarms.action != "fail" or ledger is None:
        return
    alarms = [alarm.message for alarm in cluster_alarms(near.alarms, ledger)]  # the size alarms; the short
    # representative share only warns
    if alarms:
        raise ClusterAlarmStop(
            f"{alarms[0]}; near_dedup.alarms.action is fail, so no dataset is published "
            f"(the layers are committed: raise the limits or set action: warn and rerun to publish)"
        )
