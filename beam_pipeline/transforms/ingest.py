"""Stage 1, ingest: snapshot files -> normalized documents with provenance.

Input: the snapshot manifest (files per source). Output: ``documents`` rows
(:data:`beam_pipeline.schemas.DOCUMENT`) and ``dead_letter`` rows. Each file is
read by :func:`beam_pipeline.readers.iter_records`, which decodes per record,
so one bad record costs that record only; a truncated compressed file keeps
every complete record and yields one dead letter for the truncation.

Before a file is parsed its checksum is compared with the snapshot: a changed
input stops the run (:class:`~beam_pipeline.snapshot.InputChangedError`).

``doc_id`` is hash(source, normalized text), so records repeated verbatim
within one source are one document: ``CollapseRepeatedRecords`` keeps the
first occurrence by (file, position) as the document's provenance and records
every other occurrence in the ``repeats`` output (nothing is lost; lineage
can list them). Equal texts from *different* sources stay separate documents
and are resolved by the exact-dedup stage.

The text is shuffled through files, not through the runner::

    files ─ read + normalize ─ spill by partition xxh3(doc_id) % n ─(paths)─ GroupByKey(partition)
          ─ per partition: read its spill files, keep first occurrences ─> documents, repeats partition

Web archives (``format: warc``) add the older captures of each URL, chosen
through files too (:class:`~beam_pipeline.web.transforms.NewestCapturePerUrl`),
which the task of their partition leaves out before it collapses repeats.

A worker holds at most ``SPILL_BYTES`` of text while reading and one
partition while collapsing, whatever the corpus size (docs/decisions.md,
"Joins without a shuffle").

Accounting per source: ``in`` = raw records (good or bad), ``passed`` =
documents, ``filtered:empty_text`` = records whose text is empty after
normalization, ``filtered:repeated_record`` = verbatim repeats within the
source, ``filtered:older_capture`` = web captures of a URL but its newest,
``dead_letter`` = records the reader could not decode (and the web filters
of :mod:`beam_pipeline.web.transforms`).
"""
from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline import schemas
from beam_pipeline.accounting import StageCounters
from beam_pipeline.config import CorpusConfig, SourceConfig
from beam_pipeline.hashing import content_hash, doc_id
from beam_pipeline.normalize import NORMALIZATION_VERSION, normalize_text
from beam_pipeline.readers import BadRecord, RawRecord, iter_records
from beam_pipeline.layers import join
from beam_pipeline.schemas import dead_letter_row
from beam_pipeline.snapshot import verify_file
from beam_pipeline.transforms.layer_io import SPILL, SpillByPartition, WrittenPartitions, read_spilled, \
    write_layer_partition
from beam_pipeline.web.transforms import OLDER_CAPTURES, ReadWebArchives, read_older_captures

STAGE = "ingest"
VERSION = f"1+{NORMALIZATION_VERSION}"
DOCUMENTS, REPEATS, DEAD_LETTER = "documents", "repeats", "dead_letter"
_RECORDS = "records"


def stage_config(config: CorpusConfig) -> dict:
    """The part of the config that determines the ingest layer's content."""
    return {"ingest": config.ingest.model_dump(mode="json"),
            "sources": [s.model_dump(mode="json", exclude={"uri": True, "extract": {"split_bytes"}})  # splits: no effect
                        for s in config.sources]}


class IngestSnapshot(beam.PTransform):
    """PBegin -> {"documents", "repeats": WrittenPartitions, "dead_letter": rows}.

    ``layer_path`` is the ingest layer's folder; its outputs get ``partitions`` partitions.
    """

    def __init__(self, config: CorpusConfig, manifest: dict, layer_path: str, partitions: int):
        super().__init__()
        self._layer_path = layer_path
        self._partitions = partitions
        self._sources = {s.name: s for s in config.sources}
        self._max_record_bytes = config.ingest.max_record_bytes
        self._files = [
            {"source": name, "path": entry["path"], "checksum": entry["checksum"]}
            for name, source in manifest["sources"].items()
            for entry in source["files"] if self._sources[name].format != "warc"
        ]
        self._web_files = [  # format warc: read in byte ranges (beam_pipeline/web, docs/web.md)
            {"source": name, "path": entry["path"], "checksum": entry["checksum"], "size": entry["size"]}
            for name, source in manifest["sources"].items()
            for entry in source["files"] if self._sources[name].format == "warc"
        ]

    def expand(self, pbegin):
        records = (
            pbegin
            | "SnapshotFiles" >> beam.Create(self._files)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadAndNormalize" >> beam.ParDo(
                ReadRecordsFn(self._sources, self._max_record_bytes)).with_outputs(DEAD_LETTER, main=DOCUMENTS)
        )
        read, dead_letter = (records[DOCUMENTS],), records[DEAD_LETTER]
        older = None
        if self._web_files:
            web = pbegin | "ReadWebArchives" >> ReadWebArchives(
                self._web_files, self._sources, max_record_bytes=self._max_record_bytes,
                spill_directory=join(self._layer_path, SPILL), partitions=self._partitions, stage=STAGE)
            # Not flattened with the other records: on the local runner a Flatten of two steps' outputs
            # is a buffer in the driver, text included. Each branch spills its own records.
            read += (web[DOCUMENTS],)
            dead_letter = (dead_letter, web[DEAD_LETTER]) | "WithWebDeadLetters" >> beam.Flatten()
            older = web[OLDER_CAPTURES]
        written = read | "CollapseRepeatedRecords" >> CollapseRepeatedRecords(self._layer_path, self._partitions,
                                                                              older_captures=older)
        return {DOCUMENTS: written[DOCUMENTS], REPEATS: written[REPEATS], DEAD_LETTER: dead_letter}


