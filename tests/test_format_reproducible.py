"""docs/format.md is enough to recompute every id: an outside reader's code, checked against a real build.

Nothing here imports the project's hashing, manifest or snapshot code: the
ids are recomputed from the published files with hashlib, xxhash and json, as
the format document describes them (canonical JSON, stable_hash64's byte
encoding, raw 32-byte Merkle leaves, the config digest, run_id, shard
assignment, partitions).
"""
from __future__ import annotations

import glob
import hashlib
import json
import math
import os

import pyarrow.parquet as pq
import xxhash

from conftest import SAMPLE_CONFIG


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def h64(seed: int, *parts) -> int:
    """stable_hash64 as docs/format.md defines it."""
    h = xxhash.xxh3_64(seed=seed)
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode("utf-8")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.intdigest()


def sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def merkle(leaves_hex: list[str]) -> str:
    level = [hashlib.sha256(b"\x00" + bytes.fromhex(leaf)).digest() for leaf in leaves_hex]
    if not level:
        return hashlib.sha256(b"").hexdigest()
    while len(level) > 1:
        nxt = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        level = nxt + ([level[-1]] if len(level) % 2 else [])
    return level[0].hex()


def test_stable_hash64_bytes_as_documented():
    assert h64(0, "ab") == xxhash.xxh3_64_intdigest(bytes([2, 0, 0, 0, 0, 0, 0, 0]) + b"ab", seed=0)
    assert h64(7, 12) == h64(7, "12")


def test_dataset_id_and_leaves_from_the_shard_files(built):
    manifest, dataset = built["manifest"], built["dataset"]
    leaves = {}
    for shard in manifest["shards"]:
        tokens = sha256_file(os.path.join(dataset, "shards", f"{shard['name']}.bin"))
        index = sha256_file(os.path.join(dataset, "shards", f"{shard['name']}.idx.parquet"))
        leaves[shard["name"]] = hashlib.sha256(canonical(
            {"name": shard["name"], "tokens_sha256": tokens, "index_sha256": index})).hexdigest()
        assert shard["leaf"] == leaves[shard["name"]]
    assert merkle([leaves[name] for name in sorted(leaves)]) == manifest["dataset_id"] == os.path.basename(dataset)
    assert merkle([]) == hashlib.sha256(b"").hexdigest()


def test_shard_assignment_and_order_from_the_indexes(built):
    manifest, dataset = built["manifest"], built["dataset"]
    seed, shard_tokens = manifest["seed"], manifest["config"]["tokenize"]["shard_tokens"]
    rows = {}
    for path in sorted(glob.glob(os.path.join(dataset, "shards", "*.idx.parquet"))):
        rows[os.path.basename(path)[:-len(".idx.parquet")]] = pq.read_table(path).to_pylist()
    bucket_tokens = {}
    for name, docs in rows.items():
        bucket = name.rsplit("-", 3)[0]
        bucket_tokens[bucket] = bucket_tokens.get(bucket, 0) + sum(r["token_count"] + 1 for r in docs)
    for name, docs in rows.items():
        bucket = name.rsplit("-", 3)[0]
        count = max(1, math.ceil(bucket_tokens[bucket] / shard_tokens))
        for row in docs:
            assert f"{bucket}-{h64(seed, 'shard', row['doc_id']) % count:05d}-of-{count:05d}" == name
        assert [r["doc_id"] for r in docs] == [d for _, d in sorted((h64(seed, "order", r["doc_id"]), r["doc_id"])
                                                                    for r in docs)]


def test_snapshot_id_config_digest_and_run_id(built):
    manifest, root = built["manifest"], built["root"]
    stored = open(os.path.join(root, "snapshots", f"{manifest['snapshot_id']}.json"), encoding="utf-8").read()
    assert hashlib.sha256(canonical(json.loads(stored))).hexdigest()[:24] == manifest["snapshot_id"]
    folder = os.path.dirname(os.path.abspath(SAMPLE_CONFIG))
    assert folder not in stored

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str) and value.startswith(folder + "/"):
            return value[len(folder) + 1:]
        return "." if value == folder else value

    config = {k: v for k, v in manifest["config"].items() if k not in ("output_root", "report")}
    digest = hashlib.sha256(canonical(strip(config))).hexdigest()
    assert digest == manifest["config_digest"]
    run_id = hashlib.sha256(canonical({"config": digest, "snapshot": manifest["snapshot_id"]})).hexdigest()[:16]
    assert run_id == built["metrics"]["run_id"]


def test_layer_partitions_by_stable_hash64_of_the_doc_id(built):
    root, ingest = built["root"], built["stages"]["ingest"]
    parts = sorted(glob.glob(os.path.join(root, "layers", "ingest", ingest["layer_key"], "documents", "*.parquet")))
    for index, path in enumerate(parts):
        ids = pq.read_table(path, columns=["doc_id"])["doc_id"].to_pylist()
        assert ids == sorted(ids)
        assert all(h64(0, d) % len(parts) == index for d in ids)
