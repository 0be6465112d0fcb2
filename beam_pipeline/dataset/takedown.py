"""Takedown: a new dataset version without some documents, rebuilding only their shards.

``python -m beam_pipeline takedown --dataset D (--doc-ids FILE | --urls FILE |
--url-pattern REGEX) [--reason TEXT]``:

1. resolve the request to doc_ids: ids as given; URLs (exact) and a URL
   pattern (``re.search``) through the lineage table, which also lists the
   URLs of verbatim repeats (a repeat's URL takes down its document); unless
   ``--exact-only``, every document with the same content_hash as a matched
   one too (exact dedup may have kept that text under another doc_id);
2. find the shards whose index holds one of them; re-pack each of those from
   its remaining documents' tokens, in the same order, with the same EOS,
   ``seq_len`` and padding rules (:func:`shard_stream.write_packed_shard`); a
   shard left without documents is dropped. Every other shard is hard-linked
   (or copied) byte for byte;
3. the new manifest is the old one with the new shard list, the new
   ``dataset_id`` (Merkle root), ``previous_dataset_id``, ``tombstones``
   (cumulative: every removed doc_id with its reason and shard) and a
   ``takedown`` record of this step; the new lineage is the old one with the
   placement updated and ``takedown__removed`` / ``takedown__reason`` columns;
4. the old version gets ``SUPERSEDED_BY`` (JSON: the new id, the reason), which
   :class:`beam_pipeline.dataset.loader.TokenLoader` refuses unless told otherwise.

The manifest of the new version is written last; re-running the same
takedown finds it and only makes sure the old version is marked. The layers
(gold text etc.) are not touched: a rebuild from them would bring the
documents back, so a takedown must also go into the build's inputs or policy.
A takedown version is not what a fresh build without the documents would
give (that would re-assign shards); it is the smallest change to the old one.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import shutil
import sys
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.dataset.lineage import lineage_marker, lineage_parts
from beam_pipeline.dataset.loader import SUPERSEDED_BY, superseded_by
from beam_pipeline.storage.layers import join, move, read_bytes, read_parquet, remove_folder, write_json_atomic
from beam_pipeline.storage.manifest import MANIFEST, dataset_id_of, dataset_path, load_manifest, shard_leaf
from beam_pipeline.transforms.lineage import (
    PLACEMENT,
    LineageError,
    conform,
    dataset_dir_of,
    empty_placement,
    has_lineage,
    lineage_dir,
    read_parts,
    root_of,
    sort_lineage,
    spill_placement,
    write_lineage_marker,
    write_lineage_part,
)
from beam_pipeline.transforms.shard_stream import write_packed_shard

DOC_ID = re.compile(r"^[0-9a-f]{32}$")
TAKEDOWN_COLUMNS = [pa.field("takedown__removed", pa.bool_()), pa.field("takedown__reason", pa.string())]


class TakedownError(RuntimeError):
    """The takedown cannot be done as asked."""


@dataclasses.dataclass
class TakedownResult:
    previous_dataset_id: str
    dataset_id: str | None  # None when nothing had to change
    dataset_path: str | None
    removed: list[str]  # doc_ids taken out of shards
    not_in_dataset: list[str]  # matched doc_ids that no shard holds (filtered earlier, or unknown)
    rebuilt_shards: list[str]
    dropped_shards: list[str]
    unchanged_shards: list[str]


# --- resolving the request ------------------------------------------------------


def read_list(path: str) -> list[str]:
    """Non-empty lines of a file, without ``#`` comments and surrounding blanks."""
    with FileSystems.open(path) as f:
        text = f.read().decode("utf-8")
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def resolve_doc_ids(
    dataset_dir: str, *, doc_ids=(), urls=(), url_pattern: str | None = None, include_duplicates: bool = True
) -> list[str]:
    """doc_ids named directly or through the URLs of their documents and repeats.

    With ``include_duplicates`` every document with the same content_hash as a
    matched one is matched too: exact dedup may have kept the text under
    another source's doc_id (a mirror's URL names content the dataset holds
    as the original's document).
    """
    bad = [d for d in doc_ids if not DOC_ID.match(d)]
    if bad:
        raise TakedownError(f"not doc_ids (32 lowercase hex characters): {bad[:5]}")
    wanted = set(doc_ids)
    if not (urls or url_pattern or include_duplicates):
        return sorted(wanted)
    if not has_lineage(dataset_dir):
        if urls or url_pattern:
            raise TakedownError(
                f"URLs are resolved through the lineage: {dataset_dir} has no lineage; write it "
                f"with: python -m beam_pipeline lineage {dataset_dir}"
            )
        return sorted(wanted)  # doc_ids alone need no lineage; duplicates cannot be followed
    if urls or url_pattern:
        try:
            pattern = re.compile(url_pattern) if url_pattern else None
        except re.error as err:
            raise TakedownError(f"--url-pattern {url_pattern!r} is not a regular expression: {err}") from None
        url_set = set(urls)
        for part in lineage_parts(dataset_dir, ["doc_id", "url"]):  # one part in memory at a time
            for doc, url in zip(part.column("doc_id").to_pylist(), part.column("url").to_pylist()):
                if url is not None and (url in url_set or (pattern is not None and pattern.search(url))):
                    wanted.add(doc)
    if include_duplicates and wanted:
        hashes, matched = set(), pa.array(sorted(wanted), pa.string())
        for part in lineage_parts(dataset_dir, ["doc_id", "content_hash"]):
            hit = part.filter(pc.is_in(part.column("doc_id"), value_set=matched))
            hashes.update(h for h in hit.column("content_hash").to_pylist() if h)
        if hashes:
            shared = pa.array(sorted(hashes), pa.string())
            for part in lineage_parts(dataset_dir, ["doc_id", "content_hash"]):
                same = part.filter(pc.is_in(part.column("content_hash"), value_set=shared))
                wanted.update(same.column("doc_id").to_pylist())
    return sorted(wanted)


