"""Nested field paths (`fields: {url: metadata.url}`): the datatrove / Dolma / FineWeb layout.

A path that ends early (key absent, object null) is an absent value; a path that runs into a value
that is not an object is a per-record dead letter (docs/config.md, "Field paths").
"""
from __future__ import annotations

import glob
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import ConfigError, load_config
from beam_pipeline.records.record_types import field_path_problem
from beam_pipeline.sources.readers import BadRecord, RawRecord, iter_records
from conftest import IN_PROCESS, SAMPLE_TOKENIZER

NESTED = {"text_field": "text", "url_field": "metadata.url", "date_field": "metadata.date", "id_field": "id"}


def read_jsonl(lines: list[dict | str], **fields) -> list[RawRecord | BadRecord]:
    data = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()
    return list(iter_records(lambda: io.BytesIO(data), "x.jsonl", "jsonl", **fields))


def read_parquet(table: pa.Table, **fields) -> list[RawRecord | BadRecord]:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    data = sink.getvalue()
    return list(iter_records(lambda: io.BytesIO(data), "x.parquet", "parquet", **fields))


def test_jsonl_nested_paths():
    (record,) = read_jsonl([{"text": "t", "id": "a", "metadata": {"url": "https://a.example/", "date": 20240105}}],
                           **NESTED)
    assert (record.url, record.date, record.record_id) == ("https://a.example/", "20240105", "a")


def test_jsonl_path_that_ends_early_is_an_absent_value():
    items = read_jsonl([{"text": "no metadata"}, {"text": "null metadata", "metadata": None},
                        {"text": "no url", "metadata": {"date": "2024"}},
                        {"text": "null url", "metadata": {"url": None}}], **NESTED)
    assert all(isinstance(item, RawRecord) and item.url is None for item in items)
    assert [item.date for item in items] == [None, None, "2024", None]


def test_jsonl_path_through_a_non_object_is_a_dead_letter_for_that_record():
    items = read_jsonl([{"text": "a", "metadata": "https://a.example/"}, {"text": "b", "metadata": [1]},
                        {"text": "c", "metadata": {"url": "u"}}], **NESTED)
    assert [type(item) for item in items] == [BadRecord, BadRecord, RawRecord]
    assert items[0].error == "field 'metadata.url': 'metadata' is a string, not an object"
    assert items[1].error == "field 'metadata.url': 'metadata' is an array, not an object"
    assert items[0].position == 0 and items[0].raw_prefix.startswith(b'{"text": "a"')


def test_jsonl_nested_text_field():
    items = read_jsonl([{"doc": {"body": "deep"}}, {"doc": {}}, {"doc": {"body": 3}}], text_field="doc.body")
    assert items[0].text == "deep"
    assert items[1].error == "missing text field 'doc.body'"
    assert items[2].error == "text field 'doc.body' is not a string (got number)"


def test_jsonl_key_spelled_like_the_whole_path_wins():
    (record,) = read_jsonl([{"text": "t", "metadata.url": "flat", "metadata": {"url": "nested"}}], **NESTED)
    assert record.url == "flat"


def test_parquet_struct_column():
    metadata = pa.array([{"url": "https://a.example/", "date": "2024-01-05", "dump": "CC-MAIN"}, None,
                         {"url": None, "date": "2023", "dump": "x"}])
    table = pa.table({"text": ["one", "two", "three"], "id": ["a", "b", "c"], "metadata": metadata})
    items = read_parquet(table, **NESTED)
    assert [(item.text, item.url, item.date, item.record_id) for item in items] == [
        ("one", "https://a.example/", "2024-01-05", "a"), ("two", None, None, "b"), ("three", None, "2023", "c")]


def test_parquet_missing_child_is_absent_and_non_struct_is_a_dead_letter():
    table = pa.table({"text": ["one"], "metadata": pa.array([{"dump": "x"}])})
    (record,) = read_parquet(table, **NESTED)
    assert isinstance(record, RawRecord) and record.url is None
    table = pa.table({"text": ["one", "two"], "metadata": ["a string", None]})
    first, second = read_parquet(table, **NESTED)
    assert first.error == "field 'metadata.url': 'metadata' is a string, not an object"
    assert first.raw_prefix == b"one" and isinstance(second, RawRecord) and second.url is None


