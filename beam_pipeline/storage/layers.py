"""Layers: stage outputs stored under a key derived from what made them.

A layer lives at ``<root>/layers/<stage>/<layer_key>/`` where::

    layer_key = sha256(stage, stage code version, stage config, input layer keys)[:24]

The code version is the stage's version followed by a digest of its code and
libraries (:mod:`beam_pipeline.build.code_version`).

Each named output of a stage (``documents``, ``annotations``, ``gold``, ...)
is a set of Parquet partitions ``<output>/part-00003-of-00016.parquet``; every
row lands in partition ``xxh3(doc_id) % n`` and rows are sorted by doc_id
inside a partition, so the bytes do not depend on the runner's bundling.

Writes are atomic: a file is written under a ``.tmp-`` name and renamed into
place, so a half-written file is never taken as complete. Each partition file
gets a small ``.meta.json`` sidecar (rows, bytes, sha256) written after it.
The layer is complete exactly when ``_LEDGER.json`` exists: the job's commit
step for the layer writes it last, after every partition is written and the
stage's counts check out (:class:`beam_pipeline.transforms.layer_io.CommitLayer`).
A rerun with the same key reuses a complete layer; a killed run leaves no
ledger, and the next run clears that layer and computes it again.
Half-written ``.tmp-`` files of a failed (retried) bundle attempt are deleted
by the commit step before it writes the ledger.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import uuid
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import canonical_json, digest_json, sha256_bytes

LEDGER = "_LEDGER.json"
LEDGER_FORMAT = 1


def join(*parts: str) -> str:
    return FileSystems.join(*parts)


def layer_key(stage: str, version: str, stage_config: Any, input_keys: Iterable[str]) -> str:
    """Key of a layer: depends on the code version, its config and its inputs only."""
    return digest_json({"stage": stage, "version": version, "config": stage_config, "inputs": sorted(input_keys)})[:24]


def part_name(index: int, count: int) -> str:
    return f"part-{index:05d}-of-{count:05d}.parquet"


@dataclasses.dataclass(frozen=True)
class Layer:
    """Where one stage's layer lives, and whether it is complete."""

    root: str
    stage: str
    key: str

    @property
    def path(self) -> str:
        return join(self.root, "layers", self.stage, self.key)

    @property
    def dead_letter_path(self) -> str:
        return join(self.root, "dead_letter", self.stage, self.key)

    def output_path(self, output: str) -> str:
        return join(self.path, output)

    @property
    def ledger_path(self) -> str:
        return join(self.path, LEDGER)

    def is_complete(self) -> bool:
        return FileSystems.exists(self.ledger_path)

    def ledger(self) -> dict:
        return json.loads(read_bytes(self.ledger_path))

    def part_paths(self, output: str) -> list[str]:
        """Paths of an output's partitions, as the ledger lists them."""
        ledger = self.ledger()
        try:
            parts = ledger["outputs"][output]["parts"]
        except KeyError:
            raise KeyError(
                f"layer {self.stage}/{self.key} has no output {output!r}; it has {sorted(ledger['outputs'])}"
            ) from None
        return [join(self.output_path(output), p["name"]) for p in parts]


# --- atomic file helpers (any Beam filesystem) ------------------------------


def read_bytes(path: str) -> bytes:
    with FileSystems.open(path) as f:
        return f.read()