# --- the takedown ---------------------------------------------------------------


def takedown(
    dataset: str,
    *,
    doc_ids=(),
    urls=(),
    url_pattern: str | None = None,
    reason: str = "takedown request",
    include_duplicates: bool = True,
    log=print,
) -> TakedownResult:
    """Publish a version of ``dataset`` without the requested documents (see the module doc)."""
    dataset_dir = dataset_dir_of(dataset)
    manifest = load_manifest(dataset_dir)
    old_id = manifest["dataset_id"]
    successor = _superseded(dataset_dir)
    if successor:
        raise TakedownError(
            f"dataset {old_id} is already superseded by {successor.get('dataset_id')}; "
            "apply the takedown to the newest version"
        )
    targets = set(
        resolve_doc_ids(
            dataset_dir, doc_ids=doc_ids, urls=urls, url_pattern=url_pattern, include_duplicates=include_duplicates
        )
    )
    if not targets:
        raise TakedownError("the request matches no document")
    indexes = {s["name"]: _read_index(dataset_dir, s) for s in manifest["shards"]}
    held = {s: sorted(targets & set(ix.column("doc_id").to_pylist())) for s, ix in indexes.items()}
    affected = {s: docs for s, docs in held.items() if docs}
    removed = sorted(d for docs in affected.values() for d in docs)
    result = TakedownResult(
        old_id,
        None,
        None,
        removed,
        sorted(targets - set(removed)),
        [],
        [],
        [s["name"] for s in manifest["shards"] if s["name"] not in affected],
    )
    if not affected:
        log(f"[takedown] no shard of {old_id} holds the {len(targets)} matched document(s): nothing to do")
        return result

    root = root_of(dataset_dir)
    staging = join(root, "datasets", f".tmp-takedown-{uuid.uuid4().hex}")
    try:
        shards = []
        for shard in manifest["shards"]:
            if shard["name"] not in affected:
                shards.append(shard)
                continue
            rebuilt = _rebuild_shard(
                dataset_dir, staging, shard, indexes[shard["name"]], set(affected[shard["name"]]), manifest
            )
            if rebuilt is None:
                result.dropped_shards.append(shard["name"])
            else:
                shards.append(rebuilt)
                result.rebuilt_shards.append(shard["name"])
        new_id = dataset_id_of(shards)
        target = dataset_path(root, new_id)
        result.dataset_id, result.dataset_path = new_id, target
        if not FileSystems.exists(join(target, MANIFEST)):
            _place_shards(dataset_dir, staging, target, shards, set(result.rebuilt_shards))
            _write_new_lineage(dataset_dir, target, new_id, shards, affected, reason, staging)
            write_json_atomic(join(target, MANIFEST), _new_manifest(manifest, new_id, shards, affected, reason, result))
        write_json_atomic(
            join(dataset_dir, SUPERSEDED_BY),
            {"dataset_id": new_id, "reason": reason, "removed_documents": len(removed)},
        )
    finally:
        if FileSystems.exists(staging):
            FileSystems.delete([staging])
    log(
        f"[takedown] {len(removed)} document(s) removed; rebuilt {len(result.rebuilt_shards)} shard(s), "
        f"dropped {len(result.dropped_shards)}, {len(result.unchanged_shards)} unchanged -> {new_id}"
    )
    return result


