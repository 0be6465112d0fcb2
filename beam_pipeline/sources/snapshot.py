"""Snapshots: the frozen list of input files a build reads.

``take_snapshot`` expands every source glob through Beam's ``FileSystems``
(local, ``s3://``, ``gs://``, ``hdfs://``), fingerprints each file (size and
checksum), and writes the canonical manifest to
``<root>/snapshots/<snapshot_id>.json`` where ``snapshot_id`` is the digest of
that manifest. Up to :data:`LOCAL_FINGERPRINT_BYTES` of input (or with
``snapshot.checksum: filesystem``, which reads no bytes) the files are
fingerprinted by threads of the calling process, so ``run`` submits one job;
above, a Beam job (:class:`FingerprintFiles`) reads them in parallel first.
Inputs are immutable from then on: ``check_unchanged`` (driver,
sizes) and the ingest readers (per file, checksums) stop the run with
:class:`InputChangedError` when a file differs from its snapshot.

The stored manifest holds no location (format 2): per source its format and
files, each file's ``path`` relative to the source's *base*, the folder of the
source's uri before its first wildcard (:func:`source_base`); not the uri. So
the same files, wherever they lie and however the config names them, have the
same snapshot id. In memory (what :func:`take_snapshot` returns and
:func:`resolve_snapshot` makes of a loaded one) every file has its full path
again, for the readers; a pinned snapshot must have the config's sources and
formats, and its files must match the config's globs
(:func:`check_sources_match`).

``take_bronze_snapshot`` freezes the bronze landing layer instead
(``snapshot --from-bronze --until ...``, :mod:`beam_pipeline.arrivals`): every
source with a ``landing:`` section lists the bronze objects of the arrivals
up to the cut-off, each object once with the paths it arrived under
(``origins``); the other sources are fingerprinted from their globs as above.
The manifest has the same shape, so a build reads it like any snapshot.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Iterable

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.config.corpus import CorpusConfig
from beam_pipeline.records.hashing import digest_json, sha256_stream
from beam_pipeline.storage.bronze import bronze_root
from beam_pipeline.storage.layers import join, read_bytes, write_json_atomic

# How many bytes of records a stored byte holds, by file suffix: text compresses ~3-6x
# with gzip or zstd (the scale benchmark's zstd JSONL: 5.3x), and Parquet pages are
# compressed too. Only the partition count depends on it, never the bytes of a row.
COMPRESSED_EXPANSION = 4
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".xz", ".parquet")


def estimated_text_bytes(manifest: dict) -> int:
    """Uncompressed input size of a snapshot, estimated from its file sizes and suffixes."""
    return sum(
        f["size"] * (COMPRESSED_EXPANSION if f["path"].lower().endswith(COMPRESSED_SUFFIXES) else 1)
        for source in manifest["sources"].values()
        for f in source["files"]
    )


SNAPSHOT_FORMAT = 2  # 1: full paths (still read)
_WILDCARDS = "*?["


class InputChangedError(RuntimeError):
    """An input file no longer matches the snapshot the run is pinned to."""


class SnapshotError(ValueError):
    """A source glob matched nothing, or a snapshot cannot be found."""


def file_checksum(path: str, kind: str) -> str:
    """``sha256:<hex>`` of the bytes, or ``fs:<value>`` from the filesystem's metadata."""
    if kind == "sha256":
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            return "sha256:" + sha256_stream(f)
    return "fs:" + str(FileSystems.checksum(path))


class FingerprintFiles(beam.PTransform):
    """``(source, glob)`` pairs -> ``{"source", "path", "size", "checksum"}`` per file."""

    def __init__(self, checksum: str):
        super().__init__()
        self._checksum = checksum

    def expand(self, globs):
        return (
            globs
            | "MatchPerSource" >> beam.FlatMap(_match_source)
            | "SpreadFiles" >> beam.Reshuffle()
            | "Checksum"
            >> beam.Map(lambda entry, kind: {**entry, "checksum": file_checksum(entry["path"], kind)}, self._checksum)
        )


def _match_source(source_glob: tuple[str, str]) -> Iterable[dict]:
    source, pattern = source_glob
    for metadata in FileSystems.match([pattern])[0].metadata_list:
        yield {"source": source, "path": metadata.path, "size": metadata.size_in_bytes}


