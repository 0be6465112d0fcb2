"""Arrow schemas of every layer: the one definition of each record.

Rows travel through Beam as plain dicts with exactly these fields (values are
str, int, bool, bytes or None, so the coders are fast and deterministic) and
are written to Parquet under these schemas. ``docs/format.md`` describes them
for readers outside the pipeline.
"""
from __future__ import annotations

import pyarrow as pa

#: ingest -> ``documents``: normalized text with its provenance.
DOCUMENT = pa.schema([
    ("doc_id", pa.string()),            # blake2b-128(source, normalized text)
    ("content_hash", pa.string()),      # xxh3-128(normalized text): exact-dedup key
    ("source", pa.string()),
    ("domain", pa.string()),
    ("source_rank", pa.int32()),
    ("license", pa.string()),
    ("url", pa.string()),
    ("date", pa.string()),
    ("record_id", pa.string()),
    ("file", pa.string()),              # input file as listed in the snapshot
    ("position", pa.int64()),           # record index within the file
    ("byte_offset", pa.int64()),        # offset in the decompressed stream (null for Parquet)
    ("n_chars", pa.int64()),
    ("text", pa.string()),
])

#: ingest -> ``repeats``: verbatim repeats of a document within its source.
REPEAT = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("file", pa.string()),
    ("position", pa.int64()),
    ("byte_offset", pa.int64()),
    ("url", pa.string()),
])

#: exact_dedup -> ``annotations``: one row per document, nothing deleted.
EXACT_DEDUP = pa.schema([
    ("doc_id", pa.string()),
    ("content_hash", pa.string()),
    ("duplicate_count", pa.int64()),    # documents sharing the content hash (1 = unique)
    ("representative", pa.string()),    # doc_id kept for this content
    ("is_duplicate", pa.bool_()),       # True for every member but the representative
])

#: select -> ``decisions``: the policy's verdict on every document.
DECISION = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("kept", pa.bool_()),
    ("reason", pa.string()),            # null when kept
])

#: select -> ``gold``: the kept text, the durable artifact before tokenization.
GOLD = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("domain", pa.string()),
    ("license", pa.string()),
    ("url", pa.string()),
    ("text", pa.string()),
])

#: every stage -> ``dead_letter``: records a stage could not process, with origin.
DEAD_LETTER = pa.schema([
    ("stage", pa.string()),
    ("source", pa.string()),
    ("file", pa.string()),
    ("position", pa.int64()),
    ("byte_offset", pa.int64()),
    ("doc_id", pa.string()),
    ("error", pa.string()),
    ("raw_prefix", pa.binary()),
])

#: tokenize -> per-shard index: where each document's tokens are.
SHARD_INDEX = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("token_start", pa.int64()),        # offset of the first token in the shard's token stream
    ("token_count", pa.int64()),        # document tokens, not counting the EOS that follows
])


def dead_letter_row(stage: str, *, source: str | None = None, file: str | None = None,
                    position: int | None = None, byte_offset: int | None = None,
                    doc_id: str | None = None, error: str, raw_prefix: bytes = b"") -> dict:
    """The one constructor of dead-letter rows, so every stage reports origin alike."""
    return {"stage": stage, "source": source, "file": file, "position": position,
            "byte_offset": byte_offset, "doc_id": doc_id, "error": error[:2000],
            "raw_prefix": raw_prefix[:256]}
