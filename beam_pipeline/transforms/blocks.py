"""Elements in blocks: what a DoFn hands the runner is one ``(group, block of items)`` per bundle and group.

A stage whose shuffle carries many small items (edges, signatures, annotation
rows) pays the runner's per-element cost (coding, the shuffle's bookkeeping)
once per item when it emits them one by one. Collected per group of the
shuffle's key and handed on at the end of the bundle (or when the bundle holds
``flush_at`` items), the runner moves one element per bundle and group; the
consumer's ``GroupByKey`` on the group then holds the same items as a
``GroupByKey`` on the item's own key would, in blocks. ``docs/decisions.md``
("LSH keys in blocks") has the measurements that made the stages move this way.

A block is one element of the runner's shuffle, and runners bound those: Flink's
batch sorter fails the job with ``Record too large`` when one element exceeds its
sort buffer, a share of the TaskManager's managed memory per grouping (the
near-dedup stage on 10^6 generated documents failed so on embedded Flink, with
blocks of ~2 MB; ``docs/decisions.md``, "Blocks of at most 1 MiB"). So a group's
items leave in pieces of at most :data:`BLOCK_BYTES` (estimated:
:func:`~beam_pipeline.transforms.bundle_budget.output_bytes`, the bundle budget's
estimate), however many a bundle holds.
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_pipeline.transforms.bundle_budget import output_bytes


class GroupBlocks:
    """Items collected per integer group, taken as ``(group, block of items)`` pairs in group order."""

    def __init__(self, flush_at: int):
        self._flush_at = flush_at
        self._pending: dict[int, list] = {}
        self._size = 0

    def add_to(self, group: int, item) -> None:
        found = self._pending.get(group)
        if found is None:
            self._pending[group] = [item]
        else:
            found.append(item)
        self._size += 1

    def full(self) -> bool:
        return self._size >= self._flush_at

    def take(self) -> list[tuple[int, tuple]]:
        """The items as ``(group, block)`` pairs in group order, a group's in pieces of at most
        :data:`BLOCK_BYTES` (:func:`pieces`)."""
        blocks = [(group, piece) for group, items in sorted(self._pending.items()) for piece in pieces(items)]
        self._pending, self._size = {}, 0
        return blocks


#: The most bytes one block carries (estimated by ``output_bytes``; one item larger than this
#: travels alone): 1 MiB, as ingest's slices (``ingest.slice_bytes``), well inside the sort buffers of a
#: TaskManager whose managed memory is shared by a build's ~100 groupings.
BLOCK_BYTES = 1 << 20


def pieces(items: list, limit: int | None = None) -> list[tuple]:
    """``items`` as consecutive blocks of at most ``limit`` (:data:`BLOCK_BYTES`) estimated bytes (an item
    larger than that alone); one block when they fit."""
    if not items:
        return []
    limit = BLOCK_BYTES if limit is None else limit
    blocks, start, size = [], 0, 0
    for i, item in enumerate(items):
        item_bytes = output_bytes(item)
        if size + item_bytes > limit and i > start:
            blocks.append(tuple(items[start:i]))
            start, size = i, 0
        size += item_bytes
    blocks.append(tuple(items[start:]))
    return blocks


def windowed(element) -> WindowedValue:
    """An element emitted from ``finish_bundle`` (which has no input element's window to inherit)."""
    return WindowedValue(element, MIN_TIMESTAMP, (GlobalWindow(),))


class BlocksFn(beam.DoFn):
    """A DoFn that collects its output in ``self._out`` (made by :meth:`new_blocks` per bundle: a
    :class:`GroupBlocks` of ``flush_at`` items) and hands the blocks on at the end of each bundle, or
    earlier when they are full (``_flush_if_full``)."""

    def __init__(self, flush_at: int):
        super().__init__()
        self._flush_at = flush_at

    def new_blocks(self) -> GroupBlocks:
        return GroupBlocks(self._flush_at)

    def start_bundle(self):
        self._out = self.new_blocks()

    def _flush_if_full(self) -> Iterator:
        if self._out.full():
            yield from self._out.take()

    def finish_bundle(self):
        for block in self._out.take():
            yield windowed(block)
