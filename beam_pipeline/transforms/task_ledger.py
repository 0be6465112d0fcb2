"""The partition-level task ledger: replay only the partitions a killed run did not finish.

A per-document stage (the scorers, select, the n-gram index) computes
partition ``i`` of its layer from partition ``i`` of its inputs, in one task.
When that task has written its partition files it writes a *task record*,
``<layer>/_tasks/part-0000i-of-0000n.json``: the sidecars of what it wrote,
the counts it emitted and its dead letters. The layer itself is still
committed as a whole (its ledger is written last, by the commit step).

If the job dies before the commit, the next run of the same layer (same key:
same code, config and inputs) keeps every task whose record is present
and whose files exist (:func:`clear_uncommitted`, instead of clearing the
whole layer), and its tasks replay those partitions from their records
(:meth:`TaskLedger.done`): the stored sidecars, counts and dead letters are
emitted as the task would emit them, without reading or scoring a document.
So the commit sees the same counts as a run that computed everything, and
the layer has the same bytes. The driver logs how many partitions it reused.

Stages that group across partitions through the runner's shuffles record the
per-partition (per-shard) step after their last shuffle; what comes before it
restarts (``docs/operations.md``, "Resuming, retries and faults", says what and
why per stage). When the job is built, the finished partitions are listed
(:func:`finished_partitions`, one listing of ``_tasks``); rows bound for them
are dropped before the shuffle that would deliver them (:func:`unfinished`),
and the finished indexes themselves, as elements, start their replay:

* ingest: the task of output partition ``i`` (after the ``CoGroupByKey`` on
  the partition) records its documents and repeats partitions and the counts
  of that step; reading the files restarts (every file feeds every partition);
* a layer output written from rows (:class:`~beam_pipeline.transforms.layer_io.WriteLayerOutput`:
  exact and near dedup's annotations, near dedup's cluster lists) records each
  written partition under its output's name,
  ``_tasks/<output>.part-0000i-of-0000n.json``, with no counts: the stage's
  counts come from the steps before the write, which run again;
* tokenize records each written shard, ``_tasks/shard.<name>.json``, naming
  its files (:func:`shard_files`).

Task records are bookkeeping of an uncommitted layer: nothing in a layer's
ledger, its outputs' digests or the dataset id reads them.
"""

from __future__ import annotations

import base64
import json
from typing import Iterable

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.storage.layers import Layer, join, part_name, read_bytes, write_json_atomic

TASKS = "_tasks"
RECORD_FORMAT = 1
#: The task name prefix of a tokenize shard's record.
SHARD_TASK = "shard."


def _encode(value):
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    return value


def _decode(value):
    if isinstance(value, dict) and set(value) == {"__bytes__"}:
        return base64.b64decode(value["__bytes__"])
    return value


class TaskLedger:
    """The task records of one layer (``layer_path``), for partitions of ``count``.

    ``output``: None for tasks that each write partition ``i`` of every output
    (their record is ``part-…``); an output's name for partitions of that
    output written on their own (``<output>.part-…``). Tasks that are not
    partitions (tokenize's shards) use :meth:`done_task` and :meth:`write_task`.
    """

    def __init__(self, layer_path: str, count: int, output: str | None = None):
        self.layer_path = layer_path
        self.count = count
        self.output = output

    def task(self, index: int) -> str:
        """The task name of partition ``index``."""
        name = part_name(index, self.count).removesuffix(".parquet")
        return f"{self.output}.{name}" if self.output else name

    def path(self, index: int) -> str:
        return self.record_path(self.task(index))

    def record_path(self, task: str) -> str:
        return join(self.layer_path, TASKS, f"{task}.json")

    def done(self, index: int) -> dict | None:
        """The record of partition ``index`` if its task finished (the record and every file it names exist)."""
        return self.done_task(self.task(index))

    def done_task(self, task: str) -> dict | None:
        """The record of ``task`` if it finished (the record and every file it names exist)."""
        return finished_record(self.layer_path, self.record_path(task))

    def write(self, index: int, outputs: dict[str, dict], counts: dict, dead_letters: list[dict]) -> dict:
        """Record partition ``index`` as finished: call after its files are written. Returns the record
        (what the layer's commit reads: :data:`beam_pipeline.transforms.layer_io.TASK_RECORDS`)."""
        return self.write_task(self.task(index), outputs, counts, dead_letters)

    def write_task(
        self,
        task: str,
        outputs: dict[str, dict],
        counts: dict | None = None,
        dead_letters: Iterable[dict] = (),
        files: Iterable[str] = (),
    ) -> dict:
        """Record ``task`` as finished: ``outputs`` (output -> sidecar of a partition it wrote), ``files``
        (other files it wrote, relative to the layer), its counts and dead letters."""
        record = {
            "format": RECORD_FORMAT,
            "outputs": outputs,
            "counts": sorted([list(key) + [n] for key, n in (counts or {}).items()]),
            "dead_letter": [{k: _encode(v) for k, v in row.items()} for row in dead_letters],
        }
        if files:
            record["files"] = sorted(files)
        write_json_atomic(self.record_path(task), record)
        return record


