"""Layers keyed by the code that made them (beam_pipeline/build/code_version.py).

The build test edits a copy of the package and builds with it: a code edit in
one scorer's filter recomputes that scorer and the stages after it, nothing
else; a docstring edit recomputes nothing.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from beam_pipeline.build import code_version
from beam_pipeline.transforms.score import SCORERS
from conftest import IN_PROCESS, REPO, SAMPLE_TOKENIZER

TEXTS = [f"Document number {i} talks about the weather, the river and the town library. " * 6 for i in range(12)]


def test_every_stage_has_code_and_libraries():
    for stage in [*code_version.STAGE_MODULES, *SCORERS]:
        code = code_version.stage_code(stage)
        assert code["modules"] and "pyarrow" in code["libraries"], stage
        assert code_version.stage_version(stage, "1") == f"1+code.{code['digest'][:16]}"
    assert "tokenizers" in code_version.stage_code("tokenize")["libraries"]
    assert "fasttext-numpy2" in code_version.stage_code("language")["libraries"]
    assert "resiliparse" in code_version.stage_code("ingest")["libraries"]
    assert "apache-beam" not in code_version.stage_code("ingest")["libraries"]  # NOT_SHAPING
    with pytest.raises(code_version.UnknownStage):
        code_version.stage_code("no_such_stage")


def test_a_scorer_depends_on_its_own_filters_only():
    heuristics = code_version.stage_code("heuristics")["modules"]
    language = code_version.stage_code("language")["modules"]
    assert "beam_pipeline.filters.heuristics" in heuristics and "beam_pipeline.filters.heuristics" not in language
    assert "beam_pipeline.filters.language" in language and "beam_pipeline.filters.language" not in heuristics
    assert "beam_pipeline.transforms.score:HeuristicsScorer" in heuristics
    assert not any(module in heuristics for module in code_version.CONFIG_MODULES)
    # the shared part of transforms/score.py is in both; the other scorers' classes in neither
    assert heuristics["beam_pipeline.transforms.score:HeuristicsScorer"] != \
        language["beam_pipeline.transforms.score:LanguageScorer"]


def test_closure_follows_imports_inside_functions_and_relative_ones(tmp_path, monkeypatch):
    package = tmp_path / "beam_pipeline"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("def f():\n    from . import b\n    return b.g()\n")
    (package / "sub" / "b.py").write_text("import numpy\nfrom beam_pipeline.c import h\ndef g():\n    return h()\n")
    (package / "c.py").write_text("import json\ndef h():\n    return 1\n")
    monkeypatch.setattr(code_version, "_ROOT", str(tmp_path))
    code_version._module_file.cache_clear()
    code_version._tree.cache_clear()
    code_version._module_imports.cache_clear()
    try:
        assert code_version.closure({"beam_pipeline.sub.a"}) == {
            "beam_pipeline", "beam_pipeline.sub", "beam_pipeline.sub.a", "beam_pipeline.sub.b", "beam_pipeline.c",
            "numpy"}  # json: the standard library
    finally:
        code_version._module_file.cache_clear()
        code_version._tree.cache_clear()
        code_version._module_imports.cache_clear()


def _clear_caches():
    for cached in (code_version._module_file, code_version._tree, code_version._module_imports,
                   code_version._module_fingerprint, code_version._facts):
        cached.cache_clear()


def test_the_facts_kept_in_pycache_are_the_computed_ones_and_follow_the_bytes(tmp_path, monkeypatch):
    package = tmp_path / "beam_pipeline"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "a.py"
    module.write_text('"""Doc."""\nimport numpy\nfrom . import b\ndef f():\n    return 1\n')
    (package / "b.py").write_text("X = 1\n")
    monkeypatch.setattr(code_version, "_ROOT", str(tmp_path))
    _clear_caches()
    try:
        computed = code_version._facts("beam_pipeline.a")
        (cached,) = (package / "__pycache__").glob("a.*.code-facts.json")
        _clear_caches()
        assert code_version._facts("beam_pipeline.a") == computed  # read back from the file
        assert code_version._module_imports("beam_pipeline.a") == {"numpy", "beam_pipeline", "beam_pipeline.b"}
        # a file made from other bytes is never used: editing the code changes the facts ...
        module.write_text('"""Doc."""\nimport numpy\nfrom . import b\ndef f():\n    return 2\n')
        _clear_caches()
        edited = code_version._facts("beam_pipeline.a")
        assert edited.fingerprint != computed.fingerprint and edited.imports == computed.imports
        # ... and a stored entry whose key does not match is recomputed, not trusted
        stored = json.loads(cached.read_text())
        cached.write_text(json.dumps({**stored, "key": "0" * 64, "fingerprint": "0" * 64}))
        _clear_caches()
        assert code_version._facts("beam_pipeline.a") == edited
        # where nothing can be written, the facts are computed all the same
        shutil.rmtree(package / "__pycache__")
        (package / "__pycache__").write_text("not a folder")
        _clear_caches()
        assert code_version._facts("beam_pipeline.a") == edited
    finally:
        _clear_caches()


def test_the_stage_digests_are_the_same_from_the_cache_as_computed(tmp_path):
    """Every stage's code digest in a fresh process with a copy of the package: computed (empty caches),
    then read from the facts the first process left in ``__pycache__``."""
    shutil.copytree(os.path.join(REPO, "beam_pipeline"), tmp_path / "beam_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    probe = ("import json; from beam_pipeline.build import code_version as c; from beam_pipeline.transforms.score import "
             "SCORERS; print(json.dumps({s: c.stage_code(s) for s in [*c.STAGE_MODULES, *SCORERS]}))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                           cwd=tmp_path).stdout for _ in range(2)]
    assert list((tmp_path / "beam_pipeline" / "filters" / "__pycache__").glob("heuristics.*.code-facts.json"))
    assert json.loads(runs[0]) == json.loads(runs[1])
    assert json.loads(runs[0])["heuristics"]["digest"] == code_version.stage_code("heuristics")["digest"]


def test_docstrings_and_comments_are_not_code():
    import ast

    plain = code_version._fingerprint(ast.parse("def f(x):\n    return x + 1\n"))
    documented = code_version._fingerprint(ast.parse('"""Module."""\n# note\ndef f(x):\n    """Doc."""\n'
                                                      '    return x + 1  # why\n'))
    assert plain == documented
    assert plain != code_version._fingerprint(ast.parse("def f(x):\n    return x + 2\n"))


# --- a build with an edited copy of the package ------------------------------------------------------------

def _build(workdir, package_parent) -> dict[str, bool]:
    """Build the corpus in ``workdir`` with the package at ``package_parent``; {stage: reused} of the run."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    before = set(glob.glob(str(workdir / "out" / "runs" / "**" / "metrics.json"), recursive=True))
    result = subprocess.run([sys.executable, "-m", "beam_pipeline", "run", "--config", "corpus.yaml", *IN_PROCESS],
                            cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (metrics,) = set(glob.glob(str(workdir / "out" / "runs" / "**" / "metrics.json"), recursive=True)) - before
    return {s["name"]: s["reused"] for s in json.load(open(metrics))["stages"]}


def test_editing_a_stage_recomputes_it_and_what_follows_only(tmp_path):
    copy = tmp_path / "code"
    shutil.copytree(os.path.join(REPO, "beam_pipeline"), copy / "beam_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    with open(work / "data" / "docs.jsonl", "w") as f:
        for i, text in enumerate(TEXTS):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")
    (work / "corpus.yaml").write_text(
        "name: codekey\noutput_root: out\n"
        "sources: [{name: docs, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}]\n"
        "cascade: [language, heuristics]\n"
        f"tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n")

    first = _build(work, copy)
    assert not any(first.values())
    assert {"ingest", "language", "heuristics", "select", "tokenize"} <= set(first)

    heuristics = copy / "beam_pipeline" / "filters" / "heuristics.py"
    source = heuristics.read_text()
    heuristics.write_text(source.replace('"""', '"""Edited docstring. ', 1) + "\n# an edited comment\n")
    assert all(_build(work, copy).values())  # documentation is not code: every layer reused

    heuristics.write_text(source + "\n_EDITED_FOR_A_TEST = 1\n")
    edited = _build(work, copy)
    # exact and near dedup follow heuristics in the cascade (the seed's order) and see only the documents it
    # scored, so they are downstream of it; ingest and language are not
    downstream = {"heuristics", "exact_dedup", "select", "tokenize"} | ({"near_dedup", "ngram_index"} & set(edited))
    assert {stage for stage, reused in edited.items() if not reused} == downstream, edited
