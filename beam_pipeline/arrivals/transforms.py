"""The landing job's transforms: watch a landing prefix, land complete files, commit the log.

One chain per source with a ``landing:`` section (docs/operations.md)::

    streaming:  MatchContinuously(landing uri, every poll_interval)   Beam's own continuous matching
                  -> stamp each listing with the time it was made
                  -> StabilityGate   keyed by (source, path): when is a file complete (stability.py)
    --once:     PollNow            stable_polls listings now, the same fold, in one task
                  -> LandObjects     copy to a temporary name while hashing, then commit the object
                                     (the gate's "still waiting" statuses pass through untouched)
                  -> CommitArrivals  FixedWindows(window_seconds) -> GroupIntoBatches per source
                                     -> one log segment per (window, source), and its progress line

Nothing here needs the runner to checkpoint: a restarted job reads the
arrivals log, so what was committed is never landed again, and what was
copied but not committed (the window it was in never closed) is landed again
into the same content-addressed object and committed then. A kill at any
moment loses no arrival and writes none twice.

The log is committed through ``GroupIntoBatches`` (Beam's state-and-timer
batching), not a ``GroupByKey``: the FnApiRunner behind the local
DirectRunner hands a ``GroupByKey``'s output downstream only when the whole
(unbounded) input is done, while state and timers run as the job goes; on
Flink and Dataflow a window's batch is flushed when the watermark passes the
window's end. The statuses travel in the same stream as the landing
requests and share that one batching step: on the FnApiRunner (Beam 2.77) a
``Flatten`` of the two would hold everything after it until the job ends, and
a fused stage holding two ``GroupIntoBatches`` fails to decode its timers.
The gate itself sets no timer: on Flink 1.19 with the 2.62 job server, a
timer in the gate held the watermark of everything after it until the job
ended (docs/decisions.md, "Arrivals: a bronze landing layer").
"""

from __future__ import annotations

import hashlib
import logging
import time
import typing
import uuid
from typing import Iterator

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms import userstate
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from beam_pipeline.arrivals.stability import (
    LAND,
    WAIT,
    Observation,
    PathState,
    is_marker,
    observe,
    replaced_versions,
    stable_versions,
)
from beam_pipeline.config.landing import LandingConfig
from beam_pipeline.storage.arrivals_log import identity, read_log, read_segment, segment_paths, write_segment
from beam_pipeline.storage.bronze import extension_of, object_key, object_path, segment_pattern, tmp_dir, window_stamp
from beam_pipeline.storage.layers import join, move

LOG = logging.getLogger("beam_pipeline.land")
NAMESPACE = "land"
#: Arrivals per log segment at most (a window with more is committed in several segments).
COMMIT_BATCH = 20_000
#: A listing counts as another poll of an unchanged file only this share of the poll interval after the last.
MIN_SPACING = 0.5
_CHUNK = 1 << 20

Key = tuple[str, str]


def landing_uri(source) -> str:
    """The glob a source's files arrive under: ``landing.uri``, else the source's ``uri``."""
    return source.landing.uri or source.uri


class LandContinuously(beam.PTransform):
    """PBegin -> the log segments it commits: the streaming landing of one source (module docstring).

    ``stop_after``: seconds after ``start`` when polling stops (the job then
    commits its last windows and ends); None polls forever.
    """

    def __init__(
        self,
        output_root: str,
        source: str,
        landing: LandingConfig,
        uri: str,
        *,
        start: float,
        stop_after: float | None = None,
    ):
        super().__init__()
        self._root, self._source, self._landing, self._uri = output_root, source, landing, uri
        self._start = Timestamp.of(start)
        self._stop = MAX_TIMESTAMP if stop_after is None else Timestamp.of(start + stop_after)

    def expand(self, pbegin):
        interval = self._landing.poll_interval_seconds
        gated = (
            pbegin
            | "MatchContinuously"
            >> fileio.MatchContinuously(
                self._uri,
                interval=interval,
                has_deduplication=False,
                start_timestamp=self._start,
                stop_timestamp=self._stop,
            )
            | "StampListing"
            >> beam.Map(observation_of, self._source, self._landing.marker_suffix).with_output_types(
                tuple[Key, typing.Any]
            )
            | "DropMarkers" >> beam.Filter(lambda kv: kv[1] is not None)
            | "StabilityGate" >> beam.ParDo(StabilityGateFn(self._root, self._source, self._landing))
        )
        return (
            gated
            | "LandObjects" >> LandObjects(self._root)
            | "CommitArrivals" >> CommitArrivals(self._root, self._source, self._landing.window_seconds)
        )


