"""Checking a new eval set against a finished dataset's retained n-gram index.

``python -m beam_pipeline contamination-report --dataset D --evalset F``
reads the dataset's manifest, finds its ``ngram_index`` layer (built when
``decontamination.index: true``), hashes the eval items with the same
normalization and n, and looks every n-gram up in the sorted index
partitions (binary search per partition; the text is never re-read). The
report lists, per item, its n-grams, how many occur in the dataset and the
gold documents that contain them.

The index is the build's layer, so after a takedown it still holds the
documents taken down; the report reads the version's tombstones (the
manifest's ``tombstones``, cumulative over takedowns) and counts none of
them: an n-gram only they held is not in the dataset.
"""

from __future__ import annotations

import json
import os

import numpy as np
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.filters.decontamination import INDEX_FORMAT, ngram_hashes, read_items
from beam_pipeline.storage.layers import Layer, join, read_parquet
from beam_pipeline.storage.manifest import load_manifest

MAX_DOCS_LISTED = 20


class ContaminationError(RuntimeError):
    """The dataset has no usable n-gram index."""


def index_layer(dataset: str) -> tuple[Layer, dict]:
    """(the ngram_index layer of a dataset, its ledger)."""
    manifest = load_manifest(dataset)
    folder = dataset if not dataset.endswith(".json") else os.path.dirname(dataset)
    root = (
        os.path.dirname(os.path.dirname(os.path.abspath(folder)))
        if "://" not in folder
        else folder.rstrip("/").rsplit("/", 2)[0]
    )
    stage = next((s for s in manifest["stages"] if s["name"] == "ngram_index"), None)
    if stage is None:
        raise ContaminationError(
            f"dataset {manifest['dataset_id']} has no n-gram index: it was built without "
            f"decontamination.index: true (set it and run again; only the index and later stages run)"
        )
    layer = Layer(root, "ngram_index", stage["layer_key"])
    if not layer.is_complete():
        raise ContaminationError(f"the ngram_index layer {layer.path} is missing or incomplete")
    ledger = layer.ledger()
    if ledger["index"]["hash"] != INDEX_FORMAT:
        raise ContaminationError(f"index format {ledger['index']['hash']} is not {INDEX_FORMAT} (this code's)")
    return layer, ledger


def report(
    dataset: str, evalset_path: str, *, field: str = "text", name: str | None = None, min_overlap: int = 1
) -> dict:
    layer, ledger = index_layer(dataset)
    manifest = load_manifest(dataset)
    tombstoned = {t["doc_id"] for t in manifest.get("tombstones", [])}  # taken down: not in this version
    n = ledger["index"]["n"]
    items = read_items(evalset_path, field)
    cache: dict[str, int] = {}
    item_hashes = [np.unique(ngram_hashes(text, n, cache)) for _, text in items]
    wanted = np.unique(np.concatenate(item_hashes)) if item_hashes else np.empty(0, dtype=np.uint64)
    found: dict[int, set[str]] = {}
    directory = layer.output_path(ledger["index"]["output"])
    for part in ledger["index"]["parts"]:
        if part["rows"] == 0 or wanted.size == 0:
            continue
        with FileSystems.open(join(directory, part["name"]), compression_type="uncompressed") as f:
            table = read_parquet(f)
        hashes = table.column("ngram").to_numpy()
        lo = np.searchsorted(hashes, wanted, side="left")
        hi = np.searchsorted(hashes, wanted, side="right")
        hit = np.nonzero(hi > lo)[0]
        if hit.size == 0:
            continue
        doc_ids = table.column("doc_id")
        for i in hit:
            key = int(wanted[i])
            present = set(doc_ids.slice(int(lo[i]), int(hi[i] - lo[i])).to_pylist()) - tombstoned
            if present:
                found.setdefault(key, set()).update(present)
    rows = []
    for (item_id, _), hashes in zip(items, item_hashes):
        matched = [int(h) for h in hashes if int(h) in found]
        docs = sorted(set().union(*(found[h] for h in matched))) if matched else []
        rows.append(
            {
                "id": item_id,
                "ngrams": int(hashes.size),
                "matched_ngrams": len(matched),
                "overlap": round(len(matched) / hashes.size, 4) if hashes.size else None,
                "contaminated": len(matched) >= min_overlap,
                "documents": len(docs),
                "doc_ids": docs[:MAX_DOCS_LISTED],
            }
        )
    contaminated = sum(r["contaminated"] for r in rows)
    return {
        "dataset_id": manifest["dataset_id"],
        "evalset": name or os.path.basename(evalset_path),
        "n": n,
        "min_overlap": min_overlap,
        "items": len(rows),
        "short_items": sum(r["ngrams"] == 0 for r in rows),
        "contaminated_items": contaminated,
        "index_layer": layer.key,
        "tombstoned_documents": len(tombstoned),
        "results": rows,
    }


def summary(result: dict) -> str:
    lines = [
        f"eval set    {result['evalset']}: {result['items']} items ({result['short_items']} shorter than "
        f"{result['n']} words, not checkable)",
        f"dataset     {result['dataset_id']} (ngram_index {result['index_layer']}, n={result['n']}"
        + (
            f"; {result['tombstoned_documents']} documents taken down, not counted"
            if result.get("tombstoned_documents")
            else ""
        )
        + ")",
        f"contaminated {result['contaminated_items']} of {result['items']} items "
        f"(>= {result['min_overlap']} shared {result['n']}-gram)",
    ]
    for row in result["results"]:
        if row["contaminated"]:
            lines.append(
                f"  {row['id']}: {row['matched_ngrams']}/{row['ngrams']} n-grams in "
                f"{row['documents']} document(s), e.g. {', '.join(row['doc_ids'][:3])}"
            )
    return "\n".join(lines)


def write_json(result: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
