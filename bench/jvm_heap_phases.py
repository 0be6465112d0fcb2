#!/usr/bin/env python3
"""The Flink job server's Java heap per build phase, from its GC log: what the JVM holds, not what it has reserved.

The scale bench's "JVM peak" is the job server's resident memory. Under G1
(Java 17's default collector) that is mostly *committed* heap, and G1 commits
heap as the allocation rate asks for it (larger young generations, fewer
pauses), up to ``-Xmx``; it rarely gives it back. So a longer build with the
same live data can show a higher RSS. The GC log separates the two: every
pause line reads ``before->after(committed)``, and ``after`` bounds what was
still reachable (plus old-generation garbage not collected yet), so the peak
``after`` of a phase is an upper bound of its live heap. A *full* collection
(``Pause Full``: ``System.gc()``, or ``jcmd GC.class_histogram``, which the
scale bench's ``--jvm_live_seconds`` runs) leaves only what is reachable: its
``after`` is the live heap at that moment.

Phases are the scale bench's (``bench_scale.Phases``): the first stage in
build order not committed yet. Boundaries come from the build's own
``[stage] committed after Ns`` lines, whose clock starts when the job is
submitted, which is when the driver starts the job server: GC log uptimes are
on the same clock to within the JVM's start (under a second).

Usage (the bench writes both files when ``--runner flink``; with a GC log made by
``--beam_args='--job_server_jvm_properties=-Xlog:gc:file=<path>:time,uptime'``)::

    .venv/bin/python bench/jvm_heap_phases.py <build log> <gc log> [<build log> <gc log>]

prints a table per run, and with two runs the ratios of the second to the first.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_STAGE_LINE = re.compile(r"\[(\w+)\] (runs in this job|committed after ([\d.]+)s)")
#: ``[<time>][12.345s] GC(7) Pause Young (Normal) (G1 Evacuation Pause) 120M->30M(256M) 4.1ms``; a cause
#: may hold parentheses: ``Pause Full (System.gc())``
_PAUSE = re.compile(r"\[([\d.]+)s\] GC\(\d+\) (Pause [A-Za-z ]+?)(?: \((?:[^()]|\([^()]*\))*\))* (\d+)M->(\d+)M\((\d+)M\)")
START_PHASE, PUBLISH_PHASE = "_start", "_publish"


def stage_commits(build_log: str) -> tuple[list[str], dict[str, float]]:
    """(stages in build order, stage -> seconds from the job's start to its commit) from a build's output."""
    order: list[str] = []
    committed: dict[str, float] = {}
    for line in build_log.splitlines():
        match = _STAGE_LINE.search(line)
        if not match:
            continue
        stage, what, seconds = match.groups()
        if what == "runs in this job":
            if stage not in order:
                order.append(stage)
        else:
            committed.setdefault(stage, float(seconds))
    return order, committed


def phase_at(seconds: float, order: list[str], committed: dict[str, float]) -> str:
    """The phase at ``seconds`` after the job's start: the first stage in build order not committed yet."""
    for stage in order:
        if committed.get(stage, float("inf")) > seconds:
            return stage
    return PUBLISH_PHASE


def pauses(gc_log: str) -> list[dict]:
    """Every pause of a ``-Xlog:gc`` log that reports heap sizes: uptime seconds, kind, MiB before, after,
    committed."""
    out = []
    for line in gc_log.splitlines():
        match = _PAUSE.search(line)
        if match:
            uptime, kind, before, after, committed = match.groups()
            out.append({"seconds": float(uptime), "kind": kind.strip(), "before": int(before), "after": int(after),
                        "committed": int(committed)})
    return out


def heap_by_phase(build_log: str, gc_log: str) -> dict[str, dict]:
    """phase -> {pauses, after_peak_mib, committed_peak_mib, full_gcs}, in build order."""
    order, committed = stage_commits(build_log)
    phases: dict[str, dict] = {}
    for pause in pauses(gc_log):
        phase = phase_at(pause["seconds"], order, committed)
        entry = phases.setdefault(phase, {"pauses": 0, "after_peak_mib": 0, "committed_peak_mib": 0, "full_gcs": 0,
                                          "live_peak_mib": None})
        entry["pauses"] += 1
        entry["after_peak_mib"] = max(entry["after_peak_mib"], pause["after"])
        entry["committed_peak_mib"] = max(entry["committed_peak_mib"], pause["committed"])
        if pause["kind"].startswith("Pause Full"):  # everything unreachable collected: what is left is live
            entry["full_gcs"] += 1
            entry["live_peak_mib"] = max(entry["live_peak_mib"] or 0, pause["after"])
    rank = {stage: i for i, stage in enumerate([*order, PUBLISH_PHASE])}
    return dict(sorted(phases.items(), key=lambda item: rank.get(item[0], len(rank))))


def overall(phases: dict[str, dict]) -> dict:
    """The whole build's peaks over its phases."""
    lives = [p["live_peak_mib"] for p in phases.values() if p["live_peak_mib"] is not None]
    return {"after_peak_mib": max((p["after_peak_mib"] for p in phases.values()), default=0),
            "committed_peak_mib": max((p["committed_peak_mib"] for p in phases.values()), default=0),
            "live_peak_mib": max(lives) if lives else None,
            "pauses": sum(p["pauses"] for p in phases.values()),
            "full_gcs": sum(p["full_gcs"] for p in phases.values())}


def markdown(runs: list[tuple[str, dict[str, dict]]], order: list[str] | None = None) -> str:
    """A table of the runs' per-phase heap (peak after a full collection, the live heap, where one ran / peak
    after any pause / peak committed, MiB), with the last run's ratios to the first when there are two or more;
    rows in ``order`` (the phases in build order) when given."""
    phases = list(dict.fromkeys(phase for _, run in runs for phase in run))
    if order is not None:
        phases = [phase for phase in order if phase in phases] + [phase for phase in phases if phase not in order]
    header = ["phase"] + [f"{label}: live / after any pause / committed" for label, _ in runs]
    if len(runs) > 1:
        header += ["live ratio", "after any pause ratio", "committed ratio"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]

    def cell(entry):
        if entry is None:
            return "-"
        live = "-" if entry["live_peak_mib"] is None else f"{entry['live_peak_mib']:,}"
        return f"{live} / {entry['after_peak_mib']:,} / {entry['committed_peak_mib']:,}"

    def ratio(first, last, key):
        return "-" if not first or not last or not first[key] or not last[key] else f"{last[key] / first[key]:.2f}x"

    for phase in [*phases, "whole build"]:
        entries = [overall(run) if phase == "whole build" else run.get(phase) for _, run in runs]
        row = [phase if phase != "whole build" else "**whole build**"] + [cell(e) for e in entries]
        if len(runs) > 1:
            row += [ratio(entries[0], entries[-1], key) for key in ("live_peak_mib", "after_peak_mib",
                                                                     "committed_peak_mib")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", metavar="LOG",
                        help="pairs: a build's output (its [stage] lines), then its job server's GC log")
    args = parser.parse_args()
    if len(args.logs) % 2:
        parser.error("give the logs in pairs: <build log> <gc log> [<build log> <gc log> ...]")
    runs, order = [], []
    for build_log, gc_log in zip(args.logs[::2], args.logs[1::2]):
        text = Path(build_log).read_text()
        runs.append((Path(build_log).stem, heap_by_phase(text, Path(gc_log).read_text())))
        order += [stage for stage in stage_commits(text)[0] if stage not in order]
    print(markdown(runs, [START_PHASE, *order, PUBLISH_PHASE]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