class LandNow(beam.PTransform):
    """PBegin -> the log segments it commits: ``land --once`` for one source: what is complete now
    lands, then the job ends.

    ``stable_polls`` listings ``poll_interval_seconds`` apart (one with a
    marker) decide, through the same fold as the streaming gate; a file that
    is still changing is reported as waiting and left for the next run.
    """

    def __init__(self, output_root: str, source: str, landing: LandingConfig, uri: str):
        super().__init__()
        self._root, self._source, self._landing, self._uri = output_root, source, landing, uri

    def expand(self, pbegin):
        return (
            pbegin
            | "Source" >> beam.Create([self._source])
            | "PollNow" >> beam.ParDo(PollNowFn(self._root, self._landing, self._uri))
            | "SpreadCopies" >> beam.Reshuffle()
            | "LandObjects" >> LandObjects(self._root)
            | "CommitArrivals" >> CommitArrivals(self._root, self._source, self._landing.window_seconds)
        )


class LandObjects(beam.PTransform):
    """Landing requests -> arrivals (request + sha256 + object), each copied into bronze once; the
    gate's statuses pass through."""

    def __init__(self, output_root: str):
        super().__init__()
        self._root = output_root

    def expand(self, requests):
        return requests | "CopyHashCommit" >> beam.ParDo(LandObjectFn(self._root))


class CommitArrivals(beam.PTransform):
    """Arrivals and statuses -> segment paths: one arrivals-log segment per (window, source), committed
    when the window closes, and a progress line per commit (with the files still waiting)."""

    def __init__(self, output_root: str, source: str, window_seconds: int):
        super().__init__()
        self._root, self._source, self._window_seconds = output_root, source, window_seconds

    def expand(self, arrivals_and_statuses):
        return (
            arrivals_and_statuses
            | "IntoWindows" >> beam.WindowInto(FixedWindows(self._window_seconds))
            | "BySource"
            >> beam.Map(lambda arrival: (arrival["source"], arrival)).with_output_types(tuple[str, typing.Any])
            | "BatchPerWindow" >> beam.GroupIntoBatches(COMMIT_BATCH)
            | "WriteSegment" >> beam.ParDo(CommitSegmentFn(self._root))
        )


# --- DoFns -------------------------------------------------------------------------


def observation_of(metadata, source: str, marker_suffix: str | None) -> tuple[Key, dict | None]:
    """A matched file -> ((source, path), what this listing saw); marker files -> None (dropped)."""
    if is_marker(metadata.path, marker_suffix):
        return (source, metadata.path), None
    return (source, metadata.path), {
        "listed_at": time.time(),
        "size": int(metadata.size_in_bytes),
        "mtime": float(metadata.last_updated_in_seconds or 0.0),
    }


class StabilityGateFn(beam.DoFn):
    """((source, path), observation) -> a landing request when the file is complete, a ``wait`` status
    while it is not.

    Keeps a :class:`~beam_pipeline.arrivals.stability.PathState` per path in
    Beam state and folds each listing into it (:func:`~.stability.observe`);
    the versions the arrivals log already holds are read in ``setup()``, so a
    restarted job skips what it committed before. A request keeps the poll's
    timestamp, which puts the arrival in the window it landed in.
    """

    PATH_STATE = userstate.ReadModifyWriteStateSpec("path", StrUtf8Coder())

    def __init__(self, output_root: str, source: str, landing: LandingConfig):
        self._root, self._source, self._landing = output_root, source, landing

    def setup(self):
        known = read_log(self._root).known_versions()
        self._known = {
            path: frozenset(versions) for (source, path), versions in known.items() if source == self._source
        }
        self._waiting = Metrics.counter(NAMESPACE, "waiting_polls")

    def process(self, element, path_state=beam.DoFn.StateParam(PATH_STATE)) -> Iterator:
        (source, path), seen = element
        state = PathState.from_json(path_state.read())
        known = self._known.get(path, frozenset())
        version = (seen["size"], seen["mtime"])
        marker = False
        if self._landing.marker_suffix and version not in known and version != state.landed:
            marker = FileSystems.exists(path + self._landing.marker_suffix)
        observation = Observation(seen["listed_at"], seen["size"], seen["mtime"], marker)
        new_state, decision = observe(
            state,
            observation,
            stable_polls=self._landing.stable_polls,
            marker_mode=self._landing.marker_suffix is not None,
            known=known,
            min_spacing=MIN_SPACING * self._landing.poll_interval_seconds,
        )
        if new_state != state:
            path_state.write(new_state.to_json())
        if decision == WAIT:
            self._waiting.inc()
            yield waiting_status(source, path, observation, new_state.polls, self._landing)
        if decision == LAND:
            yield landing_request(source, path, version, replaced_versions(state, known, version))


