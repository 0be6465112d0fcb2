"""Verify a published dataset against its manifest, byte for byte.

``python -m beam_pipeline verify DATASET`` recomputes everything the manifest
asserts and names every mismatch (exit 0 when there is none, 1 otherwise):

* per shard: both files exist, their sizes and sha256, the leaf (from the
  recomputed digests) and the leaf the manifest stores;
* per shard, the packing: ``tokens + pad_tokens == sequences * seq_len``,
  the file holds exactly that many tokens, ``pad_tokens < seq_len``; the
  index has ``documents`` rows, starts at 0, each document starts right after
  the previous one's EOS (so starts strictly increase), the token at
  ``token_start + token_count`` is EOS, the last EOS ends at ``tokens`` and
  everything after it is the pad token; every id is below the vocabulary size;
* the dataset: the Merkle root of the recomputed leaves equals
  ``dataset_id``, ``merkle.root`` and the folder name; no doc_id is in two
  shards; no tombstoned doc_id is in any shard;
* lineage (when present): every part's size and sha256, and the placement of
  each document (shard, token_start, token_count) agrees with the indexes.

Files are read through Beam's FileSystems, so a dataset on S3/GCS verifies the
same way; each shard is held in memory once while it is checked.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import tempfile

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import merkle_root, sha256_bytes
from beam_pipeline.storage.layers import join, read_parquet
from beam_pipeline.storage.manifest import load_manifest, shard_leaf

INDEX_COLUMNS = ("doc_id", "source", "token_start", "token_count")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One mismatch: where (a shard name or ``dataset``), which check, what was found."""

    where: str
    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: {self.check}: {self.detail}"


