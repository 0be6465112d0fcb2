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

The documents go to their partition through the runner::

    files ─ read + normalize ─ (partition xxh3(doc_id) % n, row) ─┐
    web archives ─ ... ─ (partition, row); older captures ────────┴─ CoGroupByKey(partition)
          ─ per partition: sort, keep first occurrences ─> documents, repeats partition

Web archives (``format: warc``) add the older captures of each URL
(:class:`~beam_pipeline.web.transforms.NewestCapturePerUrl`), which the task
of their partition leaves out before it collapses repeats. A task holds one
partition (``layout.target_partition_bytes`` of text).

**After a kill** (:mod:`beam_pipeline.transforms.task_ledger`): the task of
partition ``i`` writes a task record after its documents and repeats
partitions (their sidecars and the counts of that step). A rerun of the same
layer keeps the finished partitions: rows of those partitions are dropped
before the ``CoGroupByKey`` (they are not moved, sorted or written again) and
each such partition's task, started by one marker element, replays its
sidecars and counts from its record. Reading and normalizing the files
restarts whole: a file's records go to every partition (by doc_id), so no
file is done before every partition is, and what a file yielded is not kept
between jobs (keeping it would be a copy of the shuffle's input in files of
our own). That step's counts (``in``, ``dead_letter``, ``filtered:empty_text``,
the web filters') and the dead letters are computed again, so the accounting
is exact.

Accounting per source: ``in`` = raw records (good or bad), ``passed`` =
documents, ``filtered:empty_text`` = records whose text is empty after
normalization, ``filtered:repeated_record`` = verbatim repeats within the
source, ``filtered:older_capture`` = web captures of a URL but its newest,
``dead_letter`` = records the reader could not decode (and the web filters
of :mod:`beam_pipeline.web.transforms`).
"""

from __future__ import annotations

import itertools
from typing import Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline import schemas
from beam_pipeline.accounting import COUNTS, Tally
from beam_pipeline.config import CorpusConfig, SourceConfig
from beam_pipeline.documents import make_document
from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import join
from beam_pipeline.normalize import NORMALIZATION_VERSION
from beam_pipeline.readers import BadRecord, iter_records
from beam_pipeline.schemas import dead_letter_row
from beam_pipeline.snapshot import verify_file
from beam_pipeline.transforms.bundle_budget import BundleBudget, ResumableExpandFn, bundle_budget
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.layer_io import WrittenPartitions, row_order, write_layer_partition
from beam_pipeline.transforms.task_ledger import TaskLedger, finished_partitions, replayed_counts, unfinished
from beam_pipeline.web.transforms import OLDER_CAPTURES, ReadWebArchives, older_capture_key

STAGE = "ingest"
VERSION = f"1+{NORMALIZATION_VERSION}"
DOCUMENTS, REPEATS, DEAD_LETTER = "documents", "repeats", "dead_letter"
_RECORDS, _WEB_RECORDS, _FINISHED = "records", "web_records", "finished"


def stage_config(config: CorpusConfig) -> dict:
    """The part of the config that determines the ingest layer's content."""
    return {
        "ingest": config.ingest.model_dump(mode="json"),
        "sources": [
            s.model_dump(mode="json", exclude={"uri": True, "extract": {"split_bytes"}})  # splits: no effect
            for s in config.sources
        ],
    }


