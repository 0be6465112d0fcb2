"""Oversized and zip-bomb-shaped inputs are bounded by ingest.max_record_bytes, not by memory.

Each case reads one hostile file with the ingest readers in a fresh interpreter and
reports the record outcome and the peak resident memory it added (``ru_maxrss`` after
minus before reading). The readers must turn the oversized record into one dead letter
that names its true size, read the good record after it, and never hold the big record.
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from conftest import REPO

MAX_RECORD_BYTES = 4 << 20  # the sample config's limit
PEAK_LIMIT_MB = 48          # far below the 50 MB and 100 MB records below

READ = r"""
import json, resource, sys
from beam_pipeline.sources.readers import BadRecord, iter_records
path, fmt, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = []
for record in iter_records(lambda: open(path, "rb"), path, fmt, max_record_bytes=limit):
    if isinstance(record, BadRecord):
        out.append({"bad": record.error, "prefix": len(record.raw_prefix)})
    else:
        out.append({"text_chars": len(record.text)})
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"records": out, "peak_added_mb": (after - before) / 1024}))
"""


def read_in_fresh_interpreter(path: str, fmt: str) -> dict:
    result = subprocess.run([sys.executable, "-c", READ, path, fmt, str(MAX_RECORD_BYTES)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_a_50_mb_single_line_document_is_one_dead_letter(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "w") as f:
        f.write('{"text": "')
        chunk = "word " * 200_000  # 1 MB
        for _ in range(50):
            f.write(chunk)
        f.write('"}\n')
        f.write(json.dumps({"text": "a normal record after the huge one"}) + "\n")
    result = read_in_fresh_interpreter(str(path), "jsonl")
    bad, good = result["records"]
    assert "exceeds max_record_bytes" in bad["bad"] and str(50 * 1_000_000 + 12) in bad["bad"]
    assert bad["prefix"] <= 256 and good == {"text_chars": len("a normal record after the huge one")}
    assert result["peak_added_mb"] < PEAK_LIMIT_MB, result


@pytest.mark.parametrize("fmt,name", [("jsonl", "bomb.jsonl.gz"), ("text", "bomb.txt.gz")])
def test_a_100_mb_gzip_bomb_is_bounded(tmp_path, fmt, name):
    path = tmp_path / name
    with gzip.open(path, "wb", compresslevel=9) as f:
        if fmt == "jsonl":
            f.write(b'{"text": "')
        block = b"a" * (1 << 20)
        for _ in range(100):
            f.write(block)
        if fmt == "jsonl":
            f.write(b'"}\n' + json.dumps({"text": "after the bomb"}).encode() + b"\n")
    assert path.stat().st_size < 1_000_000  # > 100x compression: the shape of a zip bomb
    result = read_in_fresh_interpreter(str(path), fmt)
    records = result["records"]
    assert "exceeds max_record_bytes" in records[0]["bad"]
    if fmt == "jsonl":
        assert records[1:] == [{"text_chars": len("after the bomb")}]
    else:
        assert len(records) == 1
    assert result["peak_added_mb"] < PEAK_LIMIT_MB, result
