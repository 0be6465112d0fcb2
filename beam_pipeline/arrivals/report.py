"""A bronze snapshot's arrivals, for the run report (docs/report.md, "Arrivals").

Self-contained: :func:`gather_arrivals` reads the snapshot manifest (and the
arrivals log, for the windows) of a run's snapshot; :func:`arrivals_section`
renders it with the report's own helpers. A run whose snapshot was taken
from globs has no such section (both return ``None`` / ``""``).
"""
from __future__ import annotations

import json

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.arrivals.log import ArrivalsLogError, identity, read_log, summarize
from beam_pipeline.layers import join, read_bytes

#: Windows listed in the section at most (the latest); the totals count them all.
MAX_WINDOWS = 50


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
            sources[name] = {"objects": len(files), "bytes": sum(f["size"] for f in files),
                             "arrived_as": sum(len(f["origins"]) for f in files)}
    windows, note = [], None
    try:
        entries = read_log(root).entries
        mine = entries[bronze["since"]:bronze["until"]]
        windows = summarize(entries[:bronze["until"]], {identity(e) for e in mine if e["source"] in sources})
    except (ArrivalsLogError, OSError) as err:
        note = f"the arrivals log could not be read ({err}); totals are from the snapshot manifest"
    return {"since": bronze["since"], "until": bronze["until"], "until_window_end": bronze.get("until_window_end"),
            "sources": sources, "windows": windows, "note": note}


def arrivals_section(root: str, snapshot_id: str) -> str:
    """The report's "Arrivals" section for a run built from a bronze snapshot, else ``""``."""
    from beam_pipeline.report.html import esc, num, section, table

    info = gather_arrivals(root, snapshot_id)
    if info is None:
        return ""
    totals = table(["source", "bronze objects", "bytes", "paths they arrived as"],
                   [[esc(name), num(s["objects"]), num(s["bytes"]), num(s["arrived_as"])]
                    for name, s in sorted(info["sources"].items())], {1, 2, 3})
    shown = info["windows"][-MAX_WINDOWS:]
    rows = [[f"{esc(w.window_start)} – {esc(w.window_end)}", esc(w.source), num(w.arrivals), num(w.new_objects),
             num(w.new_bytes), num(w.duplicates), esc(", ".join(w.changed_paths)) or "–"] for w in shown]
    windows = table(["window (UTC)", "source", "arrivals", "new objects", "bytes", "duplicates skipped",
                     "changed after landing"], rows, {2, 3, 4, 5}) if rows else ""
    more = (f'<p class="lead">The latest {len(shown)} of {len(info["windows"])} windows.</p>'
            if len(info["windows"]) > len(shown) else "")
    note = f'<div class="note">{esc(info["note"])}</div>' if info["note"] else ""
    lead = (f"The snapshot froze arrivals {info['since'] + 1}–{info['until']} of the bronze arrivals log (the last "
            f"landed in the window ending {esc(info['until_window_end'])}). An object is read once however many "
            f"paths it arrived as; lineage names the object, the snapshot manifest its original paths.")
    return section("arrivals", "Arrivals (bronze snapshot)", lead, note + totals + more + windows)
