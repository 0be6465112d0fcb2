"""Every Parquet read of the package keeps Arrow on the calling thread.

Arrow decodes Parquet on its thread pool unless told not to; read from a Python
file object (``FileSystems.open``, ``io.BytesIO``) a pool thread can still be
inside Python at interpreter exit, and a command that did all its work aborts
with SIGABRT ("terminate called without an active exception",
apache/arrow#34314). Measured here: ``python -m beam_pipeline dead-letter`` on
a build with one dead letter aborted in 14 of 150 runs (two loops side by
side); a CI run failed on it (tests/test_newcomer.py). ``beam_pipeline.storage.layers``
has the two readers that pass ``use_threads=False``; this test finds any other
``read_table``/``iter_batches`` call in the package that does not.
"""
from __future__ import annotations

import ast
import io
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq

from beam_pipeline.storage.layers import parquet_batches, read_parquet

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "beam_pipeline"

#: Reads of a local path (Arrow's own file, no Python callbacks): the training loader, which must not
#: import Beam to read an index.
PATH_READS = {("loader.py", "read_table")}


def unthreaded_reads_missing() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in ("read_table", "iter_batches"):
                continue
            if (path.name, node.func.attr) in PATH_READS:
                continue
            if not any(k.arg == "use_threads" and isinstance(k.value, ast.Constant) and k.value.value is False
                       for k in node.keywords):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.func.attr}")
    return found


def test_every_parquet_read_of_the_package_is_on_the_calling_thread():
    assert unthreaded_reads_missing() == []


def test_the_readers_read_file_objects():
    table = pa.table({"doc_id": ["a", "b", "c"], "n": [1, 2, 3]})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=2)
    assert read_parquet(io.BytesIO(sink.getvalue()), ["n"]).column("n").to_pylist() == [1, 2, 3]
    batches = list(parquet_batches(io.BytesIO(sink.getvalue()), 2))
    assert [b.num_rows for b in batches] == [2, 1] and pa.Table.from_batches(batches).equals(table)
