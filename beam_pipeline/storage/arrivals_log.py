"""The arrivals log: one line per file that landed, committed in segments, read in one order.

An entry (one JSON object per line, keys sorted; docs/format.md)::

    {"source": "crawl", "path": "s3://deliveries/crawl/part-7.warc.gz", "size": 1048576,
     "mtime": 1717243261.0, "sha256": "9f86...", "object": "crawl/9f/9f86....warc.gz",
     "window_start": "2024-06-01T12:00:00Z", "window_end": "2024-06-01T12:05:00Z"}

``path`` is where the file was found, ``size`` and ``mtime`` the version
that landed, ``object`` the bronze object holding its bytes (relative to
``<root>/bronze``) and the window the landing job's window in which it
landed. The same bytes delivered under two names are two entries naming one
object; a file that changed after it landed is a second entry for the same
path naming another object.

The log is append-only: the landing job writes one segment per (window,
source) commit, named by the window's start and the digest of its lines, to
a temporary name first; a segment is never rewritten (a retried commit
writes the same name with the same bytes) and never deleted. Reading the log
lists every segment and sorts the entries into **log order**:
(window_end, source, path, mtime, sha256). An entry's **position** is its
index in that order, so ``snapshot --until N`` takes the first N arrivals.
Positions before the end of a committed window never move once every
window up to it has been committed: the landing job commits a window
shortly after it closed, and a restarted job lands what it finds in windows
after the restart.

An entry is identified by (source, path, size, mtime, sha256); the reader
counts an entry that appears twice (which only a runner replaying a commit
after a failover could write) and keeps its first copy.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import time
from typing import Iterable

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import canonical_json, sha256_bytes
from beam_pipeline.storage.bronze import arrivals_dir, parse_stamp, segment_name
from beam_pipeline.storage.layers import join, read_bytes, write_bytes_atomic

FIELDS = ("source", "path", "size", "mtime", "sha256", "object", "window_start", "window_end")


class ArrivalsLogError(ValueError):
    """A log position or cut-off that does not exist, or a damaged segment."""


def identity(entry: dict) -> tuple:
    """What makes an arrival one arrival: this version of this file, with these bytes."""
    return entry["source"], entry["path"], entry["size"], entry["mtime"], entry["sha256"]


def log_order(entry: dict) -> tuple:
    return (entry["window_end"], entry["source"], entry["path"], entry["mtime"], entry["sha256"])


def segment_bytes(entries: Iterable[dict]) -> bytes:
    """A segment's canonical bytes: its entries in log order, one canonical JSON object a line."""
    return b"".join(canonical_json({k: e[k] for k in FIELDS}) + b"\n" for e in sorted(entries, key=log_order))


def write_segment(output_root: str, source: str, window_start: float, entries: list[dict]) -> str | None:
    """Commit one (window, source) segment; returns its path (None for no entries).

    The name holds the digest of the bytes, so a retried commit of the same
    entries finds its segment already there and writes nothing.
    """
    if not entries:
        return None
    data = segment_bytes(entries)
    path = join(arrivals_dir(output_root), segment_name(window_start, source, sha256_bytes(data)))
    if not FileSystems.exists(path):
        write_bytes_atomic(path, data)
    return path


def segment_paths(output_root: str, pattern: str = "*.jsonl") -> list[str]:
    directory = arrivals_dir(output_root)
    if "://" not in directory and not FileSystems.exists(directory):
        return []
    return sorted(m.path for m in FileSystems.match([join(directory, pattern)])[0].metadata_list)


def read_segment(path: str) -> list[dict]:
    entries = []
    for number, line in enumerate(read_bytes(path).decode("utf-8").splitlines(), 1):
        if not line:
            continue
        try:
            entry = json.loads(line)
            missing = [k for k in FIELDS if k not in entry]
        except ValueError as err:
            raise ArrivalsLogError(f"{path}:{number}: not a JSON line: {err}") from None
        if missing:
            raise ArrivalsLogError(f"{path}:{number}: missing {', '.join(missing)}")
        entries.append(entry)
    return entries


