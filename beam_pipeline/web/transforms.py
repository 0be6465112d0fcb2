"""The ingest branch of ``format: warc`` sources: byte-range splits, extraction, newest capture per URL.

Shape of the data::

    snapshot file entries {source, path, size, checksum}
      | VerifyAndSplit        -> {source, path, start, end}: byte ranges of split_bytes (checksum once per file)
      | SpreadSplits          (one split per worker, not one file)
      | ReadSplits            -> captures {document, key, ts, digest}   (main)
                                 revisits {key, ts, digest, refers_ts}  (newest_capture policy)
                                 dead letters                           (damage, with file and offset)
      | NewestCapturePerUrl   -> every capture's document row (DOCUMENT schema), to ingest's partition spills;
                                 (partition, spill file) of the older captures ingest drops

The newest capture is chosen through files, not through the runner: each
capture's (URL key, time, digest, doc_id, file, position) and each revisit
goes to a spill file of bucket ``xxh3(key) % n``; one task per bucket picks
the newest capture of each of its URLs (:func:`~beam_pipeline.web.records.newest_capture`)
and spills the others, by the partition of their doc_id, to the ingest task of
that partition, which leaves them out (ingest's ``CollapseRepeatedRecords``).
The text travels once, in ingest's partition spills; only file names go
through the runner, so a worker's memory does not grow with the crawl.

Accounting, per source (stage ``ingest``): every record of every split is
``in`` once; ``filtered:`` ``record_type``, ``revisit``, ``http_status``,
``content_type``, ``too_small``, ``too_large``, ``empty_text`` in ReadSplits;
``dead_letter`` for BadRecords; ``older_capture`` and ``passed`` by the ingest
stage's CollapseRepeatedRecords (which also counts ``repeated_record``).
"""
from __future__ import annotations

from typing import Iterable, Iterator

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.accounting import StageCounters
from beam_pipeline.config import SourceConfig
from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import read_partition_rows
from beam_pipeline.readers import BadRecord
from beam_pipeline.schemas import dead_letter_row
from beam_pipeline.snapshot import verify_file
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed
from beam_pipeline.transforms.layer_io import GroupSpillFiles
from beam_pipeline.transforms.lsh_files import SpillKeyedFn, read_keyed_groups, write_spills
from beam_pipeline.web.records import Filtered, Revisit, iter_web_records, newest_capture
from beam_pipeline.web.warc import plan_splits, sniff

DOCUMENTS, DEAD_LETTER, CAPTURES, REVISITS = "documents", "dead_letter", "captures", "revisits"
OLDER_CAPTURES = "older_captures"
_CAPTURE, _REVISIT = "capture", "revisit"  # kinds of the keyed records spilled by URL

#: A capture that is not the newest of its URL, on its way to the ingest task of its doc_id's partition.
OLDER_CAPTURE = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("file", pa.string()),
    ("position", pa.int64()),
])
_KEY_SEPARATOR = "\x1f"


class ReadWebArchives(beam.PTransform):
    """PBegin -> {"documents", "older_captures", "dead_letter"} for the snapshot files of ``format: warc``
    sources: see :class:`NewestCapturePerUrl` for the first two. Spill files go to ``spill_directory``;
    ``partitions`` is the ingest layer's partition count."""

    def __init__(self, files: list[dict], sources: dict[str, SourceConfig], *, max_record_bytes: int,
                 spill_directory: str, partitions: int, stage: str = "ingest"):
        super().__init__()
        self._files, self._sources = files, sources
        self._max_record_bytes, self._stage = max_record_bytes, stage
        self._spill_directory, self._partitions = spill_directory, partitions

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
        newest = {CAPTURES: read[CAPTURES], REVISITS: read[REVISITS]} | "NewestCapturePerUrl" >> (
            NewestCapturePerUrl(self._spill_directory, self._partitions))
        return {DOCUMENTS: newest[DOCUMENTS], OLDER_CAPTURES: newest[OLDER_CAPTURES], DEAD_LETTER: read[DEAD_LETTER]}


