"""Dataset manifests: what a dataset is, and its id.

``dataset_id`` is the Merkle root (:func:`beam_pipeline.records.hashing.merkle_root`)
over one leaf per shard, in shard-name order, where a leaf is the sha256 of
the canonical JSON of the shard's name and the sha256 of its token and index
files. Two datasets hold the same data exactly when their ids are equal.
The manifest also records the config, the snapshot, the stage versions and
per-stage counts, so that two manifests can answer "was it the data?".
It names no path of the machine that built it (:func:`portable_config`):
the same build from two checkouts in different folders gives the same
manifest, apart from an ``output_root`` outside the config's folder.
See ``docs/format.md``.
"""

from __future__ import annotations

import dataclasses
import json

from beam_pipeline.records.hashing import digest_json, merkle_root
from beam_pipeline.storage.layers import join, read_bytes
from beam_pipeline.storage.paths import portable_paths

MANIFEST_FORMAT = 1
MANIFEST = "manifest.json"


def portable_config(config) -> dict:
    """The config as manifest.json records it: every path inside the config file's folder relative to it.

    Paths as the YAML wrote them (sources, blocklists, models, eval sets, the
    tokenizer, ``output_root``): :meth:`CorpusConfig.portable_path`. A path
    outside the folder (absolute in the YAML, or ``../``) or with a scheme is
    kept; what the files hold is in the manifest anyway (the snapshot id, the
    tokenizer's sha256, the stages' layer keys, which hold content digests of
    every list, model and eval set), so ``diff`` reads such a path as a location.
    """
    return portable_paths(config.model_dump(mode="json"), getattr(config, "_base_dir", None))


def portable_tokenizer(config, tokenizer) -> dict:
    """The manifest's ``tokenizer`` entry: the tokenizer's facts, its path as :func:`portable_config` writes it."""
    return {
        **dataclasses.asdict(tokenizer),
        "path": portable_paths(tokenizer.path, getattr(config, "_base_dir", None)),
        "dtype": tokenizer.dtype,
    }


def shard_leaf(shard: dict) -> str:
    return digest_json(
        {"name": shard["name"], "tokens_sha256": shard["tokens_sha256"], "index_sha256": shard["index_sha256"]}
    )


def dataset_id_of(shards: list[dict]) -> str:
    return merkle_root(shard_leaf(s) for s in sorted(shards, key=lambda s: s["name"]))


def dataset_path(root: str, dataset_id: str) -> str:
    return join(root, "datasets", dataset_id)


class NotADataset(FileNotFoundError):
    """The path holds no dataset manifest (nothing there, an output root, another kind of JSON file)."""


def load_manifest(path: str) -> dict:
    """Load a manifest from its file, its dataset folder, or ``<root>/datasets/<id>``.

    Raises :class:`NotADataset` with what the path is instead and what to pass.
    """
    given = path
    if not path.endswith(".json"):
        path = join(path, MANIFEST)
    try:
        data = read_bytes(path)
    except Exception:  # noqa: BLE001 - every filesystem's "not found"
        raise NotADataset(_not_found(given, path)) from None
    try:
        manifest = json.loads(data)
    except ValueError as err:
        raise NotADataset(f"{path} is not JSON ({err})") from None
    if not isinstance(manifest, dict) or "shards" not in manifest or "dataset_id" not in manifest:
        raise NotADataset(
            f"{path} is not a dataset manifest{_kind_of(manifest)}; pass a dataset folder "
            f"<root>/datasets/<dataset_id> (or its manifest.json)"
        )
    return manifest


def _not_found(given: str, path: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    root = given.rstrip("/")
    try:
        datasets = sorted(
            m.path.rstrip("/").rsplit("/", 2)[-2]
            for m in FileSystems.match([join(root, "datasets", "*", MANIFEST)])[0].metadata_list
        )
    except Exception:  # noqa: BLE001 - a store that cannot list: no hint
        datasets = []
    if datasets:
        return (
            f"{given} is an output root, not a dataset: pass one of its datasets, "
            + ", ".join(join(root, "datasets", d) for d in datasets[:3])
            + (f" (and {len(datasets) - 3} more)" if len(datasets) > 3 else "")
        )
    return (
        f"no dataset manifest at {path}: pass a dataset folder <root>/datasets/<dataset_id> "
        f"(or its manifest.json), as `run` prints it"
    )


def _kind_of(data) -> str:
    """' (it is a ...)' for the other JSON files of an output root."""
    if isinstance(data, dict):
        if "total_bytes" in data and "sources" in data:
            return " (it is a snapshot manifest: snapshots/<id>.json)"
        if "stage" in data and "outputs" in data:
            return " (it is a layer's ledger)"
        if "run_id" in data and "stages" in data:
            return " (it is a run's metrics: runs/<run_id>/metrics.json)"
    return ""


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
        lines.append(
            f"{stage['name']:<13} {stage['version']:<12} {stage['layer_key']:<24} {c['in']:>6} {c['passed']:>8} "
            f"{sum(c['filtered'].values()):>9} {c['dead_letter']:>12}"
        )
        for reason, n in c["filtered"].items():
            lines.append(f"{'':<13}   filtered:{reason} = {n}")
    lines += ["", "domain bucket   shards  documents      tokens"]
    for domain in sorted({s["domain"] for s in shards}):
        mine = [s for s in shards if s["domain"] == domain]
        lines.append(
            f"{domain:<15} {len(mine):>6} {sum(s['documents'] for s in mine):>10} {sum(s['tokens'] for s in mine):>11}"
        )
    return "\n".join(lines)