@dataclasses.dataclass
class Report:
    dataset_id: str
    shards: int = 0
    documents: int = 0
    tokens: int = 0
    problems: list[Problem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_dataset(dataset: str, *, check_lineage: bool = True) -> Report:
    """Check every file and every claim of a dataset's manifest; collect all problems."""
    from beam_pipeline.transforms.lineage import dataset_dir_of

    dataset_dir = dataset_dir_of(dataset)
    manifest = load_manifest(dataset_dir)
    report = Report(manifest.get("dataset_id", "?"))
    seq_len = manifest["seq_len"]
    tok = manifest["tokenizer"]
    dtype = np.dtype(tok["dtype"]).newbyteorder("<")
    leaves, owner = {}, {}
    for shard in manifest["shards"]:
        report.shards += 1
        leaves[shard["name"]] = _verify_shard(dataset_dir, shard, seq_len, dtype, tok, owner, report)
    _verify_dataset_id(dataset_dir, manifest, leaves, report)
    tombstoned = sorted(t["doc_id"] for t in manifest.get("tombstones", []) if t["doc_id"] in owner)
    for doc in tombstoned:
        report.problems.append(Problem(owner[doc], "tombstone", f"tombstoned document {doc} is still in the shard"))
    if FileSystems.exists(join(dataset_dir, "SUPERSEDED_BY")):
        successor = json.loads(_read(join(dataset_dir, "SUPERSEDED_BY")))
        report.notes.append(f"superseded by {successor.get('dataset_id')} ({successor.get('reason')})")
    if check_lineage:
        _verify_lineage(dataset_dir, manifest, report)
    return report


# --- shards -----------------------------------------------------------------


def _verify_shard(
    dataset_dir: str, shard: dict, seq_len: int, dtype: np.dtype, tok: dict, owner: dict, report: Report
) -> str | None:
    """Check one shard; return its recomputed leaf (None if a file is missing)."""
    name = shard["name"]
    problem = lambda check, detail: report.problems.append(Problem(name, check, detail))  # noqa: E731
    data = {}
    for kind in ("tokens", "index"):
        path = join(dataset_dir, shard[f"{kind}_file"])
        if not FileSystems.exists(path):
            problem(f"{kind} file", f"{shard[f'{kind}_file']} is missing")
            continue
        data[kind] = _read(path)
        if len(data[kind]) != shard[f"{kind}_bytes"]:
            problem(f"{kind} size", f"{len(data[kind])} bytes, manifest says {shard[f'{kind}_bytes']}")
        digest = sha256_bytes(data[kind])
        if digest != shard[f"{kind}_sha256"]:
            problem(f"{kind} sha256", f"{digest}, manifest says {shard[f'{kind}_sha256']}")
    if shard.get("leaf") != shard_leaf(shard):
        problem("leaf", f"manifest leaf {shard.get('leaf')} is not the leaf of its own digests {shard_leaf(shard)}")
    if not name.startswith(f"{shard['domain']}-"):
        problem("domain", f"shard name does not start with its domain {shard['domain']!r}")
    _verify_geometry(shard, seq_len, problem)
    tokens = None
    if "tokens" in data:
        usable = len(data["tokens"]) - len(data["tokens"]) % dtype.itemsize
        tokens = np.frombuffer(data["tokens"][:usable], dtype=dtype)
        report.tokens += int(min(tokens.size, shard["tokens"]))
        if tokens.size and int(tokens.max()) >= tok["vocab_size"]:
            problem("token ids", f"id {int(tokens.max())} is not below vocab_size {tok['vocab_size']}")
    if "index" in data:
        _verify_index(data["index"], tokens, shard, tok, problem, owner, report)
    if len(data) < 2:
        return None
    return shard_leaf(
        {"name": name, "tokens_sha256": sha256_bytes(data["tokens"]), "index_sha256": sha256_bytes(data["index"])}
    )


def _verify_geometry(shard: dict, seq_len: int, problem) -> None:
    expected = shard["sequences"] * seq_len
    if shard["tokens"] + shard["pad_tokens"] != expected:
        problem(
            "token count",
            f"tokens {shard['tokens']} + pad_tokens {shard['pad_tokens']} != "
            f"sequences {shard['sequences']} * seq_len {seq_len} = {expected}",
        )
    if not 0 <= shard["pad_tokens"] < seq_len:
        problem("padding", f"pad_tokens {shard['pad_tokens']} is not in [0, seq_len={seq_len})")
    if shard["sequences"] < 1:
        problem("sequences", f"{shard['sequences']} sequences")


def _verify_index(
    raw: bytes, tokens: np.ndarray | None, shard: dict, tok: dict, problem, owner: dict, report: Report
) -> None:
    try:
        index = read_parquet(io.BytesIO(raw))
    except Exception as err:  # noqa: BLE001 - any parse failure is the finding
        problem("index", f"not a readable Parquet file: {err}")
        return
    missing = [c for c in INDEX_COLUMNS if c not in index.column_names]
    if missing:
        problem("index columns", f"missing {missing}")
        return
    starts = index.column("token_start").to_numpy(zero_copy_only=False).astype(np.int64)
    counts = index.column("token_count").to_numpy(zero_copy_only=False).astype(np.int64)
    report.documents += index.num_rows
    if index.num_rows != shard["documents"]:
        problem("documents", f"index has {index.num_rows} rows, manifest says {shard['documents']}")
    for doc in index.column("doc_id").to_pylist():
        if doc in owner:
            problem("doc_id", f"{doc} is also in shard {owner[doc]}")
        owner[doc] = shard["name"]
    if not index.num_rows:
        return
    ends = starts + counts  # position of each document's EOS
    if starts[0] != 0:
        problem("index", f"the first document starts at {starts[0]}, not 0")
    if (counts < 0).any():
        problem("index", f"negative token_count in row {int(np.argmax(counts < 0))}")
    gaps = np.flatnonzero(starts[1:] != ends[:-1] + 1)
    if gaps.size:
        row = int(gaps[0]) + 1
        problem(
            "index",
            f"{gaps.size} document(s) do not start right after the previous EOS; first: row {row} "
            f"starts at {starts[row]}, expected {ends[row - 1] + 1} (starts must increase)",
        )
    if int(ends[-1]) + 1 != shard["tokens"]:
        problem(
            "index",
            f"the last document's EOS is at {int(ends[-1])}, so data ends at {int(ends[-1]) + 1}, "
            f"manifest says tokens = {shard['tokens']} (padding must follow the last document)",
        )
    if tokens is None:
        return
    inside = (ends >= 0) & (ends < tokens.size)
    bad = np.flatnonzero(~inside | (tokens[np.clip(ends, 0, max(tokens.size - 1, 0))] != tok["eos_id"]))
    if bad.size:
        row = int(bad[0])
        problem(
            "eos",
            f"{bad.size} document(s) not followed by EOS (id {tok['eos_id']}); first: row {row}, "
            f"doc {index.column('doc_id')[row].as_py()}, position {int(ends[row])}",
        )
    tail = tokens[shard["tokens"] :]
    if tail.size and (tail != tok["pad_id"]).any():
        first = shard["tokens"] + int(np.argmax(tail != tok["pad_id"]))
        problem(
            "padding", f"token {first} after the last document is {int(tokens[first])}, not the pad id {tok['pad_id']}"
        )


# --- dataset id ---------------------------------------------------------------


def _verify_dataset_id(dataset_dir: str, manifest: dict, leaves: dict, report: Report) -> None:
    problem = lambda check, detail: report.problems.append(Problem("dataset", check, detail))  # noqa: E731
    names = [s["name"] for s in manifest["shards"]]
    if len(set(names)) != len(names):
        problem("shard names", "a shard name appears twice")
    if any(leaf is None for leaf in leaves.values()):
        problem("merkle root", "not recomputed: a shard file is missing")
        return
    root = merkle_root(leaves[name] for name in sorted(leaves))
    if root != manifest["dataset_id"]:
        problem("merkle root", f"recomputed {root}, manifest dataset_id is {manifest['dataset_id']}")
    if manifest.get("merkle", {}).get("root") != manifest["dataset_id"]:
        problem("merkle root", f"merkle.root {manifest.get('merkle', {}).get('root')} != dataset_id")
    folder = dataset_dir.rstrip("/").rsplit("/", 1)[-1]
    if folder != manifest["dataset_id"] and _looks_like_id(folder):
        problem("folder", f"dataset folder {folder} is not named after dataset_id {manifest['dataset_id']}")


def _looks_like_id(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


# --- lineage ------------------------------------------------------------------


def _verify_lineage(dataset_dir: str, manifest: dict, report: Report) -> None:
    from beam_pipeline.dataset.lineage import lineage_marker, lineage_parts
    from beam_pipeline.transforms.lineage import has_lineage, lineage_dir, read_parts, spill_placement

    if not has_lineage(dataset_dir):
        report.notes.append("no lineage (lineage/_LINEAGE.json): skipped")
        return
    problem = lambda check, detail: report.problems.append(Problem("lineage", check, detail))  # noqa: E731
    marker = lineage_marker(dataset_dir)
    for part in marker["parts"]:
        path = join(lineage_dir(dataset_dir), part["name"])
        if not FileSystems.exists(path):
            problem("part", f"{part['name']} is missing")
            return
        data = _read(path)
        if len(data) != part["bytes"] or sha256_bytes(data) != part["sha256"]:
            problem("part", f"{part['name']}: size or sha256 differs from _LINEAGE.json")
            return
    with tempfile.TemporaryDirectory(prefix="verify-placement-") as scratch:
        try:  # the shards' placement, split by lineage part: one part's rows in memory at a time
            placement = spill_placement(dataset_dir, manifest, len(marker["parts"]), scratch)
        except Exception:  # noqa: BLE001 - unreadable indexes are reported per shard already
            return
        for index, part in enumerate(
            lineage_parts(dataset_dir, ["doc_id", "is_repeat", "shard", "token_start", "token_count"])
        ):
            actual = {
                r["doc_id"]: (r["shard"], r["token_start"], r["token_count"])
                for r in (read_parts(placement[index], None).to_pylist() if index in placement else [])
            }
            recorded = {
                r["doc_id"]: (r["shard"], r["token_start"], r["token_count"])
                for r in part.to_pylist()
                if not r["is_repeat"] and r["shard"] is not None
            }
            for doc in sorted(set(actual) ^ set(recorded)):
                where = "in a shard but not placed in lineage" if doc in actual else "placed in lineage but in no shard"
                problem("placement", f"{doc} is {where}")
            for doc in sorted(set(actual) & set(recorded)):
                if actual[doc] != recorded[doc]:
                    problem("placement", f"{doc}: lineage says {recorded[doc]}, index says {actual[doc]}")


def _read(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


# --- CLI ----------------------------------------------------------------------


def format_report(report: Report) -> str:
    lines = [
        f"dataset   {report.dataset_id}",
        f"checked   {report.shards} shards, {report.documents} documents, {report.tokens} tokens",
    ]
    lines += [f"note      {n}" for n in report.notes]
    if report.ok:
        lines.append("OK        every digest, leaf, the Merkle root and the packing verify")
    else:
        lines.append(f"FAILED    {len(report.problems)} problem(s):")
        lines += [f"  {p}" for p in report.problems]
    return "\n".join(lines)


def cli_verify(args) -> int:
    """``python -m beam_pipeline verify DATASET [--json]``: exit 0 if everything verifies, else 1."""
    try:
        report = verify_dataset(args.dataset, check_lineage=not args.skip_lineage)
    except (FileNotFoundError, KeyError, ValueError) as err:
        print(f"error: cannot read the manifest of {args.dataset}: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "dataset_id": report.dataset_id,
                    "ok": report.ok,
                    "shards": report.shards,
                    "documents": report.documents,
                    "tokens": report.tokens,
                    "notes": report.notes,
                    "problems": [dataclasses.asdict(p) for p in report.problems],
                },
                indent=1,
            )
        )
    else:
        print(format_report(report))
    return 0 if report.ok else 1
