"""The ingest branch of ``format: warc`` sources: byte-range splits, extraction, newest capture per URL.

Shape of the data::

    snapshot file entries {source, path, size, checksum}
      | VerifyAndSplit        -> {source, path, start, end}: byte ranges of split_bytes (checksum once per file)
      | SpreadSplits          (one split per worker, not one file)
      | ReadSplits            -> captures {document, key, ts, digest}   (main)
                                 revisits {key, ts, digest, refers_ts}  (newest_capture policy)
                                 dead letters                           (damage, with file and offset)
      | NewestCapturePerUrl   -> document rows (DOCUMENT schema), older captures of a URL counted and dropped

Accounting, per source (stage ``ingest``): every record of every split is
``in`` once; ``filtered:`` ``record_type``, ``revisit``, ``http_status``,
``content_type``, ``too_small``, ``too_large``, ``empty_text`` in ReadSplits,
``older_capture`` in NewestCapturePerUrl; ``dead_letter`` for BadRecords; the
documents are ``passed`` by the ingest stage's CollapseRepeatedRecords
(which also counts ``repeated_record``).
"""
from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.accounting import StageCounters
from beam_pipeline.config import SourceConfig
from beam_pipeline.readers import BadRecord
from beam_pipeline.schemas import dead_letter_row
from beam_pipeline.snapshot import verify_file
from beam_pipeline.transforms.keys import StrKeyed
from beam_pipeline.web.records import Filtered, Revisit, iter_web_records, newest_capture
from beam_pipeline.web.warc import plan_splits, sniff

DOCUMENTS, DEAD_LETTER, CAPTURES, REVISITS = "documents", "dead_letter", "captures", "revisits"
_KEY_SEPARATOR = "\x1f"


class ReadWebArchives(beam.PTransform):
    """PBegin -> {"documents", "dead_letter"} for the snapshot files of ``format: warc`` sources."""

    def __init__(self, files: list[dict], sources: dict[str, SourceConfig], *, max_record_bytes: int,
                 stage: str = "ingest"):
        super().__init__()
        self._files, self._sources = files, sources
        self._max_record_bytes, self._stage = max_record_bytes, stage

    def expand(self, pbegin):
        splits = (
            pbegin
            | "WebArchiveFiles" >> beam.Create(self._files)
            | "SpreadWebArchives" >> beam.Reshuffle()
            | "VerifyAndSplit" >> beam.ParDo(_VerifyAndSplitFn(self._sources))
            | "SpreadSplits" >> beam.Reshuffle()
        )
        read = splits | "ReadSplits" >> beam.ParDo(
            _ReadSplitFn(self._sources, self._max_record_bytes, self._stage)).with_outputs(
                REVISITS, DEAD_LETTER, main=CAPTURES)
        documents = {CAPTURES: read[CAPTURES], REVISITS: read[REVISITS]} | "NewestCapturePerUrl" >> (
            NewestCapturePerUrl(self._stage))
        return {DOCUMENTS: documents, DEAD_LETTER: read[DEAD_LETTER]}


class NewestCapturePerUrl(beam.PTransform):
    """{captures, revisits} -> document rows: one per (source, normalized URL), plus those without a key."""

    def __init__(self, stage: str = "ingest"):
        super().__init__()
        self._stage = stage

    def expand(self, inputs):
        with_key, without_key = inputs[CAPTURES] | "HasUrlKey" >> beam.Partition(
            lambda capture, n: 0 if capture["key"] is not None else 1, 2)
        newest = (
            (with_key, inputs[REVISITS])
            | "CapturesAndRevisits" >> beam.Flatten()
            | "KeyByUrl" >> beam.Map(lambda item: (item["key"], item)).with_output_types(StrKeyed)
            | "GroupByUrl" >> beam.GroupByKey()
            | "KeepNewest" >> beam.ParDo(_KeepNewestFn(self._stage))
        )
        unkeyed = without_key | "Unwrap" >> beam.Map(lambda capture: capture["document"])
        return (newest, unkeyed) | "Documents" >> beam.Flatten()


class _VerifyAndSplitFn(beam.DoFn):
    """Snapshot file entry -> its byte ranges; the checksum is verified once, here."""

    def __init__(self, sources: dict[str, SourceConfig]):
        self._sources = sources

    def process(self, entry: dict) -> Iterator[dict]:
        path = entry["path"]
        verify_file(path, entry["checksum"])
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
            gz, arc = sniff(raw)
        split_bytes = self._sources[entry["source"]].extract.split_bytes
        for start, end in plan_splits(entry["size"], split_bytes, gz=gz, arc=arc):
            yield {"source": entry["source"], "path": path, "start": start, "end": end}


class _ReadSplitFn(beam.DoFn):
    """One byte range -> captures (main), revisits and dead letters (tagged)."""

    def __init__(self, sources: dict[str, SourceConfig], max_record_bytes: int, stage: str):
        self._sources, self._max_record_bytes, self._stage = sources, max_record_bytes, stage

    def setup(self):
        from beam_pipeline.transforms.ingest import make_document  # the one document constructor

        self._make_document = make_document
        self._counters = StageCounters(self._stage)

    def process(self, split: dict) -> Iterator:
        source = self._sources[split["source"]]
        config, path = source.extract, split["path"]
        keep_revisits = config.url_dedup and config.revisits == "newest_capture"
        items = iter_web_records(
            lambda: FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED), config,
            max_record_bytes=self._max_record_bytes, start=split["start"], end=split["end"])
        for item in items:
            self._counters.entered(source.name)
            if isinstance(item, BadRecord):
                self._counters.dead_letter(source.name)
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_row(
                    self._stage, source=source.name, file=path, position=item.position,
                    byte_offset=item.byte_offset, error=item.error, raw_prefix=item.raw_prefix))
            elif isinstance(item, Filtered):
                self._counters.filtered(item.reason, source.name)
            elif isinstance(item, Revisit):
                self._counters.filtered("revisit", source.name)
                if keep_revisits and item.url_key is not None:
                    yield beam.pvalue.TaggedOutput(REVISITS, {
                        "key": url_key(source.name, item.url_key), "ts": item.timestamp,
                        "digest": item.digest, "refers_ts": item.refers_to_date})
            else:
                document = self._make_document(item.record, source, path)
                if document is None:
                    self._counters.filtered("empty_text", source.name)
                    continue
                key = url_key(source.name, item.url_key) if config.url_dedup and item.url_key else None
                yield {"document": document, "key": key, "ts": item.timestamp, "digest": item.digest}


class _KeepNewestFn(beam.DoFn):
    def __init__(self, stage: str):
        self._stage = stage

    def setup(self):
        self._counters = StageCounters(self._stage)

    def process(self, keyed: tuple[str, list[dict]]) -> Iterator[dict]:
        _, items = keyed
        captures = [item for item in items if "document" in item]
        revisits = [item for item in items if "document" not in item]
        # Only revisits: the page's captures are in no file of the source; nothing to emit.
        winner = newest_capture(captures, revisits) if captures else None
        for capture in captures:
            if capture is winner:
                yield capture["document"]
            else:
                self._counters.filtered("older_capture", capture["document"]["source"])


def url_key(source: str, normalized_url: str) -> str:
    """Grouping key of URL-level dedup: captures meet only within their source."""
    return f"{source}{_KEY_SEPARATOR}{normalized_url}"
