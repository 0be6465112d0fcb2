"""Property-based tests (hypothesis): the policy expression parser, the record readers, the hashes.

* The parser, given any string, returns a condition or raises its own ``RuleError`` whose position lies
  inside the string (the end of the string included): never another exception.
* The JSONL, Parquet and WARC readers, given arbitrary or damaged bytes, yield only records and bad
  records (a filtered web capture is not yielded): never an uncaught exception, never a hang (every
  example runs under a wall-clock alarm as well as hypothesis' deadline). For plain JSONL each
  non-blank line is accounted for by exactly one record or bad record.
* The hashing and partition functions give the same values in other interpreters under other
  ``PYTHONHASHSEED`` values.

Deterministic: ``derandomize=True`` (examples derived from each test's source), no example database.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from beam_pipeline.records import hashing
from beam_pipeline.policy.conditions import MAX_NESTING, RuleError, parse_condition, parse_reference
from beam_pipeline.sources.readers import BadRecord, RawRecord, iter_records

HANG_SECONDS = 20  # one example running this long is a hang, whatever the machine's load


def properties(max_examples: int, deadline_seconds: float = 5.0) -> settings:
    return settings(derandomize=True, database=None, max_examples=max_examples,
                    deadline=timedelta(seconds=deadline_seconds),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Hang(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds: int = HANG_SECONDS):
    """Raise Hang in this thread if the block runs longer than ``seconds`` (hypothesis' deadline only
    judges an example after it returns)."""
    def alarm(signum, frame):
        raise Hang(f"example still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- the policy expression parser ------------------------------------------------------------------

COLUMNS = {"quality": {"quality_score": "number", "label": "string"},
           "language": {"lang": "string", "confidence": "number"},
           "document": {"url": "string", "n_chars": "number"},
           "safety": {"flagged": "bool"}}
WORDS = ["quality.quality_score", "quality.label", "language.lang", "language.confidence", "document.url",
         "safety.flagged", "quality", "nope.column", "quality.nope", "and", "or", "not", "in", "is", "null",
         "true", "false", "<", "<=", ">", ">=", "==", "!=", "=", "(", ")", "[", "]", ",", "0.5", "-3",
         "1e999", ".5", "'en'", '"x"', "'unclosed", "AND", "Not", "@", "é", "٣", " ", "\t"]


def check_condition(expression: str) -> None:
    with no_hang():
        try:
            condition = parse_condition(expression, COLUMNS)
        except RuleError as error:
            assert 0 <= error.position <= len(expression), (error.position, expression)
            assert f"at column {error.position + 1}:" in str(error)
        else:
            assert condition.layers <= set(COLUMNS)
            condition.evaluate({"quality": {"quality_score": 0.4, "label": "x"}, "language": None,
                                "document": {"url": "u", "n_chars": 3}, "safety": {"flagged": True}})


@properties(max_examples=300)
@given(st.text(max_size=80))
def test_parser_any_string(expression):
    check_condition(expression)


@properties(max_examples=400)
@given(st.lists(st.sampled_from(WORDS), max_size=25), st.sampled_from([" ", ""]))
def test_parser_token_soup(words, separator):
    check_condition(separator.join(words))


@properties(max_examples=20)
@given(st.integers(min_value=1, max_value=5000), st.sampled_from(["(", "not ", "( not "]))
def test_parser_deep_nesting(depth, opener):
    check_condition(opener * depth + "safety.flagged" + ")" * (depth * opener.count("(")))


def test_parser_nesting_limit():
    """Found by test_parser_deep_nesting: deep nesting was a RecursionError; now a RuleError at the token
    that opens level MAX_NESTING + 1, and MAX_NESTING levels still parse."""
    condition = parse_condition("not " * MAX_NESTING + "safety.flagged", COLUMNS)
    assert condition.evaluate({"safety": {"flagged": True}}) is True  # an even number of 'not's
    with pytest.raises(RuleError, match=f"more than {MAX_NESTING} levels of 'not' and '\\(' at column 251:"):
        parse_condition("(" * 50 + "not " * 75 + "safety.flagged" + ")" * 50, COLUMNS)


@properties(max_examples=200)
@given(st.text(max_size=40))
def test_reference_any_string(text):
    with no_hang():
        try:
            parse_reference(text, COLUMNS, kind="number")
        except RuleError as error:
            assert 0 <= error.position <= len(text), (error.position, text)


# --- the readers -----------------------------------------------------------------------------------

def read(data: bytes, path: str, fmt: str, **options) -> list[RawRecord | BadRecord]:
    with no_hang():
        items = list(iter_records(lambda: io.BytesIO(data), path, fmt, **options))
    assert all(isinstance(item, (RawRecord, BadRecord)) for item in items)
    for item in items:
        if isinstance(item, BadRecord):
            assert item.error and len(item.raw_prefix) <= 256
    return items


def json_values():
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) |
                        st.dictionaries(st.sampled_from(["text", "url", "metadata", "id", "x"]), inner, max_size=4),
                        max_leaves=8)


def jsonl_line():
    record = st.fixed_dictionaries({"text": st.text(max_size=30)},
                                   optional={"id": json_values(), "metadata": json_values(), "url": json_values()})
    return st.one_of(record.map(json.dumps), json_values().map(json.dumps),
                     st.binary(max_size=40).map(lambda raw: raw.replace(b"\n", b" ").decode("latin-1")),
                     st.sampled_from(["", " ", "\r", "{", "\ufeff{}", '{"text": "\\ud800"}', "[1, 2", "\x00"]))


def count_lines(data: bytes) -> int:
    """Lines the reader must account for: not blank once a trailing CR is dropped."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # after the final newline
    return sum(1 for line in lines if line.removesuffix(b"\r") and not line.removesuffix(b"\r").isspace())