class IngestSnapshot(beam.PTransform):
    """PBegin -> {"documents", "repeats": WrittenPartitions, "dead_letter": rows, "counts"}.

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
            for entry in source["files"]
            if self._sources[name].format != "warc"
        ]
        self._web_files = [  # format warc: read in byte ranges (beam_pipeline/web, docs/web.md)
            {"source": name, "path": entry["path"], "checksum": entry["checksum"], "size": entry["size"]}
            for name, source in manifest["sources"].items()
            for entry in source["files"]
            if self._sources[name].format == "warc"
        ]

    def expand(self, pbegin):
        n = self._partitions
        read = (
            pbegin
            | "SnapshotFiles" >> beam.Create(self._files, reshuffle=False)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadAndNormalize"
            >> beam.ParDo(
                ReadRecordsFn(self._sources, self._max_record_bytes, bundle_budget(pbegin.pipeline))
            ).with_outputs(DEAD_LETTER, COUNTS, main=DOCUMENTS)
        )
        records = {_RECORDS: read[DOCUMENTS] | "KeyByPartition" >> KeyByPartition(n)}
        dead_letter, counts = read[DEAD_LETTER], [read[COUNTS]]
        if self._web_files:
            web = pbegin | "ReadWebArchives" >> ReadWebArchives(
                self._web_files, self._sources, max_record_bytes=self._max_record_bytes, partitions=n, stage=STAGE
            )
            records[_WEB_RECORDS] = web[DOCUMENTS] | "KeyWebByPartition" >> KeyByPartition(n)
            records[OLDER_CAPTURES] = web[OLDER_CAPTURES]
            dead_letter = (dead_letter, web[DEAD_LETTER]) | "WithWebDeadLetters" >> beam.Flatten()
            counts.append(web[COUNTS])
        finished = finished_partitions(self._layer_path, n)  # by an earlier, killed run: replayed, not recomputed
        if finished:
            records = {
                tag: keyed | f"SkipFinished_{tag}" >> beam.Filter(unfinished, frozenset(finished))
                for tag, keyed in records.items()
            }
            records[_FINISHED] = pbegin | "FinishedPartitions" >> beam.Create(
                [(index, True) for index in finished]
            ).with_output_types(IntKeyed)
        written = records | "CollapseRepeatedRecords" >> CollapseRepeatedRecords(self._layer_path, n)
        return {
            DOCUMENTS: written[DOCUMENTS],
            REPEATS: written[REPEATS],
            DEAD_LETTER: dead_letter,
            COUNTS: (*counts, written[COUNTS]),
        }


class KeyByPartition(beam.PTransform):
    """PCollection[row] -> PCollection[(partition xxh3(doc_id) % n, row)] (an int key: a deterministic coder)."""

    def __init__(self, partitions: int):
        super().__init__()
        self._partitions = partitions

    def expand(self, rows):
        n = self._partitions
        return rows | "KeyByPartition" >> beam.Map(lambda row: (bucket_of(row["doc_id"], n), row)).with_output_types(
            IntKeyed
        )


class CollapseRepeatedRecords(beam.PTransform):
    """{"records" (and "web_records"): (partition, row), "older_captures": (partition, capture)}
    -> {"documents", "repeats": WrittenPartitions under ``layer_path``, "counts"}: one document per
    doc_id (its first occurrence), every other occurrence a ``repeats`` row; older web captures
    (:class:`~beam_pipeline.web.transforms.NewestCapturePerUrl`) left out."""

    def __init__(self, layer_path: str, partitions: int):
        super().__init__()
        self._layer_path = layer_path
        self._partitions = partitions

    def expand(self, keyed):
        written = (
            keyed
            | "GroupByPartition" >> beam.CoGroupByKey()
            | "KeepFirstOccurrencesAndWrite"
            >> beam.ParDo(_KeepFirstOccurrencesFn(self._layer_path, self._partitions)).with_outputs(
                REPEATS, COUNTS, main=DOCUMENTS
            )
        )
        return {
            DOCUMENTS: WrittenPartitions(written[DOCUMENTS]),
            REPEATS: WrittenPartitions(written[REPEATS]),
            COUNTS: written[COUNTS],
        }


class _KeepFirstOccurrencesFn(beam.DoFn):
    """(partition, {records, web_records, older_captures}) -> sidecars of its documents and repeats
    partitions, and its counts."""

    def __init__(self, layer_path: str, partitions: int):
        self._layer_path = layer_path
        self._partitions = partitions

    def setup(self):
        self._tally = Tally(STAGE)

    def process(self, keyed: tuple[int, dict]) -> Iterator:
        index, groups = keyed
        ledger = TaskLedger(self._layer_path, self._partitions)
        if groups.get(_FINISHED):  # finished by an earlier, killed run of this layer (transforms/task_ledger.py)
            yield from self._replay(index, ledger, groups)
            return
        older = {older_capture_key(row) for row in groups.get(OLDER_CAPTURES, ())}
        rows = sorted(itertools.chain(groups.get(_RECORDS, ()), groups.get(_WEB_RECORDS, ())), key=row_order)
        documents, repeats = [], []
        for row in rows:  # by doc_id, then (file, position): first occurrence first
            if older_capture_key(row) in older:
                self._tally.filtered("older_capture", row["source"])
                continue
            if documents and documents[-1]["doc_id"] == row["doc_id"]:
                self._tally.filtered("repeated_record", row["source"])
                repeats.append(
                    {
                        "doc_id": row["doc_id"],
                        "source": row["source"],
                        "file": row["file"],
                        "position": row["position"],
                        "byte_offset": row["byte_offset"],
                        "url": row["url"],
                    }
                )
                continue
            self._tally.passed(row["source"])
            documents.append(row)
        written = {
            DOCUMENTS: write_layer_partition(
                join(self._layer_path, DOCUMENTS), index, self._partitions, documents, schemas.DOCUMENT
            ),
            REPEATS: write_layer_partition(
                join(self._layer_path, REPEATS), index, self._partitions, repeats, schemas.REPEAT
            ),
        }
        counts = self._tally.take()
        ledger.write(index, written, counts, [])
        yield from _emitted(written, counts)

    def _replay(self, index: int, ledger: TaskLedger, groups: dict) -> Iterator:
        record = ledger.done(index)
        if record is None or any(groups.get(tag) for tag in (_RECORDS, _WEB_RECORDS, OLDER_CAPTURES)):
            raise RuntimeError(
                f"{STAGE}: partition {index} of {ledger.layer_path} was finished when the job was built, "
                f"but its task record or files are gone, or rows reached it"
            )
        yield from _emitted(record["outputs"], replayed_counts(record))


def _emitted(written: dict, counts: dict) -> Iterator:
    """What the task of a partition emits: its documents sidecar, tagged its repeats sidecar and counts."""
    yield written[DOCUMENTS]
    yield beam.pvalue.TaggedOutput(REPEATS, written[REPEATS])
    if counts:
        yield beam.pvalue.TaggedOutput(COUNTS, counts)


class ReadRecordsFn(ResumableExpandFn):
    """One snapshot file entry -> documents (main output), dead letters and its counts (tagged).

    A file's records are read in bundles of about ``budget`` bytes of documents
    (:mod:`beam_pipeline.transforms.bundle_budget`); a file resumed in a later bundle is read again
    from its start and its records before the resume point skipped (decoded, not counted), so a file
    of F bytes costs about F * F / (2 * budget) bytes of reading more: nothing while F is below the budget.
    """

    def __init__(self, sources: dict[str, SourceConfig], max_record_bytes: int, budget: BundleBudget):
        super().__init__(budget)
        self._sources = sources
        self._max_record_bytes = max_record_bytes

    def setup(self):
        self._counters = Tally(STAGE)

    def items(self, entry: dict, start: int) -> Iterator:
        source = self._sources[entry["source"]]
        path = entry["path"]
        if start == 0:  # once per file: a resumed part reads the file this job has already checked
            verify_file(path, entry["checksum"])
        records = iter_records(
            lambda: FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED),
            path,
            source.format,
            text_field=source.fields.text,
            url_field=source.fields.url,
            date_field=source.fields.date,
            license_field=source.fields.license,
            id_field=source.fields.id,
            max_record_bytes=self._max_record_bytes,
        )
        for record in itertools.islice(records, start, None):
            self._counters.entered(source.name)
            if isinstance(record, BadRecord):
                self._counters.dead_letter(source.name)
                yield beam.pvalue.TaggedOutput(
                    DEAD_LETTER,
                    dead_letter_row(
                        STAGE,
                        source=source.name,
                        file=path,
                        position=record.position,
                        byte_offset=record.byte_offset,
                        error=record.error,
                        raw_prefix=record.raw_prefix,
                    ),
                )
                continue
            document = make_document(record, source, path)
            if document is None:
                self._counters.filtered("empty_text", source.name)
            yield document  # None: an ordinal with no output

    def settle(self) -> Iterator:
        return self._counters.tagged()
