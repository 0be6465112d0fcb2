"""Where the bronze layer keeps its objects and its arrivals log (docs/format.md)::

    <root>/bronze/<source>/<sha256[:2]>/<sha256><extension>     one object per distinct bytes
    <root>/bronze/_arrivals/<window start>-<source>-<digest>.jsonl   the arrivals log, one segment per commit
    <root>/bronze/_tmp/<uuid>                                     copies in flight (deleted when they fail)

An object is named by the sha256 of its bytes and the extension of the file
it came from (``.jsonl.zst``, ``.warc.gz``, ``.parquet`` ...): the readers
pick the codec from the suffix, so the same bytes under another extension
would be read differently and are another object. Source names cannot start
with ``_`` (``config.SOURCE_NAME``), so ``_arrivals`` and ``_tmp`` never
collide with a source.
"""

from __future__ import annotations

import datetime
import re

from beam_pipeline.storage.layers import join

BRONZE = "bronze"
ARRIVALS = "_arrivals"
TMP = "_tmp"

#: Suffixes that only say how the bytes are compressed; the suffix before them is kept too.
_CODEC_SUFFIXES = {"gz", "gzip", "zst", "zstd", "bz2", "xz", "lz4", "br", "bad"}
_SUFFIX = re.compile(r"^[A-Za-z0-9]{1,12}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def bronze_root(output_root: str) -> str:
    return join(output_root, BRONZE)


def arrivals_dir(output_root: str) -> str:
    return join(output_root, BRONZE, ARRIVALS)


def tmp_dir(output_root: str) -> str:
    return join(output_root, BRONZE, TMP)


def extension_of(path: str) -> str:
    """The suffixes of a file name that tell a reader how to read it.

    ``crawl-00001.warc.gz`` -> ``.warc.gz``, ``part-0001.jsonl.zst`` ->
    ``.jsonl.zst``, ``data.parquet`` -> ``.parquet``, ``README`` -> ``''``,
    ``notes.2024-06.txt`` -> ``.txt`` (only short alphanumeric suffixes count;
    a compression suffix keeps the one before it, as pywb's ``.warc.gz.bad``
    keeps two).
    """
    name = path.rstrip("/").rsplit("/", 1)[-1]
    parts = name.split(".")[1:]
    kept: list[str] = []
    for part in reversed(parts):
        if not _SUFFIX.match(part):
            break
        kept.insert(0, part)
        if part.lower() not in _CODEC_SUFFIXES:
            break
    return "".join(f".{part}" for part in kept)


def object_key(source: str, sha256: str, extension: str) -> str:
    """``<source>/<sha256[:2]>/<sha256><extension>``, relative to the bronze root."""
    if not _SHA256.match(sha256):
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    return f"{source}/{sha256[:2]}/{sha256}{extension}"


def object_path(output_root: str, key: str) -> str:
    return join(bronze_root(output_root), key)


def window_stamp(seconds: float) -> str:
    """UTC ``2024-06-01T12:05:00Z`` of a window bound (whole seconds)."""
    return datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str) -> float:
    """Seconds since the epoch of an ISO-8601 time (``Z`` or an offset; a naive time is UTC)."""
    value = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.timestamp()


def segment_name(window_start: float, source: str, digest: str) -> str:
    """A log segment's file name: the window's start (sortable), the source, the digest of its lines."""
    return f"{_compact(window_start)}-{source}-{digest[:16]}.jsonl"


def segment_pattern(window_start: float, source: str) -> str:
    """Glob of every segment of one (window, source)."""
    return f"{_compact(window_start)}-{source}-" + "?" * 16 + ".jsonl"


def _compact(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
