"""The records a reader yields: :class:`RawRecord` (a document as found) or :class:`BadRecord` (a dead letter).

Shared by the file readers (:mod:`beam_pipeline.sources.readers`) and the web archive
readers (:mod:`beam_pipeline.web.warc`, :mod:`beam_pipeline.web.records`), so
neither imports the other for its types.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class RawRecord:
    """One document as found in the file (text not yet normalized)."""

    position: int  # 0-based line index (jsonl), row index (parquet), 0 (text)
    byte_offset: int | None  # first byte in the decompressed stream; None for parquet
    text: str
    url: str | None
    date: str | None
    license: str | None
    record_id: str | None


@dataclasses.dataclass(frozen=True)
class BadRecord:
    """A record (or the damaged tail of a file) that could not be read."""

    position: int
    byte_offset: int | None
    error: str  # short and human readable
    raw_prefix: bytes  # first <= 256 raw bytes of the record or of the unread tail


def field_path_problem(name: str) -> str | None:
    """Why ``name`` is not a valid field path, or None if it is.

    A field path is one or more non-empty names joined by single dots
    (``text``, ``metadata.url``); a name may hold any character but the dot,
    and may not start or end with white space (``metadata. url`` is a typo).
    """
    if not name:
        return "is empty"
    for segment in name.split("."):
        if not segment:
            return "has an empty name between dots (write names joined by single dots, e.g. metadata.url)"
        if segment != segment.strip():
            return f"has a name with white space around it: {segment!r}"
    return None
