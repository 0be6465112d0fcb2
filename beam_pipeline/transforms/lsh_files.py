"""Near dedup through files: LSH buckets spilled by key, signatures looked up by partition.

Near dedup's per-document collections used to travel through the runner's
``GroupByKey``: 16 band keys per document, and each document's MinHash
payload joined to the candidate pairs. On the local runner a worker receives
its whole share of a grouping as one message, so its memory grew with the
corpus (0.85 -> 1.32 GB per worker from 278 MB to 1 GB of text). Here the
same groupings go through files, as the scorers' joins do
(:mod:`beam_pipeline.transforms.layer_io`):

* **LSH records** (band keys of MinHash, block keys of SimHash) are written
  by the task that signed the documents (or read a previous version's
  signatures) to spill files, one per bucket ``key % count``
  (:func:`spill_lsh_records`). Only (bucket, file name) pairs go through a
  ``GroupByKey``; one task per bucket reads its files, sorts them by key and
  hands each key's entries to the bucket logic (:class:`LshBucketFilesFn`).
  A file is named by the digest of its bytes, so a retried task rewrites the
  same file, and a file named twice is read once.
* **Signatures** are read back from the partitions the signing tasks wrote
  (:class:`SignatureFiles`): a document's signature is in partition
  ``xxh3(doc_id) % n`` of its layer, so a pair is routed to that partition
  and the task reading it attaches the payload. Documents of earlier
  versions (``near_dedup.against``) are looked up in their layers the same
  way, with those layers' partition counts.

* **Candidate pairs** (up to one per band and near-duplicate document: a
  document that collides with its anchor in all 16 bands makes 16 copies of
  the pair) go through files too (:class:`SpillPairsFn`): to the partition
  of the first document's signature, whose task drops repeats and attaches
  the payload, then to the partition of the second's, whose task decides.

* **Cluster assignment** reads keyed records (:data:`KEYED_RECORD`): the
  members, cluster labels, previous-version members and repeated spans of
  the documents of a partition are spilled to that partition
  (:class:`SpillKeyedFn`), whose task assembles them; the clustered entries
  are spilled to the bucket of their cluster label, whose task chooses the
  representatives.

What still goes through the runner: file names, and elements that go from
the task that makes them straight to the one that spills them (verified
edges, pairs to check against a representative), never grouped.
"""
from __future__ import annotations

import dataclasses
import io
import json
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.hashing import bucket_of
from beam_pipeline.layers import arrow_table_bytes, read_partition_rows, read_segment, table_bytes, \
    write_spill_blocks
from beam_pipeline.transforms.layer_io import BufferedSpillFn

#: One LSH record of a spill file: a band (MinHash) or block (SimHash) key of one document.
#: ``previous``: the document is of an earlier version; its source, rank and date then
#: make its member (the representative order), which the bucket passes on (null for
#: this corpus's documents). ``simhash``: the fingerprint, in block records only.
LSH_RECORD = pa.schema([
    ("key", pa.int64()),
    ("doc_id", pa.string()),
    ("previous", pa.bool_()),
    ("source", pa.string()),
    ("source_rank", pa.int32()),
    ("date", pa.string()),
    ("simhash", pa.uint64()),
])

#: The columns of a signature row that verification reads (``PairCheck``'s payload).
PAYLOAD_COLUMNS = ["minhash", "simhash", "shingles"]

#: A pair on its way to verification: its documents, what travels with it (``carry``,
#: canonical JSON), and once attached, the layer and payload of ``a``'s signature.
PAIR_RECORD = pa.schema([
    ("a", pa.string()),
    ("b", pa.string()),
    ("carry", pa.string()),
    ("layer", pa.int32()),
    ("minhash", pa.binary()),
    ("simhash", pa.uint64()),
    ("shingles", pa.binary()),
])

#: Pairs a spilling worker buffers before it writes them (bounds its memory, ~100 MB).
SPILL_PAIRS = 250_000


