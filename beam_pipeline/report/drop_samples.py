"""The report's dropped documents: a fixed sample per reason, and the dead letters.

Up to ``report.samples_per_reason`` dropped documents per ``<stage>:<reason>``
(any output with a ``reason`` column, and the ``repeats``) and per stage of
dead letters, each the lowest ``stable_hash64(seed, doc_id, ...)`` so the next
run of the same data shows the same ones; texts come from the documents layer
(:func:`beam_pipeline.report.run_layers.lookup_documents`). Used by
:func:`beam_pipeline.report.gather.gather` (and ``docs/report.md``, "Dropped
documents").
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter, defaultdict

import pyarrow.compute as pc

from beam_pipeline.records.hashing import stable_hash64
from beam_pipeline.report.run_layers import DROP_RECORD_OUTPUTS, Layout, lookup_documents

SAMPLE_TEXT_CHARS = 600


def sample_key(seed: int, *parts: str | int) -> int:
    """The deterministic sampling order: the lowest ``stable_hash64(seed, doc_id, ...)`` first."""
    return stable_hash64(seed, *parts)


def drop_samples(layout: Layout, seed: int, k: int) -> tuple[dict, dict]:
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