def source_base(uri: str) -> str:
    """The folder of ``uri`` before its first wildcard (``data/docs/*.jsonl`` -> ``data/docs``), without a slash."""
    cut = min((i for i in (uri.find(c) for c in _WILDCARDS) if i >= 0), default=len(uri))
    return uri[:cut].rsplit("/", 1)[0] if "/" in uri[:cut] else ""


def _relative_to(path: str, base: str) -> str:
    return path[len(base) + 1 :] if base and path.startswith(base + "/") else path


def build_manifest(config: CorpusConfig, entries: Iterable[dict]) -> dict:
    """Canonical (stored) manifest: sources in config order, files relative to their source's base, sorted."""
    bases = {s.name: source_base(s.uri) for s in config.sources}
    by_source: dict[str, list[dict]] = {s.name: [] for s in config.sources}
    for entry in entries:
        by_source[entry["source"]].append(
            {
                "path": _relative_to(entry["path"], bases[entry["source"]]),
                "size": entry["size"],
                "checksum": entry["checksum"],
                **({"origins": entry["origins"]} if "origins" in entry else {}),
            }
        )
    empty = [s for s in config.sources if not by_source[s.name]]
    if empty:
        raise SnapshotError("; ".join(f"source {s.name!r}: uri {s.uri!r} matched no files" for s in empty))
    sources = {
        s.name: {"format": s.format, "files": sorted(by_source[s.name], key=lambda f: f["path"])}
        for s in config.sources
    }
    return {
        "format": SNAPSHOT_FORMAT,
        "checksum": config.snapshot.checksum,
        "sources": sources,
        "total_bytes": sum(f["size"] for s in sources.values() for f in s["files"]),
    }


def snapshot_id_of(manifest: dict) -> str:
    return digest_json(manifest)[:24]


def snapshot_path(root: str, snapshot_id: str) -> str:
    return join(root, "snapshots", f"{snapshot_id}.json")


#: Inputs up to this size are fingerprinted in the driver (threads); larger ones by a Beam job.
LOCAL_FINGERPRINT_BYTES = 2 << 30


def take_snapshot(
    config: CorpusConfig, pipeline_options: PipelineOptions, *, log=None, local: bool | None = None
) -> tuple[str, dict]:
    """Fingerprint every input; write and return (snapshot_id, manifest).

    ``local``: fingerprint in this process (True), in a Beam job (False), or
    decide by size (None: :data:`LOCAL_FINGERPRINT_BYTES`).
    """
    matched = match_sources(config)
    total = sum(entry["size"] for entry in matched)
    if local is None:
        local = config.snapshot.checksum == "filesystem" or total <= LOCAL_FINGERPRINT_BYTES
    if local:
        entries = fingerprint_locally(matched, config.snapshot.checksum)
    else:
        if log:
            log(
                f"[snapshot] {total} bytes of input: fingerprinted by a Beam job first (pin the snapshot with "
                f"--snapshot_id to build without it)"
            )
        entries = _fingerprint_in_a_job(config, pipeline_options)
    manifest = build_manifest(config, entries)
    snapshot_id = snapshot_id_of(manifest)
    write_json_atomic(snapshot_path(config.output_root, snapshot_id), manifest)
    return snapshot_id, resolve_snapshot(config, json.loads(json.dumps(manifest)))