def spill_lsh_records(rows: list[dict], keys_column: str, previous: bool, count: int,
                      directory: str, prefix: str) -> Iterator[tuple[int, str]]:
    """Signature rows -> (bucket, spill file path) per non-empty bucket ``key % count``.

    Every key in ``row[keys_column]`` (``band_keys`` or ``simhash_keys``, non-negative
    63-bit ints) becomes one record; a file holds one bucket's records of ``rows``,
    sorted by (key, doc_id), as lz4 Parquet named ``<prefix>-<bucket>-<digest>``.
    """
    lengths = [len(row[keys_column]) for row in rows]
    if not sum(lengths):
        return

    def repeated(column: str, needed: bool = True) -> list:
        """The column for every key; null where it is not needed (only a previous version's
        documents need their source, rank and date, to make their member in the bucket)."""
        if not needed:
            return [None] * sum(lengths)
        return [row[column] for row, n in zip(rows, lengths) for _ in range(n)]

    keys = np.fromiter((key for row in rows for key in row[keys_column]), dtype=np.int64, count=sum(lengths))
    table = pa.table({
        "key": pa.array(keys, pa.int64()), "doc_id": repeated("doc_id"),
        "previous": pa.array(np.full(keys.size, previous), pa.bool_()), "source": repeated("source", previous),
        "source_rank": repeated("source_rank", previous), "date": repeated("date", previous),
        "simhash": repeated("simhash", keys_column == "simhash_keys"),
    }, schema=LSH_RECORD)
    yield from write_table_spills(table, keys % count, ["key", "doc_id"], directory, prefix)


def write_table_spills(table: pa.Table, targets: np.ndarray, order: list[str], directory: str,
                       prefix: str) -> Iterator[tuple[int, str]]:
    """(target, segment) of one lz4 Parquet block per distinct value of ``targets`` (an int per row of
    ``table``): that target's rows sorted by the ``order`` columns, all in one spill file
    (:func:`~beam_pipeline.layers.write_spill_blocks`) named ``<prefix>-<digest>``."""
    blocks = []
    for target in np.unique(targets).tolist():
        part = table.take(np.flatnonzero(targets == target)).sort_by([(column, "ascending") for column in order])
        blocks.append((target, arrow_table_bytes(part, compression="lz4")))
    yield from write_spill_blocks(directory, prefix, blocks)


def read_spill_table(paths: Iterable[str], schema: pa.Schema, order: list[str]) -> pa.Table | None:
    """The rows of the given spill files (each file read once) as one table sorted by the
    ``order`` columns (ascending), or None when there are no files."""
    tables = [pq.read_table(io.BytesIO(read_segment(path)), schema=schema) for path in sorted(set(paths))]
    if not tables:
        return None
    return pa.concat_tables(tables).sort_by([(column, "ascending") for column in order])


def key_runs(keys: list) -> Iterator[tuple[int, int]]:
    """(start, end) of every run of equal consecutive values of ``keys``."""
    start = 0
    for end in range(1, len(keys) + 1):
        if end == len(keys) or keys[end] != keys[start]:
            yield start, end
            start = end


def read_lsh_buckets(paths: Iterable[str]) -> Iterator[tuple[int, list[dict]]]:
    """(key, [record]) for every key of one bucket's spill files (each file read once), by key.

    Records of one key come sorted by (doc_id, previous): the order is the same
    whatever the bundles that wrote the files.
    """
    table = read_spill_table(paths, LSH_RECORD, ["key", "doc_id", "previous"])
    if table is None:
        return
    keys = table.column("key").to_numpy()
    starts = np.concatenate([[0], np.flatnonzero(np.diff(keys)) + 1, [keys.size]]).tolist()
    # column lists, not one dict per record: a bucket holds ~16 records per document of a partition
    columns = {name: table.column(name).to_pylist() for name in LSH_RECORD.names if name != "key"}
    del table
    for start, end in zip(starts, starts[1:]):
        yield int(keys[start]), [{name: values[i] for name, values in columns.items()} for i in range(start, end)]


class LshBucketFilesFn(beam.DoFn):
    """(bucket, [spill file paths]) -> what ``bucket_fn`` yields for each key of the bucket.

    ``bucket_fn`` is the DoFn that processes one ``(key, entries)`` group
    (``MinHashBucketFn`` or ``SimHashBucketFn`` of
    :mod:`~beam_pipeline.transforms.near_dedup`); ``entry_of`` turns a spilled
    record into its entry.
    """

    def __init__(self, bucket_fn: beam.DoFn, entry_of):
        self._bucket_fn = bucket_fn
        self._entry_of = entry_of

    def setup(self):
        self._bucket_fn.setup()

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator:
        entry_of = self._entry_of
        for key, records in read_lsh_buckets(keyed[1]):
            yield from self._bucket_fn.process((key, [entry_of(record) for record in records]))