def test_parquet_nested_text_column():
    table = pa.table({"doc": pa.array([{"body": "deep"}, None, {"body": None}])})
    items = read_parquet(table, text_field="doc.body")
    assert items[0].text == "deep"
    assert items[1].error == "missing text field 'doc.body'"
    assert items[2].error == "text field 'doc.body' is null"
    (bad,) = read_parquet(table, text_field="doc.nope")
    assert bad.error == "missing text column 'doc.nope'; columns found: doc"


def test_parquet_flat_column_spelled_like_the_path_wins():
    table = pa.table({"text": ["t"], "metadata.url": ["flat"], "metadata": pa.array([{"url": "nested"}])})
    (record,) = read_parquet(table, **NESTED)
    assert record.url == "flat"


@pytest.mark.parametrize("name, problem", [
    ("", "is empty"), ("metadata.", "empty name"), (".url", "empty name"), ("a..b", "empty name"),
    ("metadata. url", "white space"), (" url", "white space")])
def test_field_path_syntax(name, problem):
    assert problem in field_path_problem(name)


def test_valid_field_paths():
    assert all(field_path_problem(name) is None for name in ("text", "metadata.url", "a.b.c", "Content Type"))


def test_config_rejects_a_malformed_field_path(tmp_path):
    config = tmp_path / "corpus.yaml"
    config.write_text(
        "name: x\noutput_root: out\n"
        "sources: [{name: docs, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d,\n"
        "           fields: {url: 'metadata..url'}}]\n"
        f"tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(str(config))
    assert ("sources[0].fields.url: Value error, not a field path: has an empty name between dots"
            in str(raised.value)) and "'metadata..url'" in str(raised.value)


TEXTS = [f"Document number {i} talks about rivers, mountains and the weather of region {i}. " * 3
         for i in range(8)]


def test_nested_provenance_builds_from_jsonl_and_parquet(tmp_path):
    """JSONL with `metadata.url` and Parquet with a struct column, through the real pipeline."""
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "parquet").mkdir()
    with open(tmp_path / "jsonl" / "docs.jsonl", "w") as f:
        for i, text in enumerate(TEXTS[:4]):
            metadata = {"url": f"https://jsonl.example/{i}", "date": f"2024-01-0{i + 1}", "dump": "CC-MAIN-2024-10"}
            f.write(json.dumps({"id": f"j{i}", "text": text, "metadata": metadata}) + "\n")
        f.write(json.dumps({"id": "j-bare", "text": TEXTS[0].replace("number 0", "without metadata")}) + "\n")
        f.write(json.dumps({"id": "j-bad", "text": "metadata is a string here", "metadata": "oops"}) + "\n")
    metadata = pa.array([{"url": f"https://parquet.example/{i}", "date": f"2023-05-0{i + 1}"} for i in range(4)])
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(4)], "text": TEXTS[4:], "metadata": metadata}),
                   tmp_path / "parquet" / "docs.parquet")
    fields = "fields: {url: metadata.url, date: metadata.date}"
    config = tmp_path / "corpus.yaml"
    config.write_text(
        "name: nested\noutput_root: out\n"
        "sources:\n"
        f"  - {{name: js, uri: 'jsonl/*.jsonl', format: jsonl, rank: 1, license: x, domain: d, {fields}}}\n"
        f"  - {{name: pq, uri: 'parquet/*.parquet', format: parquet, rank: 2, license: x, domain: d, {fields}}}\n"
        "cascade: [heuristics]\n"
        "accounting: {max_dead_letter_fraction: 0.5}\n"
        f"tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")
    assert cli.main(["run", "--config", str(config), *IN_PROCESS]) == 0
    out = tmp_path / "out"
    documents = [row for path in sorted(glob.glob(str(out / "layers" / "ingest" / "*" / "documents" / "*.parquet")))
                 for row in pq.read_table(path).to_pylist()]
    provenance = {(row["source"], row["url"], row["date"]) for row in documents}
    assert provenance == {("js", f"https://jsonl.example/{i}", f"2024-01-0{i + 1}") for i in range(4)} | {
        ("pq", f"https://parquet.example/{i}", f"2023-05-0{i + 1}") for i in range(4)} | {("js", None, None)}
    dead = [row for path in sorted(glob.glob(str(out / "dead_letter" / "ingest" / "*" / "*.parquet")))
            for row in pq.read_table(path).to_pylist()]
    (bad,) = dead
    assert bad["error"] == "field 'metadata.url': 'metadata' is a string, not an object"
    assert bad["raw_prefix"].startswith(b'{"id": "j-bad"') and os.path.basename(bad["file"]) == "docs.jsonl"