def finished_record(layer_path: str, path: str) -> dict | None:
    """The task record at ``path`` if it is one of this format and every file it names exists."""
    if not FileSystems.exists(path):
        return None
    record = json.loads(read_bytes(path))
    if record.get("format") != RECORD_FORMAT or not all(FileSystems.exists(f) for f in files_of(layer_path, record)):
        return None
    return record


def files_of(layer_path: str, record: dict) -> list[str]:
    """The partition files (and their sidecars) and other files a task record names."""
    return [
        path
        for output, sidecar in sorted(record["outputs"].items())
        for path in (
            join(layer_path, output, sidecar["name"]),
            join(layer_path, output, sidecar["name"] + ".meta.json"),
        )
    ] + [join(layer_path, name) for name in record.get("files", ())]


def shard_files(output: str, name: str) -> list[str]:
    """The files of tokenize shard ``name`` under the layer's ``output`` folder, relative to the layer."""
    return [f"{output}/{name}{suffix}" for suffix in (".bin", ".idx.parquet", ".meta.json")]


def replayed_counts(record: dict) -> dict:
    return {tuple(entry[:3]): entry[3] for entry in record["counts"]}


def replayed_dead_letters(record: dict) -> list[dict]:
    return [{k: _decode(v) for k, v in row.items()} for row in record["dead_letter"]]


def finished_tasks(layer_path: str, prefix: str = "") -> dict[str, dict]:
    """{task name: record} of the tasks (named ``prefix…``) an earlier run of the layer at ``layer_path``
    finished (record and files present). One listing of ``_tasks``: a layer no run started costs one call."""
    found = FileSystems.match([join(layer_path, TASKS, f"{prefix}*.json")])[0].metadata_list
    tasks = {}
    for path in sorted(m.path for m in found):
        record = finished_record(layer_path, path)
        if record is not None:
            tasks[path.rsplit("/", 1)[-1].removesuffix(".json")] = record
    return tasks


def finished_partitions(layer_path: str, count: int, output: str | None = None) -> list[int]:
    """The partitions of ``output`` (None: of every output, one task each) that a killed run of the
    uncommitted layer at ``layer_path`` finished (their task records hold)."""
    ledger = TaskLedger(layer_path, count, output)
    tasks = finished_tasks(layer_path, f"{output}.part-" if output else "part-")
    return [index for index in range(count) if ledger.task(index) in tasks]


def unfinished(keyed: tuple, finished: frozenset) -> bool:
    """Whether a ``(partition or shard, value)`` pair is bound for a partition (shard) not in ``finished``:
    what a rerun still has to move to its task (``beam.Filter(unfinished, finished)``)."""
    return keyed[0] not in finished


def finished_shards(layer_path: str) -> list[str]:
    """The names of the tokenize shards a killed run of the layer at ``layer_path`` wrote (their task
    records hold)."""
    return sorted(task[len(SHARD_TASK) :] for task in finished_tasks(layer_path, SHARD_TASK))


def reuse_summary(tasks: Iterable[str], count: int) -> list[str]:
    """What a rerun reuses, one phrase per kind of task: ``3 of 4 partitions``, ``2 of 4 annotations
    partitions``, ``5 shards``."""
    kinds: dict[str, int] = {}
    for task in tasks:
        kind = "shards" if task.startswith(SHARD_TASK) else task.rsplit("part-", 1)[0].rstrip(".")
        kinds[kind] = kinds.get(kind, 0) + 1
    return [
        f"{n} shards" if kind == "shards" else f"{n} of {count} {kind + ' ' if kind else ''}partitions"
        for kind, n in sorted(kinds.items())
    ]


def clear_uncommitted(layer: Layer) -> list[str]:
    """Delete what a killed or failed run of ``layer`` left, except what its tasks finished (their files
    and records); return the names of the finished tasks kept."""
    if layer.is_complete():
        raise ValueError(f"refusing to clear the committed layer {layer.path}")
    tasks = finished_tasks(layer.path)
    keep = {join(layer.path, TASKS, f"{task}.json") for task in tasks}
    for record in tasks.values():
        keep.update(files_of(layer.path, record))
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
    return sorted(tasks)


def discard_task_records(layer: Layer) -> None:
    """Forget the finished tasks of an uncommitted layer: after the runner lost or repeated records, a
    partition's files may not hold what its record counted, so a retry computes every partition again."""
    found = FileSystems.match([join(layer.path, TASKS, "*")])[0].metadata_list
    if found:
        FileSystems.delete([m.path for m in found])
