"""Stage 1, ingest: snapshot files -> normalized documents with provenance.

Input: the snapshot manifest (files per source). Output: ``documents`` rows
(:data:`beam_pipeline.storage.schemas.DOCUMENT`) and ``dead_letter`` rows. Each file is
read by :func:`beam_pipeline.sources.readers.iter_records`, which decodes per record,
so one bad record costs that record only; a truncated compressed file keeps
every complete record and yields one dead letter for the truncation.

Before a file is parsed its checksum is compared with the snapshot: a changed
input stops the run (:class:`~beam_pipeline.sources.snapshot.InputChangedError`).

``doc_id`` is hash(source, normalized text), so records repeated verbatim
within one source are one document: ``CollapseRepeatedRecords`` keeps the
first occurrence by (file, position) as the document's provenance and records
every other occurrence in the ``repeats`` output (nothing is lost; lineage
can list them). Equal texts from *different* sources stay separate documents
and are resolved by the exact-dedup stage.

The documents go to their partition through the runner, in slices::

    files ─ read + normalize ─ (slice xxh3(doc_id) % (n x s), row) ─┐
    web archives ─ ... ─ (slice, row); older captures ──────────────┴─ CoGroupByKey(slice)
          ─ per slice: sort, keep first occurrences, write a piece ─> (partition, piece: path + counts)
          ─ GroupByKey(partition) ─ per partition: the pieces' rows ─> documents, repeats partition

A slice is a share of one output partition: slice key ``k = xxh3(doc_id) %
(n x s)`` is in partition ``k % n`` (the partition ``xxh3(doc_id) % n`` of
every layer, since ``n`` divides ``n x s``), and every copy of a doc_id is in
one slice, so a slice's task can keep first occurrences alone. Why slices:
a runner may hand a worker a grouping's whole group as one element (Beam's
Flink batch runner does, as one data-plane message), and a task's elements
can wait in the runner's memory while the worker handles the first one
(docs/flink.md, "What one element carries"); a group of one slice holds
``ingest.slice_bytes`` of text (1 MiB by default; ``s`` is derived from the
snapshot's estimated text per partition), where a partition's group held the
whole partition (~85 MB at 1 GB of text). The slices' tasks write their
documents and repeats to *pieces* in the layer's scratch folder
(:data:`beam_pipeline.storage.layers.SCRATCH`); the partition's task gets only the
pieces' paths and counts through the runner, reads the pieces, writes the
partition with the same :func:`write_layer_partition` as before (which sorts
its rows: the layer's bytes do not depend on the slices) and deletes them.

Web archives (``format: warc``) add the older captures of each URL
(:class:`~beam_pipeline.transforms.web_archives.NewestCapturePerUrl`), which the task
of their slice leaves out before it collapses repeats. A slice's task holds
one slice; a partition's task one partition (``layout.target_partition_bytes``
of text), read from files, as before.

**After a kill** (:mod:`beam_pipeline.transforms.task_ledger`): the task of
partition ``i`` writes a task record after its documents and repeats
partitions (their sidecars and the counts of its slices), then deletes its
pieces. A rerun of the same layer keeps the finished partitions: rows of
those partitions are dropped before the ``CoGroupByKey`` (they are not moved,
sorted or written again) and each such partition's task, started by one
marker element, replays its sidecars and counts from its record. Pieces a
killed run left are deleted with the rest of its unfinished work
(:func:`~beam_pipeline.transforms.task_ledger.clear_uncommitted`); the slices
of unfinished partitions are computed again. Reading and normalizing the files
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
of :mod:`beam_pipeline.transforms.web_archives`).
"""

from __future__ import annotations