def fingerprint_locally(matched: list[dict], checksum: str, threads: int = 8) -> list[dict]:
    """Checksums of the matched files, computed by ``threads`` threads of this process."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        sums = list(pool.map(lambda entry: file_checksum(entry["path"], checksum), matched))
    return [{**entry, "checksum": value} for entry, value in zip(matched, sums)]


def _fingerprint_in_a_job(config: CorpusConfig, pipeline_options: PipelineOptions) -> list[dict]:
    entries_dir = join(config.output_root, "snapshots", "_pending", config.digest()[:16])
    with beam.Pipeline(options=pipeline_options) as pipeline:
        (
            pipeline
            | "Globs" >> beam.Create([(s.name, s.uri) for s in config.sources])
            | "Fingerprint" >> FingerprintFiles(config.snapshot.checksum)
            | "AsJson" >> beam.Map(lambda e: json.dumps(e, sort_keys=True))
            | "WriteEntries" >> beam.io.WriteToText(join(entries_dir, "entries"), file_name_suffix=".jsonl")
        )
    entry_files = [m.path for m in FileSystems.match([join(entries_dir, "entries*.jsonl")])[0].metadata_list]
    entries = [json.loads(line) for path in entry_files for line in read_bytes(path).decode().splitlines() if line]
    FileSystems.delete([entries_dir])
    return entries


def take_bronze_snapshot(
    config: CorpusConfig, pipeline_options: PipelineOptions, until: str | int, since: str | int | None = None
) -> tuple[str, dict]:
    """Freeze the arrivals from ``since`` (default: the first) up to ``until`` (each a log position or
    an ISO-8601 time); write and return (snapshot_id, manifest). Sources without ``landing:`` are
    fingerprinted from their globs."""
    from beam_pipeline.storage.arrivals_log import ArrivalsLogError, read_log

    try:
        log = read_log(config.output_root)
        position = log.until(until)
        first = 0 if since is None else log.until(since)
    except ArrivalsLogError as err:
        raise SnapshotError(str(err)) from None
    if first > position:
        raise SnapshotError(f"--since {since} (log position {first}) is after --until {until} (position {position})")
    landing = [s for s in config.sources if s.landing is not None]
    if not landing:
        raise SnapshotError("--from-bronze: no source has a `landing:` section (docs/config.md)")
    static = [s for s in config.sources if s.landing is None]
    matched = match_sources(config.model_copy(update={"sources": static})) if static else []
    entries = fingerprint_locally(matched, config.snapshot.checksum)
    files = bronze_files(config, log.entries[first:position])
    empty = sorted(name for name, per in files.items() if not per)
    if empty:
        raise SnapshotError(
            f"--since {first} --until {position} (of {len(log)} arrivals): no arrivals of "
            f"{', '.join(empty)} up to the cut-off; run `python -m beam_pipeline land` first, "
            f"or cut later"
        )
    manifest = build_manifest(config, entries + [f for per in files.values() for f in per])
    for source in landing:
        manifest["sources"][source.name]["bronze"] = join(bronze_root(config.output_root), source.name)
    manifest["bronze"] = {
        "since": first,
        "until": position,
        "until_window_end": log.entries[position - 1]["window_end"] if position else None,
    }
    snapshot_id = snapshot_id_of(manifest)
    write_json_atomic(snapshot_path(config.output_root, snapshot_id), manifest)
    return snapshot_id, resolve_snapshot(config, json.loads(json.dumps(manifest)))


def bronze_files(config: CorpusConfig, arrivals: Iterable[dict]) -> dict[str, list[dict]]:
    """Arrivals (a prefix of the log) -> per landing source, one file entry per bronze object:
    ``{"source", "path", "size", "checksum": "sha256:<hex>", "origins": [paths it arrived under]}``.

    Every object must still be in bronze with its size (``bronze gc`` may have
    deleted the objects of a cut-off no snapshot kept).
    """
    from beam_pipeline.storage.bronze import object_path

    names = {s.name for s in config.sources if s.landing is not None}
    files: dict[str, dict[str, dict]] = {name: {} for name in names}
    for arrival in arrivals:
        if arrival["source"] not in names:
            continue  # a source this config does not land (another config shares the root)
        entry = files[arrival["source"]].setdefault(
            arrival["object"],
            {
                "source": arrival["source"],
                "path": object_path(config.output_root, arrival["object"]),
                "size": arrival["size"],
                "checksum": "sha256:" + arrival["sha256"],
                "origins": [],
            },
        )
        if arrival["path"] not in entry["origins"]:
            entry["origins"].append(arrival["path"])
    problems = []
    for name, by_object in files.items():
        present = (
            {
                m.path: m.size_in_bytes
                for m in FileSystems.match([join(bronze_root(config.output_root), name, "*", "*")])[0].metadata_list
            }
            if by_object
            else {}
        )
        for entry in by_object.values():
            entry["origins"].sort()
            if entry["path"] not in present:
                problems.append(f"{entry['path']}: missing (arrived as {entry['origins'][0]})")
            elif present[entry["path"]] != entry["size"]:
                problems.append(
                    f"{entry['path']}: {present[entry['path']]} bytes, the arrivals log says {entry['size']}"
                )
    if problems:
        raise SnapshotError(
            "bronze objects of arrivals before the cut-off are missing or altered (deleted by "
            "`bronze gc`, whose kept snapshots did not cover this cut-off?):\n  " + "\n  ".join(problems[:20])
        )
    return {name: sorted(by_object.values(), key=lambda f: f["path"]) for name, by_object in files.items()}


def origins_of(manifest: dict) -> dict[str, list[str]]:
    """A bronze snapshot's object path -> the original paths it arrived under (empty for a glob snapshot).

    Lineage and dead letters name the file a build read (``file``): for a
    bronze snapshot that is the immutable object; this names where it came from.
    """
    return {
        f["path"]: list(f["origins"])
        for source in manifest["sources"].values()
        for f in source["files"]
        if "origins" in f
    }


def match_sources(config: CorpusConfig) -> list[dict]:
    """Every file the sources' globs match ({source, path, size}); fails when a glob matches nothing."""
    matched = [(s.name, s.uri, FileSystems.match([s.uri])[0].metadata_list) for s in config.sources]
    empty = [(name, uri) for name, uri, found in matched if not found]
    if empty:
        raise SnapshotError("; ".join(f"source {name!r}: uri {uri!r} matched no files" for name, uri in empty))
    return [{"source": name, "path": m.path, "size": m.size_in_bytes} for name, _, found in matched for m in found]


