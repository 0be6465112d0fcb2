"""Finding a run from what the user points at.

``python -m beam_pipeline report X`` accepts any of

* ``<root>/runs/<run_id>`` or ``<root>/runs/<run_id>/metrics.json``;
* ``<root>/datasets/<dataset_id>`` or its ``manifest.json``;
* an output root: its latest run, the one whose metrics were written last
  (a first run ``runs/<run_id>`` or a rerun ``runs/<run_id>/rerun-N``:
  ``beam_pipeline/storage/runs.py``).

A what-if report (``--target_tokens``, ``--mixture``) is written next to the
run's own report, never over it: :func:`whatif_report_path`.

From a run's metrics the dataset is ``<root>/datasets/<dataset_id>``; from a
dataset the run is ``runs/<run_id>`` with ``run_id = sha256(snapshot id,
config digest)[:16]`` (``docs/format.md``): the first run, the one that
built it. A dataset whose run folder is gone
still gets a report: the stage counts then come from its manifest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import digest_json
from beam_pipeline.storage.layers import join, read_bytes
from beam_pipeline.storage.manifest import MANIFEST
from beam_pipeline.storage.runs import metrics_paths, root_of

METRICS = "metrics.json"
REPORT = "report.html"
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class ReportError(RuntimeError):
    """The report cannot be made: the message says what is missing and where."""


@dataclasses.dataclass
class RunRef:
    """Where one run's files are: the output root, its metrics and its dataset manifest."""

    root: str
    run_id: str
    metrics: dict | None
    manifest: dict
    manifest_path: str
    folder: str | None = (
        None  # the run's folder when it is a rerun's (runs/<run_id>/rerun-N; beam_pipeline/storage/runs.py)
    )

    @property
    def run_dir(self) -> str:
        return self.folder or join(self.root, "runs", self.run_id)

    @property
    def report_path(self) -> str:
        return join(self.run_dir, REPORT)

    @property
    def dataset_dir(self) -> str:
        return self.manifest_path.rsplit("/", 1)[0]


def run_id_of(snapshot_id: str, config_digest: str) -> str:
    """The run id a build gives (``beam_pipeline.build.corpus_build``): sha256(snapshot, config digest)[:16]."""
    return digest_json({"snapshot": snapshot_id, "config": config_digest})[:16]


def locate(target: str) -> RunRef:
    """Resolve a run folder, metrics file, dataset folder, manifest or output root."""
    path = _normalize(target)
    if path.endswith("/" + METRICS) or path == METRICS:
        return _from_metrics(path)
    if path.endswith("/" + MANIFEST) or path == MANIFEST:
        return _from_manifest(path)
    if _exists(join(path, METRICS)):
        return _from_metrics(join(path, METRICS))
    if _exists(join(path, MANIFEST)):
        return _from_manifest(join(path, MANIFEST))
    runs = _run_metrics(path)
    if runs:  # an output root: its latest run, first run or rerun
        return _from_metrics(max(runs, key=lambda m: (_modified(m), _rerun_number(m), m)))
    raise ReportError(
        f"{target}: not a run folder (runs/<run_id>), a metrics.json, a dataset folder "
        f"(datasets/<dataset_id>), a manifest.json, or an output root with a run"
    )


def _from_metrics(path: str) -> RunRef:
    if not _exists(path):
        raise ReportError(f"no run metrics at {path}")
    metrics = json.loads(read_bytes(path))
    run_dir = path.rsplit("/", 1)[0]
    root = root_of(path, metrics["run_id"])
    manifest_path = join(root, "datasets", metrics["dataset_id"], MANIFEST)
    if not _exists(manifest_path):
        raise ReportError(
            f"run {metrics['run_id']} names dataset {metrics['dataset_id']}, but {manifest_path} does not exist"
        )
    manifest = json.loads(read_bytes(manifest_path))
    return RunRef(
        root=root,
        run_id=metrics["run_id"],
        metrics=metrics,
        manifest=manifest,
        manifest_path=manifest_path,
        folder=run_dir,
    )


def _from_manifest(path: str) -> RunRef:
    if not _exists(path):
        raise ReportError(f"no dataset manifest at {path}")
    manifest = json.loads(read_bytes(path))
    root = path.rsplit("/", 3)[0]  # <root>/datasets/<id>/manifest.json
    run_id = run_id_of(manifest["snapshot_id"], manifest["config_digest"])
    metrics_path = join(root, "runs", run_id, METRICS)
    metrics = json.loads(read_bytes(metrics_path)) if _exists(metrics_path) else None
    if metrics is not None and metrics.get("dataset_id") != manifest["dataset_id"]:
        metrics = None  # the run folder was reused by a later build of other data
    return RunRef(root=root, run_id=run_id, metrics=metrics, manifest=manifest, manifest_path=path)


def _normalize(target: str) -> str:
    if _SCHEME.match(target):
        return target.rstrip("/")
    return os.path.abspath(target)


def _exists(path: str) -> bool:
    try:
        return FileSystems.exists(path)
    except Exception:  # noqa: BLE001 - an unknown scheme is simply "not there"
        return False


def _modified(path: str) -> float:
    try:
        return FileSystems.match([path])[0].metadata_list[0].last_updated_in_seconds
    except Exception:  # noqa: BLE001 - a store without modification times
        return 0.0


def whatif_report_path(ref: RunRef, report_config: dict) -> str:
    """Where a report with other ``report.*`` settings goes: ``report-whatif-<digest>.html`` in the run's
    folder, one file per set of settings (the run's ``report.html`` is never overwritten)."""
    return join(ref.run_dir, f"report-whatif-{digest_json(report_config)[:12]}.html")


def _rerun_number(metrics_path: str) -> int:
    match = re.search(r"/rerun-(\d+)/" + re.escape(METRICS) + "$", metrics_path)
    return int(match.group(1)) if match else 1


def _run_metrics(root: str) -> list[str]:
    """The metrics.json of every run (``runs/<run_id>/`` and its reruns) under an output root."""
    if not _SCHEME.match(root) and not os.path.isdir(join(root, "runs")):
        return []
    try:
        return metrics_paths(root)
    except Exception:  # noqa: BLE001 - a store that cannot list: no run found
        return []
