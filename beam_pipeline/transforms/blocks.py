"""Elements in blocks: what a DoFn hands the runner is one ``(group, block of items)`` per bundle and group.

A stage whose shuffle carries many small items (edges, signatures, annotation
rows) pays the runner's per-element cost (coding, the shuffle's bookkeeping)
once per item when it emits them one by one. Collected per group of the
shuffle's key and handed on at the end of the bundle (or when the bundle holds
``flush_at`` items), the runner moves one element per bundle and group; the
consumer's ``GroupByKey`` on the group then holds the same items as a
``GroupByKey`` on the item's own key would, in blocks. ``docs/decisions.md``
("LSH keys in blocks") has the measurements that made the stages move this way.
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue


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
        blocks = [(group, tuple(items)) for group, items in sorted(self._pending.items())]
        self._pending, self._size = {}, 0
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