class CollapseRepeatedRecords(beam.PTransform):
    """Records -> {"documents", "repeats"}: partitions written under ``layer_path``, one document per
    doc_id (its first occurrence), every other occurrence a ``repeats`` row.

    ``older_captures``: (partition, spill file) of web captures that are not the
    newest of their URL (:class:`~beam_pipeline.web.transforms.NewestCapturePerUrl`);
    the task of the partition leaves those records out before it collapses.
    """

    def __init__(self, layer_path: str, partitions: int, older_captures=None):
        super().__init__()
        self._layer_path = layer_path
        self._partitions = partitions
        self._older_captures = older_captures

    def expand(self, record_sets):
        """``record_sets``: a tuple of record PCollections (ingest's readers), each spilled where it is read."""
        n, path = self._partitions, self._layer_path
        spilled = [records | f"SpillByPartition{'' if i == 0 else i + 1}" >> SpillByPartition(
            join(path, SPILL), n, schemas.DOCUMENT) for i, records in enumerate(record_sets)]
        spills = {_RECORDS: spilled[0] if len(spilled) == 1 else tuple(spilled) | "AllRecordSpills" >> beam.Flatten()}
        if self._older_captures is not None:
            spills[OLDER_CAPTURES] = self._older_captures
        written = (
            spills
            | "GroupSpillsByPartition" >> beam.CoGroupByKey()
            | "KeepFirstOccurrencesAndWrite" >> beam.ParDo(_KeepFirstOccurrencesFn(path, n)).with_outputs(
                REPEATS, main=DOCUMENTS)
        )
        return {DOCUMENTS: WrittenPartitions(written[DOCUMENTS]), REPEATS: WrittenPartitions(written[REPEATS])}


class _KeepFirstOccurrencesFn(beam.DoFn):
    """(partition, {records: spill paths, older_captures: spill paths}) -> sidecars of its documents
    and repeats partitions."""

    def __init__(self, layer_path: str, partitions: int):
        self._layer_path = layer_path
        self._partitions = partitions

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, keyed: tuple[int, dict]) -> Iterator:
        index, spills = keyed
        older = read_older_captures(spills.get(OLDER_CAPTURES, ()))
        documents, repeats = [], []
        for row in read_spilled(spills[_RECORDS]):  # by doc_id, then (file, position): first occurrence first
            if (row["doc_id"], row["file"], row["position"]) in older:
                self._counters.filtered("older_capture", row["source"])
                continue
            if documents and documents[-1]["doc_id"] == row["doc_id"]:
                self._counters.filtered("repeated_record", row["source"])
                repeats.append({"doc_id": row["doc_id"], "source": row["source"], "file": row["file"],
                                "position": row["position"], "byte_offset": row["byte_offset"], "url": row["url"]})
                continue
            self._counters.passed(row["source"])
            documents.append(row)
        yield write_layer_partition(join(self._layer_path, DOCUMENTS), index, self._partitions, documents,
                                    schemas.DOCUMENT)
        yield beam.pvalue.TaggedOutput(REPEATS, write_layer_partition(
            join(self._layer_path, REPEATS), index, self._partitions, repeats, schemas.REPEAT))


class ReadRecordsFn(beam.DoFn):
    """One snapshot file entry -> documents (main output) and dead letters (tagged)."""

    def __init__(self, sources: dict[str, SourceConfig], max_record_bytes: int):
        self._sources = sources
        self._max_record_bytes = max_record_bytes

    def setup(self):
        self._counters = StageCounters(STAGE)

    def process(self, entry: dict) -> Iterator:
        source = self._sources[entry["source"]]
        path = entry["path"]
        verify_file(path, entry["checksum"])
        records = iter_records(
            lambda: FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED),
            path, source.format,
            text_field=source.fields.text, url_field=source.fields.url, date_field=source.fields.date,
            license_field=source.fields.license, id_field=source.fields.id,
            max_record_bytes=self._max_record_bytes)
        for record in records:
            self._counters.entered(source.name)
            if isinstance(record, BadRecord):
                self._counters.dead_letter(source.name)
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter_row(
                    STAGE, source=source.name, file=path, position=record.position,
                    byte_offset=record.byte_offset, error=record.error, raw_prefix=record.raw_prefix))
                continue
            document = make_document(record, source, path)
            if document is None:
                self._counters.filtered("empty_text", source.name)
                continue
            yield document


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
