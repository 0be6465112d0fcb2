"""A bronze snapshot's arrivals, for the run report (docs/report.md, "Arrivals").

Self-contained: :func:`gather_arrivals` reads the snapshot manifest (and the
arrivals log, for the windows) of a run's snapshot; the report page
(:func:`beam_pipeline.report.html.arrivals_section`) renders it. A run whose
snapshot was taken from globs has no such section (``None`` / ``""``).
"""

from __future__ import annotations

import json

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.storage.arrivals_log import ArrivalsLogError, identity, read_log, summarize
from beam_pipeline.storage.layers import join, read_bytes


def gather_arrivals(root: str, snapshot_id: str) -> dict | None:
    """Per source and per window: the arrivals a bronze snapshot froze (None for a glob snapshot)."""
    path = join(root, "snapshots", f"{snapshot_id}.json")
    if not FileSystems.exists(path):
        return None
    manifest = json.loads(read_bytes(path))
    bronze = manifest.get("bronze")
    if bronze is None:
        return None
    sources = {}
    for name, source in manifest["sources"].items():
        files = [f for f in source["files"] if "origins" in f]
        if files:
            sources[name] = {
                "objects": len(files),
                "bytes": sum(f["size"] for f in files),
                "arrived_as": sum(len(f["origins"]) for f in files),
            }
    windows, note = [], None
    try:
        entries = read_log(root).entries
        mine = entries[bronze["since"] : bronze["until"]]
        windows = summarize(entries[: bronze["until"]], {identity(e) for e in mine if e["source"] in sources})
    except (ArrivalsLogError, OSError) as err:
        note = f"the arrivals log could not be read ({err}); totals are from the snapshot manifest"
    return {
        "since": bronze["since"],
        "until": bronze["until"],
        "until_window_end": bronze.get("until_window_end"),
        "sources": sources,
        "windows": windows,
        "note": note,
    }
