"""Web archives in: WARC, WET and ARC files to documents (``format: warc``; docs/web.md).

Small pure modules, tested without Beam, and one module of transforms:

``warc``
    Record framing: every record of a byte range of a WARC/WET/ARC file
    (plain or gzip per record) as a :class:`~beam_pipeline.web.warc.Capture`,
    or a :class:`~beam_pipeline.sources.readers.BadRecord` for damage (truncated
    record, bad gzip member, broken headers), after which reading resumes at
    the next record boundary.
``archive_streams``
    The bytes under ``warc``: gzip or ARC by the first bytes, byte-range
    splits and record boundaries, gzip members read one at a time.
``charset``
    Bytes to text: BOM, HTTP header, meta tag, then detection.
``extract``
    HTML to text (resiliparse main content by default, trafilatura as the
    alternative) and the title.
``urls``
    URL normalization, the key of "newest capture wins".
``records``
    The policy of one source (record types, HTTP status, content types, size
    bounds, revisits) applied to captures: what becomes a document.
``transforms``
    The ingest branch for web sources: split files by byte range, read the
    splits, keep the newest capture of every URL.
"""
