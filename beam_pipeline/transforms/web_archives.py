"""The ingest branch of ``format: warc`` sources: byte-range splits, extraction, newest capture per URL.

Shape of the data::

    snapshot file entries {source, path, size, checksum}
      | VerifyAndSplit        -> {source, path, start, end}: byte ranges of split_bytes (checksum once per file)
      | SpreadSplits          (one split per worker, not one file)
      | ReadSplits            -> captures {document, key, ts, digest}   (main)
                                 revisits {key, ts, digest, refers_ts}  (newest_capture policy)
                                 dead letters                           (damage, with file and offset)
      | NewestCapturePerUrl   -> every capture's document row (DOCUMENT schema), for ingest's partitions;
                                 (partition, older capture) of every capture but the newest of its URL

The newest capture is chosen by the runner's ``CoGroupByKey`` on the URL key
of small records (time, digest, identity; no text): one group per URL, whose
older captures go, keyed by the partition of their doc_id, to the ingest task
of that partition, which leaves them out (ingest's ``CollapseRepeatedRecords``).
The text travels once, with the documents to their partition.

Accounting, per source (stage ``ingest``): every record of every split is
``in`` once; ``filtered:`` ``record_type``, ``revisit``, ``http_status``,
``content_type``, ``too_small``, ``too_large``, ``empty_text`` in ReadSplits;
``dead_letter`` for BadRecords; ``older_capture`` and ``passed`` by the ingest
stage's CollapseRepeatedRecords (which also counts ``repeated_record``).
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.config.corpus import SourceConfig
from beam_pipeline.records.accounting import COUNTS, Tally
from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.records.record_types import BadRecord
from beam_pipeline.sources.documents import make_document
from beam_pipeline.sources.snapshot import verify_file
from beam_pipeline.storage.schemas import dead_letter_row
from beam_pipeline.transforms.bundle_budget import BudgetedExpandFn, BundleBudget, bundle_budget
from beam_pipeline.transforms.keys import IntKeyed, StrKeyed
from beam_pipeline.web.archive_streams import plan_splits, sniff
from beam_pipeline.web.records import Filtered, Revisit, iter_web_records, newest_capture

DOCUMENTS, DEAD_LETTER, CAPTURES, REVISITS = "documents", "dead_letter", "captures", "revisits"
OLDER_CAPTURES = "older_captures"
_KEY_SEPARATOR = "\x1f"


class ReadWebArchives(beam.PTransform):
    """PBegin -> {"documents", "older_captures", "dead_letter", "counts"} for the snapshot files of
    ``format: warc`` sources: see :class:`NewestCapturePerUrl` for the first two; ``partitions`` is the
    ingest layer's partition count."""

    def __init__(
        self,
        files: list[dict],
        sources: dict[str, SourceConfig],
        *,
        max_record_bytes: int,
        partitions: int,
        stage: str = "ingest",
    ):
        super().__init__()
        self._files, self._sources = files, sources
        self._max_record_bytes, self._stage = max_record_bytes, stage
        self._partitions = partitions

    def expand(self, pbegin):
        splits = (
            pbegin
            | "WebArchiveFiles" >> beam.Create(self._files, reshuffle=False)
            | "SpreadWebArchives" >> beam.Reshuffle()
            | "VerifyAndSplit" >> beam.ParDo(_VerifyAndSplitFn(self._sources))
            | "SpreadSplits" >> beam.Reshuffle()
        )
        read = splits | "ReadSplits" >> beam.ParDo(
            _ReadSplitFn(self._sources, self._max_record_bytes, self._stage, bundle_budget(pbegin.pipeline))
        ).with_outputs(REVISITS, DEAD_LETTER, COUNTS, main=CAPTURES)
        newest = {CAPTURES: read[CAPTURES], REVISITS: read[REVISITS]} | "NewestCapturePerUrl" >> (
            NewestCapturePerUrl(self._partitions)
        )
        return {
            DOCUMENTS: newest[DOCUMENTS],
            OLDER_CAPTURES: newest[OLDER_CAPTURES],
            DEAD_LETTER: read[DEAD_LETTER],
            COUNTS: read[COUNTS],
        }


