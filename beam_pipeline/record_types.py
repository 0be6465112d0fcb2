"""The records a reader yields: :class:`RawRecord` (a document as found) or :class:`BadRecord` (a dead letter).

Shared by the file readers (:mod:`beam_pipeline.readers`) and the web archive
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
