"""Nothing from input data or config is executed, paths stay inside the output root,
and credentials given as options never reach a log line, a ledger, a manifest or a report."""
from __future__ import annotations

import ast
import glob
import os
import shutil

import pytest
import yaml

from beam_pipeline.cli import commands as cli
from beam_pipeline.config.corpus import ConfigError, parse_config
from conftest import IN_PROCESS, REPO

SAMPLE = os.path.join(REPO, "sample")
PACKAGE = os.path.join(REPO, "beam_pipeline")

#: Calls that would run or unpickle whatever they are given.
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_ATTRIBUTES = {("pickle", "load"), ("pickle", "loads"), ("dill", "load"), ("dill", "loads"),
                        ("marshal", "load"), ("marshal", "loads"), ("yaml", "load"), ("yaml", "unsafe_load"),
                        ("yaml", "full_load")}


def forbidden_calls(path: str) -> list[str]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
            found.append(f"{os.path.relpath(path, REPO)}:{node.lineno} {func.id}()")
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and (func.value.id, func.attr) in FORBIDDEN_ATTRIBUTES):
            found.append(f"{os.path.relpath(path, REPO)}:{node.lineno} {func.value.id}.{func.attr}()")
    return found


def test_the_package_never_evaluates_or_unpickles():
    paths = sorted(glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True))
    assert len(paths) > 40
    assert [hit for path in paths for hit in forbidden_calls(path)] == []


def test_the_scanner_would_see_them(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle, yaml\nx = eval('1')\ny = pickle.loads(b'')\nz = yaml.load('a')\n")
    assert [h.split()[-1] for h in forbidden_calls(str(bad))] == ["eval()", "pickle.loads()", "yaml.load()"]


def base_config() -> dict:
    return yaml.safe_load(open(os.path.join(SAMPLE, "corpus.yaml")))


@pytest.mark.parametrize("expression", [
    "__import__('os').system('touch pwned')",
    "quality.score < 0.1 or open('/etc/passwd')",
    "(lambda: 1)()",
])
def test_policy_rules_are_parsed_not_evaluated(expression, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = base_config()
    data["policy"]["rules"] = [{"reason": "hostile", "drop_if": expression}]
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir=SAMPLE)
    assert "policy.rules" in str(err.value)
    assert not os.path.exists(tmp_path / "pwned")


@pytest.mark.parametrize("field,value", [
    ("name", "../../escape"), ("name", "a/b"), ("domain", "../shards"), ("domain", "/abs"), ("name", "..")])
def test_names_that_become_paths_cannot_leave_the_output_root(field, value):
    data = base_config()
    data["sources"][0][field] = value
    with pytest.raises(ConfigError) as err:
        parse_config(data, base_dir=SAMPLE)
    assert f"sources.0.{field}" in str(err.value) or f"sources[0].{field}" in str(err.value)


FAKE_KEY_ID = "AKIAFAKEKEYID7Q3Z9X1"
FAKE_SECRET = "fake-secret-Vd8Jq2LmN4pR7sT1wY6zB3cE5gH9kM0"


def test_credentials_in_options_are_never_written(tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(os.path.join(SAMPLE, "data", "python-docs-mirror"), data)
    config = tmp_path / "corpus.yaml"
    config.write_text(f"""
name: creds
output_root: out
sources:
  - {{name: docs, uri: "data/*.jsonl.gz", format: jsonl, rank: 1, license: PSF-2.0, domain: docs}}
tokenize: {{tokenizer: {os.path.join(SAMPLE, 'tokenizer', 'tokenizer.json')}, seq_len: 1024, shard_tokens: 65536}}
""")
    assert cli.main(["run", "--config", str(config), *IN_PROCESS, f"--s3_access_key_id={FAKE_KEY_ID}",
                     f"--s3_secret_access_key={FAKE_SECRET}", "--s3_region_name=us-east-1"]) == 0
    printed = capsys.readouterr()
    assert "dataset_id" in printed.out
    written = [p for p in glob.glob(str(tmp_path / "out" / "**" / "*"), recursive=True) if os.path.isfile(p)]
    assert any(p.endswith("manifest.json") for p in written) and any(p.endswith("report.html") for p in written)
    leaks = [p for p in written if FAKE_SECRET.encode() in open(p, "rb").read()
             or FAKE_KEY_ID.encode() in open(p, "rb").read()]
    assert leaks == []
    assert FAKE_SECRET not in printed.out + printed.err and FAKE_KEY_ID not in printed.out + printed.err