class PollNowFn(beam.DoFn):
    """A source name -> its landing requests now and ``wait`` statuses, for ``land --once``."""

    def __init__(self, output_root: str, landing: LandingConfig, uri: str):
        self._root, self._landing, self._uri = output_root, landing, uri

    def process(self, source: str) -> Iterator:
        known = read_log(self._root).known_versions()
        marker_mode = self._landing.marker_suffix is not None
        polls = 1 if marker_mode else self._landing.stable_polls
        seen: dict[str, list[Observation]] = {}
        for poll in range(polls):
            if poll:
                time.sleep(self._landing.poll_interval_seconds)
            for metadata in FileSystems.match([self._uri])[0].metadata_list:
                path = metadata.path
                if is_marker(path, self._landing.marker_suffix):
                    continue
                marker = marker_mode and FileSystems.exists(path + self._landing.marker_suffix)
                seen.setdefault(path, []).append(
                    Observation(
                        time.time(), int(metadata.size_in_bytes), float(metadata.last_updated_in_seconds or 0.0), marker
                    )
                )
        landed_at = time.time()
        for path in sorted(seen):
            versions = frozenset(known.get((source, path), ()))
            to_land, decision, polls_seen = stable_versions(
                seen[path],
                stable_polls=self._landing.stable_polls,
                marker_mode=marker_mode,
                known=versions,
                min_spacing=MIN_SPACING * self._landing.poll_interval_seconds,
            )
            if decision == WAIT:
                yield TimestampedValue(
                    waiting_status(source, path, seen[path][-1], polls_seen, self._landing), landed_at
                )
            for version in to_land:
                yield TimestampedValue(
                    landing_request(source, path, version, sorted(v for v in versions if v != version)), landed_at
                )


def waiting_status(source: str, path: str, seen: Observation, polls: int, landing: LandingConfig) -> dict:
    """A file that is not complete yet, as one poll saw it (for the progress line of its window)."""
    return {
        "kind": WAIT,
        "source": source,
        "path": path,
        "listed_at": seen.poll,
        "size": seen.size,
        "polls": polls,
        "needed": None if landing.marker_suffix else landing.stable_polls,
    }


def landing_request(source: str, path: str, version: tuple[int, float], replaced: list) -> dict:
    if replaced:
        LOG.warning(
            "[land] %s: %s changed after it landed (size, mtime %s -> %s): its new bytes land as a new "
            "object; the old object stays",
            source,
            path,
            replaced[-1],
            version,
        )
    return {
        "kind": LAND,
        "source": source,
        "path": path,
        "size": version[0],
        "mtime": version[1],
        "extension": extension_of(path),
        "replaces": [list(v) for v in replaced],
    }


class LandObjectFn(beam.DoFn):
    """A landing request -> its arrival: the file copied into bronze under the sha256 of its bytes.

    The bytes go to ``<root>/bronze/_tmp/<uuid>`` while they are hashed; the
    copy counts only if the file still has the requested size and
    modification time afterwards (else it changed while landing: the copy is
    deleted, and the gate sees the new version at its next polls). Then the
    temporary file is renamed to its object name, unless that object exists
    (the same bytes landed before: the copy is deleted, the object is never
    overwritten). Two workers landing the same bytes at once both rename
    identical bytes onto one name.
    """

    def __init__(self, output_root: str):
        self._root = output_root

    def setup(self):
        self._objects = Metrics.counter(NAMESPACE, "objects")
        self._bytes = Metrics.counter(NAMESPACE, "bytes")
        self._duplicates = Metrics.counter(NAMESPACE, "duplicates")
        self._changed = Metrics.counter(NAMESPACE, "changed_while_landing")

    def process(self, request: dict) -> Iterator[dict]:
        if request["kind"] != LAND:
            yield request  # a status, on its way to its window's progress line
            return
        arrival = land_file(self._root, request)
        if arrival is None:
            self._changed.inc()
            LOG.warning(
                "[land] %s: %s changed while it was copied; it lands once it is stable again",
                request["source"],
                request["path"],
            )
            return
        if arrival["created"]:
            self._objects.inc()
            self._bytes.inc(arrival["size"])
        else:
            self._duplicates.inc()
        yield arrival