def load_snapshot(root: str, snapshot_id: str) -> dict:
    path = snapshot_path(root, snapshot_id)
    if not FileSystems.exists(path):
        raise SnapshotError(
            f"snapshot {snapshot_id} not found at {path}; take one with `python -m beam_pipeline snapshot --config ...`"
        )
    manifest = json.loads(read_bytes(path))
    if snapshot_id_of(manifest) != snapshot_id:
        raise SnapshotError(f"snapshot file {path} does not hash to its id {snapshot_id}: it was edited")
    return manifest


def check_sources_match(config: CorpusConfig, manifest: dict) -> None:
    """The pinned snapshot must describe exactly the config's sources; its files then get their full paths.

    (``manifest`` is a loaded snapshot: :func:`resolve_snapshot` is applied to it in place.)
    """
    field = "format" if manifest.get("format", 1) >= 2 else "uri"  # format 1 snapshots stored the uri
    want = {s.name: getattr(s, field) for s in config.sources}
    have = {name: s[field] for name, s in manifest["sources"].items()}
    if want != have:
        raise SnapshotError(
            f"the snapshot was taken for sources {have}, but the config has {want}; take a new snapshot for this config"
        )
    resolve_snapshot(config, manifest)
    for source in config.sources:
        stray = [
            f["path"]
            for f in manifest["sources"][source.name]["files"]
            if "origins" not in f  # a bronze object: it arrived under the landing prefix, not the uri
            and not fnmatch.fnmatchcase(f["path"], source.uri)
        ]
        if stray:
            raise SnapshotError(
                f"source {source.name!r}: the snapshot's file {stray[0]} is not matched by the "
                f"config's uri {source.uri!r}; take a new snapshot for this config"
            )


def resolve_snapshot(config: CorpusConfig, manifest: dict) -> dict:
    """``manifest`` (stored form) with every file's full path, from the config's sources; in place, returned.

    Format 1 snapshots hold full paths already and are left as they are.
    """
    if manifest.get("format", 1) < 2:
        return manifest
    for source in config.sources:
        base = source_base(source.uri)
        for entry in manifest["sources"].get(source.name, {}).get("files", []):
            if base and not _is_full_path(entry["path"]):  # (a full path stays: resolving twice changes nothing)
                entry["path"] = f"{base}/{entry['path']}"
    return manifest


def _is_full_path(path: str) -> bool:
    return path.startswith("/") or "://" in path


def check_unchanged(manifest: dict) -> None:
    """Driver-side check of every file's presence and size (cheap: metadata only)."""
    problems = []
    for source in manifest["sources"].values():
        for entry in source["files"]:
            matched = FileSystems.match([entry["path"]])[0].metadata_list
            if not matched:
                problems.append(f"{entry['path']}: missing")
                continue
            size = matched[0].size_in_bytes
            if size != entry["size"]:
                problems.append(f"{entry['path']}: size {size} != {entry['size']} in the snapshot")
    if problems:
        raise InputChangedError(
            "input changed since its snapshot (inputs are immutable; take a new snapshot "
            "to build from the new data):\n  " + "\n  ".join(problems)
        )


def verify_file(path: str, expected_checksum: str) -> None:
    """Reader-side check of one file's checksum against the snapshot."""
    kind = "sha256" if expected_checksum.startswith("sha256:") else "filesystem"
    actual = file_checksum(path, kind)
    if actual != expected_checksum:
        raise InputChangedError(
            f"input changed since its snapshot: {path} has checksum {actual}, "
            f"the snapshot recorded {expected_checksum}; take a new snapshot to build from the new data"
        )
