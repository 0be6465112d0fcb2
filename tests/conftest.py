"""Shared fixtures: the bundled sample, runner arguments, a fresh output root."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_CONFIG = os.path.join(REPO, "sample", "corpus.yaml")
SAMPLE_TOKENIZER = os.path.join(REPO, "sample", "tokenizer", "tokenizer.json")


def tiny_corpus(tmp_path, name: str, texts: list[str], extra_yaml: str = "") -> str:
    """A one-source JSONL corpus of ``texts`` scored by the heuristics only; returns its config path."""
    (tmp_path / "data").mkdir()
    with open(tmp_path / "data" / "docs.jsonl", "w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")
    config = tmp_path / "corpus.yaml"
    config.write_text(
        f"name: {name}\noutput_root: out\n"
        "sources: [{name: docs, uri: 'data/*.jsonl', format: jsonl, rank: 1, license: x, domain: d}]\n"
        "cascade: [heuristics]\n"
        f"tokenize: {{tokenizer: {SAMPLE_TOKENIZER}, seq_len: 256, shard_tokens: 65536}}\n" + extra_yaml)
    return str(config)

#: In-process runner, one thread: the fastest setting for small test inputs.
IN_PROCESS = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def run_cli(args: list[str], env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python -m beam_pipeline`` in a fresh interpreter (own PYTHONHASHSEED)."""
    return subprocess.run([sys.executable, "-m", "beam_pipeline", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def dataset_id_from_output(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("dataset_id"):
            return line.split()[1]
    raise AssertionError(f"no dataset_id in output:\n{stdout}")


@pytest.fixture
def output_root(tmp_path):
    root = tmp_path / "out"
    yield str(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The sample built once in-process: the reference every other run is compared with."""
    from beam_pipeline import cli

    root = str(tmp_path_factory.mktemp("reference") / "out")
    assert cli.main(["run", "--config", SAMPLE_CONFIG, "--output_root", root, *IN_PROCESS]) == 0
    (dataset_dir,) = glob.glob(os.path.join(root, "datasets", "*"))
    (metrics_path,) = glob.glob(os.path.join(root, "runs", "*", "metrics.json"))
    return {"root": root, "dataset": dataset_dir,
            "manifest": json.load(open(os.path.join(dataset_dir, "manifest.json"))),
            "metrics": json.load(open(metrics_path)),
            "stages": stages_by_name(json.load(open(metrics_path)))}


def layer_digests(root: str) -> dict:
    """{stage/output: [part sha256...]} from every committed ledger under ``root``."""
    digests = {}
    for ledger_path in sorted(glob.glob(os.path.join(root, "layers", "*", "*", "_LEDGER.json"))):
        ledger = json.load(open(ledger_path))
        for output, spec in ledger["outputs"].items():
            digests[f"{ledger['stage']}/{output}"] = [p["sha256"] for p in spec["parts"]]
    return digests


def stages_by_name(metrics: dict) -> dict:
    """{stage name: stage entry} of a run's metrics.json, in run order."""
    return {stage["name"]: stage for stage in metrics["stages"]}


def grouping_key_coders(pipeline) -> dict:
    """{GroupByKey transform name: the key coder Beam chose} of a pipeline's portable graph."""
    from apache_beam.portability import common_urns
    from apache_beam.runners import pipeline_context

    proto = pipeline.to_runner_api()
    context = pipeline_context.PipelineContext(proto.components)
    found = {}
    for transform in proto.components.transforms.values():
        if transform.spec.urn == common_urns.primitives.GROUP_BY_KEY.urn:
            (pcoll_id,) = transform.inputs.values()
            found[transform.unique_name] = context.coders.get_by_id(
                proto.components.pcollections[pcoll_id].coder_id).key_coder()
    return found
