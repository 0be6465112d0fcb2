"""Megatron export, read back by a reader written here from the published format only."""
import json
import os
import struct

import numpy as np
import pyarrow.parquet as pq

from beam_pipeline.cli import commands as cli
from beam_pipeline.records.hashing import stable_hash64

#: Megatron-LM's dtype codes (megatron/core/datasets/indexed_dataset.py, DType)
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def read_megatron(prefix):
    """Minimal reader of the MMIDIDX v1 format: (sequence arrays, document_indices)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    version, = struct.unpack_from("<Q", idx, 9)
    code, = struct.unpack_from("<B", idx, 17)
    n_seq, n_doc = struct.unpack_from("<QQ", idx, 18)
    offset = 34
    sizes = np.frombuffer(idx, dtype="<i4", count=n_seq, offset=offset)
    offset += 4 * n_seq
    pointers = np.frombuffer(idx, dtype="<i8", count=n_seq, offset=offset)
    offset += 8 * n_seq
    doc_idx = np.frombuffer(idx, dtype="<i8", count=n_doc, offset=offset)
    offset += 8 * n_doc
    assert offset == len(idx), "trailing bytes in .idx"
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    assert data.nbytes == int(sizes.sum()) * dtype.itemsize
    sequences = [np.asarray(data[p // dtype.itemsize: p // dtype.itemsize + s]) for p, s in zip(pointers, sizes)]
    return version, code, sequences, doc_idx


def documents_from_shards(dataset, manifest, domains=None, order="shuffled"):
    """(doc tokens including EOS) in the dataset's shuffled order across shards and domains
    (``(xxh3(seed, "order", doc_id), doc_id)``, docs/format.md), or with ``order="shards"`` in shard-name
    order; from the published shard format."""
    out = []
    for shard in sorted(manifest["shards"], key=lambda s: s["name"]):
        if domains and shard["domain"] not in domains:
            continue
        tokens = np.fromfile(os.path.join(dataset, shard["tokens_file"]), dtype="<u2")
        for row in pq.read_table(os.path.join(dataset, shard["index_file"])).to_pylist():
            key = (stable_hash64(manifest["seed"], "order", row["doc_id"]), row["doc_id"])
            out.append((key, shard["domain"], tokens[row["token_start"]: row["token_start"] + row["token_count"] + 1]))
    if order == "shuffled":
        out.sort(key=lambda entry: entry[0])
    return [tokens for _, _, tokens in out]


def domains_in_order(manifest, order="shuffled"):
    keyed = [((stable_hash64(manifest["seed"], "order", doc), doc), shard["domain"])
             for shard in sorted(manifest["shards"], key=lambda s: s["name"])
             for doc in pq.read_table(os.path.join(manifest["_dir"], shard["index_file"])).column("doc_id").to_pylist()]
    return [domain for _, domain in (sorted(keyed) if order == "shuffled" else keyed)]


def test_every_document_round_trips(built, tmp_path, capsys):
    prefix = str(tmp_path / "megatron" / "sample_text_document")
    assert cli.main(["export-megatron", built["dataset"], prefix]) == 0
    assert "--data-path" in capsys.readouterr().out
    version, code, sequences, doc_idx = read_megatron(prefix)
    expected = documents_from_shards(built["dataset"], built["manifest"])
    assert version == 1 and code == 8  # uint16 vocabulary
    assert len(sequences) == len(expected) == sum(s["documents"] for s in built["manifest"]["shards"])
    assert doc_idx.tolist() == list(range(len(expected) + 1))  # one document per sequence
    eos = built["manifest"]["tokenizer"]["eos_id"]
    for got, want in zip(sequences, expected):
        assert np.array_equal(got, want)
        assert got[-1] == eos  # EOS included, as Megatron's --append-eod
    summary = json.load(open(prefix + ".json"))
    assert summary["dataset_id"] == built["manifest"]["dataset_id"] and summary["eos_included"]
    assert summary["tokens"] == sum(s["tokens"] for s in built["manifest"]["shards"])  # no padding exported


def test_one_domain(built, tmp_path):
    prefix = str(tmp_path / "legal")
    assert cli.main(["export-megatron", built["dataset"], prefix, "--domain", "legal"]) == 0
    _, _, sequences, _ = read_megatron(prefix)
    expected = documents_from_shards(built["dataset"], built["manifest"], {"legal"})
    assert len(sequences) == len(expected) and all(np.array_equal(a, b) for a, b in zip(sequences, expected))
    assert cli.main(["export-megatron", built["dataset"], prefix, "--domain", "code"]) == 1


def test_the_export_keeps_the_shuffled_order_across_domains(built, tmp_path):
    """Not shard after shard, domain after domain (a source-ordered curriculum): the dataset's one shuffle."""
    prefix = str(tmp_path / "mixed")
    assert cli.main(["export-megatron", built["dataset"], prefix]) == 0
    _, _, sequences, _ = read_megatron(prefix)
    manifest = {**built["manifest"], "_dir": built["dataset"]}
    domains = domains_in_order(manifest)
    switches = sum(a != b for a, b in zip(domains, domains[1:]))
    assert switches > 10 * len(set(domains)), switches  # shard-name order switches domain len(domains) - 1 times
    expected = documents_from_shards(built["dataset"], built["manifest"])
    assert len(sequences) == len(expected) and all(np.array_equal(a, b) for a, b in zip(sequences, expected))
    summary = json.load(open(prefix + ".json"))
    assert summary["order"] == "shuffled" and summary["seed"] == built["manifest"]["seed"]
    # the order of before, shard after shard, is still there on request
    prefix = str(tmp_path / "by_shard")
    assert cli.main(["export-megatron", built["dataset"], prefix, "--order", "shards"]) == 0
    _, _, sequences, _ = read_megatron(prefix)
    expected = documents_from_shards(built["dataset"], built["manifest"], order="shards")
    assert len(sequences) == len(expected) and all(np.array_equal(a, b) for a, b in zip(sequences, expected))
    assert json.load(open(prefix + ".json"))["order"] == "shards"
