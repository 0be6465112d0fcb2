"""Export a dataset as a Megatron-LM indexed dataset (``<prefix>.bin`` + ``<prefix>.idx``).

Megatron-LM (``megatron/core/datasets/indexed_dataset.py``, the "MMap"
format) reads a flat token file and an index. One Megatron *sequence* here is
one document, **including its trailing EOS** (Megatron's own
``preprocess_data.py --append-eod`` does the same); one Megatron *document*
is one sequence, so ``document_indices`` is ``0, 1, ..., n``. Padding is not
exported: Megatron packs and pads at training time.

Documents are written in the dataset's shuffled order (``order="shuffled"``,
the default): every exported document sorted by the key that orders the
documents inside each shard, ``(stable_hash64(seed, "order", doc_id),
doc_id)`` (``transforms/tokenize_shard.shuffle_order``). Each shard's index is
already in that order, so the export merges the shards' streams (a k-way
merge holding one pending document per shard): domains and shards interleave
as one global shuffle, never the source-ordered curriculum of shard after
shard, domain after domain. ``order="shards"`` writes the order of before
issue 44: shards by name, each shard's documents in index order. The
``.idx`` layout, all little-endian::

    magic            9 bytes  b"MMIDIDX\\x00\\x00"
    version          uint64   1
    dtype code       uint8    8 = uint16, 4 = int32 (1 uint8, 2 int8, 3 int16, 5 int64, 6 float64, 7 float32)
    sequence count   uint64   n
    document count   uint64   n + 1 (length of document_indices)
    sizes            int32[n]     tokens per sequence (document + EOS)
    pointers         int64[n]     byte offset of each sequence in the .bin
    document_indices int64[n+1]   sequence index where each document starts, then n

``<prefix>.bin`` is the concatenation of the sequences in that dtype
(uint16 shards stay uint16; uint32 shards become int32). A small
``<prefix>.json`` records the dataset id, the order, the seed and the
shards, so sequence i can be traced back (the i-th document in that order).
"""

from __future__ import annotations

import errno
import heapq
import io
import json
import os
import struct
import sys

import numpy as np

from beam_pipeline.errors import EXIT_NOT_WRITABLE
from beam_pipeline.records.hashing import stable_hash64
from beam_pipeline.storage.layers import join, read_bytes, read_parquet

ORDERS = ("shuffled", "shards")  # the dataset's one shuffle across shards and domains; shard after shard
WRITE_BUFFER_BYTES = 8 << 20  # tokens gathered per write in the shuffled order
MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.float64): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.uint16): 8,
}


class ExportError(RuntimeError):
    """The dataset cannot be exported as asked."""


class ExportTargetError(ExportError):
    """The export's files cannot be written where asked (exit 4)."""


def megatron_dtype(shard_dtype: str) -> np.dtype:
    """Megatron's dtype for a shard dtype: uint16 stays, uint32 becomes int32 (no uint32 code)."""
    return np.dtype(np.uint16) if shard_dtype == "uint16" else np.dtype(np.int32)


