"""What a build reads: a source's files, frozen in a snapshot, read into documents.

* ``snapshot``   immutable input manifests (and snapshots of the landing layer)
* ``readers``    per-record file readers (JSONL, Parquet, text, WARC)
* ``documents``  a raw record to a document: normalized text, ids, provenance
"""