def local_copy(path: str) -> str:
    """A local file with the bytes of ``path``: itself when it is local, else a copy in a cache of this
    machine (``$BEAM_PIPELINE_CACHE`` or ``~/.cache/beam_pipeline/side_files``), made once per URI.

    For libraries that read only local files (fastText's ``load_model``): a model on s3:// or gs://
    is copied where the worker runs, in ``DoFn.setup``. The copy is named by a digest of the URI and
    written under a temporary name first, so concurrent workers on one machine never read half a file.
    """
    if "://" not in path or path.startswith("file://"):
        return path[len("file://") :] if path.startswith("file://") else path
    import os
    import tempfile

    cache = os.environ.get("BEAM_PIPELINE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "beam_pipeline")
    folder = os.path.join(cache, "side_files", sha256_bytes(path.encode("utf-8"))[:24])
    local = os.path.join(folder, path.rstrip("/").rsplit("/", 1)[-1] or "file")
    if not os.path.exists(local):
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as out, FileSystems.open(path, compression_type="uncompressed") as src:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                out.write(chunk)
        os.replace(tmp, local)
    return local


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, then rename it onto ``path``."""
    directory, name = path.rsplit("/", 1)
    tmp = join(directory, f".tmp-{name}-{uuid.uuid4().hex}")
    with FileSystems.create(tmp) as f:
        f.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


TEMPORARY_PREFIX = ".tmp-"
#: A layer's scratch folder: files one step of the layer's job writes for a later step of the same job
#: (ingest's slices), each deleted by the step that reads it; the commit removes the folder.
SCRATCH = "_scratch"


def remove_temporaries(layer: "Layer") -> list[str]:
    """Delete the layer's ``.tmp-*`` files; return their paths.

    They are writes that never reached their rename: left by a killed run, or
    by a bundle attempt that failed (a runner retries the bundle and discards
    the attempt's outputs, but not the files it wrote). Only the driver calls
    this, while no job of the layer runs.
    """
    return remove_matching(
        join(layer.path, TEMPORARY_PREFIX + "*"),
        join(layer.path, "*", TEMPORARY_PREFIX + "*"),
        join(layer.dead_letter_path, TEMPORARY_PREFIX + "*"),
    )


def remove_scratch(layer: "Layer") -> list[str]:
    """Delete the layer's scratch folder (:data:`SCRATCH`) and what a killed or retried task left in it;
    return the paths of the files deleted. Only the commit calls this, after every task of the layer."""
    folder = join(layer.path, SCRATCH)
    found = remove_matching(join(folder, "*"))
    if FileSystems.exists(folder):  # a filesystem with folders (an object store has none)
        FileSystems.delete([folder])
    return found


def remove_matching(*patterns: str) -> list[str]:
    """Delete the files matching any of ``patterns`` (any Beam filesystem); return their paths."""
    found = sorted({m.path for result in FileSystems.match(list(patterns)) for m in result.metadata_list})
    if found:
        FileSystems.delete(found)
    return found


def remove_folder(folder: str) -> None:
    """Delete a folder of files (not nested) and, on a filesystem that has folders, the folder itself
    (an object store has none: deleting its files is enough)."""
    remove_matching(join(folder, "*"))
    if FileSystems.exists(folder):
        FileSystems.delete([folder])


def clear_layer(layer: "Layer") -> None:
    """Delete every file of an uncommitted layer (and its dead letter), before its job runs again."""
    if layer.is_complete():
        raise ValueError(f"refusing to clear the committed layer {layer.path}")
    patterns = [join(layer.path, "*"), join(layer.path, "*", "*"), join(layer.dead_letter_path, "*")]
    found = {m.path for result in FileSystems.match(patterns) for m in result.metadata_list}
    for path in sorted(found, key=lambda p: (-p.count("/"), p)):  # files before their local folders
        try:
            FileSystems.delete([path])
        except BeamIOError:
            if FileSystems.exists(path):
                raise


def move(src: str, dst: str) -> None:
    """Rename a file, creating the destination folder where the filesystem has folders."""
    parent = dst.rsplit("/", 1)[0]
    if not FileSystems.exists(parent):
        try:
            FileSystems.mkdirs(parent)
        except OSError:  # created concurrently, or a store without folders
            pass
    FileSystems.rename([src], [dst])


def write_json_atomic(path: str, value: Any) -> None:
    write_bytes_atomic(path, json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n")


# --- Parquet partitions -----------------------------------------------------


def table_bytes(rows: list[dict], schema: pa.Schema, compression: str = "zstd") -> bytes:
    """Deterministic Parquet bytes for ``rows`` (already sorted) under ``schema``.

    Layers use zstd (level 3).
    """
    return arrow_table_bytes(pa.Table.from_pylist(rows, schema=schema), compression)


def arrow_table_bytes(table: pa.Table, compression: str = "zstd") -> bytes:
    """Deterministic Parquet bytes of an Arrow table (see :func:`table_bytes`)."""
    buffer = io.BytesIO()
    pq.write_table(
        table,
        buffer,
        compression=compression,
        compression_level=3 if compression == "zstd" else None,
        row_group_size=65536,
        write_statistics=False,
    )
    return buffer.getvalue()


def write_partition(directory: str, index: int, count: int, rows: list[dict], schema: pa.Schema) -> dict:
    """Write one partition atomically, then its sidecar; return the sidecar."""
    name = part_name(index, count)
    data = table_bytes(rows, schema)
    write_bytes_atomic(join(directory, name), data)
    meta = {"name": name, "rows": len(rows), "bytes": len(data), "sha256": sha256_bytes(data)}
    write_bytes_atomic(join(directory, name + ".meta.json"), canonical_json(meta))
    return meta


def read_partition_rows(path: str, columns: list[str] | None = None) -> Iterable[dict]:
    """The rows of a Parquet file, read in batches."""
    with FileSystems.open(path) as f:
        for batch in parquet_batches(f, 4096, columns):
            yield from batch.to_pylist()


# Arrow decodes Parquet on its own thread pool unless told not to. Reading from a Python file object
# (``FileSystems.open``, ``io.BytesIO``), a pool thread can still be calling into Python when the
# interpreter exits, and the process aborts after its work is done ("terminate called without an
# active exception", SIGABRT; apache/arrow#34314): 17 and 27 of 120 short runs here, and a CLI test
# in CI. With ``use_threads=False``, 0 of 120. Every Parquet read of the package goes through these
# two functions; a Beam worker already runs one bundle per core, so the pool bought little.


def read_parquet(source, columns: list[str] | None = None) -> pa.Table:
    """``pq.read_table`` of a path or file object, on the calling thread."""
    return pq.read_table(source, columns=columns, use_threads=False)


def parquet_batches(source, batch_size: int, columns: list[str] | None = None):
    """``ParquetFile.iter_batches`` of a path or file object, on the calling thread."""
    return pq.ParquetFile(source).iter_batches(batch_size=batch_size, columns=columns, use_threads=False)


def commit_layer(
    layer: Layer,
    *,
    version: str,
    config: Any,
    inputs: dict[str, str],
    outputs: dict[str, list[dict]],
    counts: dict,
    extra: dict | None = None,
) -> dict:
    """Write the ledger: from now on the layer is complete."""
    ledger = {
        "format": LEDGER_FORMAT,
        "stage": layer.stage,
        "key": layer.key,
        "version": version,
        "config": config,
        "inputs": inputs,
        "outputs": {
            name: {"parts": parts, "rows": sum(p["rows"] for p in parts)} for name, parts in sorted(outputs.items())
        },
        "counts": counts,
    }
    if extra:
        ledger.update(extra)
    write_json_atomic(layer.ledger_path, ledger)
    return ledger


_DATASET_ID = re.compile(r"^[0-9a-f]{64}$")


class EarlierLayerError(ValueError):
    """An ``against`` entry that names no complete layer of the stage."""


def earlier_layer(root: str, entry: str, stage: str, option: str) -> tuple[str, dict]:
    """An ``against`` entry of a dedup stage -> (its layer's path, its ledger).

    ``entry`` is the path/URI of ``<root>/layers/<stage>/<key>`` or the id of a
    dataset under ``root`` (its manifest names the layer). ``option`` (e.g.
    ``near_dedup.against``) names the setting in the error messages.
    """
    if _DATASET_ID.match(entry):
        try:
            manifest = json.loads(read_bytes(join(root, "datasets", entry, "manifest.json")))
        except (OSError, ValueError) as err:
            raise EarlierLayerError(f"{option}: dataset {entry} not found under {root} ({err})") from None
        keys = [s["layer_key"] for s in manifest["stages"] if s["name"] == stage]
        if not keys:
            raise EarlierLayerError(f"{option}: dataset {entry} was built without a {stage} stage")
        path = join(root, "layers", stage, keys[0])
    else:
        path = entry.rstrip("/")
    try:
        ledger = json.loads(read_bytes(join(path, LEDGER)))
    except (OSError, ValueError):
        raise EarlierLayerError(
            f"{option}: {entry!r} is not a complete {stage} layer (no readable "
            f"{join(path, LEDGER)}); give the absolute path of <root>/layers/{stage}/<key> "
            f"or a dataset id"
        ) from None
    if ledger.get("stage") != stage:
        raise EarlierLayerError(f"{option}: {entry!r} is a {ledger.get('stage')} layer, not {stage}")
    return path, ledger