def superseded_warning(dataset_dir: str) -> str | None:
    """What a build that published ``dataset_dir`` again must say when a takedown superseded it (None: current).

    The build's layers still hold the documents taken down, so the same build gives the old version again,
    which the loader refuses; the warning names the current successor (following later takedowns)."""
    record = _superseded(dataset_dir)
    if record is None:
        return None
    root = root_of(dataset_dir)
    successor, seen = record["dataset_id"], {dataset_dir}
    while True:  # a successor taken down again: the last one
        following = dataset_path(root, successor)
        later = _superseded(following) if following not in seen else None
        if later is None:
            break
        seen.add(following)
        successor = later["dataset_id"]
    removed = record.get("removed_documents")
    return (
        f"this build published {dataset_dir.rstrip('/').rsplit('/', 1)[-1]} again, which a takedown superseded "
        f"({record.get('reason', 'takedown')}"
        + (f", {removed} document(s) removed" if removed is not None else "")
        + f"): train on its successor {dataset_path(root, successor)} (the loader refuses this one), and put the "
        f"takedown into the config's inputs or policy so that a build leaves the documents out"
    )


def _superseded(dataset_dir: str) -> dict | None:
    if "://" in dataset_dir:
        import json

        path = join(dataset_dir, SUPERSEDED_BY)
        return json.loads(read_bytes(path)) if FileSystems.exists(path) else None
    return superseded_by(dataset_dir)


def _read_index(dataset_dir: str, shard: dict) -> pa.Table:
    return read_parquet(io.BytesIO(read_bytes(join(dataset_dir, shard["index_file"]))))


def _rebuild_shard(
    dataset_dir: str, staging: str, shard: dict, index: pa.Table, drop: set[str], manifest: dict
) -> dict | None:
    """Re-pack ``shard`` without ``drop``: same order, EOS, seq_len and padding. None if it ends up empty."""
    tok = manifest["tokenizer"]
    keep = [r for r in index.to_pylist() if r["doc_id"] not in drop]
    if not keep:
        return None
    dtype = np.dtype(tok["dtype"]).newbyteorder("<")
    path = join(dataset_dir, shard["tokens_file"])
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:

        def kept_documents():  # read one at a time, in the shard's order
            for r in keep:
                f.seek(r["token_start"] * dtype.itemsize)
                ids = np.frombuffer(f.read(r["token_count"] * dtype.itemsize), dtype=dtype)
                yield (0, r["doc_id"]), r["source"], ids

        meta = write_packed_shard(
            staging,
            shard["name"],
            kept_documents(),
            domain=shard["domain"],
            eos_id=tok["eos_id"],
            pad_id=tok["pad_id"],
            seq_len=manifest["seq_len"],
            dtype=tok["dtype"],
        )
    FileSystems.delete([join(staging, f"{shard['name']}.meta.json")])
    entry = {**meta, "tokens_file": f"shards/{meta['tokens_file']}", "index_file": f"shards/{meta['index_file']}"}
    return {**entry, "leaf": shard_leaf(entry)}


def _place_shards(old_dir: str, staging: str, target: str, shards: list[dict], rebuilt: set[str]) -> None:
    """Rebuilt shards move in from staging; the others are hard-linked (or copied) unchanged."""
    for shard in shards:
        for field in ("tokens_file", "index_file"):
            dst = join(target, shard[field])
            if FileSystems.exists(dst):
                continue
            if shard["name"] in rebuilt:
                move(join(staging, os.path.basename(shard[field])), dst)
            else:
                _link_or_copy(join(old_dir, shard[field]), dst)


def _link_or_copy(src: str, dst: str) -> None:
    if "://" in src or "://" in dst:
        FileSystems.copy([src], [dst])
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = f"{dst}.tmp-{uuid.uuid4().hex}"
    try:
        os.link(src, tmp)
    except OSError:  # another filesystem, or links not allowed
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _write_new_lineage(
    old_dir: str, target: str, new_id: str, shards: list[dict], affected: dict, reason: str, staging: str
) -> None:
    """The old lineage, part by part, with the removed documents marked and every document's new placement.

    Part ``i`` of the old lineage becomes part ``i`` of the new one (the partition of a doc_id does
    not change); the new shards' placement is first split by part (as the build does), so one part's
    rows are in memory at a time.
    """
    if not has_lineage(old_dir):
        return
    marker = lineage_marker(old_dir)
    count = len(marker["parts"])
    placement_dir = join(staging, "_placement")
    placement = spill_placement(target, {"shards": shards}, count, placement_dir)
    removed = pa.array(sorted(d for docs in affected.values() for d in docs), pa.string())
    directory = lineage_dir(target)
    parts, rows, columns = [], 0, None
    for index, old in enumerate(lineage_parts(old_dir)):
        where = read_parts(placement[index], None) if index in placement else empty_placement()
        part = taken_down_part(old, removed, reason, where)
        parts.append(write_lineage_part(directory, index, count, part))
        rows, columns = rows + part.num_rows, part.schema.names
    remove_folder(placement_dir)  # by file: an object store has no folder to delete with the staging one
    write_lineage_marker(
        directory,
        new_id,
        rows,
        columns,
        parts,
        {**marker.get("inputs", {}), "previous_dataset_id": marker["dataset_id"]},
    )


