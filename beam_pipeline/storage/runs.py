"""Where a run's metrics and report go: one folder per invocation, none overwritten.

The run id is deterministic (sha256 of the snapshot id and the config digest,
``docs/format.md``): a rerun of the same command has the same id. The first
invocation whose job finishes writes ``<root>/runs/<run_id>/`` (the run that
built the layers, so its timings are the build's); every later one writes
``<root>/runs/<run_id>/rerun-<N>/`` with N = 2, 3, ... (the smallest free one),
so a rerun that reuses every layer keeps its own few-second report next to the
report of the build that made the data.
"""

from __future__ import annotations

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.storage.layers import join

METRICS = "metrics.json"
RERUN_PREFIX = "rerun-"


def run_folder(root: str, run_id: str) -> str:
    """The folder this invocation writes its metrics and report to (chosen once, before the job)."""
    first = join(root, "runs", run_id)
    if not FileSystems.exists(join(first, METRICS)):
        return first
    number = 2
    while FileSystems.exists(join(first, f"{RERUN_PREFIX}{number}", METRICS)):
        number += 1
    return join(first, f"{RERUN_PREFIX}{number}")


def metrics_paths(root: str, reruns: bool = True) -> list[str]:
    """Every run's metrics.json under ``root``: the first runs, and the reruns unless ``reruns`` is False."""
    patterns = [join(root, "runs", "*", METRICS)]
    if reruns:
        patterns.append(join(root, "runs", "*", f"{RERUN_PREFIX}*", METRICS))
    return sorted(m.path for result in FileSystems.match(patterns) for m in result.metadata_list)


def root_of(metrics_path: str, run_id: str) -> str:
    """The output root of a run's ``metrics.json`` (``<root>/runs/<run_id>[/rerun-N]/metrics.json``)."""
    marker = f"/runs/{run_id}/"
    at = metrics_path.rfind(marker)
    if at < 0:
        return metrics_path.rsplit("/", 3)[0]
    return metrics_path[:at]
