"""``python -m beam_pipeline bronze gc``: delete the bronze objects no kept snapshot needs.

Bronze only grows; snapshots say which objects a build can still ask for.
``plan_gc`` sorts every object under ``<root>/bronze/<source>/`` into:

* **referenced**: listed by a kept bronze snapshot (``--keep``: snapshot ids,
  or a count N for the N with the latest cut-offs);
* **pending**: named by an arrival after the latest cut-off any bronze
  snapshot took (whether kept or not): no snapshot has offered it yet, so the
  next one will want it;
* **young orphans**: named by no arrival and younger than ``min_age_seconds``:
  a running landing job copied it and commits its window soon;
* **garbage**: everything else: objects whose arrivals were all before a
  cut-off and that no kept snapshot lists, and old orphans (copied by a job
  that was killed before its window committed, and never landed again).

Only garbage is deleted, and only with ``apply`` (the default is a dry run).
The arrivals log is never touched; a snapshot that was not kept may name
deleted objects, and ``snapshot --from-bronze`` over a cut-off whose objects
are gone stops with the list of what is missing.
"""

from __future__ import annotations

import dataclasses
import json
import time

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.sources.snapshot import SnapshotError, snapshot_id_of
from beam_pipeline.storage.arrivals_log import read_log
from beam_pipeline.storage.bronze import ARRIVALS, TMP, bronze_root, object_path
from beam_pipeline.storage.layers import join, read_bytes


@dataclasses.dataclass(frozen=True)
class GcPlan:
    kept: tuple[str, ...]  # snapshot ids kept
    dropped: tuple[str, ...]  # bronze snapshots not kept (their objects may go)
    referenced: tuple[str, ...]
    pending: tuple[str, ...]
    young_orphans: tuple[str, ...]
    garbage: tuple[tuple[str, int], ...]  # (object path, bytes)

    @property
    def garbage_bytes(self) -> int:
        return sum(size for _, size in self.garbage)


def bronze_snapshots(output_root: str) -> dict[str, dict]:
    """Snapshot id -> manifest, for every bronze snapshot under ``<root>/snapshots``."""
    found = {}
    for metadata in FileSystems.match([join(output_root, "snapshots", "*.json")])[0].metadata_list:
        manifest = json.loads(read_bytes(metadata.path))
        snapshot_id = metadata.path.rsplit("/", 1)[-1][: -len(".json")]
        if "bronze" in manifest and snapshot_id_of(manifest) == snapshot_id:
            found[snapshot_id] = manifest
    return found


def choose_kept(snapshots: dict[str, dict], keep: str) -> list[str]:
    """``keep``: a count N (the N bronze snapshots with the latest cut-offs) or snapshot ids (comma- or
    space-separated)."""
    keep = keep.strip()
    if keep.isdigit():
        order = sorted(snapshots, key=lambda i: (snapshots[i]["bronze"]["until"], i), reverse=True)
        return order[: int(keep)]
    wanted = [i for i in keep.replace(",", " ").split() if i]
    unknown = [i for i in wanted if i not in snapshots]
    if unknown:
        raise SnapshotError(
            f"--keep: not bronze snapshots of this root: {', '.join(unknown)} "
            f"(bronze snapshots: {', '.join(sorted(snapshots)) or 'none'})"
        )
    return wanted


def list_objects(output_root: str) -> dict[str, tuple[int, float]]:
    """Every bronze object: path -> (bytes, modification time)."""
    found = {}
    for metadata in FileSystems.match([join(bronze_root(output_root), "*", "*", "*")])[0].metadata_list:
        top = metadata.path[len(bronze_root(output_root)) + 1 :].split("/", 1)[0]
        if top in (ARRIVALS, TMP):
            continue
        found[metadata.path] = (metadata.size_in_bytes, metadata.last_updated_in_seconds or 0.0)
    return found


def plan_gc(output_root: str, keep: str, *, min_age_seconds: float = 86400.0) -> GcPlan:
    snapshots = bronze_snapshots(output_root)
    kept = choose_kept(snapshots, keep)
    referenced = {
        f["path"]
        for i in kept
        for source in snapshots[i]["sources"].values()
        for f in source["files"]
        if "origins" in f
    }
    horizon = max((m["bronze"]["until"] for m in snapshots.values()), default=0)
    log = read_log(output_root)
    pending = {object_path(output_root, e["object"]) for e in log.entries[horizon:]}
    logged = {object_path(output_root, e["object"]) for e in log.entries}
    now = time.time()
    objects = list_objects(output_root)
    young, garbage = [], []
    for path, (size, mtime) in sorted(objects.items()):
        if path in referenced or path in pending:
            continue
        if path not in logged and now - mtime < min_age_seconds:
            young.append(path)
            continue
        garbage.append((path, size))
    return GcPlan(
        tuple(kept),
        tuple(sorted(set(snapshots) - set(kept))),
        tuple(sorted(p for p in objects if p in referenced)),
        tuple(sorted(p for p in objects if p in pending and p not in referenced)),
        tuple(young),
        tuple(garbage),
    )


def apply_gc(plan: GcPlan, batch: int = 1000) -> int:
    """Delete the plan's garbage; returns the objects deleted."""
    paths = [path for path, _ in plan.garbage]
    for i in range(0, len(paths), batch):
        FileSystems.delete(paths[i : i + batch])
    return len(paths)


def plan_lines(plan: GcPlan, *, applied: bool, verbose: bool = True) -> list[str]:
    lines = [
        f"kept snapshots     {', '.join(plan.kept) or 'none'}",
        f"not kept           {', '.join(plan.dropped) or 'none'}",
        f"referenced         {len(plan.referenced)} objects (listed by a kept snapshot)",
        f"pending            {len(plan.pending)} objects (arrived after the latest snapshot's cut-off)",
        f"young orphans      {len(plan.young_orphans)} objects (in no arrival yet; a landing job may be "
        f"committing them)",
        f"{'deleted' if applied else 'to delete'}{' ' * (19 - len('deleted' if applied else 'to delete'))}"
        f"{len(plan.garbage)} objects, {plan.garbage_bytes} bytes",
    ]
    if verbose:
        lines += [f"  {path}  {size}" for path, size in plan.garbage]
    if not applied and plan.garbage:
        lines.append("dry run: nothing was deleted; add --apply to delete these objects")
    return lines
