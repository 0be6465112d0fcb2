"""The figures README.md shows for `make demo` are the sample build's (the session's reference build)."""
from __future__ import annotations

import os
import re

from tests.conftest import REPO


def _demo_output() -> str:
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    start = readme.index("prints what happened:")
    block = re.search(r"```\n(.*?)```", readme[start:], re.S)
    assert block, "README.md: no output block after 'prints what happened:'"
    return block.group(1)


def test_the_readme_stage_table_is_the_sample_build(built):
    rows = {}
    for line in _demo_output().splitlines():
        fields = line.split()
        if len(fields) == 6 and fields[0] in built["stages"]:
            rows[fields[0]] = fields[1:]
    assert list(rows) == list(built["stages"]), "README.md shows other stages than the build runs"
    for name, stage in built["stages"].items():
        c = stage["counts"]
        expected = [str(c["in"]), str(c["passed"]), str(sum(c["filtered"].values())), str(c["dead_letter"]),
                    stage["layer_key"]]
        assert rows[name] == expected, (name, rows[name], expected)


def test_the_readme_totals_are_the_sample_dataset(built):
    text = _demo_output()
    manifest, metrics = built["manifest"], built["metrics"]
    shards = manifest["shards"]
    assert (f"tokens      {sum(s['tokens'] for s in shards)} in {sum(s['sequences'] for s in shards)} "
            f"sequences of {manifest['seq_len']}") in text
    assert f"shards      {len(shards)}\n" in text
    assert f"snapshot    {metrics['snapshot_id']}\n" in text
    assert f"dataset_id  {metrics['dataset_id']}\n" in text
    assert f"[snapshot] {metrics['snapshot_id']}: " in text
    assert f"[ingest] runs in this job -> out/demo/layers/ingest/{built['stages']['ingest']['layer_key']}" in text
