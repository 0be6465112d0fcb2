"""Dataset manifests: what a dataset is, and its id.

``dataset_id`` is the Merkle root (:func:`beam_pipeline.hashing.merkle_root`)
over one leaf per shard, in shard-name order, where a leaf is the sha256 of
the canonical JSON of the shard's name and the sha256 of its token and index
files. Two datasets hold the same data exactly when their ids are equal.
The manifest also records the config, the snapshot, the stage versions and
per-stage counts, so that two manifests can answer "was it the data?".
See ``docs/format.md``.
"""
from __future__ import annotations

import json

from beam_pipeline.hashing import digest_json, merkle_root
from beam_pipeline.layers import join, read_bytes

MANIFEST_FORMAT = 1
MANIFEST = "manifest.json"


def shard_leaf(shard: dict) -> str:
    return digest_json({"name": shard["name"], "tokens_sha256": shard["tokens_sha256"],
                        "index_sha256": shard["index_sha256"]})


def dataset_id_of(shards: list[dict]) -> str:
    return merkle_root(shard_leaf(s) for s in sorted(shards, key=lambda s: s["name"]))


def dataset_path(root: str, dataset_id: str) -> str:
    return join(root, "datasets", dataset_id)


def load_manifest(path: str) -> dict:
    """Load a manifest from its file, its dataset folder, or ``<root>/datasets/<id>``."""
    if not path.endswith(".json"):
        path = join(path, MANIFEST)
    return json.loads(read_bytes(path))


def summarize(manifest: dict) -> str:
    """Human-readable summary for ``python -m beam_pipeline inspect``."""
    shards = manifest["shards"]
    tokens = sum(s["tokens"] for s in shards)
    lines = [
        f"dataset     {manifest['dataset_id']}",
        f"name        {manifest['name']}",
        f"snapshot    {manifest['snapshot_id']}",
        f"config      {manifest['config_digest'][:16]}",
        f"tokenizer   {manifest['tokenizer']['path']} (sha256 {manifest['tokenizer']['sha256'][:12]}, "
        f"vocab {manifest['tokenizer']['vocab_size']}, {manifest['tokenizer']['dtype']})",
        f"sequences   {sum(s['sequences'] for s in shards)} x {manifest['seq_len']} tokens",
        f"shards      {len(shards)}, documents {sum(s['documents'] for s in shards)}, tokens {tokens}",
        "",
        "stage         version      layer                     in   passed  filtered  dead_letter",
    ]
    for stage in manifest["stages"]:
        c = stage["counts"]
        lines.append(f"{stage['name']:<13} {stage['version']:<12} {stage['layer_key']:<24} {c['in']:>6} {c['passed']:>8} "
                     f"{sum(c['filtered'].values()):>9} {c['dead_letter']:>12}")
        for reason, n in c["filtered"].items():
            lines.append(f"{'':<13}   filtered:{reason} = {n}")
    lines += ["", "domain bucket   shards  documents      tokens"]
    for domain in sorted({s["domain"] for s in shards}):
        mine = [s for s in shards if s["domain"] == domain]
        lines.append(f"{domain:<15} {len(mine):>6} {sum(s['documents'] for s in mine):>10} "
                     f"{sum(s['tokens'] for s in mine):>11}")
    return "\n".join(lines)