import itertools
import math
from typing import Iterable, Iterator

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.config.corpus import CorpusConfig, SourceConfig
from beam_pipeline.records.accounting import COUNTS, Tally
from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.records.normalize import NORMALIZATION_VERSION
from beam_pipeline.sources.documents import make_document
from beam_pipeline.sources.readers import BadRecord, iter_records
from beam_pipeline.sources.snapshot import estimated_text_bytes, verify_file
from beam_pipeline.storage import schemas
from beam_pipeline.storage.layers import SCRATCH, join, part_name, read_bytes, remove_matching, write_bytes_atomic
from beam_pipeline.storage.schemas import dead_letter_row
from beam_pipeline.transforms.bundle_budget import BundleBudget, ResumableExpandFn, bundle_budget
from beam_pipeline.transforms.keys import IntKeyed
from beam_pipeline.transforms.layer_io import WrittenPartitions, row_order, write_layer_partition
from beam_pipeline.transforms.task_ledger import TaskLedger, finished_partitions, replayed_counts
from beam_pipeline.transforms.web_archives import OLDER_CAPTURES, ReadWebArchives, older_capture_key

STAGE = "ingest"
VERSION = f"1+{NORMALIZATION_VERSION}"
DOCUMENTS, REPEATS, DEAD_LETTER = "documents", "repeats", "dead_letter"
_RECORDS, _WEB_RECORDS, _FINISHED, _PIECES = "records", "web_records", "finished", "pieces"


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
        self._slices = slices_per_partition(estimated_text_bytes(manifest), partitions, config.ingest.slice_bytes)
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
        n, slices = self._partitions, self._slices
        read = (
            pbegin
            | "SnapshotFiles" >> beam.Create(self._files, reshuffle=False)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadAndNormalize"
            >> beam.ParDo(
                ReadRecordsFn(self._sources, self._max_record_bytes, bundle_budget(pbegin.pipeline))
            ).with_outputs(DEAD_LETTER, COUNTS, main=DOCUMENTS)
        )
        records = {_RECORDS: read[DOCUMENTS] | "KeyBySlice" >> KeyBySlice(n, slices)}
        dead_letter, counts = read[DEAD_LETTER], [read[COUNTS]]
        if self._web_files:
            web = pbegin | "ReadWebArchives" >> ReadWebArchives(
                self._web_files, self._sources, max_record_bytes=self._max_record_bytes, partitions=n, stage=STAGE
            )
            records[_WEB_RECORDS] = web[DOCUMENTS] | "KeyWebBySlice" >> KeyBySlice(n, slices)
            records[OLDER_CAPTURES] = (
                web[OLDER_CAPTURES]
                | "OlderCaptures" >> beam.Values()
                | "KeyOlderCapturesBySlice" >> KeyBySlice(n, slices)
            )
            dead_letter = (dead_letter, web[DEAD_LETTER]) | "WithWebDeadLetters" >> beam.Flatten()
            counts.append(web[COUNTS])
        finished = finished_partitions(self._layer_path, n)  # by an earlier, killed run: replayed, not recomputed
        replayed = None
        if finished:
            records = {
                tag: keyed | f"SkipFinished_{tag}" >> beam.Filter(_slice_unfinished, n, frozenset(finished))
                for tag, keyed in records.items()
            }
            replayed = pbegin | "FinishedPartitions" >> beam.Create(
                [(index, True) for index in finished]
            ).with_output_types(IntKeyed)
        written = records | "CollapseRepeatedRecords" >> CollapseRepeatedRecords(self._layer_path, n, replayed)
        return {
            DOCUMENTS: written[DOCUMENTS],
            REPEATS: written[REPEATS],
            DEAD_LETTER: dead_letter,
            COUNTS: (*counts, written[COUNTS]),
        }


def slices_per_partition(input_bytes: int, partitions: int, slice_bytes: int) -> int:
    """Slices of each output partition: about ``slice_bytes`` of the snapshot's (estimated) text each."""
    return max(1, math.ceil(input_bytes / (partitions * slice_bytes)))