class NewestCapturePerUrl(beam.PTransform):
    """{captures, revisits} -> {"documents": the document row of every capture,
    "older_captures": (partition, spill file of :data:`OLDER_CAPTURE` rows)}.

    Of the captures of one (source, normalized URL), all but the newest are
    older captures: the ingest task of their doc_id's partition (of
    ``partitions``) drops them. Captures without a URL key are never older.
    """

    def __init__(self, spill_directory: str, partitions: int):
        super().__init__()
        self._spill_directory = spill_directory
        self._partitions = partitions

    def expand(self, inputs):
        directory, n = self._spill_directory, self._partitions
        captures = (
            inputs[CAPTURES]
            | "KeyedCaptures" >> beam.FlatMap(
                lambda c: [(c["key"], capture_value(c))] if c["key"] is not None else []).with_output_types(StrKeyed)
            | "SpillCapturesByUrl" >> beam.ParDo(SpillKeyedFn(directory, n, _CAPTURE)).with_output_types(IntKeyed))
        revisits = (
            inputs[REVISITS]
            | "KeyedRevisits" >> beam.Map(lambda r: (r["key"], revisit_value(r))).with_output_types(StrKeyed)
            | "SpillRevisitsByUrl" >> beam.ParDo(SpillKeyedFn(directory, n, _REVISIT)).with_output_types(IntKeyed))
        older = (
            (captures, revisits)
            | "AllUrlSpills" >> beam.Flatten()
            | "GroupSpillsByUrlBucket" >> GroupSpillFiles()
            | "OlderCaptures" >> beam.ParDo(_OlderCapturesFn(directory, n)).with_output_types(IntKeyed)
        )
        documents = inputs[CAPTURES] | "Documents" >> beam.Map(lambda capture: capture["document"])
        return {DOCUMENTS: documents, OLDER_CAPTURES: older}


def capture_value(capture: dict) -> tuple:
    """What choosing the newest capture needs of a capture (a spilled keyed record's value)."""
    document = capture["document"]
    return (capture["ts"], capture["digest"], document["doc_id"], document["source"], document["file"],
            document["position"])


def revisit_value(revisit: dict) -> tuple:
    return revisit["ts"], revisit["digest"], revisit["refers_ts"]


def older_captures(captures: list[tuple], revisits: list[tuple]) -> list[dict]:
    """The :data:`OLDER_CAPTURE` rows of one URL's captures (:func:`capture_value` tuples): all but the
    newest (:func:`~beam_pipeline.web.records.newest_capture`); none when the URL has only revisits."""
    if not captures:  # only revisits: the page's captures are in no file of the source
        return []
    items = [{"ts": ts, "digest": digest, "document": {"doc_id": doc_id, "source": source, "file": file,
                                                       "position": position}}
             for ts, digest, doc_id, source, file, position in captures]
    winner = newest_capture(items, [{"ts": ts, "digest": digest, "refers_ts": refers_ts}
                                    for ts, digest, refers_ts in revisits])
    return [item["document"] for item in items if item is not winner]


class _OlderCapturesFn(beam.DoFn):
    """(URL bucket, keyed spill files) -> (partition, spill file) of the older captures of its URLs."""

    def __init__(self, spill_directory: str, partitions: int):
        self._spill_directory = spill_directory
        self._partitions = partitions

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator[tuple[int, str]]:
        bucket, paths = keyed
        by_partition: dict[int, list[dict]] = {}
        for _key, parts in read_keyed_groups(paths):
            for row in older_captures(parts.get(_CAPTURE, []), parts.get(_REVISIT, [])):
                by_partition.setdefault(bucket_of(row["doc_id"], self._partitions), []).append(row)
        yield from write_spills(by_partition, self._spill_directory, f"{OLDER_CAPTURES}-{bucket:05d}",
                                OLDER_CAPTURE, older_capture_order)


def older_capture_order(row: dict) -> tuple:
    return row["doc_id"], row["file"], row["position"]


def read_older_captures(paths: Iterable[str]) -> dict[tuple[str, str, int], str]:
    """{(doc_id, file, position): source} of the older captures in the given spill files (each read once)."""
    return {older_capture_order(row): row["source"]
            for path in sorted(set(paths)) for row in read_partition_rows(path)}


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


def url_key(source: str, normalized_url: str) -> str:
    """Grouping key of URL-level dedup: captures meet only within their source."""
    return f"{source}{_KEY_SEPARATOR}{normalized_url}"