class NewestCapturePerUrl(beam.PTransform):
    """{captures, revisits} -> {"documents": the document row of every capture,
    "older_captures": (partition, {doc_id, source, file, position}) of every capture but the newest}.

    Of the captures of one (source, normalized URL), all but the newest are
    older captures: the ingest task of their doc_id's partition (of
    ``partitions``) drops them. Captures without a URL key are never older.
    """

    def __init__(self, partitions: int):
        super().__init__()
        self._partitions = partitions

    def expand(self, inputs):
        n = self._partitions
        captures = inputs[CAPTURES] | "KeyedCaptures" >> beam.FlatMap(
            lambda c: [(c["key"], capture_value(c))] if c["key"] is not None else []
        ).with_output_types(StrKeyed)
        revisits = inputs[REVISITS] | "KeyedRevisits" >> beam.Map(
            lambda r: (r["key"], revisit_value(r))
        ).with_output_types(StrKeyed)
        older = (
            {CAPTURES: captures, REVISITS: revisits}
            | "GroupByUrl" >> beam.CoGroupByKey()
            | "OlderCaptures"
            >> beam.FlatMap(
                lambda keyed: [
                    (bucket_of(row["doc_id"], n), row)
                    for row in older_captures(list(keyed[1][CAPTURES]), list(keyed[1][REVISITS]))
                ]
            ).with_output_types(IntKeyed)
        )
        documents = inputs[CAPTURES] | "Documents" >> beam.Map(lambda capture: capture["document"])
        return {DOCUMENTS: documents, OLDER_CAPTURES: older}


def capture_value(capture: dict) -> tuple:
    """What choosing the newest capture needs of a capture (no text)."""
    document = capture["document"]
    return (
        capture["ts"],
        capture["digest"],
        document["doc_id"],
        document["source"],
        document["file"],
        document["position"],
    )


def revisit_value(revisit: dict) -> tuple:
    return revisit["ts"], revisit["digest"], revisit["refers_ts"]


def older_captures(captures: list[tuple], revisits: list[tuple]) -> list[dict]:
    """The older captures ({doc_id, source, file, position}) of one URL's captures (:func:`capture_value`
    tuples): all but the newest (:func:`~beam_pipeline.web.records.newest_capture`); none when the URL has
    only revisits."""
    if not captures:  # only revisits: the page's captures are in no file of the source
        return []
    items = [
        {
            "ts": ts,
            "digest": digest,
            "document": {"doc_id": doc_id, "source": source, "file": file, "position": position},
        }
        for ts, digest, doc_id, source, file, position in captures
    ]
    winner = newest_capture(
        items, [{"ts": ts, "digest": digest, "refers_ts": refers_ts} for ts, digest, refers_ts in revisits]
    )
    return [item["document"] for item in items if item is not winner]


def older_capture_key(row: dict) -> tuple:
    """How an ingest task recognizes an older capture among its records."""
    return row["doc_id"], row["file"], row["position"]


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


class _ReadSplitFn(BudgetedExpandFn):
    """One byte range -> captures (main), revisits, dead letters and its counts (tagged); a bundle
    stops taking ranges once it has emitted its budget (:mod:`beam_pipeline.transforms.bundle_budget`)."""

    def __init__(self, sources: dict[str, SourceConfig], max_record_bytes: int, stage: str, budget: BundleBudget):
        super().__init__(budget)
        self._sources, self._max_record_bytes, self._stage = sources, max_record_bytes, stage

    def setup(self):
        self._tally = Tally(self._stage)

    def items(self, split: dict, start: int) -> Iterator:
        source = self._sources[split["source"]]
        config, path = source.extract, split["path"]
        keep_revisits = config.url_dedup and config.revisits == "newest_capture"
        items = iter_web_records(
            lambda: FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED),
            config,
            max_record_bytes=self._max_record_bytes,
            start=split["start"],
            end=split["end"],
        )
        for item in items:
            self._tally.entered(source.name)
            if isinstance(item, BadRecord):
                self._tally.dead_letter(source.name)
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTER,
                    dead_letter_row(
                        self._stage,
                        source=source.name,
                        file=path,
                        position=item.position,
                        byte_offset=item.byte_offset,
                        error=item.error,
                        raw_prefix=item.raw_prefix,
                    ),
                )
            elif isinstance(item, Filtered):
                self._tally.filtered(item.reason, source.name)
            elif isinstance(item, Revisit):
                self._tally.filtered("revisit", source.name)
                if keep_revisits and item.url_key is not None:
                    yield beam.pvalue.TaggedOutput(
                        REVISITS,
                        {
                            "key": url_key(source.name, item.url_key),
                            "ts": item.timestamp,
                            "digest": item.digest,
                            "refers_ts": item.refers_to_date,
                        },
                    )
            else:
                document = make_document(item.record, source, path)
                if document is None:
                    self._tally.filtered("empty_text", source.name)
                    continue
                key = url_key(source.name, item.url_key) if config.url_dedup and item.url_key else None
                yield {"document": document, "key": key, "ts": item.timestamp, "digest": item.digest}

    def settle(self) -> Iterator:
        return self._tally.tagged()


def url_key(source: str, normalized_url: str) -> str:
    """Grouping key of URL-level dedup: captures meet only within their source."""
    return f"{source}{_KEY_SEPARATOR}{normalized_url}"