class KeyBySlice(beam.PTransform):
    """PCollection[row] -> PCollection[(slice key xxh3(doc_id) % (n x s), row)] (an int key: a deterministic
    coder). The slice is in partition ``key % n``, the partition ``xxh3(doc_id) % n`` of every layer."""

    def __init__(self, partitions: int, slices: int):
        super().__init__()
        self._keys = partitions * slices

    def expand(self, rows):
        keys = self._keys
        return rows | "KeyBySlice" >> beam.Map(lambda row: (bucket_of(row["doc_id"], keys), row)).with_output_types(
            IntKeyed
        )


def _slice_unfinished(keyed: tuple, partitions: int, finished: frozenset) -> bool:
    """Whether a ``(slice key, value)`` pair is bound for a partition not in ``finished``."""
    return keyed[0] % partitions not in finished


class CollapseRepeatedRecords(beam.PTransform):
    """{"records" (and "web_records"): (slice key, row), "older_captures": (slice key, capture)}
    -> {"documents", "repeats": WrittenPartitions under ``layer_path``, "counts"}: one document per
    doc_id (its first occurrence), every other occurrence a ``repeats`` row; older web captures
    (:class:`~beam_pipeline.transforms.web_archives.NewestCapturePerUrl`) left out.

    Two groupings: by slice, whose tasks collapse the repeats and write pieces (a group the runner
    hands a worker as one element is a slice, ~``ingest.slice_bytes``, not a partition: docs/flink.md,
    "What one element carries"), then by partition, whose elements are small (the pieces' paths and
    counts) and whose tasks write the partitions from the pieces.

    ``replayed``: ``(partition, True)`` for each partition an earlier, killed run finished (none of
    its rows come here); its task replays it from its task record.
    """

    def __init__(self, layer_path: str, partitions: int, replayed=None):
        super().__init__()
        self._layer_path = layer_path
        self._partitions = partitions
        self._replayed = replayed

    def expand(self, keyed):
        pieces = (
            keyed
            | "GroupBySlice" >> beam.CoGroupByKey()
            | "KeepFirstOccurrences"
            >> beam.ParDo(_KeepFirstOccurrencesFn(self._layer_path, self._partitions)).with_output_types(IntKeyed)
        )
        by_partition = {_PIECES: pieces}
        if self._replayed is not None:
            by_partition[_FINISHED] = self._replayed
        written = (
            by_partition
            | "GroupByPartition" >> beam.CoGroupByKey()
            | "WritePartition"
            >> beam.ParDo(_WritePartitionFn(self._layer_path, self._partitions)).with_outputs(
                REPEATS, COUNTS, main=DOCUMENTS
            )
        )
        return {
            DOCUMENTS: WrittenPartitions(written[DOCUMENTS]),
            REPEATS: WrittenPartitions(written[REPEATS]),
            COUNTS: written[COUNTS],
        }


def piece_path(layer_path: str, index: int, partitions: int, key: int) -> str:
    """Where the slice of slice key ``key`` (in partition ``index`` of ``partitions``) writes its rows."""
    name = part_name(index, partitions).removesuffix(".parquet")
    return join(layer_path, SCRATCH, f"{name}.slice-{key // partitions:05d}.arrows")


def piece_bytes(documents: list[dict], repeats: list[dict]) -> bytes:
    """A slice's piece: its documents and its repeats as two Arrow IPC streams (the layer's schemas), the
    first's length first (8 bytes, little-endian). Arrow, not pickle: the package never unpickles
    (``tests/test_security.py``), and a scratch folder on a shared store is input like any other."""
    first = _ipc_stream(documents, schemas.DOCUMENT)
    return len(first).to_bytes(8, "little") + first + _ipc_stream(repeats, schemas.REPEAT)


def piece_rows(data: bytes) -> tuple[list[dict], list[dict]]:
    """The documents and repeats of a piece written by :func:`piece_bytes`."""
    size = int.from_bytes(data[:8], "little")
    buffer = pa.py_buffer(data)
    return (
        pa.ipc.open_stream(buffer.slice(8, size)).read_all().to_pylist(),
        pa.ipc.open_stream(buffer.slice(8 + size)).read_all().to_pylist(),
    )