@dataclasses.dataclass(frozen=True)
class SignatureFiles:
    """Where a document's signature is: ``layers[0]`` holds the partition paths this job
    writes (this corpus), the others those of earlier versions' layers.

    A layer with ``n`` partitions holds doc_id's row in partition ``xxh3(doc_id) % n``,
    as every layer of a build does (:class:`~beam_pipeline.transforms.layer_io.WriteLayerOutput`).
    """

    layers: tuple[tuple[str, ...], ...]

    def partitions_of(self, doc_id: str) -> list[tuple[int, int]]:
        """(layer, partition) of every layer that could hold ``doc_id``."""
        return [(layer, bucket_of(doc_id, len(paths))) for layer, paths in enumerate(self.layers) if paths]

    @staticmethod
    def lookup_key(layer: int, partition: int) -> int:
        """(layer, partition) as one int grouping key (VarIntCoder: deterministic, unlike a tuple's)."""
        return layer << 32 | partition

    @staticmethod
    def layer_and_partition(key: int) -> tuple[int, int]:
        return key >> 32, key & 0xFFFFFFFF

    def this_corpus_partition(self, doc_id: str) -> int:
        return bucket_of(doc_id, len(self.layers[0]))

    def payloads(self, layer: int, partition: int, doc_ids: set[str]) -> dict[str, tuple]:
        """{doc_id: (minhash, simhash, shingles)} of the ``doc_ids`` in that partition."""
        with FileSystems.open(self.layers[layer][partition]) as f:
            table = pq.read_table(f, columns=["doc_id", *PAYLOAD_COLUMNS])
        table = table.filter(pc.is_in(table.column("doc_id"), value_set=pa.array(sorted(doc_ids), pa.string())))
        return {row["doc_id"]: tuple(row[c] for c in PAYLOAD_COLUMNS) for row in table.to_pylist()}


# --- pairs through files ------------------------------------------------------------------

def encode_carry(carry) -> str | None:
    """What travels with a pair (None, or nested tuples of str/int/float/bool) as canonical JSON."""
    return None if carry is None else json.dumps(carry, separators=(",", ":"), ensure_ascii=False)


def decode_carry(text: str | None):
    """The inverse of :func:`encode_carry`: JSON arrays come back as tuples."""
    return None if text is None else _frozen(json.loads(text))


def _frozen(value):
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def write_spills(by_target: dict[int, list[dict]], directory: str, prefix: str, schema: pa.Schema,
                 order) -> Iterator[tuple[int, str]]:
    """(target, segment) of one lz4 Parquet block of ``schema`` rows per target, rows sorted by
    ``order``, all in one spill file (:func:`~beam_pipeline.layers.write_spill_blocks`).

    The file is named by the digest of its bytes: a retried task rewrites the same file.
    """
    blocks = [(target, table_bytes(sorted(rows, key=order), schema, compression="lz4"))
              for target, rows in sorted(by_target.items())]
    yield from write_spill_blocks(directory, prefix, blocks)


def write_pair_spills(by_target: dict[int, list[dict]], directory: str, prefix: str) -> Iterator[tuple[int, str]]:
    """(target, path) of one spill file of :data:`PAIR_RECORD` rows per target, named by its digest."""
    return write_spills(by_target, directory, prefix, PAIR_RECORD,
                        lambda r: (r["a"], r["b"], r["carry"] or "", r.get("layer") or 0))


def read_pair_spills(paths: Iterable[str]) -> Iterator[dict]:
    """Every pair row of the given spill files, each file once."""
    for path in sorted(set(paths)):
        yield from read_partition_rows(path)


