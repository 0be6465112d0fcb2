"""The partition-level task ledger: replay only the partitions a killed run did not finish.

A per-document stage (the scorers, select) computes partition ``i`` of its
layer from partition ``i`` of its inputs, in one task. When that task has
written its partition files it writes a *task record*,
``<layer>/_tasks/part-0000i-of-0000n.json``: the sidecars of what it wrote,
the counts it emitted and its dead letters. The layer itself is still
committed as a whole (its ledger is written last, by the commit step).

If the job dies before the commit, the next run of the same layer (same key:
same code, config and inputs) keeps every partition whose record is present
and whose files exist (:func:`clear_uncommitted`, instead of clearing the
whole layer), and its tasks replay those partitions from their records
(:meth:`TaskLedger.done`): the stored sidecars, counts and dead letters are
emitted as the task would emit them, without reading or scoring a document.
So the commit sees the same counts as a run that computed everything, and
the layer has the same bytes. The driver logs how many partitions it reused.
"""

from __future__ import annotations

import base64
import json

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.layers import Layer, join, part_name, read_bytes, write_json_atomic

TASKS = "_tasks"
RECORD_FORMAT = 1


def _encode(value):
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    return value


def _decode(value):
    if isinstance(value, dict) and set(value) == {"__bytes__"}:
        return base64.b64decode(value["__bytes__"])
    return value


class TaskLedger:
    """The task records of one layer (``layer_path``), for partitions of ``count``."""

    def __init__(self, layer_path: str, count: int):
        self.layer_path = layer_path
        self.count = count

    def path(self, index: int) -> str:
        return join(self.layer_path, TASKS, part_name(index, self.count).replace(".parquet", ".json"))

    def done(self, index: int) -> dict | None:
        """The record of partition ``index`` if its task finished (the record and every file it names exist)."""
        path = self.path(index)
        if not FileSystems.exists(path):
            return None
        record = json.loads(read_bytes(path))
        if record.get("format") != RECORD_FORMAT or not all(
            FileSystems.exists(f) for f in files_of(self.layer_path, record)
        ):
            return None
        return record

    def write(self, index: int, outputs: dict[str, dict], counts: dict, dead_letters: list[dict]) -> dict:
        """Record partition ``index`` as finished: call after its files are written. Returns the record
        (what the layer's commit reads: :data:`beam_pipeline.transforms.layer_io.TASK_RECORDS`)."""
        record = {
            "format": RECORD_FORMAT,
            "outputs": outputs,
            "counts": sorted([list(key) + [n] for key, n in counts.items()]),
            "dead_letter": [{k: _encode(v) for k, v in row.items()} for row in dead_letters],
        }
        write_json_atomic(self.path(index), record)
        return record


def files_of(layer_path: str, record: dict) -> list[str]:
    """The partition files (and their sidecars) a task record names."""
    return [
        path
        for output, sidecar in sorted(record["outputs"].items())
        for path in (
            join(layer_path, output, sidecar["name"]),
            join(layer_path, output, sidecar["name"] + ".meta.json"),
        )
    ]


def replayed_counts(record: dict) -> dict:
    return {tuple(entry[:3]): entry[3] for entry in record["counts"]}


def replayed_dead_letters(record: dict) -> list[dict]:
    return [{k: _decode(v) for k, v in row.items()} for row in record["dead_letter"]]


def finished_partitions(layer: Layer, count: int) -> int:
    """How many partitions of an uncommitted layer a killed run finished (their task records hold)."""
    ledger = TaskLedger(layer.path, count)
    return sum(ledger.done(i) is not None for i in range(count))


def clear_uncommitted(layer: Layer, count: int) -> int:
    """Delete what a killed or failed run of ``layer`` left, except the partitions its tasks finished
    (their files and records); return how many partitions are kept."""
    if layer.is_complete():
        raise ValueError(f"refusing to clear the committed layer {layer.path}")
    ledger = TaskLedger(layer.path, count)
    keep = set()
    finished = 0
    for index in range(count):
        record = ledger.done(index)
        if record is not None:
            finished += 1
            keep.update(files_of(layer.path, record))
            keep.add(ledger.path(index))
    patterns = [join(layer.path, "*"), join(layer.path, "*", "*"), join(layer.dead_letter_path, "*")]
    found = {m.path for result in FileSystems.match(patterns) for m in result.metadata_list}
    kept_folders = {path.rsplit("/", 1)[0] for path in keep}
    for path in sorted(found, key=lambda p: (-p.count("/"), p)):  # files before their local folders
        if path in keep or path.rstrip("/") in kept_folders or path.rstrip("/") == layer.path:
            continue
        try:
            FileSystems.delete([path])
        except BeamIOError:
            if FileSystems.exists(path):
                raise
    return finished


def discard_task_records(layer: Layer) -> None:
    """Forget the finished tasks of an uncommitted layer: after the runner lost or repeated records, a
    partition's files may not hold what its record counted, so a retry computes every partition again."""
    found = FileSystems.match([join(layer.path, TASKS, "*")])[0].metadata_list
    if found:
        FileSystems.delete([m.path for m in found])