FIELDS = st.sampled_from([{}, {"url_field": "metadata.url", "id_field": "metadata.id"},
                          {"text_field": "metadata.text", "date_field": "x"}])


@properties(max_examples=150)
@given(st.binary(max_size=600), st.sampled_from([64 << 10, 1024]), st.sampled_from([7, 1 << 20]), FIELDS)
def test_jsonl_arbitrary_bytes(data, max_record_bytes, chunk_size, fields):
    items = read(data, "x.jsonl", "jsonl", max_record_bytes=max_record_bytes, chunk_size=chunk_size, **fields)
    assert len(items) == count_lines(data)
    assert [item.position for item in items] == sorted({item.position for item in items})


@properties(max_examples=150)
@given(st.lists(jsonl_line(), max_size=12), st.sampled_from(["\n", "\r\n"]), FIELDS)
def test_jsonl_lines(lines, newline, fields):
    data = "".join(line + newline for line in lines).encode("utf-8", "surrogatepass")
    items = read(data, "x.jsonl", "jsonl", **fields)
    assert len(items) == count_lines(data)
    if not fields:  # a line that is an object with a string text is a record with that text
        for item in items:
            line = data.split(b"\n")[item.position].removesuffix(b"\r")
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict) and isinstance(value.get("text"), str) and b"\\ud" not in line.lower():
                    assert isinstance(item, RawRecord) and item.text == value["text"], line


@properties(max_examples=100)
@given(st.lists(jsonl_line(), min_size=1, max_size=8), st.sampled_from(["gz", "zst"]), st.data())
def test_compressed_jsonl_damaged(lines, codec, data):
    import zstandard

    plain = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
    packed = gzip.compress(plain, mtime=0) if codec == "gz" else zstandard.ZstdCompressor().compress(plain)
    cut = data.draw(st.integers(min_value=0, max_value=len(packed)), label="cut")
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(packed) - 1), st.integers(1, 255)), max_size=3),
                      label="flips")
    damaged = bytearray(packed)
    for index, mask in flips:
        damaged[index] ^= mask
    items = read(bytes(damaged[:cut]) + data.draw(st.binary(max_size=20), label="tail"), f"x.jsonl.{codec}",
                 "jsonl", chunk_size=16)
    good = [item for item in items if isinstance(item, RawRecord)]
    assert len(good) <= count_lines(plain) + 1


def parquet_bytes() -> bytes:
    table = pa.table({"text": [f"document {i} " * (i + 1) for i in range(30)],
                      "url": [f"https://example.com/{i}" for i in range(30)],
                      "metadata": pa.array([{"url": f"u{i}", "date": "2024", "text": f"nested {i}"} if i % 3 else None
                                           for i in range(30)])})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=10, compression="snappy")
    return sink.getvalue()


PARQUET = parquet_bytes()


def test_parquet_column_name_not_utf8():
    """Found by test_parquet_damaged: a footer whose column name is not UTF-8 made Arrow raise a
    UnicodeDecodeError out of the reader; it is one bad record for the file."""
    damaged = PARQUET.replace(b"\x03url", b"\x03\xf5rl")
    assert damaged != PARQUET
    (bad,) = read(damaged, "x.parquet", "parquet")
    assert isinstance(bad, BadRecord) and bad.error.startswith("not a parquet file: 'utf-8' codec can't decode")


@properties(max_examples=150)
@given(st.lists(st.tuples(st.integers(0, len(PARQUET) - 1), st.integers(1, 255)), max_size=4),
       st.integers(0, len(PARQUET)), FIELDS)
@example(flips=[(3364, 128)], cut=0, fields={})  # a column name's first byte made 0xf5 (pyarrow 25.0.1's layout)
def test_parquet_damaged(flips, cut, fields):
    damaged = bytearray(PARQUET)
    for index, mask in flips:
        damaged[index] ^= mask
    items = read(bytes(damaged[:cut]) if cut else bytes(damaged), "x.parquet", "parquet", **fields)
    if not flips and not cut:  # every row is a record or (null metadata, nested text) a bad record
        assert len(items) == 30 and [item.position for item in items] == list(range(30))
    assert len([item for item in items if isinstance(item, RawRecord)]) <= 30


@properties(max_examples=100)
@given(st.binary(max_size=400))
def test_parquet_arbitrary_bytes(data):
    read(data, "x.parquet", "parquet")
    read(b"PAR1" + data + b"PAR1", "x.parquet", "parquet")


