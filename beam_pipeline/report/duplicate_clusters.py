"""The report's duplicate clusters: cluster sizes, and the largest clusters with their members.

From the ``duplicate_count`` of exact dedup and the ``cluster_id`` /
``cluster_size`` of near dedup (:func:`clusters`); the largest clusters,
those of different texts first, with member texts from the documents layer
(:func:`top_clusters`). Used by :func:`beam_pipeline.report.gather.gather`
(and ``docs/report.md``, "Duplicate clusters"; docs/near_dedup.md).
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.report.run_layers import Layout, Output, joined_by_doc_id, lookup_documents

CLUSTER_SIZE_COLUMNS = ("cluster_size", "duplicate_count")
CLUSTER_KEY_COLUMNS = ("cluster_id", "content_hash")
CLUSTER_TEXT_CHARS = 700
TOP_CLUSTERS = 5
CLUSTER_MEMBERS_SHOWN = 6


def clusters(layout: Layout) -> list[dict]:
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


def top_clusters(layout: Layout, found: list[dict]) -> list[dict]:
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


def _near_only_clusters(output: Output, docs: Output, size: str | None) -> tuple[dict[str, int], dict[str, int]]:
    """The largest clusters, those whose members are not all exact copies first ({id: size}, {id: texts}).

    Exact copies are already shown by exact dedup; what a person must judge
    are clusters of *different* texts. Distinct texts are counted up to 2 per
    cluster from the documents' ``content_hash`` (joined partition by partition).
    """
    sizes: dict[str, int] = {}
    first_hash: dict[str, str] = {}
    differs: set[str] = set()
    columns = ["doc_id", "cluster_id"] + ([size] if size else [])
    for table in joined_by_doc_id(output, columns, docs, ["doc_id", "content_hash"]):
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