def land_file(output_root: str, request: dict) -> dict | None:
    """Copy one file version into bronze; its arrival, or None if the file changed (or went away)
    meanwhile. Any other error is raised: the runner retries the bundle, the gate's decision with it."""
    path, size, mtime = request["path"], request["size"], request["mtime"]
    tmp = join(tmp_dir(output_root), uuid.uuid4().hex)
    digest, copied = hashlib.sha256(), 0
    try:
        try:
            with (
                FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as src,
                FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as dst,
            ):
                for chunk in iter(lambda: src.read(_CHUNK), b""):
                    digest.update(chunk)
                    dst.write(chunk)
                    copied += len(chunk)
        except Exception:  # noqa: BLE001 - a file moved away by its producer is no error; anything else is
            if FileSystems.match([path])[0].metadata_list:
                raise
            copied = -1
        now = FileSystems.match([path])[0].metadata_list
        if (
            copied != size
            or not now
            or (now[0].size_in_bytes, float(now[0].last_updated_in_seconds or 0.0)) != (size, mtime)
        ):
            _discard(tmp)
            return None
        sha256 = digest.hexdigest()
        key = object_key(request["source"], sha256, request["extension"])
        target = object_path(output_root, key)
        existing = FileSystems.match([target])[0].metadata_list
        if existing:
            if existing[0].size_in_bytes != size:
                raise OSError(
                    f"bronze object {target} has {existing[0].size_in_bytes} bytes, its name says "
                    f"{size}: the bronze layer was altered"
                )
            _discard(tmp)
            created = False
        else:
            move(tmp, target)
            created = True
    except BaseException:
        _discard(tmp)
        raise
    return {
        "kind": LAND,
        "source": request["source"],
        "path": path,
        "size": size,
        "mtime": mtime,
        "sha256": sha256,
        "object": key,
        "created": created,
        "replaces": request.get("replaces", []),
    }


def _discard(tmp: str) -> None:
    if FileSystems.exists(tmp):
        FileSystems.delete([tmp])


class CommitSegmentFn(beam.DoFn):
    """(source, arrivals and statuses of one window) -> the window's log segment, written; prints a progress line.

    Leaves out arrivals a segment of the same window and source already holds
    (a runner that restores state from a checkpoint and replays the window),
    so the log names each arrival once.
    """

    def __init__(self, output_root: str):
        self._root = output_root

    def process(self, batch, window=beam.DoFn.WindowParam) -> Iterator[str]:
        source, items = batch
        start, end = float(window.start), float(window.end)
        arrivals = [item for item in items if item["kind"] == LAND]
        segment = None
        if arrivals:
            entries = [
                {
                    "source": a["source"],
                    "path": a["path"],
                    "size": a["size"],
                    "mtime": a["mtime"],
                    "sha256": a["sha256"],
                    "object": a["object"],
                    "window_start": window_stamp(start),
                    "window_end": window_stamp(end),
                }
                for a in arrivals
            ]
            committed = {
                identity(e) for p in segment_paths(self._root, segment_pattern(start, source)) for e in read_segment(p)
            }
            fresh = {identity(e): e for e in entries if identity(e) not in committed}
            segment = write_segment(self._root, source, start, list(fresh.values()))
        print(progress_line(source, start, end, arrivals, waiting_now(items), segment), flush=True)
        for arrival in arrivals:
            if arrival["replaces"]:
                print(
                    f"[land] warning: {source}: {arrival['path']} changed after it landed; its new bytes are "
                    f"object {arrival['object']} (the old object stays)",
                    flush=True,
                )
        if segment is not None:
            yield segment


def waiting_now(items: list[dict]) -> list[dict]:
    """The files still waiting at their latest listing in this batch (a file that landed later is not)."""
    latest: dict[str, dict] = {}
    for item in items:
        if item["kind"] == WAIT and item["listed_at"] >= latest.get(item["path"], {"listed_at": -1.0})["listed_at"]:
            latest[item["path"]] = item
    landed = {item["path"] for item in items if item["kind"] == LAND}
    return [latest[path] for path in sorted(latest) if path not in landed]


def progress_line(
    source: str, start: float, end: float, arrivals: list[dict], waiting: list[dict], segment: str | None
) -> str:
    """``[land] window 12:00:00Z..12:05:00Z crawl: 3 arrivals, 2 new objects (1234 bytes), 1 duplicate
    skipped, 1 waiting to become stable (part-9.warc.gz 1/2 polls) -> <segment>``."""
    created = [a for a in arrivals if a["created"]]
    shown = ", ".join(
        f"{w['path'].rsplit('/', 1)[-1]} "
        f"({str(w['polls']) + '/' + str(w['needed']) + ' polls' if w['needed'] else 'no marker yet'})"
        for w in waiting[:5]
    ) + (", ..." if len(waiting) > 5 else "")
    line = (
        f"[land] window {window_stamp(start)}..{window_stamp(end)} {source}: {len(arrivals)} arrivals, "
        f"{len(created)} new objects ({sum(a['size'] for a in created)} bytes), "
        f"{len(arrivals) - len(created)} duplicates skipped, {len(waiting)} waiting to become stable"
    )
    line += f" ({shown})" if waiting else ""
    return line + (f" -> {segment.rsplit('/', 1)[-1]}" if segment else "")