def warc_record(index: int, html: str) -> bytes:
    target = f"https://example.com/{index}"
    http = (f"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<html><head><title>T</title></head>"
            f"<body><p>{html}</p></body></html>").encode()
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: {target}\r\nWARC-Date: 2024-01-05T00:00:00Z\r\n"
            f"WARC-Record-ID: <urn:uuid:{index:08d}-0000-0000-0000-000000000000>\r\n"
            f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(http)}\r\n\r\n").encode()
    return head + http + b"\r\n\r\n"


WARC_RECORDS = [warc_record(i, f"Paragraph number {i} of a page about rivers. " * 4)
                for i in range(4)]
WARC = b"".join(WARC_RECORDS)
WARC_GZ = b"".join(gzip.compress(record, mtime=0) for record in WARC_RECORDS)


def test_warc_fixtures_are_read():
    """The undamaged inputs of the WARC properties are four documents (so the properties read real records)."""
    for data in (WARC, WARC_GZ):
        items = read(data, "x.warc", "warc")
        assert [type(item) for item in items] == [RawRecord] * 4


@pytest.mark.parametrize("content_type", ["application/httpI msgtype=response", "application/http-x"])
def test_warc_content_type_fastwarc_reads_no_http_from(content_type):
    """Found by test_warc_damaged (a flipped bit turned ';' into 'I'): a block type that starts with
    application/http but that FastWARC parses no HTTP message from is a bad record, not an AttributeError."""
    record = WARC_RECORDS[1].replace(b"application/http; msgtype=response", content_type.encode())
    items = read(WARC_RECORDS[0] + record + WARC_RECORDS[2], "x.warc", "warc")
    assert [type(item) for item in items] == [RawRecord, BadRecord, RawRecord]
    assert items[1].error == f"broken WARC header: Content-Type {content_type!r}"
    assert items[1].position == items[1].byte_offset == len(WARC_RECORDS[0])


@properties(max_examples=120)
@given(st.sampled_from(["plain", "gz"]), st.data())
def test_warc_damaged(kind, data):
    original = WARC if kind == "plain" else WARC_GZ
    damaged = bytearray(original)
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(original) - 1), st.integers(1, 255)), max_size=4),
                      label="flips")
    for index, mask in flips:
        damaged[index] ^= mask
    cut = data.draw(st.integers(min_value=1, max_value=len(damaged)), label="cut")
    items = read(bytes(damaged[:cut]), "x.warc", "warc")
    assert len([item for item in items if isinstance(item, RawRecord)]) <= 4


@properties(max_examples=100)
@given(st.binary(max_size=400), st.sampled_from([b"", b"WARC/1.0\r\n", b"\x1f\x8b", b"filedesc://"]))
def test_warc_arbitrary_bytes(data, prefix):
    read(prefix + data, "x.warc", "warc")


# --- hashing and partitioning across interpreters --------------------------------------------------

HASH_ROWS = r"""
import numpy as np
from beam_pipeline.records import hashing
from beam_pipeline.dedup import minhash


def hash_rows(cases):
    rows = []
    for source, text, seed, buckets in cases:
        words = [hashing.stable_hash64(seed, word) for word in text.split()] or [seed]
        signature = minhash.signature(np.array(words, dtype=np.uint64), 16, seed)
        rows.append([hashing.doc_id(source, text), hashing.content_hash(text),
                     str(hashing.stable_hash64(seed, source, text, seed)), hashing.bucket_of(text, buckets, seed),
                     hashing.digest_json({"s": source, "t": text, "n": seed}),
                     [str(key) for key in minhash.band_keys(signature, 4, 4, seed)],
                     str(int(hashing.splitmix64(np.array([seed], dtype=np.uint64))[0]))])
    return rows
"""
HASH_SCRIPT = HASH_ROWS + "\nimport json, sys\njson.dump(hash_rows(json.load(sys.stdin)), sys.stdout)\n"


def hash_rows_here(cases):
    namespace = {}
    exec(HASH_ROWS, namespace)
    return json.loads(json.dumps(namespace["hash_rows"](cases)))


UTF8_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@properties(max_examples=3, deadline_seconds=60)
@given(st.lists(st.tuples(UTF8_TEXT, UTF8_TEXT, st.integers(0, 2 ** 64 - 1), st.integers(1, 4096)),
                min_size=20, max_size=40))
def test_hashes_are_stable_across_interpreters_and_hash_seeds(cases):
    outputs = []
    for hash_seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", HASH_SCRIPT], input=json.dumps(cases), env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1] == outputs[2] == hash_rows_here(cases)
    assert all(0 <= row[3] < buckets for (_, _, _, buckets), row in zip(cases, outputs[0]))


@properties(max_examples=200)
@given(UTF8_TEXT, UTF8_TEXT)
def test_doc_id_separates_source_from_text(source, text):
    """Moving characters between source and text changes the id (the separator cannot occur in a name)."""
    if "\x1f" in source or not text or text[0] == "\x1f":
        return
    assert hashing.doc_id(source, text) != hashing.doc_id(source + text[0], text[1:])