@dataclasses.dataclass(frozen=True)
class ArrivalsLog:
    """Every committed arrival, in log order, each once."""

    entries: tuple[dict, ...]
    segments: int
    repeated: int  # entries found more than once (kept once); 0 unless a commit was replayed

    def __len__(self) -> int:
        return len(self.entries)

    def known_versions(self) -> dict[tuple[str, str], set[tuple[int, float]]]:
        """(source, path) -> the (size, mtime) versions that landed: what a restarted job skips."""
        known: dict[tuple[str, str], set[tuple[int, float]]] = collections.defaultdict(set)
        for entry in self.entries:
            known[(entry["source"], entry["path"])].add((entry["size"], entry["mtime"]))
        return dict(known)

    def until(self, cut: str | int) -> int:
        """The position a cut-off stands for: an int N (the first N arrivals) or an ISO-8601 time
        (every arrival whose window ended at or before it)."""
        if isinstance(cut, int) or (isinstance(cut, str) and cut.strip().isdigit()):
            position = int(cut)
            if position > len(self.entries):
                raise ArrivalsLogError(f"--until {position}: the arrivals log holds {len(self.entries)} arrivals")
            if position and parse_stamp(self.entries[position - 1]["window_end"]) > time.time():
                raise ArrivalsLogError(
                    f"--until {position}: arrival {position} is in the window ending "
                    f"{self.entries[position - 1]['window_end']}, which is still open (its order may change "
                    f"until it closes); cut at a closed window"
                )
            return position
        try:
            moment = parse_stamp(cut)
        except ValueError:
            raise ArrivalsLogError(
                f"--until {cut!r}: expected an arrivals-log position (an integer) or an "
                f"ISO-8601 time such as 2024-06-01T00:00:00Z"
            ) from None
        if moment > time.time():
            raise ArrivalsLogError(f"--until {cut}: that time is in the future; windows up to it are not committed yet")
        return sum(1 for e in self.entries if parse_stamp(e["window_end"]) <= moment)


def read_log(output_root: str) -> ArrivalsLog:
    """Read every segment of ``<root>/bronze/_arrivals`` into one log."""
    paths = segment_paths(output_root)
    seen: set[tuple] = set()
    entries, repeated = [], 0
    for path in paths:
        for entry in read_segment(path):
            key = identity(entry)
            if key in seen:
                repeated += 1
                continue
            seen.add(key)
            entries.append(entry)
    return ArrivalsLog(tuple(sorted(entries, key=log_order)), len(paths), repeated)


# --- summaries ------------------------------------------------------------------


@dataclasses.dataclass
class WindowSummary:
    """Arrivals of one source in one window."""

    source: str
    window_start: str
    window_end: str
    arrivals: int = 0
    new_objects: int = 0
    new_bytes: int = 0
    duplicates: int = 0  # arrivals whose bytes an earlier arrival (of this source) had landed
    changed_paths: list[str] = dataclasses.field(default_factory=list)  # landed before with other bytes


def summarize(entries: Iterable[dict], only: set[tuple] | None = None) -> list[WindowSummary]:
    """Per (source, window), in log order: objects and bytes landed, duplicates, changed files.

    Computed from the log alone (in log order, the first arrival of an object
    is the one that landed its bytes), so it is the same after a restart.
    ``only``: identities of the entries to count (e.g. one run's); the others
    still tell which objects and paths were there before.
    """
    seen_objects: set[str] = set()
    seen_paths: dict[tuple[str, str], str] = {}
    summaries: dict[tuple, WindowSummary] = {}
    for entry in sorted(entries, key=log_order):
        counted = only is None or identity(entry) in only
        key = (entry["window_end"], entry["source"], entry["window_start"])
        summary = summaries.get(key)
        if summary is None and counted:
            summary = summaries[key] = WindowSummary(entry["source"], entry["window_start"], entry["window_end"])
        new_object = entry["object"] not in seen_objects
        seen_objects.add(entry["object"])
        previous = seen_paths.get((entry["source"], entry["path"]))
        seen_paths[(entry["source"], entry["path"])] = entry["sha256"]
        if not counted:
            continue
        summary.arrivals += 1
        if new_object:
            summary.new_objects += 1
            summary.new_bytes += entry["size"]
        else:
            summary.duplicates += 1
        if previous is not None and previous != entry["sha256"]:
            summary.changed_paths.append(entry["path"])
    return list(summaries.values())


def summary_lines(entries: Iterable[dict], only: set[tuple] | None = None, *, positions: bool = False) -> list[str]:
    """``window  source  arrivals  objects  bytes  duplicates`` lines, plus a warning per changed file.

    ``positions`` (for a whole log): add the log position at the end of each line's arrivals.
    """
    summaries = summarize(entries, only)
    if not summaries:
        return ["no arrivals"]
    width = max(len("source"), *(len(s.source) for s in summaries))
    lines = [
        f"{'window (UTC)':<42} {'source':<{width}} {'arrivals':>8} {'objects':>8} {'bytes':>12} "
        f"{'duplicates':>10}" + (f" {'position':>9}" if positions else "")
    ]
    position = 0
    for s in summaries:
        position += s.arrivals
        lines.append(
            f"{s.window_start} .. {s.window_end} {s.source:<{width}} {s.arrivals:>8} {s.new_objects:>8} "
            f"{s.new_bytes:>12} {s.duplicates:>10}" + (f" {position:>9}" if positions else "")
        )
        for path in s.changed_paths:
            lines.append(f"  warning: {path} changed after it landed: its new bytes are a new object")
    return lines