def _ipc_stream(rows: list[dict], schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    return sink.getvalue().to_pybytes()


class _KeepFirstOccurrencesFn(beam.DoFn):
    """(slice key, {records, web_records, older_captures}) -> (partition, piece): the slice's documents
    (first occurrences) and repeats, sorted, written to a piece file; the element carries its path, its
    row counts and the slice's counts (the partition's task emits them: a replayed partition's counts come
    from its task record instead, so they are counted once either way)."""

    def __init__(self, layer_path: str, partitions: int):
        self._layer_path = layer_path
        self._partitions = partitions

    def setup(self):
        self._tally = Tally(STAGE)

    def process(self, keyed: tuple[int, dict]) -> Iterator[tuple[int, dict]]:
        key, groups = keyed
        index = key % self._partitions
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
        path = None
        if documents or repeats:  # a slice of older captures only has nothing to write
            path = piece_path(self._layer_path, index, self._partitions, key)
            write_bytes_atomic(path, piece_bytes(documents, repeats))
        yield index, {"slice": key // self._partitions, "path": path, "counts": self._tally.take()}


class _WritePartitionFn(beam.DoFn):
    """(partition, {pieces} or {finished}) -> sidecars of its documents and repeats partitions, and the
    counts of its slices; the pieces deleted once its task record is written."""

    def __init__(self, layer_path: str, partitions: int):
        self._layer_path = layer_path
        self._partitions = partitions

    def process(self, keyed: tuple[int, dict]) -> Iterator:
        index, groups = keyed
        ledger = TaskLedger(self._layer_path, self._partitions)
        pieces = sorted(groups.get(_PIECES, ()), key=lambda piece: piece["slice"])
        if groups.get(_FINISHED):  # finished by an earlier, killed run of this layer (transforms/task_ledger.py)
            yield from self._replay(index, ledger, pieces)
            return
        paths = [piece["path"] for piece in pieces if piece["path"] is not None]
        try:
            documents, repeats = _read_pieces(paths)
        except FileNotFoundError:
            # A retried attempt of this task, after an earlier attempt wrote its record and deleted the
            # pieces (a runner retries a task whose output it lost): the partition is written.
            if ledger.done(index) is None:
                raise
            yield from self._replay(index, ledger, [])
            return
        written = {
            DOCUMENTS: write_layer_partition(
                join(self._layer_path, DOCUMENTS), index, self._partitions, documents, schemas.DOCUMENT
            ),
            REPEATS: write_layer_partition(
                join(self._layer_path, REPEATS), index, self._partitions, repeats, schemas.REPEAT
            ),
        }
        counts: dict = {}
        for piece in pieces:
            for count_key, n in piece["counts"].items():
                counts[count_key] = counts.get(count_key, 0) + n
        ledger.write(index, written, counts, [])
        if paths:
            remove_matching(*paths)
        yield from _emitted(written, counts)

    def _replay(self, index: int, ledger: TaskLedger, pieces: list[dict]) -> Iterator:
        record = ledger.done(index)
        if record is None or pieces:
            raise RuntimeError(
                f"{STAGE}: partition {index} of {ledger.layer_path} was finished when the job was built, "
                f"but its task record or files are gone, or rows reached it"
            )
        yield from _emitted(record["outputs"], replayed_counts(record))


def _read_pieces(paths: Iterable[str]) -> tuple[list[dict], list[dict]]:
    """The documents and repeats of a partition's pieces, in slice order (each piece sorted)."""
    documents: list[dict] = []
    repeats: list[dict] = []
    for path in paths:
        try:
            data = read_bytes(path)
        except Exception as err:  # a Beam filesystem raises its own error for a missing file
            if not FileSystems.exists(path):
                raise FileNotFoundError(path) from err
            raise
        piece_documents, piece_repeats = piece_rows(data)
        documents.extend(piece_documents)
        repeats.extend(piece_repeats)
    return documents, repeats


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
