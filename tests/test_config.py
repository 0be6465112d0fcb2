import os

import pytest
import yaml

from beam_pipeline.config.corpus import ConfigError, load_config, parse_config

VALID = {
    "name": "demo",
    "output_root": "out",
    "sources": [{"name": "wiki", "uri": "data/*.jsonl", "format": "jsonl", "rank": 1,
                 "license": "CC-BY-SA-3.0", "domain": "encyclopedic"}],
    "tokenize": {"tokenizer": "tok.json"},
}


def errors_of(data):
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir="/base")
    return str(err.value)


def test_valid_config_resolves_relative_paths():
    config = parse_config(VALID, base_dir="/base")
    assert config.sources[0].uri == "/base/data/*.jsonl"
    assert config.tokenize.tokenizer == "/base/tok.json"
    assert config.output_root == "/base/out"
    assert config.policy.drop_exact_duplicates is True
    assert config.tokenize.seq_len == 8192


def test_uris_with_a_scheme_are_kept():
    data = {**VALID, "sources": [{**VALID["sources"][0], "uri": "s3://bucket/x/*.jsonl.gz"}]}
    assert parse_config(data, base_dir="/base").sources[0].uri == "s3://bucket/x/*.jsonl.gz"


def test_bad_enum_names_field_value_and_allowed():
    message = errors_of({**VALID, "sources": [{**VALID["sources"][0], "format": "jsnol"}]})
    assert "sources[0].format" in message
    assert "'jsnol'" in message
    assert "'jsonl'" in message and "'parquet'" in message and "'text'" in message


def test_unknown_field_lists_allowed_fields():
    message = errors_of({**VALID, "tokenize": {"tokenizer": "t.json", "seqlen": 10}})
    assert "tokenize.seqlen: unknown field" in message
    assert "seq_len" in message


def test_missing_field_and_number_bounds():
    data = {k: v for k, v in VALID.items() if k != "tokenize"}
    assert "tokenize: required field is missing" in errors_of(data)
    message = errors_of({**VALID, "tokenize": {"tokenizer": "t.json", "seq_len": 3}})
    assert "tokenize.seq_len" in message and "greater than or equal to 16" in message and "(got 3)" in message


def test_cross_field_rules():
    assert "shard_tokens" in errors_of({**VALID, "tokenize": {"tokenizer": "t", "seq_len": 4096, "shard_tokens": 2048}})
    assert "min_chars" in errors_of({**VALID, "policy": {"min_chars": 10, "max_chars": 5}})
    twice = {**VALID, "sources": VALID["sources"] * 2}
    assert "repeated: wiki" in errors_of(twice)


def test_names_are_restricted():
    message = errors_of({**VALID, "sources": [{**VALID["sources"][0], "name": "Bad Name/../x"}]})
    assert "sources[0].name" in message and "lowercase" in message


def test_every_problem_is_reported_at_once():
    data = {**VALID, "seed": -1, "sources": [{**VALID["sources"][0], "rank": -2}]}
    message = errors_of(data)
    assert "2 problem(s)" in message and "seed" in message and "sources[0].rank" in message


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(bad))
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(str(listy))


def test_load_config_resolves_against_the_file(tmp_path):
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(VALID))
    config = load_config(str(path))
    assert config.sources[0].uri == os.path.join(str(tmp_path), "data/*.jsonl")


def test_digest_ignores_output_root_but_not_parameters():
    a = parse_config(VALID, base_dir="/a")
    b = parse_config({**VALID, "output_root": "elsewhere"}, base_dir="/a")
    c = parse_config({**VALID, "seed": 1}, base_dir="/a")
    assert a.digest() == b.digest() != c.digest()
