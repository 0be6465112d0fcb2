"""The one document constructor: a reader's raw record -> a ``documents`` row (:data:`beam_pipeline.storage.schemas.DOCUMENT`).

Used by the ingest stage for files (:mod:`beam_pipeline.transforms.ingest`) and
for web archives (:mod:`beam_pipeline.transforms.web_archives`), so both make the same
row from the same record.
"""

from __future__ import annotations

from beam_pipeline.config.corpus import SourceConfig
from beam_pipeline.records.hashing import content_hash, doc_id
from beam_pipeline.records.normalize import normalize_text
from beam_pipeline.records.record_types import RawRecord


def make_document(record: RawRecord, source: SourceConfig, path: str) -> dict | None:
    """Normalize a raw record into a document row; None when no text remains."""
    text = normalize_text(record.text)
    if not text:
        return None
    return {
        "doc_id": doc_id(source.name, text),
        "content_hash": content_hash(text),
        "source": source.name,
        "domain": source.domain,
        "source_rank": source.rank,
        "license": record.license or source.license,
        "url": record.url,
        "date": record.date,
        "record_id": record.record_id,
        "file": path,
        "position": record.position,
        "byte_offset": record.byte_offset,
        "n_chars": len(text),
        "text": text,
    }