def export_megatron(
    dataset: str, out_prefix: str, *, domains: list[str] | None = None, order: str = "shuffled"
) -> dict:
    """Write ``out_prefix.bin``/``.idx``/``.json`` from a dataset in ``order`` (:data:`ORDERS`); return the summary."""
    if order not in ORDERS:
        raise ExportError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    from beam_pipeline.storage.manifest import load_manifest
    from beam_pipeline.transforms.lineage import dataset_dir_of

    dataset_dir = dataset_dir_of(dataset)
    manifest = load_manifest(dataset_dir)
    shards = sorted(manifest["shards"], key=lambda s: s["name"])
    if domains:
        unknown = sorted(set(domains) - {s["domain"] for s in shards})
        if unknown:
            raise ExportError(f"no shards of domain(s) {unknown}; domains: {sorted({s['domain'] for s in shards})}")
        shards = [s for s in shards if s["domain"] in domains]
    source_dtype = np.dtype(manifest["tokenizer"]["dtype"]).newbyteorder("<")
    out_dtype = megatron_dtype(manifest["tokenizer"]["dtype"])
    sizes: list[np.ndarray] = []
    parent = os.path.dirname(os.path.abspath(out_prefix))
    bin_tmp, idx_tmp = f"{out_prefix}.bin.tmp-{os.getpid()}", f"{out_prefix}.idx.tmp-{os.getpid()}"
    try:
        os.makedirs(parent, exist_ok=True)
        with open(bin_tmp, "wb") as out:
            if order == "shuffled":
                sizes.append(_write_shuffled(out, dataset_dir, shards, manifest["seed"], source_dtype, out_dtype))
            for shard in shards if order == "shards" else ():
                tokens = np.frombuffer(read_bytes(join(dataset_dir, shard["tokens_file"])), dtype=source_dtype)
                index = read_parquet(
                    io.BytesIO(read_bytes(join(dataset_dir, shard["index_file"]))), ["token_start", "token_count"]
                )
                sizes.append(_document_sizes(shard, index))
                # documents are packed back to back (verify checks it): one slice holds them all
                out.write(tokens[: shard["tokens"]].astype(out_dtype.newbyteorder("<"), copy=False).tobytes())
        all_sizes = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        with open(idx_tmp, "wb") as out:
            out.write(index_bytes(all_sizes, out_dtype))
        os.replace(bin_tmp, f"{out_prefix}.bin")
        os.replace(idx_tmp, f"{out_prefix}.idx")
    except OSError as err:
        if not _about_target(err, out_prefix, parent):
            raise
        raise ExportTargetError(
            f"cannot write the export {out_prefix}.bin/.idx ({err.strerror or err}: {err.filename or parent}); "
            f"pass an out_prefix in a folder you can write"
        ) from None
    finally:
        for tmp in (bin_tmp, idx_tmp):
            if os.path.exists(tmp):
                os.remove(tmp)
    summary = {
        "format": "megatron-mmap-indexed-dataset",
        "version": VERSION,
        "dataset_id": manifest["dataset_id"],
        "dtype": str(out_dtype),
        "sequences": int(all_sizes.size),
        "tokens": int(all_sizes.sum()),
        "eos_included": True,
        "eos_id": manifest["tokenizer"]["eos_id"],
        "order": order,
        "order_key": 'ascending (stable_hash64(seed, "order", doc_id), doc_id) over every exported document'
        if order == "shuffled"
        else "shards by name, then each shard's documents in index order",
        "seed": manifest["seed"],
        "shards": [{"name": s["name"], "documents": s["documents"]} for s in shards],
    }
    with open(f"{out_prefix}.json", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    return summary


def _about_target(err: OSError, out_prefix: str, parent: str) -> bool:
    """Whether an OSError is about the export's own files (not the dataset being read)."""
    if err.filename is None:
        return err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
    name = os.path.abspath(os.fsdecode(err.filename))
    return name.startswith(os.path.abspath(out_prefix)) or os.path.abspath(parent).startswith(name)


def _write_shuffled(out, dataset_dir: str, shards: list[dict], seed: int, source_dtype, out_dtype) -> np.ndarray:
    """Write every document of ``shards`` in the dataset's shuffled order; return their sizes (EOS included).

    A k-way merge of the shards' indexes, each already sorted by the order key: one pending document per
    shard, the shards' token files memory-mapped (read whole when remote)."""
    streams = []
    for i, shard in enumerate(shards):
        index = read_parquet(
            io.BytesIO(read_bytes(join(dataset_dir, shard["index_file"]))), ["doc_id", "token_start", "token_count"]
        )
        _document_sizes(shard, index)  # packed back to back, or ExportError
        streams.append(_ordered(shard, i, index, seed))
    tokens = [_tokens(join(dataset_dir, s["tokens_file"]), source_dtype) for s in shards]
    sizes, pending, pending_bytes = [], [], 0
    for _, _, i, start, size in heapq.merge(*streams):
        piece = tokens[i][start : start + size]
        pending.append(piece)
        sizes.append(size)
        pending_bytes += piece.nbytes
        if pending_bytes >= WRITE_BUFFER_BYTES:
            out.write(np.concatenate(pending).astype(out_dtype.newbyteorder("<"), copy=False).tobytes())
            pending, pending_bytes = [], 0
    if pending:
        out.write(np.concatenate(pending).astype(out_dtype.newbyteorder("<"), copy=False).tobytes())
    return np.asarray(sizes, dtype=np.int64)


def _ordered(shard: dict, i: int, index, seed: int):
    """(key, doc_id, shard i, token start, size with EOS) of a shard's documents, checked to ascend."""
    previous = None
    starts = index.column("token_start").to_pylist()
    counts = index.column("token_count").to_pylist()
    for doc_id, start, count in zip(index.column("doc_id").to_pylist(), starts, counts):
        key = (stable_hash64(seed, "order", doc_id), doc_id)
        if previous is not None and key <= previous:
            raise ExportError(f"shard {shard['name']}: documents are not in the dataset's order; run verify")
        previous = key
        yield key[0], doc_id, i, start, count + 1


def _tokens(path: str, dtype: np.dtype) -> np.ndarray:
    if "://" in path:
        return np.frombuffer(read_bytes(path), dtype=dtype)
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _document_sizes(shard: dict, index) -> np.ndarray:
    """Tokens per document including EOS, checking the documents are back to back from 0."""
    starts = index.column("token_start").to_numpy(zero_copy_only=False).astype(np.int64)
    sizes = index.column("token_count").to_numpy(zero_copy_only=False).astype(np.int64) + 1
    expected = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if sizes.size else sizes
    if not np.array_equal(starts, expected) or int(sizes.sum()) != shard["tokens"]:
        raise ExportError(f"shard {shard['name']}: documents are not packed back to back; run verify")
    return sizes


def index_bytes(sizes: np.ndarray, dtype: np.dtype) -> bytes:
    """The ``.idx`` file for sequences of ``sizes`` tokens, one document per sequence."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.size and int(sizes.max()) > np.iinfo(np.int32).max:
        raise ExportError("a document is longer than Megatron's int32 sequence length")
    pointers = np.zeros(sizes.size, dtype="<i8")
    pointers[1:] = np.cumsum(sizes)[:-1] * dtype.itemsize
    document_indices = np.arange(sizes.size + 1, dtype="<i8")
    buffer = io.BytesIO()
    buffer.write(MAGIC)
    buffer.write(struct.pack("<Q", VERSION))
    buffer.write(struct.pack("<B", DTYPE_CODES[np.dtype(dtype)]))
    buffer.write(struct.pack("<Q", sizes.size))
    buffer.write(struct.pack("<Q", document_indices.size))
    buffer.write(sizes.astype("<i4").tobytes())
    buffer.write(pointers.tobytes())
    buffer.write(document_indices.tobytes())
    return buffer.getvalue()


def cli_export_megatron(args) -> int:
    """``python -m beam_pipeline export-megatron DATASET OUT_PREFIX [--domain D ...]``."""
    try:
        summary = export_megatron(
            args.dataset, args.out_prefix, domains=args.domain, order=getattr(args, "order", "shuffled")
        )
    except ExportTargetError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_NOT_WRITABLE
    except (ExportError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(
        f"wrote {args.out_prefix}.bin and .idx: {summary['sequences']} documents (one Megatron sequence each, "
        f"EOS included), {summary['tokens']} tokens, dtype {summary['dtype']}, in the {summary['order']} order"
    )
    print(f"megatron: --data-path {args.out_prefix}")
    return 0
