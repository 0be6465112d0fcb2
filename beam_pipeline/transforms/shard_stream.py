"""Writing one token shard as a stream, in bounded memory.

A shard is about a gigabyte of tokens (``tokenize.shard_tokens``), more than a
worker should hold. Its documents arrive from the runner's grouping in no
particular order and must be written in the shard's order, a pure function of
(seed, doc_id) (:func:`~beam_pipeline.transforms.tokenize_shard.shuffle_order`).
:class:`SpillSorter` is an external merge sort: documents are buffered up to
``memory_bytes``, each full buffer is sorted and written to a local run file,
and the runs are merged lazily (``heapq.merge``). :func:`write_packed_shard`
consumes the merged stream: it writes each document's tokens and its EOS
straight to the shard file (through a small write buffer), pads the end to a
whole sequence and hashes the bytes as they go. Only the shard's index (four
small fields per document, kept as columns) is kept whole, to be written as
one Parquet table.

A takedown re-packs a shard without some documents through the same
writer (``dataset/takedown.py``), reading the old shard a document at a time.
"""

from __future__ import annotations

import array
import hashlib
import heapq
import os
import struct
import tempfile
import uuid
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import canonical_json, sha256_bytes
from beam_pipeline.storage.layers import arrow_table_bytes, join, write_bytes_atomic
from beam_pipeline.storage.schemas import SHARD_INDEX

#: A spilled document: order hash, doc_id length, source length, token bytes length; then the three.
_RECORD = struct.Struct("<QHHI")
#: Bytes of tokens gathered before a write to the shard file.
WRITE_BUFFER_BYTES = 8 << 20

Item = tuple[tuple[int, str], str, np.ndarray]  # ((order hash, doc_id), source, the document's token ids)


class SpillSorter:
    """Sorts ``(order key, source, tokens)`` items by order key (tokens given as little-endian uint32 bytes,
    :data:`~beam_pipeline.transforms.tokenize_shard.TOKEN_WIRE_DTYPE`), holding at most about ``memory_bytes``
    of them in memory; the rest wait in sorted run files under ``directory`` (a fresh temporary folder).

    Use as a context manager: the run files are deleted on exit.
    """

    def __init__(self, memory_bytes: int, directory: str | None = None):
        self._memory = memory_bytes
        self._buffer: list[tuple[tuple[int, str], str, bytes]] = []
        self._buffered = 0
        self._runs: list[str] = []
        self._directory = tempfile.mkdtemp(prefix="shard-sort-", dir=directory)
        self.spilled_runs = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for path in self._runs:
            os.remove(path)
        os.rmdir(self._directory)
        return False

    def add(self, key: tuple[int, str], source: str, tokens: bytes) -> None:
        self._buffer.append((key, source, tokens))
        self._buffered += len(tokens) + len(key[1]) + len(source) + 100  # + the tuple's own overhead
        if self._buffered >= self._memory:
            self._spill()

    def _spill(self) -> None:
        self._buffer.sort(key=lambda item: item[0])
        path = os.path.join(self._directory, f"run-{len(self._runs):05d}")
        with open(path, "wb") as f:
            for (order, doc_id), source, tokens in self._buffer:
                doc, src = doc_id.encode("utf-8"), source.encode("utf-8")
                f.write(_RECORD.pack(order, len(doc), len(src), len(tokens)))
                f.write(doc)
                f.write(src)
                f.write(tokens)
        self._runs.append(path)
        self.spilled_runs += 1
        self._buffer, self._buffered = [], 0

    def sorted_items(self) -> Iterator[Item]:
        """Every item added, by order key (runs and the in-memory rest merged lazily)."""
        self._buffer.sort(key=lambda item: item[0])
        streams = [_read_run(path) for path in self._runs] + [iter(self._buffer)]
        for key, source, tokens in heapq.merge(*streams, key=lambda item: item[0]):
            yield key, source, np.frombuffer(tokens, dtype="<u4")


def _read_run(path: str) -> Iterator[tuple[tuple[int, str], str, bytes]]:
    with open(path, "rb", buffering=1 << 20) as f:
        while header := f.read(_RECORD.size):
            order, doc_len, src_len, tok_len = _RECORD.unpack(header)
            doc_id = f.read(doc_len).decode("utf-8")
            source = f.read(src_len).decode("utf-8")
            yield (order, doc_id), source, f.read(tok_len)


def write_packed_shard(
    directory: str, name: str, items: Iterable[Item], *, domain: str, eos_id: int, pad_id: int, seq_len: int, dtype: str
) -> dict:
    """Pack ``items`` (in the order given; their keys are not read) into ``<name>.bin`` as a stream: each document's tokens then EOS, padded to
    whole sequences of ``seq_len``; write ``<name>.idx.parquet`` and ``<name>.meta.json``; return the meta.
    Each file is written under a ``.tmp-`` name and renamed into place."""
    out_dtype = np.dtype(dtype).newbyteorder("<")
    eos = np.asarray([eos_id], dtype=np.uint32).astype(out_dtype).tobytes()
    tokens_path = join(directory, f"{name}.bin")
    tmp = join(directory, f".tmp-{name}.bin-{uuid.uuid4().hex}")
    digest = hashlib.sha256()
    index = {"doc_id": [], "source": [], "token_start": array.array("q"), "token_count": array.array("q")}
    cursor, written = 0, 0
    pending: list[bytes] = []
    pending_bytes = 0
    with FileSystems.create(tmp) as f:

        def flush():
            nonlocal pending, pending_bytes, written
            data = b"".join(pending)
            f.write(data)
            digest.update(data)
            written += len(data)
            pending, pending_bytes = [], 0

        for (_order, doc_id), source, ids in items:
            index["doc_id"].append(doc_id)
            index["source"].append(source)
            index["token_start"].append(cursor)
            index["token_count"].append(int(ids.size))
            data = ids.astype(out_dtype, copy=False).tobytes()
            pending += (data, eos)
            pending_bytes += len(data) + len(eos)
            cursor += int(ids.size) + 1
            if pending_bytes >= WRITE_BUFFER_BYTES:
                flush()
        sequences = max(1, -(-cursor // seq_len))
        pad = sequences * seq_len - cursor
        pending.append(np.full(pad, pad_id, dtype=np.uint32).astype(out_dtype).tobytes())
        flush()
    if FileSystems.exists(tokens_path):
        FileSystems.delete([tokens_path])
    FileSystems.rename([tmp], [tokens_path])

    index_bytes = arrow_table_bytes(
        pa.table(
            {name: pa.array(values, type=SHARD_INDEX.field(name).type) for name, values in index.items()},
            schema=SHARD_INDEX,
        )
    )
    write_bytes_atomic(join(directory, f"{name}.idx.parquet"), index_bytes)
    meta = {
        "name": name,
        "domain": domain,
        "tokens_file": f"{name}.bin",
        "tokens_sha256": digest.hexdigest(),
        "tokens_bytes": written,
        "index_file": f"{name}.idx.parquet",
        "index_sha256": sha256_bytes(index_bytes),
        "index_bytes": len(index_bytes),
        "documents": len(index["doc_id"]),
        "tokens": cursor,
        "pad_tokens": pad,
        "sequences": sequences,
    }
    write_bytes_atomic(join(directory, f"{name}.meta.json"), canonical_json(meta))
    return meta