class SpillPairsFn(BufferedSpillFn):
    """(a, b, carry) -> (lookup key, spill file) per layer of ``files`` that could hold ``a``'s signature.

    Buffers up to :data:`SPILL_PAIRS` pairs per bundle, then writes one block per
    lookup key (:meth:`SignatureFiles.lookup_key`) in one spill file; the runner moves block names.
    """

    def __init__(self, files: "SignatureFiles", directory: str, prefix: str):
        self._files = files
        self._directory = directory
        self._prefix = prefix

    def targets(self, pair: tuple) -> Iterable[tuple[int, dict]]:
        a, b, carry = pair
        row = {"a": a, "b": b, "carry": encode_carry(carry)}
        return [(self._files.lookup_key(*at), row) for at in self._files.partitions_of(a)]

    def limit(self) -> int:
        return SPILL_PAIRS

    def write(self, buffers: dict[int, list[dict]]) -> Iterator[tuple[int, str]]:
        return write_pair_spills(buffers, self._directory, self._prefix)


class AttachFirstFn(beam.DoFn):
    """(lookup key, pair spill files) -> (partition of b, spill file) of the distinct pairs, each with
    ``a``'s layer and payload (null when that partition has no signature of ``a``)."""

    def __init__(self, files: "SignatureFiles", directory: str, prefix: str):
        self._files = files
        self._directory = directory
        self._prefix = prefix

    def process(self, keyed: tuple[int, Iterable[str]]) -> Iterator[tuple[int, str]]:
        layer, partition = self._files.layer_and_partition(keyed[0])
        pairs = {(r["a"], r["b"], r["carry"]) for r in read_pair_spills(keyed[1])}
        payloads = self._files.payloads(layer, partition, {a for a, _, _ in pairs})
        by_target: dict[int, list[dict]] = {}
        for a, b, carry in pairs:
            minhash, simhash, shingles = payloads.get(a, (None, None, None))
            found = a in payloads
            by_target.setdefault(self._files.this_corpus_partition(b), []).append({
                "a": a, "b": b, "carry": carry, "layer": layer if found else None,
                "minhash": minhash, "simhash": simhash, "shingles": shingles})
        yield from write_pair_spills(by_target, self._directory, f"{self._prefix}-{keyed[0]}")


# --- cluster assignment through files -------------------------------------------------------

#: A keyed record on its way to the task of its key's bucket: ``kind`` says what it is
#: (a member, a cluster label, ...), ``value`` is the value as canonical JSON (:func:`encode_carry`).
KEYED_RECORD = pa.schema([
    ("key", pa.string()),
    ("kind", pa.string()),
    ("value", pa.string()),
])

#: Keyed records a spilling worker buffers before it writes them.
SPILL_KEYED = 250_000


def keyed_record(key: str, kind: str, value) -> dict:
    return {"key": key, "kind": kind, "value": encode_carry(value)}


def write_keyed_spills(by_target: dict[int, list[dict]], directory: str, prefix: str) -> Iterator[tuple[int, str]]:
    """(target, path) of one spill file of :data:`KEYED_RECORD` rows per target."""
    return write_spills(by_target, directory, prefix, KEYED_RECORD, lambda r: (r["key"], r["kind"], r["value"]))


def read_keyed_groups(paths: Iterable[str]) -> Iterator[tuple[str, dict[str, list]]]:
    """(key, {kind: [decoded value, ...]}) for every key of the given spill files (each file
    read once), by key; the values of a kind come in the order of their JSON text, so the
    groups are the same whatever the bundles that wrote the files."""
    table = read_spill_table(paths, KEYED_RECORD, KEYED_RECORD.names)
    if table is None:
        return
    keys, kinds, values = (table.column(name).to_pylist() for name in KEYED_RECORD.names)
    del table
    for start, end in key_runs(keys):
        parts: dict[str, list] = {}
        for i in range(start, end):
            parts.setdefault(kinds[i], []).append(decode_carry(values[i]))
        yield keys[start], parts


class SpillKeyedFn(BufferedSpillFn):
    """(key, value) -> (bucket, spill file): the record goes to bucket ``xxh3(key) % count``
    (for a doc_id key, the partition that holds the document), tagged ``kind``."""

    def __init__(self, directory: str, count: int, kind: str):
        self._directory = directory
        self._count = count
        self._kind = kind

    def targets(self, keyed: tuple) -> Iterable[tuple[int, dict]]:
        key, value = keyed
        return [(bucket_of(key, self._count), keyed_record(key, self._kind, value))]

    def limit(self) -> int:
        return SPILL_KEYED

    def write(self, buffers: dict[int, list[dict]]) -> Iterator[tuple[int, str]]:
        return write_keyed_spills(buffers, self._directory, self._kind)