def taken_down_part(old: pa.Table, removed: pa.Array, reason: str, placement: pa.Table) -> pa.Table:
    """Rows of a lineage part after a takedown: ``removed`` doc_ids marked (``takedown__removed``,
    ``takedown__reason``; earlier takedowns' marks kept), documents placed as in ``placement``
    (nothing where it holds no row), repeats unchanged."""
    table = conform(old, _with_takedown_columns(old.schema))
    hit = pc.is_in(table.column("doc_id"), value_set=removed)
    columns = {
        "takedown__removed": pc.or_(hit, pc.fill_null(table.column("takedown__removed"), False)),
        "takedown__reason": pc.if_else(hit, pa.scalar(reason, pa.string()), table.column("takedown__reason")),
    }
    ids = placement.column("doc_id").combine_chunks() if placement.num_rows else pa.array([], pa.string())
    positions = pc.index_in(table.column("doc_id"), value_set=ids)
    for field in PLACEMENT:
        placed = placement.column(field.name).take(positions).cast(table.schema.field(field.name).type)
        columns[field.name] = pc.if_else(table.column("is_repeat"), table.column(field.name), placed)
    for name, values in columns.items():
        index = table.schema.get_field_index(name)
        table = table.set_column(index, table.schema.field(index), values)
    return sort_lineage(table)


def _with_takedown_columns(schema: pa.Schema) -> pa.Schema:
    for field in TAKEDOWN_COLUMNS:
        if field.name not in schema.names:
            schema = schema.append(field)
    return schema


def _new_manifest(
    manifest: dict, new_id: str, shards: list[dict], affected: dict, reason: str, result: TakedownResult
) -> dict:
    tombstones = list(manifest.get("tombstones", [])) + [
        {"doc_id": doc, "reason": reason, "shard": shard} for shard, docs in affected.items() for doc in docs
    ]
    return {
        **manifest,
        "dataset_id": new_id,
        "shards": sorted(shards, key=lambda s: s["name"]),
        "merkle": {**manifest["merkle"], "root": new_id},
        "previous_dataset_id": manifest["dataset_id"],
        "tombstones": sorted(tombstones, key=lambda t: t["doc_id"]),
        "takedown": {
            "previous_dataset_id": manifest["dataset_id"],
            "reason": reason,
            "removed_documents": len(result.removed),
            "rebuilt_shards": result.rebuilt_shards,
            "dropped_shards": result.dropped_shards,
        },
    }


# --- CLI ------------------------------------------------------------------------


def cli_takedown(args) -> int:
    """``python -m beam_pipeline takedown --dataset D (--doc-ids F | --urls F | --url-pattern RE)``."""
    try:
        result = takedown(
            args.dataset,
            doc_ids=read_list(args.doc_ids) if args.doc_ids else (),
            urls=read_list(args.urls) if args.urls else (),
            url_pattern=args.url_pattern,
            reason=args.reason,
            include_duplicates=not args.exact_only,
        )
    except (TakedownError, LineageError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if result.not_in_dataset:
        print(
            f"{len(result.not_in_dataset)} matched doc_id(s) are in no shard (filtered before tokenization, "
            f"or unknown): {', '.join(result.not_in_dataset[:10])}{' ...' if len(result.not_in_dataset) > 10 else ''}"
        )
    if result.dataset_id is None:
        print(f"dataset {result.previous_dataset_id} unchanged")
        return 0
    print(f"removed     {len(result.removed)} document(s)")
    print(f"rebuilt     {', '.join(result.rebuilt_shards) or '-'}")
    print(f"dropped     {', '.join(result.dropped_shards) or '-'}")
    print(f"unchanged   {len(result.unchanged_shards)} shard(s), byte-identical")
    print(f"previous    {result.previous_dataset_id} (now marked {SUPERSEDED_BY})")
    print(f"dataset_id  {result.dataset_id}")
    print(f"dataset     {result.dataset_path}")
    return 0
