"""Reading the layers a run's stage ledgers list: outputs, partitions, columns, documents.

The report reads a layer column by column, one partition at a time, so the
driver's memory stays at one partition whatever the corpus size:
:class:`Layout` holds every output of every committed layer of a run (and
its dead letters) as an :class:`Output` (partition paths, Arrow schema);
:func:`joined_by_doc_id` joins two outputs on ``doc_id`` partition by partition;
:func:`lookup_documents` fetches some documents' texts from only the
partitions that hold them. Used by the gatherers of the report's sections
(:mod:`beam_pipeline.report.gather` and the modules it calls).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.records.hashing import bucket_of
from beam_pipeline.report.locate import RunRef
from beam_pipeline.storage.layers import Layer, join, read_parquet

#: Outputs that hold one row per dropped record but no ``reason`` column: output -> reason.
DROP_RECORD_OUTPUTS = {"repeats": "repeated_record"}
#: Outputs whose columns describe documents, one row per document: ``documents`` and every ``*annotations``.
#: (Others -- gold text, decisions, signatures, indexes -- are not scores.)
ANNOTATION_OUTPUTS = ("documents",)
ANNOTATION_SUFFIX = "annotations"
TEXT_OUTPUT = "documents"


def stage_ledgers(ref: RunRef, stages: list[dict]) -> dict[str, dict]:
    ledgers = {}
    for stage in stages:
        layer = Layer(ref.root, stage["name"], stage["layer_key"])
        if layer.is_complete():
            ledgers[stage["name"]] = layer.ledger()
    return ledgers


class Output:
    """One output of one stage layer: its partition paths and Arrow schema."""

    def __init__(self, stage: str, name: str, paths: list[str], rows: int):
        self.stage, self.name, self.paths, self.rows = stage, name, paths, rows
        self._schema = None

    @property
    def label(self) -> str:
        return f"{self.stage}/{self.name}"

    @property
    def schema(self) -> pa.Schema:
        if self._schema is None:
            with FileSystems.open(self.paths[0]) as f:
                self._schema = pq.ParquetFile(f).schema_arrow
        return self._schema

    def has(self, *columns: str) -> bool:
        return all(c in self.schema.names for c in columns)

    def tables(self, columns: list[str] | None) -> Iterable[pa.Table]:
        for path in self.paths:
            yield read_table(path, columns)


class Layout:
    """Every output of every committed layer of a run, and the dead letters."""

    def __init__(self, root: str, ledgers: dict[str, dict]):
        self.outputs: list[Output] = []
        self.dead_letters: list[Output] = []
        for stage, ledger in ledgers.items():
            layer = Layer(root, stage, ledger["key"])
            for name, spec in ledger.get("outputs", {}).items():
                parts = [p["name"] for p in spec.get("parts", [])]
                if not parts:
                    continue
                if name == "dead_letter":
                    base = layer.dead_letter_path
                    self.dead_letters.append(Output(stage, name, [join(base, p) for p in parts], spec.get("rows", 0)))
                else:
                    base = layer.output_path(name)
                    self.outputs.append(Output(stage, name, [join(base, p) for p in parts], spec.get("rows", 0)))

    def documents(self) -> Output | None:
        for out in self.outputs:
            if out.name == TEXT_OUTPUT and out.has("doc_id", "text"):
                return out
        return None

    def annotations(self) -> list[Output]:
        return [o for o in self.outputs if o.name in ANNOTATION_OUTPUTS or o.name.endswith(ANNOTATION_SUFFIX)]


def read_table(path: str, columns: list[str] | None = None) -> pa.Table:
    with FileSystems.open(path) as f:
        return read_parquet(f, columns)


def joined_by_doc_id(
    left: Output, left_columns: list[str], right: Output, right_columns: list[str]
) -> Iterable[pa.Table]:
    """``left`` rows joined with ``right`` on doc_id, partition by partition when both share the layout."""
    if len(left.paths) == len(right.paths):
        for lp, rp in zip(left.paths, right.paths):
            yield read_table(lp, left_columns).join(read_table(rp, right_columns), "doc_id", join_type="left outer")
    else:  # different partition counts: hold the narrow right side once
        whole = pa.concat_tables(right.tables(right_columns))
        for table in left.tables(left_columns):
            yield table.join(whole, "doc_id", join_type="left outer")


def lookup_documents(docs: Output, doc_ids: set[str], max_chars: int) -> dict[str, dict]:
    """Source, URL, size and (truncated) text of some documents, reading only the partitions that hold them."""
    if not doc_ids:
        return {}
    n = len(docs.paths)
    by_part: dict[int, list[str]] = defaultdict(list)
    for d in doc_ids:
        by_part[bucket_of(d, n)].append(d)
    columns = [c for c in ("doc_id", "source", "url", "n_chars", "text", "file", "position") if docs.has(c)]
    found: dict[str, dict] = {}
    for index, ids in sorted(by_part.items()):
        table = read_table(docs.paths[index], columns)
        table = table.filter(pc.is_in(table["doc_id"], value_set=pa.array(sorted(ids), pa.string())))
        for row in table.to_pylist():
            text = row.pop("text") or ""
            row["text"] = text[:max_chars]
            row["truncated"] = len(text) > max_chars
            found[row["doc_id"]] = row
    missing = doc_ids - set(found)
    if missing:  # partitioned some other way: scan
        for table in docs.tables(columns):
            table = table.filter(pc.is_in(table["doc_id"], value_set=pa.array(sorted(missing), pa.string())))
            for row in table.to_pylist():
                text = row.pop("text") or ""
                found[row["doc_id"]] = {**row, "text": text[:max_chars], "truncated": len(text) > max_chars}
    return found
