"""Reading a dataset's lineage, and tracing a token back to its source record.

The lineage table (its format and the publish step that writes it) is
:mod:`beam_pipeline.transforms.lineage`. :func:`trace_token` answers "where did
token T of shard S come from": shard index (binary search) -> lineage row ->
the raw record, re-read from the source file at its recorded position.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import sys
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import bucket_of, sha256_bytes
from beam_pipeline.records.hashing import doc_id as make_doc_id
from beam_pipeline.storage.layers import (
    join,
    read_bytes,
    read_parquet,
)
from beam_pipeline.storage.manifest import load_manifest
from beam_pipeline.transforms.lineage import (
    LINEAGE_DIR,
    LINEAGE_MARKER,
    SEP,
    LineageError,
    dataset_dir_of,
    lineage_dir,
    root_of,
    write_lineage,
)


def lineage_marker(dataset_dir: str) -> dict:
    path = join(lineage_dir(dataset_dir), LINEAGE_MARKER)
    if not FileSystems.exists(path):
        raise LineageError(
            f"{dataset_dir} has no lineage ({LINEAGE_DIR}/{LINEAGE_MARKER} is missing); "
            f"write it with: python -m beam_pipeline lineage {dataset_dir}"
        )
    return json.loads(read_bytes(path))


def lineage_parts(dataset_dir: str, columns: list[str] | None = None) -> Iterator[pa.Table]:
    """The lineage table one part at a time (part ``i``: the rows with ``xxh3(doc_id) % parts == i``)."""
    directory = lineage_dir(dataset_dir)
    for part in lineage_marker(dataset_dir)["parts"]:
        yield read_parquet(io.BytesIO(read_bytes(join(directory, part["name"]))), columns)


def read_lineage(dataset_dir: str, doc_ids: Iterable[str] | None = None, columns: list[str] | None = None) -> pa.Table:
    """The lineage table, or only the rows of ``doc_ids`` (reading just their partitions)."""
    marker = lineage_marker(dataset_dir)
    parts = marker["parts"]
    wanted = None
    if doc_ids is not None:
        wanted = sorted(set(doc_ids))
        indexes = sorted({bucket_of(d, len(parts)) for d in wanted}) or [0]  # part 0 gives the schema
        parts = [parts[i] for i in indexes]
    tables = [read_parquet(io.BytesIO(read_bytes(join(lineage_dir(dataset_dir), p["name"]))), columns) for p in parts]
    table = pa.concat_tables(tables)
    if wanted is not None:
        table = table.filter(pc.is_in(table.column("doc_id"), value_set=pa.array(wanted, pa.string())))
    return table


# --- trace ------------------------------------------------------------------


@dataclasses.dataclass
class Trace:
    """Everything known about one token of one shard."""

    dataset_id: str
    shard: str
    offset: int
    token_id: int
    kind: str  # "document", "eos" or "padding"
    doc_id: str | None = None
    doc_token: int | None = None  # offset of the token inside the document
    index_row: dict | None = None  # the shard index row
    lineage: dict | None = None  # the document's lineage row
    repeats: list[dict] = dataclasses.field(default_factory=list)
    record: dict | None = None  # the raw record re-read from its source file
    record_matches: bool | None = None  # the re-read record normalizes to this doc_id
    context: str | None = None  # the document's text around the token, decoded (tokenizer permitting)


def trace_token(dataset: str, shard_name: str, offset: int, *, read_record: bool = True) -> Trace:
    """Token ``offset`` of ``shard_name`` -> its document, lineage row and raw source record."""
    dataset_dir = dataset_dir_of(dataset)
    manifest = load_manifest(dataset_dir)
    shard = _find_shard(manifest, shard_name)
    dtype = np.dtype(manifest["tokenizer"]["dtype"]).newbyteorder("<")
    total = shard["tokens_bytes"] // dtype.itemsize
    if not 0 <= offset < total:
        raise LineageError(f"offset {offset} is outside shard {shard['name']} (tokens 0..{total - 1})")
    token_id = _token_at(join(dataset_dir, shard["tokens_file"]), offset, dtype)
    index = read_parquet(io.BytesIO(read_bytes(join(dataset_dir, shard["index_file"]))))
    starts = index.column("token_start").to_numpy()
    row = int(np.searchsorted(starts, offset, side="right")) - 1
    trace = Trace(manifest["dataset_id"], shard["name"], offset, token_id, "padding")
    if row < 0:
        raise LineageError(f"shard {shard['name']}: no document starts at or before token {offset}")
    entry = index.slice(row, 1).to_pylist()[0]
    end = entry["token_start"] + entry["token_count"]
    if offset > end:
        return trace  # after the last document's EOS: padding
    trace.kind = "eos" if offset == end else "document"
    trace.doc_id, trace.index_row, trace.doc_token = entry["doc_id"], entry, offset - entry["token_start"]
    rows = read_lineage(dataset_dir, [entry["doc_id"]]).to_pylist()
    documents = [r for r in rows if not r["is_repeat"]]
    if not documents:
        raise LineageError(f"doc_id {entry['doc_id']} is in shard {shard['name']} but not in the lineage")
    trace.lineage = documents[0]
    trace.repeats = [r for r in rows if r["is_repeat"]]
    if read_record:
        trace.record, trace.record_matches = reread_record(manifest, trace.lineage)
    tokenizer = tokenizer_file(manifest, trace.lineage)
    trace.context = _decode_context(tokenizer, join(dataset_dir, shard["tokens_file"]), dtype, entry, offset)
    return trace


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def tokenizer_file(manifest: dict, lineage_row: dict | None = None) -> str | None:
    """The manifest's tokenizer on this machine, or None.

    The manifest names it relative to the config's folder (``manifest.portable_config``). Tried: the path
    as written (absolute, or from the current folder), then from the config folder implied by the
    lineage row's file and its source's ``uri`` (``data/*.jsonl`` matched ``<folder>/data/a.jsonl``).
    A file found is used only when its sha256 is the manifest's.
    """
    tok = manifest["tokenizer"]
    path = tok["path"]
    candidates = [path]
    source = {s["name"]: s for s in manifest["config"]["sources"]}.get((lineage_row or {}).get("source"))
    if not os.path.isabs(path) and source is not None and "://" not in lineage_row["file"]:
        uri, file = source["uri"], lineage_row["file"]
        depth = len(uri.split("/"))
        if not os.path.isabs(uri) and "**" not in uri and len(file.split("/")) > depth:
            candidates.append(os.path.join(file.rsplit("/", depth)[0], path))
    for candidate in candidates:
        if os.path.isfile(candidate):
            with open(candidate, "rb") as f:
                if sha256_bytes(f.read()) == tok.get("sha256"):
                    return candidate
    return None


def _decode_context(
    path: str | None, tokens_path: str, dtype: np.dtype, entry: dict, offset: int, width: int = 12
) -> str | None:
    """The document's text around the token, with the token itself in [[ ]]; None without the tokenizer."""
    if "://" in tokens_path or path is None:
        return None
    tokenizer = _tokenizer(path)
    start, end = entry["token_start"], entry["token_start"] + entry["token_count"]
    ids = np.memmap(tokens_path, dtype=dtype, mode="r")
    piece = lambda a, b: tokenizer.decode([int(t) for t in ids[a:b]], skip_special_tokens=False)  # noqa: E731
    if offset == end:
        return piece(max(start, offset - width), offset) + "[[EOS]]"
    return (
        piece(max(start, offset - width), offset)
        + "[["
        + piece(offset, offset + 1)
        + "]]"
        + piece(offset + 1, min(end, offset + 1 + width))
    )


def _find_shard(manifest: dict, name: str) -> dict:
    name = os.path.basename(name)
    for suffix in (".bin", ".idx.parquet"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    for shard in manifest["shards"]:
        if shard["name"] == name:
            return shard
    raise LineageError(
        f"no shard {name!r} in dataset {manifest['dataset_id']}; "
        f"shards: {', '.join(s['name'] for s in manifest['shards'])}"
    )


def _token_at(path: str, offset: int, dtype: np.dtype) -> int:
    if "://" not in path:
        return int(np.memmap(path, dtype=dtype, mode="r")[offset])
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(offset * dtype.itemsize)
        return int(np.frombuffer(f.read(dtype.itemsize), dtype=dtype)[0])


def reread_record(manifest: dict, row: dict) -> tuple[dict | None, bool | None]:
    """Re-read a lineage row's record from its file; also check it normalizes to the doc_id."""
    from beam_pipeline.records.normalize import normalize_text
    from beam_pipeline.sources.readers import BadRecord, iter_records

    sources = {s["name"]: s for s in manifest["config"]["sources"]}
    source = sources.get(row["source"])
    if source is None or not FileSystems.exists(row["file"]):
        return None, None
    fields = source.get("fields", {})
    records = iter_records(
        lambda: FileSystems.open(row["file"], compression_type=CompressionTypes.UNCOMPRESSED),
        row["file"],
        source["format"],
        text_field=fields.get("text", "text"),
        url_field=fields.get("url", "url"),
        date_field=fields.get("date", "date"),
        license_field=fields.get("license", "license"),
        id_field=fields.get("id", "id"),
        extract=source.get("extract"),  # web archives: the source's extraction
        max_record_bytes=manifest["config"].get("ingest", {}).get("max_record_bytes", 8 << 20),
    )
    for record in records:
        if record.position == row["position"] and not isinstance(record, BadRecord):
            raw = dataclasses.asdict(record)
            return raw, make_doc_id(row["source"], normalize_text(record.text)) == row["doc_id"]
        if record.position > row["position"]:
            break
    return None, False


def format_trace(trace: Trace, *, max_chars: int = 1200) -> str:
    """Human-readable trace for ``python -m beam_pipeline trace``."""
    lines = [
        f"dataset   {trace.dataset_id}",
        f"shard     {trace.shard}",
        f"token     {trace.offset} (id {trace.token_id}, {trace.kind})",
    ]
    if trace.kind == "padding":
        lines.append("          padding after the shard's last document: no source")
        return "\n".join(lines)
    ix = trace.index_row
    lines += [
        f"document  {trace.doc_id}  token {trace.doc_token} of {ix['token_count']} "
        f"(shard tokens {ix['token_start']}..{ix['token_start'] + ix['token_count']}, EOS last)"
    ]
    if trace.context is not None:
        lines.append(f"context   {trace.context!r}")
    row = trace.lineage
    lines += ["", "provenance"]
    for name in (
        "source",
        "domain",
        "license",
        "url",
        "date",
        "record_id",
        "file",
        "position",
        "byte_offset",
        "snapshot_id",
        "content_hash",
        "n_chars",
    ):
        lines.append(f"  {name:<13} {row.get(name)}")
    lines += ["", "decisions"]
    for stage, columns in _decision_columns(row).items():
        lines.append(f"  {stage:<13} " + ", ".join(f"{c}={row[f'{stage}{SEP}{c}']}" for c in columns))
    lines.append(
        f"  {'dataset':<13} shard={row.get('shard')}, token_start={row.get('token_start')}, "
        f"token_count={row.get('token_count')}"
    )
    if trace.repeats:
        lines += ["", f"verbatim repeats of this document in its source ({len(trace.repeats)})"]
        lines += [
            f"  {r['file']} position {r['position']} byte_offset {r['byte_offset']} url {r['url']}"
            for r in trace.repeats
        ]
    lines += ["", "source record (re-read from the file)"]
    if trace.record is None:
        lines.append("  (the source file is not readable here)")
    else:
        check = "matches" if trace.record_matches else "DOES NOT match"
        lines.append(f"  normalized text {check} doc_id {trace.doc_id}")
        for name in ("position", "byte_offset", "url", "date", "license", "record_id"):
            lines.append(f"  {name:<13} {trace.record.get(name)}")
        text = trace.record["text"]
        shown = text if len(text) <= max_chars else text[:max_chars] + f"... [{len(text) - max_chars} more chars]"
        lines += ["  text:", *("    " + t for t in shown.splitlines())]
    return "\n".join(lines)


def _decision_columns(row: dict) -> dict[str, list[str]]:
    """{stage: [column, ...]} for every ``<stage>__<column>`` in a lineage row, in column order."""
    stages: dict[str, list[str]] = {}
    for name in row:
        if SEP in name:
            stage, column = name.split(SEP, 1)
            stages.setdefault(stage, []).append(column)
    return stages


# --- CLI --------------------------------------------------------------------


def cli_lineage(args) -> int:
    """``python -m beam_pipeline lineage DATASET``: (re)write a dataset's lineage."""
    dataset_dir = dataset_dir_of(args.dataset)
    manifest = load_manifest(dataset_dir)
    if "previous_dataset_id" in manifest:
        print(
            f"error: {manifest['dataset_id']} was made by a takedown, which wrote its lineage; "
            "it cannot be rebuilt from the layers",
            file=sys.stderr,
        )
        return 1
    try:
        print(write_lineage(root_of(dataset_dir), manifest, force=args.force))
    except (LineageError, KeyError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def cli_trace(args) -> int:
    """``python -m beam_pipeline trace --dataset D --shard S --offset T``."""
    try:
        trace = trace_token(args.dataset, args.shard, args.offset)
    except (LineageError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_trace(trace, max_chars=args.max_chars))
    return 0
